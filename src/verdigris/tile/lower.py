"""Tile-track kernel IR -> LLVM IR (llvmlite.ir): the GPU lowering of `ir.tiles`.

Takes: a specialized tile `ir.Kernel` and a target (`codegen.TARGETS`). Gives:
`lower(kernel, target) -> llvmlite.ir.Module` (one `ptx_kernel` function with the SIMT
lowering's ABI: `abi_params(kernel)` then the fault block). Its warps are `warps`'
(`num_warps`, `launch_block`); tile values in registers are `values`' (`TileValue`, `Lazy`).

How: the block's threads share each tile value. Every tile value gets a distributed
layout (`layout.Layout`); a thread holds its elements as a list of LLVM registers, so an
elementwise op is one scalar op per register, with the SIMT lowering's helpers (`arith`,
`casts`, `mathlib`: the same semantics, float16/bfloat16 in float32 registers). Loads and
stores are in `memory` (16-byte vectors, masks only on edge tiles), reductions in
`reduce` (shuffles, then shared memory across warps), scans in `scan`, flips in `flips`,
slices and concatenations in `pieces`,
sorts in `sorting` (a bitonic network in the operand's layout), data movement between
layouts in `convert` (shared memory). Scalars and control flow are the SIMT lowering's
(`codegen.lower`), which this class extends; scalars are uniform over the block, so every
branch is block-uniform and barriers inside them are safe. One-element atomics
(`tile.atomic_cas`, `tile.atomic_xchg`) and critical sections (`tile.lock`) are `locks`'.
Tile variables live in one alloca per register (the variable's default layout), which
mem2reg promotes.

Shared memory (`TileLowering.shared`): two buffers taking turns, each of the most any
user asks for, static when both fit 48 KiB. Otherwise `lower` lowers the kernel again with
them in dynamic shared memory (`sharedmem.exchange`: after the matrix products' part;
one buffer and a barrier after each user when two do not fit the target's block;
refused past it), and the module defines a symbol whose name gives the bytes every launch
must ask for (`DYNAMIC_SHARED_SYMBOL`; `runtime.module.dynamic_shared` reads it).

A `Print` is one `vprintf` call per block, by its first thread, after every thread has
computed the values (a reduction needs them all; `codegen.printf`).

Register pressure and latency: elementwise results and the elements of loaded vectors are
`Lazy` (computed where first used), so a chain of elementwise ops is emitted register by
register and a loaded bfloat16 pair stays in one 32-bit word until its use; the loads of
one statement are issued together, before its arithmetic (`prefetch`); and a statement
that loads is lowered once on each path of its loads (`memory.with_loads`), so that on the
vector path its loads, arithmetic and store or assignment are one straight-line block.
"""
from __future__ import annotations

import dataclasses
from math import prod

from llvmlite import ir

from .. import errors
from ..codegen import arith, checks, printf
from ..codegen.dtypes import I8, I32, I64, reg_type
from ..codegen.emitter import Emitter
from ..codegen.lower import _KernelLowering
from ..codegen.nvptx import SHARED
from ..ir import nodes as N
from ..ir import tiles as X
from ..ir.locks import Locked
from ..types import DType, int32
from . import (convert, elementwise, flips, indexed, locks, memory, ordering, pieces, prefetch, random,
               reduce, scan, sharedmem, sorting, varlayout)
from .sharedmem import DYNAMIC_SHARED_SYMBOL, Exchange
from .layout import WARP_SIZE, Layout, blocked, only_unit_axes_differ, padded, unit_reshaped
from .values import Lazy, TileValue, forced, forced_all
from .warps import launch_block, num_warps, vector_widths

MAX_STATIC_SHARED = 48 * 1024


def _error(message: str, node) -> errors.CompileError:
    return errors.CompileError(message, node.loc)


