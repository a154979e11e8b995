"""The device code of a bounds check: the test, and the record of a launch's first fault.

Takes: a builder positioned where the check goes, an access's indices and its array's
extents (i64, or narrower indices where noted), and for the record the kernel lowering
(`codegen.lower`: its builder, the fault block parameter and the kernel id). Gives
- `within(b, index, extents, narrow)`: whether every index is inside its extent;
- `fault_description(b, site, index, shape)`: the record words of a fault of the access
  numbered `site` (`checks.sites`) at `index`, the tuple `CheckingBuilder` carries;
- `record_fault(low, description)`: the fault path, which the `CheckingBuilder` emits
  where a pending fault settles.

Guarantees: the record has the layout of `checks` (`RECORD_*`), which `runtime.faults`
reads; only the first fault of a launch is recorded: it claims the fault block with a
compare-and-swap, writes the record, fences at system scope, then sets the record's flag,
so the host never sees the flag before the record is complete.
"""
from __future__ import annotations

from llvmlite import ir

from ..ir import nodes as N
from . import atomics, checks
from .dtypes import I32, I64
from .nvptx import GLOBAL


def within(b: ir.IRBuilder, index: list, extents: list, narrow: frozenset = frozenset()) -> ir.Value:
    """Whether every index is inside its extent (compared unsigned: a negative index is
    outside too). On the axes in `narrow` (extents at most `N.NARROW_EXTENT`, a launch
    condition) and against constant extents that small, an index widened from 32 bits or
    fewer is compared in 32 bits: the same answer, one instruction where the 64-bit test of
    a sign-extended index takes three."""
    inside = ir.Constant(ir.IntType(1), True)
    for axis, (i, extent) in enumerate(zip(index, extents)):
        small = axis in narrow or (isinstance(extent, ir.Constant) and extent.constant <= N.NARROW_EXTENT)
        if small and _widened_from_32_bits(i):
            source = i.operands[0]
            if source.type != I32:  # widened the same way, to 32 bits only
                source = (b.sext if i.opname == "sext" else b.zext)(source, I32)
            inside = b.and_(inside, b.icmp_unsigned("<", source, b.trunc(extent, I32)))
        else:
            inside = b.and_(inside, b.icmp_unsigned("<", i, extent))
    return inside


def _widened_from_32_bits(value: ir.Value) -> bool:
    """Whether `value` is a sign or zero extension of an integer of 32 bits or fewer."""
    return isinstance(value, ir.CastInstr) and value.opname in ("sext", "zext") \
        and isinstance(value.operands[0].type, ir.IntType) and value.operands[0].type.width <= 32


def fault_description(b: ir.IRBuilder, site: int, index: list, shape: list) -> tuple:
    """The record words of a fault of access number `site` at `index` (`checks`): site, rank,
    then `RECORD_DIMS` indices and as many extents (zeros past the rank), as i64."""
    def word(value: ir.Value) -> ir.Value:
        return value if value.type == I64 else b.zext(value, I64)

    pad = [ir.Constant(I64, 0)] * (checks.RECORD_DIMS - min(len(index), checks.RECORD_DIMS))
    return (ir.Constant(I64, site), ir.Constant(I64, len(index)),
            *[word(i) for i in index[:checks.RECORD_DIMS]], *pad,
            *[word(e) for e in shape[:checks.RECORD_DIMS]], *pad)


def record_fault(low, description: tuple) -> None:
    """The first fault of a launch claims the fault block and fills in the record
    (`description`: its words from `fault_description`)."""
    b = low.b
    claim = b.cmpxchg(low.faults, ir.Constant(I64, 0), ir.Constant(I64, 1), atomics.ORDERING,
                      atomics.FAIL_ORDERING)
    won_bb, done_bb = low._block("fault.record"), low._block("fault.done")
    b.cbranch(b.extract_value(claim, 1), won_bb, done_bb)
    b.position_at_end(won_bb)
    slot = b.gep(low.faults, [ir.Constant(I64, 1)], inbounds=True, source_etype=I64)
    record = b.inttoptr(b.load(slot, typ=I64), ir.PointerType(addrspace=GLOBAL))

    def put(word: int, value: ir.Value) -> None:
        if value.type != I64:
            value = b.zext(value, I64)
        b.store(value, b.gep(record, [ir.Constant(I64, word)], inbounds=True, source_etype=I64))

    put(checks.RECORD_KERNEL, ir.Constant(I64, low.kernel_id))
    for base, sreg in ((checks.RECORD_BLOCK, "ctaid"), (checks.RECORD_THREAD, "tid")):
        for axis in range(3):
            put(base + axis, low.em.call(f"llvm.nvvm.read.ptx.sreg.{sreg}.{'xyz'[axis]}", I32))
    site, ndim, *words = description
    put(checks.RECORD_SITE, site)
    put(checks.RECORD_NDIM, ndim)
    for k, value in enumerate(words):
        put(checks.RECORD_INDEX + k, value)
    b.fence("seq_cst")  # system scope: the record is complete before the host sees the flag
    put(checks.RECORD_FLAG, ir.Constant(I64, 1))
    b.branch(done_bb)
    b.position_at_end(done_bb)
