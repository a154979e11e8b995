"""Streaming a loop's matrix operands into shared memory on sm_80+: cp.async for mma.sync.

Takes: a loop `streams.find` matched for mma.sync products (targets sm_80, sm_89, and
sm_90 without the `a` features; the same loops the sm_90a path streams: loads used once,
as product operands, at an index that depends on nothing the body assigns but the loop
variable and the scalars of the body's index prefix, which the copies of an iteration
compute for it first; 16-bit operands with 16-byte-aligned arrays), placed by
`matmul.plan` in 2 to `pipeline.MAX_STAGES` stages as the target's shared memory allows
(`sharedmem.shared_per_block`). Gives `lower_loop(low, loop, p)`.

Each streamed tile goes global -> shared without passing through registers: the block's
threads copy it in 16-byte chunks with `cp.async.cg` (consecutive threads, consecutive
chunks of a row: coalesced), each chunk into its place in the swizzled `operand.Stored`
format that ldmatrix reads. A chunk reaching past the array's last column reads only the
bytes inside the array, one outside it reads none, and the rest is zero-filled (the
src-size operand): edge tiles are padded with zeros and nothing outside the array is read.
When an array's rows do not start at 16-byte boundaries (a leading stride not a multiple
of 16 bytes: checked at run time, block-uniform), its tiles are copied the synchronous way
instead: loaded into registers (`memory`, masked) and written by `operand.stage` into
the same place.

Schedule, with S stages: the copies of iteration j go to stage j % S and form each
thread's async group j (a group per iteration; empty past the last iteration):
    prologue:     groups 0 .. S-2
    iteration i:  cp.async.wait_group S-2    # this thread's group i has landed
                  barrier                    # everyone's has; everyone is done with i-1
                  copies of iteration i+S-1 into stage (i-1) % S; commit
                  the body, its products reading stage i % S
so S-1 iterations' copies are in flight while one computes. Race-free by construction:
- read after write: stage i % S is read only after every thread waited for its own group
  i (wait_group S-2 leaves pending at most the S-2 groups committed after it) and then
  passed the barrier, which makes every thread's landed copies visible to all;
- write after read: stage (i-1) % S is refilled by copies issued after the barrier of
  iteration i, which every thread reaches only after its last read of that stage (the
  body of iteration i-1), so no copy can land before a read it would spoil;
- across runs of the loop (inside an outer loop) a barrier precedes the prologue, and
  after the loop no copy is pending: copies are issued for iterations < trips only, and
  each was waited for before its iteration read it.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I1, I32, I64, i32
from ..ir import nodes as N
from . import control, operand, pipeline, ptx
from .layout import unit_reshaped
from .values import TileValue

CHUNK = 16  # bytes per cp.async.cg


class _Copies:
    """One thread's part of copying a stage: per streamed operand, the chunks it copies
    (computed once, before the loop) and whether its array's rows are chunk-aligned."""

    def __init__(self, low, p: pipeline.Pipeline):
        b = self.b = low.b
        self.low, self.p = low, p
        tid = low.em.call("llvm.nvvm.read.ptx.sreg.tid.x", I32)
        threads = 32 * low.num_warps
        self.chunks, self.aligned = [], []
        for op in p.copies:
            view = low._view(op.load.array, op.load)
            per_chunk = CHUNK // op.stored.size
            per_row = op.stored.cols // per_chunk
            total = op.stored.rows * per_row
            mine = []
            for first in range(0, total, threads):
                q = b.add(tid, i32(first))
                row = b.lshr(q, i32(per_row.bit_length() - 1))
                col = b.mul(b.and_(q, i32(per_row - 1)), i32(per_chunk))
                live = b.icmp_unsigned("<", q, i32(total)) if total < threads else None
                mine.append((row, col, op.stored.chunk_offset(b, row, col), live))
            self.chunks.append(mine)
            aligned = ir.Constant(I1, True)
            for stride in view.strides[:-1]:
                rest = b.and_(stride, ir.Constant(I64, per_chunk - 1))
                aligned = b.and_(aligned, b.icmp_unsigned("==", rest, ir.Constant(I64, 0)))
            self.aligned.append(low.likely(aligned))

    def issue(self, stage: ir.Value) -> None:
        """Copy the tiles of the iteration the loop variable holds into `stage` (i32)."""
        stage_offset = self.b.zext(self.b.mul(stage, i32(self.p.stage_bytes)), I64)
        base = self.b.gep(self.low.shared_dynamic(self.p.base), [stage_offset], inbounds=True,
                          source_etype=ir.IntType(8))
        for op, mine, aligned in zip(self.p.copies, self.chunks, self.aligned):
            control.choose(self.low, aligned, lambda: self._async(op, mine, base), lambda: self._sync(op, base),
                           "cpasync", ("chunks", "registers"))

    def _async(self, op: pipeline.Streamed, mine: list, base: ir.Value) -> None:
        b, low = self.b, self.low
        stage_address = ptx.shared_address(b, base)
        view = low._view(op.load.array, op.load)
        starts = [b.mul(low.expr(i), ir.Constant(I64, n)) for i, n in zip(op.load.index, op.load.shape)]
        per_chunk = CHUNK // op.stored.size
        for row, col, stored_offset, live in mine:
            at = starts[:-2] + [b.add(starts[-2], b.zext(row, I64)), b.add(starts[-1], b.zext(col, I64))]
            inside = ir.Constant(I1, True)
            for coord, extent in zip(at, view.shape):
                inside = b.and_(inside, b.icmp_unsigned("<", coord, extent))
            left = b.sub(view.shape[-1], at[-1])  # elements of the row from the chunk on
            count = b.select(b.icmp_unsigned("<", left, ir.Constant(I64, per_chunk)), left,
                             ir.Constant(I64, per_chunk))
            nbytes = b.select(inside, b.mul(b.trunc(count, I32), i32(op.stored.size)), i32(0))
            offset = at[-1]
            for coord, stride in zip(at[:-1], view.strides[:-1]):
                offset = b.add(offset, b.mul(coord, stride))
            offset = b.select(inside, offset, ir.Constant(I64, 0))  # no bytes read: the array's start
            src = b.ptrtoint(b.gep(view.ptr, [offset], inbounds=True, source_etype=ir.IntType(8 * op.stored.size)),
                             I64)
            dst = b.add(stage_address, b.add(i32(op.offset), stored_offset))
            if live is None:
                ptx.cp_async(low.em, dst, src, nbytes)
            else:  # more threads than chunks
                control.when(low, live, lambda dst=dst, src=src, nbytes=nbytes: ptx.cp_async(low.em, dst, src, nbytes))

    def _sync(self, op: pipeline.Streamed, base: ir.Value) -> None:
        b, low = self.b, self.low
        value = low.tile(op.load)
        shape = (op.stored.rows, op.stored.cols)
        if len(op.load.shape) != 2:
            value = TileValue(unit_reshaped(value.layout, tuple(op.load.shape), shape), value.regs, value.dtype)
        at = b.gep(base, [ir.Constant(I64, op.offset)], inbounds=True, source_etype=ir.IntType(8))
        operand.stage(low, op.stored, at, value, shape, False, op.load.array.dtype.name)


