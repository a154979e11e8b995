"""Symbolic execution of a SIMT kernel's structured IR for one generic thread.

Takes: a specialized `ir.Kernel` (SIMT track). Gives: `execute(kernel) -> Trace`: every
global and shared memory access of one symbolic thread (an `Ordered` access: array, kind,
index polynomials, path condition, loc, whether inside `vg.unsafe()`, its memory, and its
place in the block's order: the barriers it may come after, program order, the loops around
it), the `Checkpoint`s every thread of a block or a warp must reach together (barriers, warp
operations, exits from loops that contain them), where each condition comes from, and the
`Space` of atoms all of it is written in. The algebra (polynomials, formulas, atoms, the
launch space) is `algebra`'s; its names are re-exported here.

The model (sound over-approximation of what a thread can do):
- Integer values are `Poly`s over atoms: thread ids (`tid0@`, `bid0@`: the `@` marks a
  per-thread atom, renamed `@1`/`@2` for the two threads of a query), launch sizes and
  scalar parameters shared by all threads (`gdim0`, `bdim0`, `shape:out:0`, `param:n`), and
  per-thread unknowns. Every atom carries an interval; some carry a definition (if-then-else,
  floor div/mod, loop variable, wrap-around) that the solver adds as a constraint.
- Straight-line locals are substituted. Loads from memory, float->int casts and bit
  operations the model does not follow are fresh unknowns in their dtype's range. A
  narrow (<= 32-bit) integer result whose interval may leave its dtype's range is a `wrap`
  atom defined by the exact result and the dtype's modulus: the solver knows its value
  (the result minus a multiple of 2**bits, in range), so wrapped indices collide exactly
  where the hardware's would. 64-bit results wrap the same way (modulus 2**64), where their
  value is used (`observe`: compared, indexing, divided, masked, bounding a loop; sums and
  products by constants commute with wrapping, so `(tile * 8 + warp) * 768 + lane` is one
  wrap): `uint64(t - 5)` of thread 0 is 2**64 - 5, `i * s * 4` of a run-time s = 2**62 is 0
  for every i, and `r * W + c` with a 64-bit run-time W is refused with W near 2**62 (rows
  1 and 6 meet); a 32-bit W keeps the product exact. Scalar parameters and unknowns lie
  within their dtypes. The integer operators' models are in `intops`.
- Loops (`loops`) are one arbitrary iteration: variables the body assigns are havocked (fresh
  unknowns) on entry and after the loop; a `for` variable is `start + k*step` with a fresh
  counter k >= 0 under the loop condition, and so is a 64-bit variable a `while` loop
  steps once per iteration by a loop-invariant amount (a narrower one may wrap). Where that condition is a constant at each k
  (its variables are constants or closed forms in k, `invariants`: `d = N >> 1; while
  d > 0: ...; d >>= 1`) or a `for` loop's range is constant, the loop runs a known number
  of times n: k < n in the body, which bounds the variables there (`offset *= 2` stays
  below N), and, unless the body can leave early, the variables with a closed form are
  constants after the loop (their values at the head of iteration n).
  `break`/`continue`/`exit` end the path;
  `exit` contributes its path and values where its region ends. Where paths join, a value
  is an if-then-else on the condition of the path taken since they parted.
- `vg.assume(cond)` (`Kernel.assumptions`): each condition, over launch-uniform atoms, is
  in the domain (`Space.assumed`): every launch is checked to satisfy it before it runs.
- Launch shape: `tid(a) in [0, block_dim(a))`, `bid(a) in [0, grid_dim(a))`; block_dim is the
  constant the kernel was specialized on, else a symbol in [1, 1024]. Axes 1 and 2 whose
  `block_id` the kernel never reads are assumed to have one block (`unit_grid_axes`; the same
  for `thread_id` and an unspecialized block: `unit_block_axes`), and along each axis
  grid_dim*block_dim < 2**31: the launch must guarantee both (they are in the facts).
- Barriers: each path carries its epochs (`barriers`); a loop whose body passes a barrier
  gets a trip count T, with k < T in the body: n where the loop runs n times and has no
  early exit, else a block-uniform atom (up to n where n is known; at least 1 for a `for`
  over a range that is never empty, from the intervals of its start and stop, and for a
  loop whose condition holds at entry by the intervals of the values there).
- The old value of an atomic add on a counter that only such adds write (`tickets`) is a
  `claim` atom: per thread, and two threads' claims of one counter element differ.
- A tuple constant indexed by a run-time value (`W[k]`) is a `table` atom defined by its
  index and the tuple's values.
- `block_ticket(counter)` is a `ticket` atom: block-uniform, and any two tickets of one
  counter that two different blocks take differ (the atomic add hands out each value once).
- Cooperative kernels (with shared memory, barriers, lane ids or warp operations) also
  track uniformity (`uniform`): unknowns get the scope their inputs have, floats are
  `Opaque(scope)` instead of None, and a loop runs its body again, with weaker scopes for
  the variables it carries, until the scopes it assumed at entry hold at the back edge.
Booleans are formulas (see `algebra`).
"""
from __future__ import annotations

