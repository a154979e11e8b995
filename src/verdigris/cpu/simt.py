"""The SIMT interpreter of the cpu backend: runs a typed `ir.Kernel` with NumPy.

Takes: a kernel, a grid and a block (up to three ints each), and the arguments: NumPy
arrays, which the kernel reads and writes in place through any view, and scalars.
Gives: `run_simt`, which runs the kernel to completion or raises `BoundsError` (an index
out of bounds), `SafetyError` (a race or a read of unwritten shared memory that shadow
memory observed, see `shadow`) or `DivergenceError` (a barrier or warp collective reached
by part of a block or warp, see `warp`); `Access` (from `memory`), what an observer of
memory accesses sees.

How: the IR is compiled once per kernel into Python closures. Whole blocks run together as
one vector of lanes (a `frames.Frame`: one lane per thread, up to `CHUNK_LANES` lanes,
blocks in order; the whole grid at once for a kernel that calls `grid_barrier()`, so that
it is a point every thread of the grid passes together). A statement takes the mask of
lanes executing it and returns the mask of lanes that fall through to the next one; lanes
that `break`, `continue` or `exit` wait in their loop's or region's slot and rejoin where
the IR says (`flow`). Expressions are evaluated on all lanes (masked lanes compute
don't-cares), except where laziness is the meaning: the right operand of `and`/`or`, the
arms of a select, and memory, which only active lanes touch. Lock step is what makes
barriers and warps faithful: a statement finishes on every lane of a block before the next
starts, so a barrier is a point all of them pass together (or a `DivergenceError`) and a
shuffle finds every lane's value computed; a block's shared arrays live for the chunk, one
copy per block.

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
from . import atomics, flow, memory, ops, warp
from .frames import Frame, Launch, Observer, assign
from .memory import Access, Site
from .memory import Memory as _Memory  # the name cpu/tiles imports
from .shadow import Shadow

MAX_SHARED_BYTES = 227 * 1024  # shared memory of one block on the largest GPUs (sm_90)
# threads that any GPU holds at once (2048 per multiprocessor, fewer than 256 of them): a
# kernel that calls grid_barrier() runs no larger grid there, nor here
MAX_RESIDENT_THREADS = 2048 * 256


# ----------------------------------------------------------------------------- compiler


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

        def run_assign(fr, mask):
            assign(fr, name, value(fr, mask), mask, undefined)
            return mask
        return run_assign, frozenset()

    def _store(self, node):
        name, index = node.array.name, self._indices(node.indices)
        site, value = self._site(node, is_write=True), self.expr(node.value)

        def store(fr, mask):
            mem = fr.memory[name]
            stored = mem.encode(value(fr, mask))  # Python order: the value, then the target
            memory.store(fr, mem, [i(fr, mask) for i in index], mask, site, stored)
            return mask
        return store, frozenset()

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

    _STMT = {ir.Assign: _assign, ir.Store: _store, ir.If: flow.compile_if, ir.While: flow.compile_while,
             ir.For: flow.compile_for, ir.Break: flow.compile_break, ir.Continue: flow.compile_continue,
             ir.Region: flow.compile_region, ir.Exit: flow.compile_exit, ir.LocalAlloc: _local_alloc,
             ir.Unsafe: _unsafe, ir.Barrier: _barrier, ir.Fence: _fence, ir.Print: _print}


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
    launch = Launch(kernel.name, grid, block, memory, scalars, None, program.n_slots, shared,
                     epochs, kernel.cooperative)
    shadow = Shadow(grid, block, {name: mem.shape for name, mem in memory.items()},
                    {ref.name: shape for ref, shape in shared}, launch.blocks_per_chunk,
                    ordered=program.barriers, grid_ordered=kernel.cooperative)
    launch.observer = shadow if observer is None else _both(observer, shadow)
    with np.errstate(all="ignore"):  # integer wrap and IEEE specials are the semantics
        for first in range(0, launch.n_blocks, launch.blocks_per_chunk):
            fr = Frame(launch, first, min(launch.blocks_per_chunk, launch.n_blocks - first))
            program.body(fr, np.ones(fr.lanes, bool))
