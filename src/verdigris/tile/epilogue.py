"""Product tiles stored through the copy engine: TMA stores (and reductions) from
per-warpgroup buffers.

Takes: a warp-specialized kernel's plan (`matmul.plan`) and the layouts of its product
variables. Gives: `find(kernel, plan, layout_of) -> {id(node): StoreChunks}` for the
stores and atomic adds it takes over (registering their TMA descriptors in
`plan.tensor_maps`), and `store(low, node, value, chunks)`, their lowering.

A store qualifies when its tile is in a wgmma accumulator layout (the product's registers,
through the epilogue's elementwise ops) and goes to a 2-d float16/bfloat16/float32 array
with unit inner stride, as a whole power-of-two tile, the kernel never reads that array
(the copy completes asynchronously), and no other write of the block that may touch its
elements can come after it (`tile.ordering`'s pairs). An atomic add (`tile.atomic_add`)
of such a tile to a float32 array of 2 to 5 axes (the tile of extent 1 along all but the
last two: a (1, 1, R, C) tile of attention's (batch, heads, seq, head_dim)) that the
kernel touches only by atomic adds qualifies too: the copy engine adds the box into global memory, each
element atomically (`cp.reduce.async.bulk.tensor ... .add`), and adds commute, so no order
among them matters (FlashAttention-2's dQ, summed over the blocks of keys, goes out as one
bulk reduction per chunk instead of an atomic per element). Writes that may touch them before
it (the grouped GEMM's scatters, before its whole-tile store) are fenced for the async
proxy by every thread (`fence.proxy.async.global`, `MmaLowering._tile_store`) before the
barrier that orders them. Each consumer warpgroup then writes
its own rows, 64 rows x one 128-byte swizzle panel at a time, into one of its two
shared-memory buffers (the swizzled format of `operand`, conflict-free for the
accumulator's pairs), fences them for the async proxy, and one of its threads has the copy
engine store the box (`cp.async.bulk.tensor` global <- shared; parts outside the array are
not written). The warpgroup moves on while the copy runs: a buffer is rewritten only after
the copy that read it is done (`cp.async.bulk.wait_group.read`: at most the copy of the
other buffer pending, none at a store's first chunk), each step behind the warpgroup's own
named barrier, so no other warpgroup waits. `drain` waits for every copy's reads before the
kernel ends.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..codegen.dtypes import I8, I32, I64, i32, mem_type, to_mem
from ..ir import nodes as N
from ..ir import tiles as X
from . import control, operand, ptx
from .layout import padded, unit_reshaped
from .mma_layout import GroupGeometry

ROWS = 64  # rows per chunk: one wgmma row block
STORE_TYPES = ("float16", "bfloat16", "float32")
REDUCE_TYPES = ("float32",)  # atomic adds through the copy engine (half types would round each add)
# Stores take 2-d arrays only: attention's (1, 1, R, C) output tiles would take the buffers'
# shared memory from the forward's stages, not yet measured (`bench/gpu_session.sh stores_ab`
# sets this to 5); atomic adds take any rank the copy engine does.
STORE_MAX_RANK = 2
FIRST_BARRIER = 2  # named barrier ids: 0 the block's, 1 the consumers' (`specialize`)


@dataclass(frozen=True)
class StoreChunks:
    geometry: GroupGeometry
    chunk: operand.Stored  # one buffer: ROWS x one panel
    map_index: int
    after_stores: bool = False  # ordinary stores of the block may have written its elements
    shape: tuple = ()  # the tile's (the product's, after unit axes in front)
    reduce: bool = False  # an atomic add: the copy engine adds the box into the array

    @property
    def layout(self):
        return _tile_layout(self.geometry, self.shape)


def _tile_layout(g: GroupGeometry, shape: tuple):
    """A tile of `shape` in the accumulator's layout: `g`'s, with the unit axes in front."""
    return unit_reshaped(g.layout(), (g.m, g.n), shape)


def buffer_bytes(plan) -> int:
    """Shared memory for the stores: two buffers of the largest chunk per warpgroup."""
    if not plan.stores:
        return 0
    chunk = max(c.chunk.nbytes for c in plan.stores.values())
    return 2 * chunk * next(iter(plan.stores.values())).geometry.groups


def find(kernel, plan, layout_of, warps: int) -> dict:
    from ..frontend import walk
    from .pipeline import MAX_TMA_RANK, TensorMap

    found = {}
    for node in walk(kernel.body):
        reduce = isinstance(node, X.TileAtomic)
        if not (isinstance(node, X.TileStore) or reduce and node.op == "add"):
            continue
        array, shape = node.array, tuple(node.value.shape)
        if not (2 <= array.type.ndim <= (MAX_TMA_RANK if reduce else STORE_MAX_RANK)
                and array.type.unit_inner_stride
                and shape == padded(shape) and all(n == 1 for n in shape[:-2])
                and array.dtype.name in (REDUCE_TYPES if reduce else STORE_TYPES) and shape[-2] % ROWS == 0
                and array.name not in kernel.reads  # the copy lands after the kernel reads
                and (_only_added(kernel, node) if reduce else not _ordered_after(kernel, node))):
            continue
        g = GroupGeometry(shape[-2], shape[-1], warps)
        if layout_of(node.value) != _tile_layout(g, shape):
            continue
        size = array.dtype.itemsize
        chunk = operand.Stored(ROWS, min(g.inst_n, 128 // size), size)
        if g.inst_n % chunk.cols:
            continue
        plan.tensor_maps.append(TensorMap(array.name, array.dtype.name, size,
                                          (1,) * (len(shape) - 2) + (ROWS, chunk.cols), chunk.panel_bytes))
        found[id(node)] = StoreChunks(g, chunk, len(plan.tensor_maps) - 1,
                                      not reduce and _written_before(kernel, node), shape, reduce)
    return found


def _only_added(kernel, node: X.TileAtomic) -> bool:
    """Whether every access of `node`'s array is a tile's atomic add: then the copy
    engine's adds need no order with any of them."""
    from ..frontend import walk
    from ..frontend.access_nodes import ACCESSING

    return all(isinstance(n, X.TileAtomic) and n.op == "add" for n in walk(kernel.body)
               if isinstance(n, ACCESSING) and n.array.name == node.array.name)