from typing import NamedTuple

from .. import types as T
from ..errors import Loc
from ..ir import nodes as N
from ..ir.locks import Locked
from . import barriers, invariants, tickets
from .algebra import (FALSE, TRUE, Poly, Space, compare, conj, disj, dtype_range,
                      joined, neg, relative)
from .expressions import Expressions
from .intops import Wrapping
from .loops import Loops, _Frame, _walk
from .trace import Checkpoint, Ordered, Trace
from .uniform import Opaque, Scopes, cap, meet

class Path(NamedTuple):
    pc: tuple
    env: dict
    epochs: dict


# ----------------------------------------------------------------------------- executor


def execute(kernel: N.Kernel) -> Trace:
    nodes = list(_walk(kernel.body))
    used = {(n.kind, n.axis) for n in nodes if isinstance(n, N.Special)}
    unit_grid = kernel.unit_grid_axes if kernel.unit_grid_axes is not None else \
        tuple(a for a in (1, 2) if ("block_id", a) not in used)
    unit_block = () if kernel.block is not None else \
        tuple(a for a in (1, 2) if ("thread_id", a) not in used)
    space = Space(kernel.block, unit_grid, unit_block)
    space.static_shapes = {n.name: n.type.shape for n in nodes
                           if isinstance(n, N.ArrayRef) and n.type.space == "shared"}
    space.barriers = frozenset(n.scope for n in nodes if isinstance(n, N.Barrier))
    run = _Thread(kernel, space)
    run.block(kernel.body)
    for access in run.accesses:
        access.epochs = {kind: barriers.resolve(alts, kind, run.loop_ends, space)
                         for kind, alts in access.epochs.items()}
    return Trace(space, run.accesses, run.checkpoints, run.origins)


def cooperative(nodes) -> bool:
    """Whether threads of a block work together (so uniformity matters)."""
    return any(isinstance(n, (N.Barrier, N.WarpOp)) or (isinstance(n, N.Special) and n.kind == "lane_id")
               or (isinstance(n, N.ArrayRef) and n.type.space == "shared") for n in nodes)