def lower_loop(low, loop: N.For, p: pipeline.Pipeline) -> None:
    """The streamed loop `loop` (module docstring), its products on mma.sync."""
    b, em = low.b, low.em
    low.barrier()  # every thread is done with the stages of an earlier run of this loop
    s = pipeline.StreamLoop(low, p)
    trips = s.trips
    copies = _Copies(low, p)
    invariants = pipeline.stage_invariants(low, p)
    stages = p.stages

    def issue(i: ir.Value) -> None:
        def copy():
            s.at_iteration(i)
            copies.issue(b.urem(i, i32(stages)))
        control.when(low, b.icmp_signed("<", i, trips), copy)
        ptx.cp_async_commit(em)

    control.rolled(low, stages - 1, issue, "cpasync.prologue")  # one copy of the copying code

    def iteration(i: ir.Value) -> None:
        ptx.cp_async_wait(em, stages - 2)
        low.barrier()
        issue(b.add(i, i32(stages - 1)))
        s.set_var(i)
        offset = b.zext(b.mul(b.urem(i, i32(stages)), i32(p.stage_bytes)), I64)
        stage = b.gep(low.shared_dynamic(p.base), [offset], inbounds=True, source_etype=ir.IntType(8))
        pipeline.run_body(low, p, invariants, lambda op: b.gep(stage, [ir.Constant(I64, op.offset)], inbounds=True,
                                                              source_etype=ir.IntType(8)))
    control.counted(low, trips, iteration, "cpasync")
    s.leave_loop_var()