class TileLowering(_KernelLowering):
    # A tile variable assigned in one place lives in the layout its value is made in
    # (`varlayout`); the matrix-product lowering places its variables itself.
    variables_where_made = True

    dynamic_align = 16  # of the dynamic shared memory's base (`shared_dynamic`)

    def __init__(self, kernel: N.Kernel, target: str, exchange: Exchange | None = None):
        scalar_locals = {k: v for k, v in kernel.locals.items() if not isinstance(v, X.TileType)}
        super().__init__(dataclasses.replace(kernel, locals=scalar_locals), target)
        self.kernel = kernel
        self.kernel_id = checks.kernel_id(kernel)
        self.num_warps = num_warps(kernel)
        self.widths = vector_widths(kernel)
        self.entry = Emitter(self.module, self.allocas, kernel.fma)  # code every block is dominated by
        tid = self.entry.call("llvm.nvvm.read.ptx.sreg.tid.x", I32)
        self.lane = self.allocas.and_(tid, ir.Constant(I32, WARP_SIZE - 1), name="lane")
        self.warp = self.allocas.lshr(tid, ir.Constant(I32, 5), name="warp")
        self._coords: dict = {}
        self.smem = [None, None]  # the two static shared buffers (`shared`)
        self.exchange = exchange  # None: the buffers are static
        self.dsmem = None  # the dynamic shared memory's symbol (`shared_dynamic`)
        self.turn = 0
        self.depth = 0  # enclosing loops, ifs and inlined functions
        self.smem_bytes = 0  # the most a user of `shared` asked for, by `smem_site`
        self.smem_site = kernel.loc
        self.ready: dict = {}  # id(TileLoad) -> TileValue issued early (`prefetch`)
        self.site = kernel.loc  # the tile expression being lowered
        self.order = ordering.BlockOrder(self)  # barriers between statements that may meet
        once = varlayout.made_once(kernel) if self.variables_where_made else {}
        self.tile_slots = {name: self._tile_slots(name, tt) for name, tt in kernel.locals.items()
                           if isinstance(tt, X.TileType) and name not in once}
        for name, value in once.items():  # in program order: the variables they read are placed
            self.tile_slots[name] = self._tile_slots(name, kernel.locals[name],
                                                     prefetch.natural(self, value))

    # ------------------------------------------------------------------ layouts

    def default(self, shape: tuple) -> Layout:
        shape = padded(shape)
        per_thread = max(1, prod(shape) // (WARP_SIZE * self.num_warps))
        return blocked(shape, self.num_warps, min(self.widths.get(shape, 4), per_thread))

    def scatter_layout(self, value: X.TileExpr) -> Layout:
        """The layout a scatter or a tile atomic of `value` writes from (element by element,
        so any layout coalesces as well as another): the default one."""
        return self.default(value.shape)

    def thread_coord(self, layout: Layout, axis: int) -> ir.Value:
        """The lane- and warp-dependent part of a thread's coordinate along `axis` (i32),
        computed once in the entry block."""
        key = (layout.lanes, layout.warps, axis)
        value = self._coords.get(key)
        if value is None:
            b, value = self.allocas, ir.Constant(I32, 0)
            runs: list = []  # (source, first bit, first shift, length): bits that move together
            for source, bit, shift in layout.thread_bits(axis):
                last = runs[-1] if runs else None
                if last and last[0] == source and last[1] + last[3] == bit and last[2] + last[3] == shift:
                    runs[-1] = (source, last[1], last[2], last[3] + 1)
                else:
                    runs.append((source, bit, shift, 1))
            for source, bit, shift, length in runs:
                part = b.lshr({"lane": self.lane, "warp": self.warp}[source], ir.Constant(I32, bit))
                part = b.shl(b.and_(part, ir.Constant(I32, (1 << length) - 1)), ir.Constant(I32, shift))
                value = b.or_(value, part)
            self._coords[key] = value
        return value

    def coords(self, layout: Layout, r: int) -> list:
        """Register r's coordinates (i32 values; thread part + constant part)."""
        return [self.b.add(self.thread_coord(layout, k), ir.Constant(I32, c)) if layout.thread_bits(k)
                else ir.Constant(I32, c) for k, c in enumerate(layout.register_coords(r))]

    def is_owner(self, layout: Layout) -> ir.Value | None:
        """Whether this thread is the first of those holding the same elements (None: every
        thread holds elements of its own)."""
        lane_mask, warp_mask = layout.owner_bits()
        if not lane_mask and not warp_mask:
            return None
        b = self.b
        dup = b.or_(b.and_(self.lane, ir.Constant(I32, lane_mask)), b.and_(self.warp, ir.Constant(I32, warp_mask)))
        return b.icmp_unsigned("==", dup, ir.Constant(I32, 0))

    # ------------------------------------------------------------------ shared memory, sync

    def shared(self, nbytes: int) -> ir.Value:
        """A shared buffer of at least `nbytes` for one user: it writes, calls `barrier`,
        reads, then calls `release_shared`.

        Two buffers take turns, so a user in straight-line code needs no barrier after its
        reads: the next user writes the other buffer, and the one after it is ordered
        behind those reads by the next user's barrier. A user inside a loop, an `if` or an
        inlined function (whose early exit may skip users, breaking the turns) ends with a
        barrier and leaves the turn where it was."""
        if nbytes > self.smem_bytes:
            self.smem_bytes, self.smem_site = nbytes, self.site
        if self.exchange is not None:
            assert nbytes <= self.exchange.size, "a second lowering asked for more shared memory"
            return self.shared_dynamic(self.exchange.offset + self.turn * self.exchange.size)
        buffer = self.smem[self.turn]
        if buffer is None:
            buffer = self.smem[self.turn] = ir.GlobalVariable(
                self.module, ir.ArrayType(ir.IntType(8), 0), f"vg.smem{self.turn}", addrspace=SHARED)
            buffer.type = ir.PointerType(addrspace=SHARED)  # opaque, as LLVM 22's pointers
            buffer.linkage = "internal"
            buffer.align = 16
        return buffer

    def release_shared(self) -> None:
        if self.depth or (self.exchange is not None and self.exchange.buffers == 1):
            self.barrier()
        else:
            self.turn ^= 1

    def shared_dynamic(self, offset: int) -> ir.Value:
        """A pointer `offset` bytes into the kernel's dynamic shared memory."""
        if self.dsmem is None:
            self.dsmem = ir.GlobalVariable(self.module, ir.ArrayType(I8, 0), "vg_dsmem", addrspace=SHARED)
            self.dsmem.type = ir.PointerType(addrspace=SHARED)
            self.dsmem.linkage = "external"
            self.dsmem.align = self.dynamic_align
        return self.b.gep(self.dsmem, [ir.Constant(I64, offset)], inbounds=True, source_etype=I8)

    def dynamic_shared_before(self) -> int:
        """The bytes of dynamic shared memory the kernel uses for other things than the
        buffers of `shared` (which come after them)."""
        return 0

    def barrier(self) -> None:
        self.em.call("llvm.nvvm.barrier0", ir.VoidType())

    # ------------------------------------------------------------------ tile expressions

    def tile(self, e: X.TileExpr, want: Layout | None = None, lazy: bool = False) -> TileValue:
        """`e` in registers; in layout `want` when given. With `lazy`, registers may be
        `Lazy` (for straight-line consumers, which force each where they use it)."""
        value = self.ready.pop(id(e), None) if isinstance(e, X.TileLoad) else None
        self.site = e.loc  # where a shared-memory error points
        if value is None or value.layout != (want or self.default(e.shape)):
            lowering = self._TILE.get(type(e))
            if lowering is None:
                raise _error(f"{type(e).__name__} tiles cannot be compiled for the GPU yet", e)
            value = lowering(self, e, want)
        if want is not None and value.layout != want:
            value = convert.relayout(self, forced_all(value), want, e.shape, e.shape)
        return value if lazy else forced_all(value)

    def _tile_var(self, e: X.TileVar, want) -> TileValue:
        layout, slots = self.tile_slots[e.name]
        ty = reg_type(e.dtype)
        return TileValue(layout, [self.b.load(s, typ=ty) for s in slots], e.dtype)

    def _splat(self, e: X.Splat, want) -> TileValue:
        layout = want or self.default(e.shape)
        return TileValue(layout, [self.expr(e.value)] * layout.num_regs, e.dtype)

    def _arange(self, e: X.Arange, want) -> TileValue:
        layout = want or self.default(e.shape)
        return TileValue(layout, [self.coords(layout, r)[0] for r in range(layout.num_regs)], e.dtype)

    def _tile_map(self, e: X.TileMap, want) -> TileValue:
        bounded = _arange_against_scalar(e)
        if bounded is not None:
            return self._arange_compare(want or self.default(e.shape), *bounded, e.dtype)
        # Operands made in any layout (`prefetch.anywhere`) last: the others' layout is the
        # result's, so no data moves.
        order = sorted(range(len(e.args)), key=lambda i: prefetch.anywhere(e.args[i]))
        values: dict = {}
        for i in order:
            values[i] = self.tile(e.args[i], want, lazy=True)
            want = values[i].layout
        args = [values[i] for i in range(len(e.args))]
        operand = e.args[1 if e.op == "where" else 0].dtype
        apply = elementwise.operation(e, operand)
        regs = [Lazy(lambda r=r: apply(self.em, [forced(a.regs[r]) for a in args])) for r in range(want.num_regs)]
        return TileValue(want, regs, e.dtype)

    def _arange_compare(self, layout: Layout, op: str, bound: X.Splat, dtype: DType) -> TileValue:
        """`arange op bound` where the arange was widened to the bound's 64-bit type (the
        masks `tile.arange(n) < n_valid`): compared in 32 bits, the bound clamped once to
        [-g, 2**31 - g] (the same answer for every position 0 <= p < 2**31 - g), the
        thread's coordinate moved to the bound's side once (`tc + c < s` as `c < s - tc`,
        exact in 32 bits), so each element is one comparison with a constant. When the
        bound is a parameter whose values are multiples of g (`Param.multiple_of`) and so
        is every thread coordinate, `s - tc` is too, and `c < s - tc` is `c0 < s - tc` for
        c's run start c0 = c - c % g: one comparison per run of g (`_runs`)."""
        b, dt = self.b, bound.dtype
        g = _runs(layout, self.kernel, bound.value, op)
        s = self.expr(bound.value)
        if dt.is_signed:
            s = self.em.call("llvm.smax.i64", s.type, s, ir.Constant(s.type, -g))
            s = self.em.call("llvm.smin.i64", s.type, s, ir.Constant(s.type, 2**31 - g))
        else:
            s = self.em.call("llvm.umin.i64", s.type, s, ir.Constant(s.type, 2**31 - g))
        s = b.trunc(s, I32)
        if layout.thread_bits(0):
            s = b.sub(s, self.thread_coord(layout, 0))
        starts = [c - c % g for c in (layout.register_coords(r)[0] for r in range(layout.num_regs))]
        masks = {c0: Lazy(lambda c0=c0: arith.compare(self.em, op, int32, ir.Constant(I32, c0), s))
                 for c0 in starts}
        return TileValue(layout, [masks[c0] for c0 in starts], dtype)

    def _broadcast(self, e: X.Broadcast, want) -> TileValue:
        # The source in the result's layout sliced on the stretched axes: every thread then
        # holds the source elements of its own result elements (a bias row loaded straight
        # into the lanes that use it, not moved there through shared memory).
        layout = want or self.default(e.shape)
        stretched = {k for k, (a, b) in enumerate(zip(e.value.shape, e.shape)) if a != b}
        source = self.tile(e.value, layout.sliced(stretched), lazy=True)
        return TileValue(layout, [source.regs[m] for m in layout.register_map(source.layout, stretched)], e.dtype)

    def _reshape(self, e: X.Reshape, want) -> TileValue:
        if not only_unit_axes_differ(e.value.shape, e.shape):
            source = forced_all(self.tile(e.value))
            return convert.relayout(self, source, want or self.default(e.shape), e.value.shape, e.shape)
        # Only unit axes come or go: the same registers, relabelled (and `want` passed on).
        source = self.tile(e.value, None if want is None else unit_reshaped(want, e.shape, e.value.shape),
                           lazy=True)
        return TileValue(unit_reshaped(source.layout, e.value.shape, e.shape), source.regs, e.dtype)

    def _permute(self, e: X.Permute, want) -> TileValue:
        source = self.tile(e.value, lazy=True)
        return TileValue(source.layout.permuted(e.perm), source.regs, e.dtype)

    def _tile_reduce(self, e: X.TileReduce, want) -> TileValue:
        return reduce.reduce(self, e)

    _TILE = {
        X.TileVar: _tile_var, X.Splat: _splat, X.Arange: _arange, X.TileMap: _tile_map,
        X.Broadcast: _broadcast, X.Reshape: _reshape, X.Permute: _permute,
        X.TileReduce: _tile_reduce,
        X.TileScan: lambda self, e, want: scan.scan(self, e),
        X.Flip: lambda self, e, want: flips.flip(self, e, want),
        X.TileSlice: lambda self, e, want: pieces.tile_slice(self, e, want),
        X.Cat: lambda self, e, want: pieces.cat(self, e, want),
        X.TileSort: lambda self, e, want: sorting.sort(self, e),
        X.Rand: lambda self, e, want: random.rand(self, e, want),
        X.Gather: lambda self, e, want: indexed.gather(self, e, want),
        X.TileLoad: lambda self, e, want: memory.load(self, e, want or self.default(e.shape)),
    }

    def _scalar_reduce(self, e: X.TileReduce) -> ir.Value:
        if e.shape != ():
            raise _error("a tile cannot be used as a scalar here", e)
        return reduce.reduce(self, e)

    _EXPR = {**_KernelLowering._EXPR, X.TileReduce: _scalar_reduce,
             N.Atomic: lambda self, e: locks.block_atomic(self, e)}

    # ------------------------------------------------------------------ statements

    def _tile_slots(self, name: str, tt: X.TileType, layout: Layout | None = None) -> tuple:
        layout = layout or self.default(tt.shape)
        return layout, [self._alloca(reg_type(tt.dtype), f"{name}.{r}") for r in range(layout.num_regs)]

    def _statement(self, e: X.TileExpr, layout: Layout, consume) -> None:
        """`consume(value)`, `value` being a statement's tile operand `e` in `layout`.

        When `e` loads tiles, the statement is lowered once on each path of its loads
        (`memory.with_loads`): on the vector path, the loads, the arithmetic on them and
        the statement's store or assignment are one straight-line block, which the
        assembler schedules as a whole (loads interleaved with their uses); merging the
        loaded words first would keep every one of them live at once. Both copies use the
        shared buffers alike, so the turn is the same after either."""
        found = prefetch.loads(self, e, layout)
        if not found or not prefetch.repeatable(e):
            prefetch.prefetch(self, found)
            try:
                return consume(self.tile(e, layout))
            finally:
                self.ready.clear()  # later statements may sit in blocks these do not dominate
        start, ends = self.turn, set()

        def lower(values: list) -> None:
            self.turn = start
            self.ready.update((id(node), value) for (node, _), value in zip(found, values))
            try:
                consume(self.tile(e, layout))
            finally:
                self.ready.clear()
            ends.add(self.turn)
        memory.with_loads(self, found, lower)
        assert len(ends) == 1, "the two copies of a statement left the shared buffers' turn apart"

    def _assign(self, s: N.Assign) -> None:
        if s.name not in self.tile_slots:
            return super()._assign(s)
        layout, slots = self.tile_slots[s.name]

        def assign(value: TileValue) -> None:
            for reg, slot in zip(value.regs, slots):
                self.b.store(reg, slot)
        self._statement(s.value, layout, assign)

    def _tile_store(self, s: X.TileStore) -> None:
        self._writable(s)
        self._statement(s.value, self.default(s.value.shape), lambda value: memory.store(self, s, value))

    def _writable(self, s) -> None:
        if s.array.name not in self.kernel.writes:
            raise _error(f"store to {s.array.name!r}, which the kernel's `writes` leaves out", s)

    def _nested(lowering):
        def nested(self, s) -> None:
            self.depth += 1
            try:
                lowering(self, s)
            finally:
                self.depth -= 1
        return nested

    def _region(self, s: N.Region) -> None:
        if s.label == "kernel":  # an exit from it ends the kernel: no later user to skip
            return super()._region(s)
        return TileLowering._nested(TileLowering._ordered(_KernelLowering._region))(self, s)

    def _if(self, s: N.If) -> None:
        with self.order.fork(exhaustive=bool(s.orelse)):
            _KernelLowering._if(self, s)

    def _arm(self, body: list) -> None:
        self.order.arm(self.stmts)(body)

    def _ordered(lowering):
        """A loop or an inlined function, whose iterations and exits `BlockOrder` orders."""
        def ordered(self, s) -> None:
            with self.order.around(s.body):
                lowering(self, s)
        return ordered

    def _lazy(self, cond: ir.Value, then, orelse, branch: bool, name: str) -> ir.Value:
        if not branch:
            return super()._lazy(cond, then, orelse, branch, name)
        with self.order.fork(exhaustive=True):
            return super()._lazy(cond, self.order.arm(then), self.order.arm(orelse), branch, name)

    def _accessing(self, node, array: N.ArrayRef) -> None:
        if array.type.space == "global":  # a scalar access: every thread of the block makes it
            self.order.access(node, array.name, {N.Load: "read", N.Store: "write"}.get(type(node), "atomic"))

    def _tile_atomic(self, s: X.TileAtomic) -> None:
        self._writable(s)
        self._statement(s.value, self.scatter_layout(s.value),
                        lambda value: memory.store(self, s, value, atomic=s.op))

    _STMT = {**_KernelLowering._STMT, N.Assign: _assign, X.TileStore: _tile_store,
             X.TileAtomic: _tile_atomic, X.Scatter: lambda self, s: indexed.scatter(self, s),
             N.If: _nested(_if), N.For: _nested(_ordered(_KernelLowering._for)),
             N.While: _nested(_ordered(_KernelLowering._while)), N.Region: _region,
             N.Print: lambda self, s: printf.emit_print(self, s, "tile"),
             Locked: lambda self, s: locks.locked(self, s)}

    # ------------------------------------------------------------------ kernel

    def threads_per_block(self) -> int:
        return launch_block(self.kernel)[0]

    def run(self) -> ir.Module:
        """The module. With an `exchange`, it also defines a one-byte global whose name
        ends in the dynamic shared memory every launch must give (`DYNAMIC_SHARED_SYMBOL`:
        the name is in the PTX text and in the cubin, where the runtime reads it)."""
        module = super().run()
        ty = ir.ArrayType(ir.IntType(8), self.smem_bytes)
        for buffer in filter(None, self.smem):
            buffer.value_type = ty
            buffer.initializer = ir.Constant(ty, ir.Undefined)
        if self.exchange is not None:
            marker = ir.GlobalVariable(module, I8, f"{DYNAMIC_SHARED_SYMBOL}{self.exchange.end}", addrspace=1)
            marker.initializer = ir.Constant(I8, 0)
        return module


_MIRRORED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _arange_against_scalar(e: X.TileMap):
    """(op with the arange on the left, the scalar's splat) when `e` compares an int32
    arange widened to a 64-bit integer type with a splat of a scalar, else None."""
    if e.op not in N.COMPARE_OPS:
        return None
    for first, (a, other) in enumerate((e.args, tuple(reversed(e.args)))):
        if isinstance(a, X.TileMap) and a.op == "cast" and isinstance(a.args[0], X.Arange) \
                and a.dtype.is_int and a.dtype.bits == 64 and isinstance(other, X.Splat):
            return (e.op if first == 0 else _MIRRORED[e.op]), other
    return None


def _runs(layout: Layout, kernel: N.Kernel, bound, op: str) -> int:
    """The run length g over which `arange op bound` is constant (`_arange_compare`): the
    bound parameter's `multiple_of` (1 for another bound), capped by the smallest step of
    a thread coordinate along the arange's axis; 1 for comparisons other than < and >=."""
    if op not in ("lt", "ge") or not isinstance(bound, N.Var):
        return 1
    param = next((p for p in kernel.params if p.name == bound.name and p.kind == "scalar"), None)
    g = 1 if param is None else param.multiple_of
    for _, _, step in layout.thread_bits(0):
        g = min(g, 1 << step)
    return g


def lower(kernel: N.Kernel, target: str) -> ir.Module:
    """The module; lowered a second time, with the shared buffers in dynamic shared
    memory (`Exchange`), when the first lowering's two do not fit the static 48 KiB."""
    lowering = TileLowering
    if X.has_dots(kernel):  # matrix products: tensor cores, staged operands
        from .matmul import MmaLowering as lowering
    first = lowering(kernel, target)
    module = first.run()
    if 2 * first.smem_bytes <= MAX_STATIC_SHARED:
        return module
    return lowering(kernel, target, sharedmem.exchange(first.smem_bytes, first.smem_site,
                                                       first.dynamic_shared_before(), target)).run()
