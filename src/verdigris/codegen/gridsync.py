"""`grid_barrier()` lowering: every thread of a cooperative launch waits for all the others.

Takes: an `Emitter` positioned in a SIMT kernel. Gives: `grid_barrier(em)`, and `COUNTER`,
the name of the module's arrival counter: a `.global .u32`, zero when the module loads,
which only grid barriers touch.

How (cooperative groups' grid sync, `sync_grids` of CUDA's cooperative_groups, in PTX):
`bar.sync 0` (the block's threads are all here, their writes done); then thread (0, 0, 0)
of each block alone: `fence.acq_rel.gpu` (releases the block's writes, which `bar.sync`
ordered before it), `atom.relaxed.gpu.global.add` on the counter of 1, or in block
(0, 0, 0) of 0x80000000 - (blocks - 1): the adds of one barrier sum to 0x80000000, so the
counter's top bit flips exactly when the last block arrives and its low bits come back to
where they were (no reset between barriers or launches); it spins on `ld.relaxed.gpu`
until the top bit differs from the one its add saw, then `fence.acq_rel.gpu` (acquires the
other blocks' writes); then `bar.sync 0` again, which holds the block's other threads until
their leader has seen every block arrive and hands them what it acquired.

Guarantees: given that every block of the grid is resident at once (the runtime launches a
kernel that calls it cooperatively and refuses a grid larger than the occupancy allows),
no thread passes a grid barrier before every thread of the grid reached it, and global
writes before it are visible to every thread after it. Launches of one module share the
counter: the runtime never overlaps them (`runtime.cooperative`).
"""
from __future__ import annotations

from llvmlite import ir

from ..ir.abi import GRID_COUNTER as COUNTER
from .dtypes import I32, I64
from .emitter import Emitter

GLOBAL = 1  # NVPTX's address space of global memory
TOP_BIT = 0x80000000


def _counter(module: ir.Module) -> ir.GlobalVariable:
    counter = module.globals.get(COUNTER)
    if counter is None:
        counter = ir.GlobalVariable(module, I32, COUNTER, addrspace=GLOBAL)
        counter.initializer = ir.Constant(I32, 0)
        counter.align = 4
    return counter


def _asm(em: Emitter, ret: ir.Type, text: str, constraints: str, *args: ir.Value) -> ir.Value:
    """Inline PTX that LLVM neither moves nor merges, and that may touch any memory."""
    asm = ir.InlineAsm(ir.FunctionType(ret, [a.type for a in args]), text,
                       constraints + ("," if constraints else "") + "~{memory}", side_effect=True)
    return em.b.call(asm, args)


def _all_zero(em: Emitter, sreg: str) -> ir.Value:
    b = em.b
    ids = [em.call(f"llvm.nvvm.read.ptx.sreg.{sreg}.{axis}", I32) for axis in "xyz"]
    zero = ir.Constant(I32, 0)
    return b.and_(b.and_(b.icmp_unsigned("==", ids[0], zero), b.icmp_unsigned("==", ids[1], zero)),
                  b.icmp_unsigned("==", ids[2], zero))


def grid_barrier(em: Emitter) -> None:
    b = em.b
    em.call("llvm.nvvm.barrier0", ir.VoidType())
    address = b.ptrtoint(_counter(em.module), I64)
    fn = b.function
    lead, spin, arrived, done = (fn.append_basic_block(f"grid_barrier.{part}")
                                 for part in ("lead", "spin", "arrived", "done"))
    b.cbranch(_all_zero(em, "tid"), lead, done)

    b.position_at_end(lead)
    blocks = b.mul(b.mul(em.call("llvm.nvvm.read.ptx.sreg.nctaid.x", I32),
                         em.call("llvm.nvvm.read.ptx.sreg.nctaid.y", I32)),
                   em.call("llvm.nvvm.read.ptx.sreg.nctaid.z", I32))
    first = b.sub(ir.Constant(I32, TOP_BIT), b.sub(blocks, ir.Constant(I32, 1)))
    add = b.select(_all_zero(em, "ctaid"), first, ir.Constant(I32, 1))
    _asm(em, ir.VoidType(), "fence.acq_rel.gpu;", "")
    old = _asm(em, I32, "atom.relaxed.gpu.global.add.u32 $0, [$1], $2;", "=r,l,r", address, add)
    b.branch(spin)

    b.position_at_end(spin)
    now = _asm(em, I32, "ld.relaxed.gpu.global.u32 $0, [$1];", "=r,l", address)
    flipped = b.icmp_unsigned("!=", b.and_(b.xor(old, now), ir.Constant(I32, TOP_BIT)),
                              ir.Constant(I32, 0))
    b.cbranch(flipped, arrived, spin)

    b.position_at_end(arrived)
    _asm(em, ir.VoidType(), "fence.acq_rel.gpu;", "")
    b.branch(done)

    b.position_at_end(done)
    em.call("llvm.nvvm.barrier0", ir.VoidType())