def _ordered_after(kernel, node: X.TileStore) -> bool:
    """Whether another access of `node`'s array (or `node` itself, in another iteration)
    may touch its elements in one block after it (`tile.ordering`): the copy engine's
    store would not be ordered before it by a barrier. An access that only runs before
    `node` (in a statement before one on the way to it, `node` in no loop) is ordered by
    the proxy fence and barrier the store begins with (`_written_before`)."""
    meets = kernel.facts.get("block_meets")
    return any(not _only_before(kernel, other, node) for other in _met(kernel, node, meets))


def _written_before(kernel, node: X.TileStore) -> bool:
    """Whether an ordinary store of the block may have written what `node` writes."""
    return bool(_met(kernel, node, kernel.facts.get("block_meets")))


def _met(kernel, node: X.TileStore, meets) -> list:
    """The accesses of `node`'s array that may meet it in one block (all of them, `node`
    included, where the kernel was not checked)."""
    from ..frontend import walk
    from ..frontend.access_nodes import ACCESSING, pair

    others = [n for n in walk(kernel.body) if isinstance(n, ACCESSING) and n.array.name == node.array.name]
    if meets is None:
        return others if len(others) > 1 else []
    return [n for n in others if pair(id(n), id(node)) in meets]


def _only_before(kernel, other, node) -> bool:
    """Whether `other` runs only before `node`: `node` stands in no loop, and `other` in a
    statement before one on the way to it."""
    from ..frontend import walk

    def holds(s, target) -> bool:
        return any(n is target for n in walk([s]))

    body = kernel.body
    while True:
        at = next(k for k, s in enumerate(body) if holds(s, node))
        step = body[at]
        if any(holds(s, other) for s in body[:at]):
            return True
        if step is node or isinstance(step, (N.For, N.While)):
            return False
        if isinstance(step, N.If):
            body = step.then if any(holds(s, node) for s in step.then) else step.orelse
        elif isinstance(getattr(step, "body", None), list):
            body = step.body
        else:
            return False


