"""Tile-track nodes of the typed IR: values that are whole tiles, and the ops on them.

Takes: nothing (the frontend builds them). Gives: node classes that sit in the same
structured IR as `ir.nodes` (statements, `If`, `For`, `While`, `Region`, `Assign` of tile
values to variables, scalar expressions as operands). Every tile expression has `dtype`
(element type) and `shape` (a tuple of positive ints, known while compiling; not
necessarily powers of two: the lowering pads internally). A tile of shape `()` is never
built: reductions over every axis give a scalar expression (`TileReduce` with `shape ()` has
scalar type and may be used wherever a scalar is).

Guarantees the frontend establishes (and both backends rely on):
- Elementwise operands have the result's shape exactly: the frontend inserts `Broadcast`
  (NumPy rules: align trailing axes, size-1 axes stretch) and `Splat` (scalar -> tile).
- Elementwise operands have one dtype (the frontend inserts `TileMap("cast", ...)`), except
  shifts (the amount has the shifted dtype) and `where`'s condition (bool).
- Tile indices (`TileLoad.index`, `TileStore.index`) count tiles, not elements: element
  `index[k] * shape[k] + j` along axis k. Elements outside the array are never read
  (they take `padding`) and never written (edge tiles are masked).
- `Kernel.locals` maps a tile variable's name to a `TileType`.
- `TileDot` operands are 2-D with one inner size K (`a` is (M, K), `b` is (K, N)), of one
  dtype from `DOT_INPUTS` (fp8 may mix its two formats); the accumulator has the result's
  dtype (`DOT_INPUTS[a.dtype]`) and shape (M, N).
- A tfloat32 tile (float32 values rounded to TF32) is made only by `TileMap("cast")` from
  float32 (the rounding), and is read only by a cast to float32 (exact), by the ops that
  move elements (`Reshape`, `Permute`, `Broadcast`, `TileSlice`, `Cat`) and as a variable:
  no arithmetic, reduction, product, load or store sees one.

Elementwise semantics are those of `ir.nodes` for the same op name (integer wrap, floor
div/mod, saturating casts, IEEE min/max of libdevice).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..types import DType
from .nodes import ArrayRef, Expr, Stmt


@dataclass(frozen=True)
class TileType:
    dtype: DType
    shape: tuple

    def __str__(self) -> str:
        return f"tile<{self.dtype.name}[{', '.join(map(str, self.shape))}]>"


@dataclass(eq=False)
class TileExpr(Expr):
    """Base of tile-valued expressions."""

    @property
    def type(self) -> TileType:
        return TileType(self.dtype, self.shape)


@dataclass(eq=False)
class TileVar(TileExpr):
    """A read of a tile variable (declared in `Kernel.locals` with its `TileType`)."""

    name: str
    dtype: DType
    shape: tuple


# Elementwise op names: every Unary/Binary/Compare op of ir.nodes, every MATH_FUNCS and
# ROUNDED_FUNCS name,
# plus "cast" (to `dtype`), "where" (cond, a, b) and "sigmoid".
TILE_EXTRA_OPS = ("cast", "where", "sigmoid")


@dataclass(eq=False)
class TileMap(TileExpr):
    """An elementwise op over tiles of one shape: `op(*args)` element by element."""

    op: str
    args: tuple
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Splat(TileExpr):
    """A scalar expression repeated over a tile."""

    value: Expr
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Broadcast(TileExpr):
    """NumPy broadcasting of `value` (same rank, size-1 axes stretch) to `shape`."""

    value: TileExpr
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Arange(TileExpr):
    """`tile.arange(n)`: 0, 1, ..., n-1 (int32)."""

    dtype: DType
    shape: tuple


@dataclass(eq=False)
class TileLoad(TileExpr):
    """`tile.load(array, index, shape, padding)`: the tile at tile-index `index`."""

    array: ArrayRef
    index: tuple  # scalar int64 Exprs, one per array axis
    padding: Expr  # scalar of array.dtype, for elements outside the array
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Gather(TileExpr):
    """`tile.gather(array, indices)`: element indices per axis (int64 tiles of `shape`);
    out-of-bounds elements take `padding`."""

    array: ArrayRef
    indices: tuple
    padding: Expr
    dtype: DType
    shape: tuple


REDUCE_OPS = ("sum", "max", "min", "prod", "argmax", "argmin")
# Inclusive scans: scan op -> the reduction whose combining op it runs along the axis.
SCAN_OPS = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}
SORT_OPS = ("sort", "argsort")


@dataclass(eq=False)
class TileReduce(TileExpr):
    """Reduce over `axis` (None: all axes -> a scalar, `shape == ()`). argmax/argmin give
    int32 positions (the first among equals)."""

    op: str
    value: TileExpr
    axis: Optional[int]
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class TileScan(TileExpr):
    """Inclusive scan along `axis` (`SCAN_OPS`): element j combines elements 0..j, or with
    `reverse` elements j..n-1 (n the axis' logical extent: padding never joins)."""

    op: str
    value: TileExpr
    axis: int
    dtype: DType
    shape: tuple
    reverse: bool = False


@dataclass(eq=False)
class Flip(TileExpr):
    """The elements in reverse order along each axis of `axes` (element j of such an axis
    of extent n is `value`'s element n-1-j)."""

    value: TileExpr
    axes: tuple
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class TileSort(TileExpr):
    """Each line along `axis` sorted: "sort" gives the elements in order, "argsort" their
    int32 positions along `axis`. The order is that of the elements' keys, unsigned
    integers of the register form's bits (bit for bit alike on every backend): integers
    and bools by value; floats by value, every NaN (made the canonical quiet NaN) after
    +inf, and -0.0 before +0.0 for "sort" (the elements come out bit for bit, but for a
    NaN's bits, which a narrow float's store sets as the hardware does) but equal
    to it for "argsort" (so positions are np.argsort(kind="stable")'s). `descending`
    reverses the keys' order (NaN first); argsort keeps equal elements in their original
    order in either direction."""

    op: str
    value: TileExpr
    axis: int
    descending: bool
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Reshape(TileExpr):
    """Same elements in row-major order, another shape of the same size."""

    value: TileExpr
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Permute(TileExpr):
    """Axes reordered: result axis k is `value`'s axis `perm[k]` (`.T` reverses them)."""

    value: TileExpr
    perm: tuple
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class TileSlice(TileExpr):
    """Part of a tile (a slice `t[2:6]`, `tile.extract`): element c along axis k is
    `value`'s element `starts[k] + steps[k] * c`, every one inside `value` (constant
    starts, positive steps)."""

    value: TileExpr
    starts: tuple
    steps: tuple
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Cat(TileExpr):
    """`tile.cat(parts, axis)`: the parts one after another along `axis` (as
    `np.concatenate`); they have one dtype and agree in every other extent."""

    parts: tuple
    axis: int
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class Rand(TileExpr):
    """`tile.rand(seed, offsets)`: Philox-4x32-10 uniform float32 in [0, 1), one per element
    of the int tile `offsets`, keyed by the scalar `seed`; identical on every backend."""

    seed: Expr
    offsets: TileExpr
    dtype: DType
    shape: tuple


# Matrix products: operand dtype name -> accumulator dtype name. "ieee" computes in the
# accumulator's precision; "tf32" (float32 operands only, opt-in) first rounds each operand
# to tf32 (10 mantissa bits, to nearest with ties away from zero, as `cvt.rna.tf32.f32`).
DOT_INPUTS = {"float16": "float32", "bfloat16": "float32", "float8_e4m3fn": "float32",
              "float8_e5m2": "float32", "float32": "float32", "float64": "float64"}
DOT_PRECISIONS = ("ieee", "tf32")


@dataclass(eq=False)
class TileDot(TileExpr):
    """`tile.mma(a, b, acc)` (`acc + a @ b`) and `tile.dot(a, b)` (`acc` None: zeros).

    Every product a[m, k] * b[k, n] is exact in the accumulator's precision (the operands are
    narrower), and the sum over k is accumulated there, in an order left to the backend;
    `acc` is added once. With `precision` "tf32" the float32 operands are first rounded
    to tf32."""

    a: TileExpr
    b: TileExpr
    acc: Optional[TileExpr]
    precision: str
    dtype: DType
    shape: tuple


@dataclass(eq=False)
class TileStore(Stmt):
    """`tile.store(array, index, tile)`: write the tile at tile-index `index` (masked)."""

    array: ArrayRef
    index: tuple
    value: TileExpr


# The read-modify-writes of `TileAtomic` and atomic `Scatter`s, as `ir.nodes.Atomic`'s ops
# of those names (integers wrap; float max/min are IEEE maxNum/minNum: a NaN loses).
TILE_ATOMIC_OPS = ("add", "max", "min")


@dataclass(eq=False)
class Scatter(Stmt):
    """`tile.scatter(array, indices, tile, mask)`, or with `atomic` (an op of
    `TILE_ATOMIC_OPS`) `tile.scatter_<atomic>`: the elements where `mask` (a bool tile of
    the value's shape, or None: all) holds. An element whose index lies outside the array
    is a bounds fault (`BoundsError`), or with `skip_out_of_bounds` writes nothing, as if
    masked off."""

    array: ArrayRef
    indices: tuple
    value: TileExpr
    atomic: Optional[str] = None
    mask: Optional[TileExpr] = None
    skip_out_of_bounds: bool = False


@dataclass(eq=False)
class TileAtomic(Stmt):
    """`tile.atomic_<op>(array, index, tile)`: combine the tile into the array at tile-index
    `index` with `op` (`TILE_ATOMIC_OPS`), atomically per element."""

    op: str
    array: ArrayRef
    index: tuple
    value: TileExpr


def has_dots(kernel) -> bool:
    """Whether a tile kernel multiplies matrices (a `TileDot`): such a kernel lowers through
    `tile.matmul` and launches with tensor maps. Light: a cached kernel's load and a kernel
    without products import neither."""
    from ..frontend import walk

    return any(isinstance(n, TileDot) for n in walk(kernel.body))