class _Thread(Expressions, Wrapping, Loops):
    def __init__(self, kernel: N.Kernel, space: Space):
        self.kernel, self.space = kernel, space
        self.params = {p.name: p for p in kernel.params}
        self.env: dict = {}
        self.pc = TRUE
        self.epochs = barriers.START
        self.exits: dict = {}
        self.unsafe = 0
        self.accesses: list = []
        nodes = list(_walk(kernel.body))
        self.cooperative = cooperative(nodes)
        self.scopes = Scopes(space)
        # Loads whose element other threads may change with no race reported are never
        # uniform (`e_load`): of arrays written inside `vg.unsafe()` or by atomics, and, read
        # inside `vg.unsafe()`, of any array the kernel writes
        self.racy_arrays = {n.array.name for u in nodes if isinstance(u, N.Unsafe)
                            for n in _walk(u.body) if isinstance(n, (N.Store, N.Atomic))} | \
            {n.array.name for n in nodes if isinstance(n, N.Atomic)}
        self.written_arrays = {n.array.name for n in nodes if isinstance(n, (N.Store, N.Atomic))}
        self.checkpoints: list = []
        self.origins: dict = {}
        self.wrapped: dict = {}  # (exact value, dtype name) -> its wrap atom (`observe`)
        self.frames: list = []
        self.loop_ends: dict = {}  # counter -> barriers.Loop
        self.seq = 0
        self.exact: list | None = None  # while evaluating an assumption: its parts' ranges
        if kernel.assumptions and not space.assumed:  # `vg.assume`: facts of every launch
            space.assumed = [self.assumed(a.cond) for a in kernel.assumptions]  # (the launch
            space.domain.extend(space.assumed)  # checks them), so of every thread
            launch_values = {n for n, a in space.atoms.items() if a.kind in ("param", "shape")}
            for fact in space.assumed:  # `1 <= G <= 64` bounds G, so `G * cols` stays exact
                invariants.refine(fact, launch_values, space)
        self.ticket_counters = tickets.counters(kernel, space)

    # ---------------------------------------------------------------- values

    def unknown(self, dtype: T.DType, label: str = "", bounds: tuple | None = None):
        """A value the checker cannot see, within `bounds` where known, else its dtype's."""
        if dtype.is_bool:
            return self.space.fresh_bool(label)
        if dtype.is_int:
            lo, hi = bounds or dtype_range(dtype)
            return self.space.fresh("unknown", lo, hi, label=label)
        return self.floating(None)

    def scoped(self, dtype: T.DType, label: str, *inputs, scope: str = "",
               bounds: tuple | None = None):
        """An unknown that is as uniform as `inputs` (or `scope`), for a cooperative kernel."""
        value = self.unknown(dtype, label, bounds)
        if not self.cooperative:
            return value
        scope = cap(meet(scope or "launch", *map(self.scopes.of, inputs)))
        if scope == "thread":
            return value
        if isinstance(value, Poly) or (isinstance(value, tuple) and value[0] == "bool"):
            name = next(iter(value.atoms())) if isinstance(value, Poly) else value[1]
            self.space.scopes[name] = (scope, self.counters())
            return value
        return Opaque(scope)

    def floating(self, *inputs):
        """A float computed from `inputs` (None outside cooperative kernels)."""
        return Opaque(meet(*map(self.scopes.of, inputs))) if self.cooperative else None

    def assumed(self, cond: N.Expr) -> tuple:
        """A `vg.assume` condition as a fact, in exact arithmetic and with every part within
        its dtype: the launch check evaluates every part and refuses a launch where one
        leaves it (`runtime.assumptions`), so there the exact values are the kernel's."""
        self.exact = []
        try:
            return conj(self.as_bool(self.eval(cond), T.bool_), *self.exact)
        finally:
            self.exact = None

    def ite(self, cond: tuple, a, b, dtype: T.DType):
        if cond == TRUE or a == b:
            return a
        if cond == FALSE:
            return b
        if dtype.is_bool:
            return disj(conj(cond, a), conj(neg(cond), b))
        if not isinstance(a, Poly) or not isinstance(b, Poly) or not dtype.is_int:
            return self.floating(cond, a, b)
        (alo, ahi), (blo, bhi) = self.space.interval(a), self.space.interval(b)
        return self.space.fresh("ite", min(alo, blo), max(ahi, bhi), (cond, a, b))

    def as_bool(self, value, dtype: T.DType) -> tuple:
        return value if dtype.is_bool else compare("ne", self.observe(value, dtype), Poly.const(0))

    def counters(self) -> tuple:
        return tuple(f.counter for f in self.frames if f.counter)

    # ---------------------------------------------------------------- records

    def access(self, array: N.ArrayRef, kind: str, indices, loc: Loc) -> tuple:
        polys = self.indices(indices)
        memory = array.type.space
        if memory != "local" and self.pc != FALSE:
            self.seq += 1
            self.accesses.append(Ordered(
                array.name, kind, polys, self.pc, loc, self.unsafe > 0, memory, self.epochs,
                self.seq, self.counters(), all(f.exact for f in self.frames)))
        return polys

    def checkpoint(self, what: str, scope: str, loc: Loc, source=None) -> None:
        if self.pc != FALSE:
            self.checkpoints.append(Checkpoint(what, scope, self.pc, loc, self.counters(), source))

    def origin(self, cond: tuple, loc: Loc) -> None:
        """Remember where a condition (and its parts, and their negations) comes from."""
        for part in (cond, *(cond[1:] if cond[0] in ("and", "or") else ())):
            for f in (part, neg(part)):
                self.origins.setdefault(f, loc)

    # ---------------------------------------------------------------- paths

    def path(self) -> Path:
        return Path(self.pc, self.env, self.epochs)

    def resume(self, p: Path, cond: tuple) -> None:
        self.pc, self.env, self.epochs = conj(p.pc, cond), dict(p.env), p.epochs

    def join(self, others: list, base: tuple = TRUE) -> None:
        """Continue from this path or any of `others` (which parted from it where the path
        condition was `base`): values and epochs by which was taken."""
        live = [p for p in others if p.pc != FALSE]
        if self.pc == FALSE and live:
            self.pc, self.env, self.epochs = live.pop()
        for p in live:
            taken, mine = relative(p.pc, base), relative(self.pc, base)
            merged = {}
            for name in p.env.keys() | self.env.keys():
                a, b = p.env.get(name), self.env.get(name)
                if name not in self.env or name not in p.env:
                    merged[name] = a if name in p.env else b
                else:
                    merged[name] = self.ite(taken, a, b, self.kernel.locals.get(name, T.int64))
            self.epochs = barriers.merge(taken, p.epochs, mine, self.epochs)
            self.pc, self.env = joined(p.pc, self.pc, base), merged

    # ---------------------------------------------------------------- statements

    def block(self, stmts) -> None:
        for s in stmts:
            if self.pc == FALSE:
                return
            _STMT[type(s)](self, s)

    def s_assign(self, s: N.Assign):
        self.env[s.name] = self.eval(s.value)

    def s_store(self, s: N.Store):
        self.eval(s.value)
        self.access(s.array, "write", s.indices, s.loc)

    def s_if(self, s: N.If):
        c = self.eval(s.cond)
        self.origin(c, s.cond.loc)
        start = self.path()
        self.resume(start, c)
        self.block(s.then)
        then = self.path()
        self.resume(start, neg(c))
        self.block(s.orelse)
        self.join([then], start.pc)

    def s_barrier(self, s: N.Barrier):
        self.checkpoint(s.called or f"{N.BARRIER_NAMES[s.scope]}()", s.scope, s.loc)
        iters = tuple(Poly.atom(c) for c in self.counters())
        self.epochs = barriers.passed(self.epochs, s.scope, id(s), iters)

    def s_region(self, s: N.Region):
        base = self.pc
        self.exits[s.label] = []
        self.frames.append(_Frame(s.label))
        self.block(s.body)
        self.frames.pop()
        self.join(self.exits.pop(s.label), base)

    def s_exit(self, s: N.Exit):
        crossed = []
        for f in reversed(self.frames):
            if f.label == s.label:
                break
            crossed.append(f.needs)
        needs = next((scope for scope in N.BARRIER_SCOPES if scope in crossed), "")
        if needs:
            self.checkpoint("return", needs, s.loc)
        self.exits[s.label].append(self.path())
        self.pc = FALSE

    def s_unsafe(self, s: N.Unsafe):
        self.unsafe += 1
        self.block(s.body)
        self.unsafe -= 1

    def s_locked(self, s: Locked):
        self.eval(s.acquire)
        self.block(s.body)
        self.eval(s.release)

    def s_print(self, s: N.Print):
        """A print only reads, and what it shows decides nothing: its loads are no part of the
        race proofs (as if in `vg.unsafe()`); their bounds are proven or checked as any."""
        self.unsafe += 1
        for part in s.parts:
            if not isinstance(part, str):
                self.eval(part)
        self.unsafe -= 1

    def s_nothing(self, s):
        pass


_STMT = {N.Assign: _Thread.s_assign, N.Store: _Thread.s_store, N.If: _Thread.s_if,
         N.For: _Thread.s_for, N.While: _Thread.s_while, N.Break: _Thread.s_break,
         N.Continue: _Thread.s_continue, N.Region: _Thread.s_region, N.Exit: _Thread.s_exit,
         N.Unsafe: _Thread.s_unsafe, N.LocalAlloc: _Thread.s_nothing,
         N.Barrier: _Thread.s_barrier, N.Fence: _Thread.s_nothing, N.Print: _Thread.s_print,
         Locked: _Thread.s_locked}