def store(low, node, value, chunks: StoreChunks) -> None:
    """`node` (a `TileStore`, or a `TileAtomic` add with `chunks.reduce`) of `value`, held
    in `chunks.layout`, chunk by chunk through the warpgroup's buffers (module doc)."""
    b, em, g, chunk = low.b, low.em, chunks.geometry, chunks.chunk
    group = b.lshr(low.warp, i32(2))
    gm = b.and_(group, i32(g.groups_m - 1))
    gn = b.lshr(group, i32(g.groups_m.bit_length() - 1))
    row0 = b.add(b.trunc(b.mul(low.expr(node.index[-2]), ir.Constant(I64, g.m)), I32), b.mul(gm, i32(g.group_rows)))
    col0 = b.add(b.trunc(b.mul(low.expr(node.index[-1]), ir.Constant(I64, g.n)), I32), b.mul(gn, i32(g.group_cols)))
    # the unit axes in front: element coordinate = tile index (innermost first, after the rows)
    outer = [b.trunc(low.expr(i), I32) for i in node.index[:-2]][::-1]
    region = low.shared_dynamic(low.plan.store_buffers)
    buffers = b.gep(region, [b.zext(b.mul(group, i32(2 * chunk.nbytes)), I64)], inbounds=True, source_etype=I8)
    leader = b.and_(b.icmp_unsigned("==", b.and_(low.warp, i32(3)), i32(0)),
                    b.icmp_unsigned("==", low.lane, i32(0)))
    # this thread's place in its warpgroup's rows and in a chunk's columns
    row_t = b.add(b.mul(b.and_(low.warp, i32(3)), i32(16)), b.lshr(low.lane, i32(2)))
    col_t = b.mul(b.and_(low.lane, i32(3)), i32(2))
    dtype = node.array.dtype
    pair = ir.VectorType(mem_type(dtype), 2)
    layout = value.layout
    held = [(r, layout.register_coords(r)[-2:]) for r in range(0, layout.num_regs, 2)]
    steps = [(mb, panel) for mb in range(g.m_blocks) for panel in range(g.group_cols // chunk.cols)]

    barrier_id = b.add(group, i32(FIRST_BARRIER))

    def sync():
        ptx.named_barrier(em, barrier_id, 128)

    for k, (mb, panel) in enumerate(steps):
        buffer = b.gep(buffers, [ir.Constant(I64, (k % 2) * chunk.nbytes)], inbounds=True, source_etype=I8)
        control.when(low, leader, lambda k=k: ptx.bulk_wait_read(em, 0 if k == 0 else 1))
        sync()
        for r, (row, col) in held:
            row -= ROWS * mb
            col -= panel * chunk.cols
            if not (0 <= row < ROWS and 0 <= col < chunk.cols):
                continue
            offset = chunk.chunk_offset(b, b.add(row_t, i32(row)), b.add(col_t, i32(col)))
            words = ir.Constant(pair, ir.Undefined)
            for e in (0, 1):
                words = b.insert_element(words, to_mem(b, dtype, value.regs[r + e]), i32(e))
            b.store(words, b.gep(buffer, [b.zext(offset, I64)], inbounds=True, source_etype=I8),
                    align=2 * dtype.itemsize)
        ptx.fence_proxy_async(em)
        sync()
        address = ptx.shared_address(b, buffer)
        coords = [b.add(col0, i32(panel * chunk.cols)), b.add(row0, i32(ROWS * mb)), *outer]
        control.when(low, leader, lambda address=address, coords=coords: (
            ptx.tma_store(em, address, low.tensor_map_args[chunks.map_index], coords, "add" if chunks.reduce else None),
            ptx.bulk_commit(em)))


def drain(low) -> None:
    """Each warpgroup's storing thread: every copy has read its buffer (before exit)."""
    b = low.b
    leader = b.and_(b.icmp_unsigned("==", b.and_(low.warp, i32(3)), i32(0)),
                    b.icmp_unsigned("==", low.lane, i32(0)))
    control.when(low, leader, lambda: ptx.bulk_wait_read(low.em, 0))
