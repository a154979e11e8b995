"""The SIMT interpreter of the cpu backend: runs a typed `ir.Kernel` with NumPy.

Takes: a kernel, a grid and a block (up to three ints each), and the arguments: NumPy
arrays, which the kernel reads and writes in place through any view, and scalars.
Gives: `run_simt`, which runs the kernel to completion or raises `BoundsError` (an index
out of bounds), `SafetyError` (a race or a read of unwritten shared memory that shadow
memory observed, see `shadow`) or `DivergenceError` (a barrier or warp collective reached
by part of a block or warp, see `warp`); `Access` (from `memory`), what an observer of
memory accesses sees.

How: the IR is compiled once per kernel into Python closures. Whole blocks run together as
one vector of lanes (one lane per thread, up to CHUNK_LANES lanes, blocks in order; the
whole grid at once for a kernel that calls `grid_barrier()`, so that it is a point every
thread of the grid passes together). A
statement takes the mask of lanes executing it and returns the mask of lanes that fall
through to the next one; lanes that `break`, `continue` or `exit` wait in their loop's or
region's slot and rejoin where the IR says. Expressions are evaluated on all lanes (masked
lanes compute don't-cares), except where laziness is the meaning: the right operand of
`and`/`or`, the arms of a select, and memory, which only active lanes touch. Lock step is
what makes barriers and warps faithful: a statement finishes on every lane of a block
before the next starts, so a barrier is a point all of them pass together (or a
`DivergenceError`) and a shuffle finds every lane's value computed; a block's shared
arrays live for the chunk, one copy per block.

Guarantees: the semantics of `ir.nodes` (through `ops`, `memory`, `atomics`, `warp`):
accesses are bounds checked and observed before they touch memory (`memory`).
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from math import prod
from typing import Callable, Optional

import numpy as np

from .. import ir
from ..errors import CompileError, LaunchError
from ..ir import printf
from . import atomics, memory, ops, warp
from .memory import Access, Site
from .memory import Memory as _Memory  # the name cpu/tiles imports
from .shadow import Shadow

CHUNK_LANES = 1 << 16
MAX_SHARED_BYTES = 227 * 1024  # shared memory of one block on the largest GPUs (sm_90)
# threads that any GPU holds at once (2048 per multiprocessor, fewer than 256 of them): a
# kernel that calls grid_barrier() runs no larger grid there, nor here
MAX_RESIDENT_THREADS = 2048 * 256


Observer = Callable[[Access], None]


# ----------------------------------------------------------------------------- frames


class _Frame:
    """The state of one chunk: whole blocks running in lock step, one lane per thread."""

    def __init__(self, launch: "_Launch", first_block: int, n_blocks: int):
        lanes = n_blocks * launch.threads
        self.lanes = lanes
        self.kernel_name = launch.kernel_name
        self.observer = launch.observer
        self.env = dict(launch.scalars)  # variable -> register-form value (lanes or scalar)
        self.memory = dict(launch.memory)  # array name -> _Memory; locals join per chunk
        self.memory.update({ref.name: _Memory.shared(ref, n_blocks, shape)
                            for ref, shape in launch.shared})
        self.slots = [None] * launch.n_slots  # parked lanes of loops and regions
        self.changes = 0  # stores and memory-changing atomics so far (`memory`; the spin test)
        self.lane = launch.lane[:lanes]
        self.lane_thread = launch.lane_thread[:lanes]
        self.thread_id = [t[:lanes] for t in launch.thread_id]
        self.lane_block = np.repeat(np.arange(first_block, first_block + n_blocks), launch.threads)
        gx, gy, _ = launch.grid
        self.block_id = [(self.lane_block % gx).astype(np.int32),
                         (self.lane_block // gx % gy).astype(np.int32),
                         (self.lane_block // (gx * gy)).astype(np.int32)]
        self.block_dim = launch.block_dim
        self.grid_dim = launch.grid_dim
        self.block_slot = self.lane // launch.threads  # the lane's block within the chunk
        self.warps = warp.Warps(lanes, launch.threads, self.lane_thread)
        self.lane_id = [self.warps.lane_id]
        self.lane_warp = self.warps.of_lane
        # Barrier epochs per block and per warp, where shadow memory needs them.
        self.block_epoch = np.zeros(n_blocks, np.int64) if launch.epochs else None
        self.warp_epoch = np.zeros(len(self.warps.starts), np.int64) if launch.epochs else None
        # grid barriers passed (a cooperative kernel's chunk is the whole grid), else None
        self.grid_epoch = np.zeros(1, np.int64) if launch.whole_grid else None

    def describe(self, lane: int) -> str:
        """'block (bx, by, bz) thread (tx, ty, tz)' of a lane, for messages."""
        block = tuple(int(b[lane]) for b in self.block_id)
        thread = tuple(int(t[lane]) for t in self.thread_id)
        return f"block {block} thread {thread}"


@dataclass
class _Launch:
    """What all chunks of one launch share."""

    kernel_name: str
    grid: tuple
    block: tuple
    memory: dict
    scalars: dict
    observer: Observer
    n_slots: int
    shared: list  # (ArrayRef, shape) of each shared array
    epochs: bool  # whether accesses carry barrier epochs (the kernel has barriers or shared memory)
    whole_grid: bool  # one chunk of every block (the kernel calls grid_barrier())

    def __post_init__(self):
        self.threads, self.n_blocks = prod(self.block), prod(self.grid)
        self.blocks_per_chunk = self.n_blocks if self.whole_grid else \
            min(self.n_blocks, max(1, CHUNK_LANES // self.threads))
        lanes = self.blocks_per_chunk * self.threads
        self.lane = np.arange(lanes, dtype=np.int64)
        self.lane_thread = self.lane % self.threads
        bx, by, _ = self.block
        self.thread_id = [(self.lane_thread % bx).astype(np.int32),
                          (self.lane_thread // bx % by).astype(np.int32),
                          (self.lane_thread // (bx * by)).astype(np.int32)]
        self.block_dim = tuple(np.int32(n) for n in self.block)
        self.grid_dim = tuple(np.int32(n) for n in self.grid)


# ----------------------------------------------------------------------------- compiler


def _assign(fr, name, value, mask, undefined):
    """Give active lanes of variable `name` the value; other lanes keep theirs."""
    fr.env[name] = value if mask.all() else np.where(mask, value, fr.env.get(name, undefined))


def _same_state(a: tuple, b: tuple) -> bool:
    """Whether two iterations of a while loop began from the same state: no memory changed
    in between, the same lanes entered and every variable holds the same values. The
    interpreter is deterministic, so from such a state the loop repeats forever."""
    (changes_a, enter_a, env_a), (changes_b, enter_b, env_b) = a, b
    return changes_a == changes_b and np.array_equal(enter_a, enter_b) and env_a.keys() == env_b.keys() \
        and all(v is env_b[k] or np.array_equal(v, env_b[k]) for k, v in env_a.items())


def _spin_error(fr, node, enter) -> LaunchError:
    lane = int(np.argmax(enter))
    return LaunchError(
        f"kernel {fr.kernel_name}: the loop at line {node.loc.line} made an iteration that "
        f"changed nothing ({fr.describe(lane)} and others): it waits for another block or "
        "the host to change memory. The cpu backend runs the blocks of a chunk in lock step "
        "and chunks one after another, so what it waits for may never come: it would hang",
        node.loc, hint="run it on the GPU (the cpu backend cannot run blocks that wait for "
        "one another), or write the kernel without the wait")


def _park(slot):
    def park(fr, mask):
        parked = fr.slots[slot]
        fr.slots[slot] = mask if parked is None else parked | mask
        return np.zeros_like(mask)
    return park


def _run_loop(fr, mask, begin, advance, body, brk, cont):
    """Iterate while lanes remain: `begin(live)` gives the lanes entering an iteration,
    `advance()` runs after each. Returns the lanes that left by the condition or `break`."""
    live, done = mask, None
    while True:
        enter = begin(live)
        left = live & ~enter
        done = left if done is None else done | left
        if not enter.any():
            return done
        fr.slots[brk] = fr.slots[cont] = None
        live = body(fr, enter)
        if fr.slots[brk] is not None:
            done = done | fr.slots[brk]
        if fr.slots[cont] is not None:
            live = live | fr.slots[cont]
        if advance is not None:
            advance()


class _Compiler:
    """IR -> closures. An expression becomes f(frame, mask) -> value; a statement becomes
    (f(frame, mask) -> fall-through mask, escapes: the slots its lanes may be parked in)."""

    def __init__(self, kernel: ir.Kernel):
        self.kernel = kernel
        self.loops: list = []  # (break slot, continue slot) of enclosing loops
        self.regions: list = []  # (label, slot) of enclosing regions
        self.n_slots = 0
        self.unsafe = False  # compiling the body of a `with vg.unsafe():`
        self.shared: list = []  # the ArrayRefs of the kernel's shared arrays
        self.barriers = False  # whether the kernel has barriers

    def program(self) -> "_Program":
        body, _ = self.block(self.kernel.body)
        return _Program(body, self.n_slots, tuple(self.shared), self.barriers)

    def _slot(self) -> int:
        self.n_slots += 1
        return self.n_slots - 1

    # ------------------------------------------------------------------ expressions

    def expr(self, node):
        return self._EXPR[type(node)](self, node)

    def _op(self, f, what, node):
        if f is None:
            raise CompileError(f"the cpu backend has no {what}", node.loc)
        return f

    def _const(self, node):
        value = ops.constant(node.value, node.dtype)
        return lambda fr, mask: value

    def _var(self, node):
        name, undefined = node.name, ops.constant(0, node.dtype)
        return lambda fr, mask: fr.env.get(name, undefined)

    def _special(self, node):
        kind, axis = node.kind, node.axis
        return lambda fr, mask: getattr(fr, kind)[axis]

    def _unary(self, node):
        f = self._op(ops.unary(node.op, node.dtype), f"{node.op} on {node.dtype.name}", node)
        operand = self.expr(node.operand)
        return lambda fr, mask: f(operand(fr, mask))

    def _binary(self, node):
        f = self._op(ops.binary(node.op, node.dtype), f"{node.op} on {node.dtype.name}", node)
        lhs, rhs = self.expr(node.lhs), self.expr(node.rhs)
        return lambda fr, mask: f(lhs(fr, mask), rhs(fr, mask))

    def _compare(self, node):
        f = self._op(ops.compare(node.op), f"comparison {node.op}", node)
        lhs, rhs = self.expr(node.lhs), self.expr(node.rhs)
        return lambda fr, mask: f(lhs(fr, mask), rhs(fr, mask))

    def _lazy(self, node, together=()):
        """A lazily evaluated operand: f(frame, mask of all lanes, lanes that need it).
        `together`: what the compiled code branches around with it (a select's arms)."""
        f = self.expr(node)
        if warp.evaluated_by_all(node, together or (node,)):
            return lambda fr, mask, lanes: f(fr, mask)
        return lambda fr, mask, lanes: f(fr, lanes)

    def _logical(self, node):
        lhs, rhs, is_and = self.expr(node.lhs), self._lazy(node.rhs), node.op == "and"

        def logical(fr, mask):
            a = lhs(fr, mask)
            undecided = mask & (a if is_and else ~a)  # lanes where the rhs decides
            if not undecided.any():
                return a
            b = rhs(fr, mask, undecided)
            return a & b if is_and else a | b
        return logical

    def _select(self, node):
        arms = (node.a, node.b)
        cond, a, b = self.expr(node.cond), self._lazy(node.a, arms), self._lazy(node.b, arms)

        def select(fr, mask):
            c = cond(fr, mask)
            lanes_a, lanes_b = mask & c, mask & ~c
            if not lanes_b.any():
                return a(fr, mask, lanes_a)
            if not lanes_a.any():
                return b(fr, mask, lanes_b)
            return np.where(c, a(fr, mask, lanes_a), b(fr, mask, lanes_b))
        return select

    def _warp_op(self, node):
        run = warp.OPERATIONS[node.op]
        value, arg = (self.expr(e) if e is not None else lambda fr, mask: None
                      for e in (node.value, node.lane))
        return lambda fr, mask: run(fr, node, value(fr, mask), arg(fr, mask), mask)

    def _cast(self, node):
        f = ops.cast(node.value.dtype, node.dtype)
        value = self.expr(node.value)
        return lambda fr, mask: f(value(fr, mask))

    def _math(self, node):
        operand = node.args[0].dtype
        f = self._op(ops.math(node.func, operand), f"{node.func} on {operand.name}", node)
        args = [self.expr(a) for a in node.args]
        return lambda fr, mask: f(*(arg(fr, mask) for arg in args))

    def _indices(self, indices):
        if not indices:  # a 0-d array: its one element, as the memory's 1-d view sees it
            return [lambda fr, mask: np.int64(0)]
        return [self.expr(i) for i in indices]

    def _site(self, node, is_write=False, atomic=False) -> Site:
        return Site(node.loc, is_write, atomic, self.unsafe)

    def _load(self, node):
        name, site, index = node.array.name, self._site(node), self._indices(node.indices)

        def load(fr, mask):
            mem = fr.memory[name]
            return mem.decode(memory.load(fr, mem, [i(fr, mask) for i in index], mask, site))
        return load

    def _atomic(self, node):
        scan = self._op(atomics.scan_for(node.op, node.dtype),
                        f"atomic {node.op} on {node.dtype.name}", node)
        name, index = node.array.name, self._indices(node.indices)
        site = self._site(node, is_write=True, atomic=True)
        value = self.expr(node.value)
        compare = None if node.compare is None else self.expr(node.compare)
        register_dtype = ops.register_dtype(node.dtype)

        def atomic(fr, mask):
            indices = [i(fr, mask) for i in index]  # Python order: index, compare, value
            expected = None if compare is None else compare(fr, mask)
            return memory.atomic(fr, fr.memory[name], indices, mask, site, scan, value(fr, mask),
                           expected, register_dtype)
        return atomic

    def _shape(self, node):
        name, axis = node.array.name, node.axis
        return lambda fr, mask: np.int64(fr.memory[name].shape[axis])

    _EXPR = {ir.Const: _const, ir.Var: _var, ir.Special: _special, ir.Unary: _unary,
             ir.Binary: _binary, ir.Compare: _compare, ir.Logical: _logical,
             ir.Select: _select, ir.Cast: _cast, ir.MathCall: _math, ir.Load: _load,
             ir.Shape: _shape, ir.Atomic: _atomic, ir.WarpOp: _warp_op}

    # ------------------------------------------------------------------ statements

    def stmt(self, node):
        return self._STMT[type(node)](self, node)

    def block(self, stmts):
        compiled = [self.stmt(s) for s in stmts]
        escapes = frozenset().union(*(e for _, e in compiled))
        steps = tuple((f, bool(e)) for f, e in compiled)

        def run(fr, mask):
            for f, may_divert in steps:
                mask = f(fr, mask)
                if may_divert and not mask.any():
                    break
            return mask
        return run, escapes

    def _assign(self, node):
        name, value = node.name, self.expr(node.value)
        undefined = ops.constant(0, node.value.dtype)  # lanes that never assigned it

        def assign(fr, mask):
            _assign(fr, name, value(fr, mask), mask, undefined)
            return mask
        return assign, frozenset()

    def _store(self, node):
        name, index = node.array.name, self._indices(node.indices)
        site, value = self._site(node, is_write=True), self.expr(node.value)

        def store(fr, mask):
            mem = fr.memory[name]
            stored = mem.encode(value(fr, mask))  # Python order: the value, then the target
            memory.store(fr, mem, [i(fr, mask) for i in index], mask, site, stored)
            return mask
        return store, frozenset()

    def _if(self, node):
        cond = self.expr(node.cond)
        then, then_escapes = self.block(node.then)
        orelse, else_escapes = self.block(node.orelse)
        escapes = then_escapes | else_escapes

        def run_if(fr, mask):
            c = cond(fr, mask)
            taken, skipped = mask & c, mask & ~c
            taken = then(fr, taken) if taken.any() else taken
            skipped = orelse(fr, skipped) if skipped.any() else skipped
            return taken | skipped if escapes else mask
        return run_if, escapes

    def _loop_body(self, body):
        brk, cont = self._slot(), self._slot()
        self.loops.append((brk, cont))
        run, escapes = self.block(body)
        self.loops.pop()
        return run, brk, cont, escapes - {brk, cont}

    def _while(self, node):
        cond = self.expr(node.cond)
        body, brk, cont, escapes = self._loop_body(node.body)

        def run_while(fr, mask):
            before = [None]  # the state an iteration started from

            def begin(live):
                enter = live & cond(fr, live)
                state = (fr.changes, enter, dict(fr.env))
                if before[0] is not None and _same_state(before[0], state):
                    raise _spin_error(fr, node, enter)
                before[0] = state
                return enter
            done = _run_loop(fr, mask, begin, None, body, brk, cont)
            return done if escapes else mask
        return run_while, escapes

    def _for(self, node):
        var, var_dtype = node.var, node.start.dtype
        start, stop, step = (self.expr(e) for e in (node.start, node.stop, node.step))
        undefined = ops.constant(0, var_dtype)
        body, brk, cont, escapes = self._loop_body(node.body)

        def run_for(fr, mask):
            counter, end, by = start(fr, mask), stop(fr, mask), step(fr, mask)
            upward, downward = by > 0, by < 0
            wrapped = np.False_  # stepping past the dtype's range ends the range, as in Python

            def begin(live):
                inside = np.where(upward, counter < end, downward & (counter > end))
                enter = live & inside & ~wrapped
                _assign(fr, var, counter, enter, undefined)
                return enter

            def advance():
                nonlocal counter, wrapped
                stepped = counter + by
                wrapped = wrapped | np.where(upward, stepped < counter, stepped > counter)
                counter = stepped

            done = _run_loop(fr, mask, begin, advance, body, brk, cont)
            return done if escapes else mask
        return run_for, escapes

    def _innermost_loop(self, node):
        if not self.loops:
            raise CompileError("break or continue outside a loop", node.loc)
        return self.loops[-1]

    def _break(self, node):
        slot = self._innermost_loop(node)[0]
        return _park(slot), frozenset({slot})

    def _continue(self, node):
        slot = self._innermost_loop(node)[1]
        return _park(slot), frozenset({slot})

    def _region(self, node):
        slot = self._slot()
        self.regions.append((node.label, slot))
        body, escapes = self.block(node.body)
        self.regions.pop()
        escapes = escapes - {slot}

        def run_region(fr, mask):
            fr.slots[slot] = None
            out = body(fr, mask)
            if not escapes:
                return mask
            exited = fr.slots[slot]
            return out if exited is None else out | exited
        return run_region, escapes

    def _exit(self, node):
        slot = next((s for label, s in reversed(self.regions) if label == node.label), None)
        if slot is None:
            raise CompileError(f"exit from region {node.label!r}, which does not enclose it",
                               node.loc)
        return _park(slot), frozenset({slot})

    def _local_alloc(self, node):
        ref = node.array
        if ref.type.space == "shared":  # made with the frame: one per block, from the start
            self.shared.append(ref)
            return (lambda fr, mask: mask), frozenset()

        def alloc(fr, mask):
            if ref.name not in fr.memory:  # contents are undefined: one buffer per chunk
                fr.memory[ref.name] = _Memory.local(ref, fr.lanes)
            return mask
        return alloc, frozenset()

    def _barrier(self, node):
        scope, loc = node.scope, node.loc
        self.barriers = True

        def run_barrier(fr, mask):
            warp.barrier(fr, scope, mask, loc)
            return mask
        return run_barrier, frozenset()

    def _fence(self, node):  # memory here is sequentially consistent: nothing to order
        return (lambda fr, mask: mask), frozenset()

    def _unsafe(self, node):
        enclosing, self.unsafe = self.unsafe, True
        try:
            return self.block(node.body)
        finally:
            self.unsafe = enclosing

    def _print(self, node):
        """One line per active lane, in lane order: blocks in order, threads in linear order.
        Its loads are bounds checked but, as in the race proofs, not race checked."""
        _, text, values = printf.line_format(node, "simt")
        enclosing, self.unsafe = self.unsafe, True
        try:
            values = [self.expr(v) for v in values]
        finally:
            self.unsafe = enclosing

        def run_print(fr, mask):
            lanes = np.flatnonzero(mask)
            ids = [*fr.block_id, *fr.thread_id]
            columns = [np.broadcast_to(v(fr, mask), (fr.lanes,)) for v in values]
            sys.stdout.write("".join(text % (*(int(i[k]) for i in ids),
                                             *(printf.shown(c[k]) for c in columns)) for k in lanes))
            return mask
        return run_print, frozenset()

    _STMT = {ir.Assign: _assign, ir.Store: _store, ir.If: _if, ir.While: _while,
             ir.For: _for, ir.Break: _break, ir.Continue: _continue, ir.Region: _region,
             ir.Exit: _exit, ir.LocalAlloc: _local_alloc, ir.Unsafe: _unsafe,
             ir.Barrier: _barrier, ir.Fence: _fence, ir.Print: _print}


@dataclass(frozen=True)
class _Program:
    """A compiled kernel: its body and what launches must prepare for it."""

    body: Callable
    n_slots: int
    shared: tuple  # ArrayRefs of its shared arrays
    barriers: bool

    def shared_shapes(self, shared_bytes: int, name: str) -> list:
        """(ArrayRef, shape) of each shared array; LaunchError past a block's shared memory."""
        shapes = [(ref, ref.type.shape or (shared_bytes // ref.dtype.itemsize,))
                  for ref in self.shared]
        total = sum(-(-ref.dtype.itemsize * prod(shape) // 16) * 16 for ref, shape in shapes
                    if ref.type.shape is not None) + shared_bytes
        if total > MAX_SHARED_BYTES:
            raise LaunchError(f"kernel {name}: {total} bytes of shared memory per block, more "
                              f"than the {MAX_SHARED_BYTES} the largest GPUs have")
        return shapes


_PROGRAMS: "weakref.WeakKeyDictionary[ir.Kernel, _Program]" = weakref.WeakKeyDictionary()


def _program(kernel: ir.Kernel) -> _Program:
    program = _PROGRAMS.get(kernel)
    if program is None:
        program = _PROGRAMS[kernel] = _Compiler(kernel).program()
    return program


def _dims(dims) -> tuple:
    dims = (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims)
    return dims + (1,) * (3 - len(dims))


def _both(first: Observer, second: Observer) -> Observer:
    def observe(access: Access) -> None:
        first(access)
        second(access)
    return observe


def launch_arguments(kernel: ir.Kernel, args: dict) -> tuple:
    """(array name -> _Memory, scalar name -> register-form value) of a launch of either
    track; LaunchError for a missing argument."""
    memory, scalars = {}, {}
    for p in kernel.params:
        if p.kind == "constexpr":
            continue
        if p.name not in args:
            raise LaunchError(f"kernel {kernel.name}: no argument for parameter {p.name!r}", p.loc)
        if p.kind == "array":
            memory[p.name] = _Memory.of_argument(kernel, p, args[p.name])
        else:
            scalars[p.name] = ops.scalar_argument(args[p.name], p.dtype)
    return memory, scalars


def run_simt(kernel: ir.Kernel, grid, block, args: dict, *, shared_bytes: int = 0,
             observer: Optional[Observer] = None) -> None:
    """Run `kernel` over `grid` x `block` threads; arrays in `args` are written in place.

    `args` maps every non-constexpr parameter to a NumPy array (any strides; bfloat16/fp8
    as ml_dtypes arrays or raw uint16/uint8 bits) or a scalar. `shared_bytes` sizes the
    dynamic shared array (`shared.dynamic`). Shadow memory checks every access for races
    (`SafetyError`). `observer`, if given, is called with an `Access` for every load, store
    and atomic, before shadow memory checks it and before memory is touched.
    """
    program = _program(kernel)
    memory, scalars = launch_arguments(kernel, args)
    grid, block = _dims(grid), _dims(block)
    if prod(grid) == 0 or prod(block) == 0:
        return
    if kernel.cooperative and prod(grid) * prod(block) > MAX_RESIDENT_THREADS:
        raise LaunchError(f"kernel {kernel.name}: grid_barrier() needs every block of the grid "
                          f"running at once, but the grid has {prod(grid) * prod(block)} threads, "
                          f"more than any GPU holds at once ({MAX_RESIDENT_THREADS})",
                          hint="launch fewer blocks and let each thread loop over several "
                               "elements (a grid-stride loop)")
    shared = program.shared_shapes(shared_bytes, kernel.name)
    epochs = program.barriers or bool(shared)
    launch = _Launch(kernel.name, grid, block, memory, scalars, None, program.n_slots, shared,
                     epochs, kernel.cooperative)
    shadow = Shadow(grid, block, {name: mem.shape for name, mem in memory.items()},
                    {ref.name: shape for ref, shape in shared}, launch.blocks_per_chunk,
                    ordered=program.barriers, grid_ordered=kernel.cooperative)
    launch.observer = shadow if observer is None else _both(observer, shadow)
    with np.errstate(all="ignore"):  # integer wrap and IEEE specials are the semantics
        for first in range(0, launch.n_blocks, launch.blocks_per_chunk):
            fr = _Frame(launch, first, min(launch.blocks_per_chunk, launch.n_blocks - first))
            program.body(fr, np.ones(fr.lanes, bool))
