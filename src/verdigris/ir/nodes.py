"""The typed kernel IR: one structured IR for both tracks, every node carrying a `Loc`.

Takes: nothing (the frontend builds it). Gives: expression and statement node classes and
`Kernel`, the unit every later stage consumes (safety, LLVM lowering, the cpu backend).

Guarantees the frontend establishes and `ir.verify` checks:
- Every expression has a concrete `dtype` (a `types.DType`); array references have an
  `ArrayType` instead.
- Binary arithmetic, comparisons and `Select` have operands of one dtype (the frontend has
  inserted the `Cast`s); shift amounts are cast to the shifted operand's dtype.
- Array indices are int64, one per dimension, *not yet bounds checked*.
- Control flow is structured: `If`, `For`, `While`, `Region`. `Break`/`Continue` refer to
  the innermost loop; `Exit` leaves the enclosing `Region` with that label (the kernel body
  is the region "kernel", so `return` in a kernel is `Exit("kernel")`; each inlined
  `@vg.func` call is a region of its own).
- `Logical` and `Select` evaluate lazily: `b` of `a and b` is evaluated only for threads
  where `a` holds; only the chosen arm of a `Select` is evaluated.

The operators, functions and scopes nodes may name, and their semantics: `operations`
(part of this namespace: `N.MATH_FUNCS`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from ..errors import Loc
from ..simt import warp_size
from ..types import DType
from .operations import (  # noqa: F401 (the IR's namespace, `N.*`, holds them too)
    ATOMIC_OPS, BARRIER_NAMES, BARRIER_SCOPES, BINARY_OPS, BIT_FUNCS, COMPARE_OPS, FENCE_SCOPES,
    MATCHES, MATH_FUNCS, MATH_PREDICATES, REDUCTIONS, ROUNDED_FUNCS, SHUFFLES, SPECIAL_KINDS,
    UNARY_OPS, VOTES, WARP_OPS, warp_call)

# ----------------------------------------------------------------------------- types

ON_GRID_EXTENT = 2**30  # an on-grid array's extents are below it (`ArrayType.on_grid`)
# The values of a narrow 64-bit integer scalar (`Param.narrow`): int32's, ends included.
NARROW_RANGE = (-2**31, 2**31 - 1)
NARROW_DTYPES = ("int64", "uint64")  # the scalar dtypes launches specialize on that range
NARROW_EXTENT = 2**31 - 1  # the largest extent a 32-bit bounds test serves (`safety.bounds.narrow_axes`)


@dataclass(frozen=True)
class ArrayType:
    """An array parameter or local array. `space` is "global", "local" or "shared"."""

    dtype: DType
    ndim: int
    space: str = "global"
    # Specialization facts of a global array (from the launch's arguments):
    unit_inner_stride: bool = False  # strides[-1] == 1, so it is not passed
    aligned16: bool = False  # data pointer is 16-byte aligned
    shape: Optional[tuple] = None  # static shape of local/shared arrays
    # every extent a multiple of 16 below ON_GRID_EXTENT, every stride but the last a multiple
    # of 16 (tile kernels are specialized on it: their vectors then never straddle an edge,
    # and their bounds tests are 32-bit)
    on_grid: bool = False
    # the shared slot of a `simt.block_ticket(counter)`: the name of its counter, whose every
    # write the frontend has checked to be an atomic add of 1
    ticket_of: Optional[str] = None
    # a local array holding a tuple constant indexed by a run-time value (`W[k]`): its
    # values, which its only stores write before any load (the race proof reads them)
    values: Optional[tuple] = None

    def __str__(self) -> str:
        if self.shape is not None:
            ticket = f" (ticket of {self.ticket_of})" if self.ticket_of else ""
            return f"{self.space} {self.dtype.name}[{', '.join(map(str, self.shape))}]{ticket}"
        flags = ("c" if self.unit_inner_stride else "") + ("a" if self.aligned16 else "") \
            + ("g" if self.on_grid else "")
        return f"{self.dtype.name}[{self.ndim}d{',' + flags if flags else ''}]"


# ----------------------------------------------------------------------------- expressions


@dataclass(eq=False)
class Expr:
    loc: Loc
    # Weak, as a float literal is: it takes the float type of the operand it meets
    # (`types.promote_weak`). The frontend sets it on a read of a Python float argument
    # (float64) and on a float made of those and literals only (`-alpha`, `alpha * beta`).
    weak: ClassVar[bool] = False


def operands(e: Expr):
    """The expressions directly inside `e`: its fields that are expressions, and the
    expressions in its tuple fields (a call's arguments, an access's indices)."""
    for value in vars(e).values():
        if isinstance(value, Expr):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, Expr))


@dataclass(eq=False)
class Const(Expr):
    value: object  # Python int, float or bool, already in range of dtype
    dtype: DType


@dataclass(eq=False)
class Var(Expr):
    """A read of a local variable or a scalar parameter."""

    name: str
    dtype: DType
    # the int (or bool) the variable holds wherever it is read, when it is bound once, at
    # the top level, to a compile-time value (`n = BLOCK // 2`, `even = N % B == 0`): what
    # a tile shape or a constexpr argument may be made of
    known: Optional[int] = None


@dataclass(eq=False)
class ArrayRef(Expr):
    """An array: a parameter (global), or a `local.array`/`shared.array` (by name)."""

    name: str
    type: ArrayType

    @property
    def dtype(self) -> DType:
        return self.type.dtype


@dataclass(eq=False)
class Special(Expr):
    """A hardware index register: kind in SPECIAL_KINDS, axis 0..2 (always 0 for
    "lane_id": the thread's lane in its warp, linear thread index % 32). Always int32."""

    kind: str
    axis: int
    dtype: DType


@dataclass(eq=False)
class Unary(Expr):
    op: str
    operand: Expr
    dtype: DType


@dataclass(eq=False)
class Binary(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: DType


@dataclass(eq=False)
class Compare(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: DType  # always bool_


@dataclass(eq=False)
class Logical(Expr):
    """Short-circuit `and`/`or` on bool operands."""

    op: str  # "and" | "or"
    lhs: Expr
    rhs: Expr
    dtype: DType


@dataclass(eq=False)
class Select(Expr):
    """`a if cond else b`, evaluating only the chosen arm."""

    cond: Expr
    a: Expr
    b: Expr
    dtype: DType


@dataclass(eq=False)
class Cast(Expr):
    value: Expr
    dtype: DType


@dataclass(eq=False)
class Load(Expr):
    array: ArrayRef
    indices: tuple  # of int64 Expr, one per dimension
    dtype: DType


@dataclass(eq=False)
class Shape(Expr):
    """`array.shape[axis]` of a global array, int64."""

    array: ArrayRef
    axis: int
    dtype: DType


@dataclass(eq=False)
class MathCall(Expr):
    func: str
    args: tuple
    dtype: DType


@dataclass(eq=False)
class Atomic(Expr):
    """`simt.atomic_<op>(array, index, value)`: one indivisible read-modify-write of one
    element; the value is the element's *old* contents.

    Appears only as the whole value of an `Assign` (the frontend hoists it), so backends
    meet it as a statement with a result. `value` (and `compare`, for "cas") have the
    array's dtype; "cas" stores `value` where the element equals `compare`. "sub" on
    floats is "add" of the negation; integer ops wrap; "max"/"min" on floats follow IEEE
    maxNum/minNum.
    """

    op: str
    array: ArrayRef
    indices: tuple
    value: Expr
    compare: Optional[Expr]
    dtype: DType


@dataclass(eq=False)
class WarpOp(Expr):
    """A warp operation. All but "activemask" are collectives over the lanes the calling
    thread's warp has (its member mask: all 32, or fewer in a block's partial last warp):
    every lane of the warp must reach it together (the safety checker proves the branch
    around it warp-uniform).

    shfl_*: `value` (any scalar dtype; the result has its dtype) read from another lane of
    the caller's segment of `width` lanes (a power of two, 32 by default: the whole warp;
    segments are lanes [w*width, (w+1)*width)). With p the caller's position in its segment
    (lane % width), the source position is p + `lane` (shfl_down), p - `lane` (shfl_up),
    p ^ `lane` (shfl_xor) or `lane` (shfl_idx); a source position outside 0..width-1 gives
    the lane its own value. `lane` is int32.
    ballot: uint32 with bit k set where lane k's bool `value` holds; any/all: bool over the
    warp's lanes. activemask (`value` None): uint32 with bit k set where lane k executes
    this operation with the caller (not a collective: it waits for no one).
    match_any: uint32, the lanes whose `value` (any scalar; compared by the bits of its
    register form) equals the caller's; match_all: the warp's member mask if every lane
    holds the same value, else 0.
    reduce_*: every lane gets the same bits, `value`s combined by `REDUCTIONS[op]` over the
    warp's lanes in a fixed order: a tree, lane i taking in lane i + d for d = 16, 8, 4, 2,
    1 (where lane i + d exists), then lane 0's result given to all. Integers of every
    width (they wrap: the order does not matter), floats: add, min, max only.
    `lane` is None for all but the shuffles.
    """

    op: str
    value: Optional[Expr]
    lane: Optional[Expr]
    dtype: DType
    width: int = warp_size

    @property
    def collective(self) -> bool:
        return self.op != "activemask"


# ----------------------------------------------------------------------------- statements


@dataclass(eq=False)
class Stmt:
    loc: Loc


@dataclass(eq=False)
class Assign(Stmt):
    """Assign to a local variable (declared by the kernel's `locals` table)."""

    name: str
    value: Expr


@dataclass(eq=False)
class Store(Stmt):
    array: ArrayRef
    indices: tuple
    value: Expr  # of array.dtype


@dataclass(eq=False)
class If(Stmt):
    cond: Expr  # bool
    then: list
    orelse: list


@dataclass(eq=False)
class For(Stmt):
    """`for var in range(start, stop, step)`: start/stop/step evaluated once, of var's dtype.

    Runs while `var < stop` if step > 0, `var > stop` if step < 0 (step == 0: no iteration,
    the frontend refuses a literal 0). `var` is assigned before each iteration.
    """

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: list


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: list


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


@dataclass(eq=False)
class Region(Stmt):
    """A block that `Exit(label)` leaves early: the kernel body, or an inlined call."""

    label: str
    body: list


@dataclass(eq=False)
class Exit(Stmt):
    label: str


@dataclass(eq=False)
class LocalAlloc(Stmt):
    """Declares a `local.array` (per thread) or a `shared.array` (one per block), as
    `array.type.space` says; contents start undefined. Static arrays have
    `array.type.shape`; the dynamic shared array (sized by the launch's `shared_bytes`) has
    shape None and ndim 1."""

    array: ArrayRef


@dataclass(eq=False)
class Barrier(Stmt):
    """`simt.barrier()` (scope "block": every thread of the block waits for all the others,
    and their shared and global writes before it are visible to all after it) or
    `simt.syncwarp()` (scope "warp": the same for the 32 lanes of the warp) or
    `simt.grid_barrier()` (scope "grid": every thread of the grid waits for all the others,
    and their global writes before it are visible to all after it; the kernel is launched
    cooperatively, see `is_cooperative`)."""

    scope: str
    called: str = ""  # the intrinsic the user called, where it is not barrier()/syncwarp()


@dataclass(eq=False)
class Fence(Stmt):
    """`simt.threadfence_block()`, `threadfence()`, `threadfence_system()`: the calling
    thread's memory accesses before the fence are seen by every thread of the scope (its
    block, the GPU, also the host and peer GPUs) before those after it, as CUDA's
    `__threadfence*()` (a sequentially consistent fence at that scope). It waits for no
    other thread and orders no other thread's accesses: it makes no race-free kernel out
    of a racy one (the checker gives it no meaning; the cpu backend, whose memory is
    sequentially consistent, none either)."""

    scope: str


@dataclass(eq=False)
class Print(Stmt):
    """`print(...)` in a kernel: one line per thread that runs it (SIMT) or per block
    (tile; a print of tiles: per element), prefixed with the block's and thread's ids
    (`ir.printf` says the text). `parts` are the arguments in order, each a literal text
    (str), a scalar `Expr` or a tile (of one shape), joined by `sep` and ended by `end`. It only reads: its loads are bounds checked but take no part
    in race proofs (a value another thread writes may print either value)."""

    parts: tuple
    sep: str = " "
    end: str = "\n"


@dataclass(eq=False)
class Unsafe(Stmt):
    """`with vg.unsafe():` — accesses inside are exempt from race proofs."""

    body: list


# ----------------------------------------------------------------------------- kernel


@dataclass(eq=False)
class Assumption:
    """`vg.assume(cond)`: a fact of the launch that the proofs take as given and every
    launch checks on the host before anything runs. `cond` is a bool expression of values
    fixed for the whole launch only (integer scalar parameters, array extents, constants,
    grid and block sizes); `text` is the condition as the user wrote it."""

    loc: Loc
    cond: Expr
    text: str


@dataclass(eq=False)
class Param:
    """A kernel parameter after specialization.

    kind "array": `type` is an ArrayType. kind "scalar": `dtype`. kind "constexpr": `value`
    (already folded into the body as constants; kept for printing and cache keys).
    """

    name: str
    kind: str
    loc: Loc
    type: Optional[ArrayType] = None
    dtype: Optional[DType] = None
    value: object = None
    # An integer scalar's launch values are multiples of this (16 when the specialization
    # was made for such values, as Triton's are), which lets masks compare once per run.
    multiple_of: int = 1
    # An int64 or uint64 scalar's launch values lie in int32's range (-2**31 <= v < 2**31):
    # the "narrow" specialization (`runtime.scalars.narrowness`); its dtype and arithmetic stay
    # 64-bit, only the proofs know the range.
    narrow: bool = False


@dataclass(eq=False)
class Kernel:
    name: str
    track: str  # "simt" | "tile"
    params: list  # of Param, in the user's order
    locals: dict  # variable name -> DType, for every variable `Assign`ed or a `For` var
    body: list  # [Region("kernel", ...)]
    loc: Loc
    writes: frozenset = frozenset()  # names of array params the body stores to
    reads: frozenset = frozenset()  # names of array params the body loads from
    unsafe_regions: list = field(default_factory=list)  # Locs of `with vg.unsafe()`
    facts: dict = field(default_factory=dict)  # proven facts from safety, for lowering
    block: Optional[tuple] = None  # (x, y, z) threads per block, when specialized on it;
    # then every `block_dim(axis)` in the body is already the constant block[axis].
    unit_grid_axes: Optional[tuple] = None  # grid axes launched with one block (of 1, 2;
    # tile kernels: also 0), when specialized on it (launches are); None: unknown.
    # Float `x * y + z` may run as one fused multiply-add, rounded once, on the GPU (the
    # kernel option `fma=True`); off, every operation rounds, as on the cpu backend.
    fma: bool = False
    # At least this many blocks should fit on one multiprocessor (the kernel option
    # `min_blocks_per_sm`, CUDA's `__launch_bounds__`): ptxas holds registers to that.
    min_blocks_per_sm: Optional[int] = None
    assumptions: list = field(default_factory=list)  # of Assumption, in source order
    # The body calls `grid_barrier()`: it runs only as a cooperative launch whose grid fits
    # on the GPU at once (the runtime checks the grid against the occupancy).
    cooperative: bool = False

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @property
    def array_params(self) -> list:
        return [p for p in self.params if p.kind == "array"]


def leaves_loop(body: list) -> bool:
    """Whether a `break` or `continue` in `body` leaves the loop whose body it is (those of
    loops nested in `body` do not)."""
    for s in body:
        if isinstance(s, (Break, Continue)):
            return True
        nested = [s.then, s.orelse] if isinstance(s, If) else \
            [s.body] if isinstance(s, (Region, Unsafe)) else []
        if any(leaves_loop(b) for b in nested):
            return True
    return False
