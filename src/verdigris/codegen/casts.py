"""`Cast` lowering: conversions between any two dtypes, with the IR's exact semantics.

Takes: an `Emitter`, a register value and its source and destination dtypes. Gives: the
register value of the destination dtype.

Guarantees (ir.nodes): integers wrap (truncate, or extend by the source's signedness);
float -> int truncates toward zero, saturates at the target's range, NaN -> 0
(`llvm.fpto[su]i.sat`); x -> bool is `x != 0` (NaN -> True, as Python's `bool`); every
conversion into a float rounds once, to nearest-even (into fp8: see `fp8`), except an
integer beyond 2**53 into fp8, which saturates anyway.
"""
from __future__ import annotations

from llvmlite import ir

from ..types import DType
from .dtypes import DOUBLE, float_to_mem, is_fp8, mem_type, reg_type, to_reg
from .emitter import Emitter


def _resize_int(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    to = reg_type(dst)
    if to.width < v.type.width:
        return em.b.trunc(v, to)
    if to.width > v.type.width:  # bool (i1) is unsigned
        return em.b.sext(v, to) if src.is_signed else em.b.zext(v, to)
    return v


def _int_to_float(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    convert = em.b.sitofp if src.is_signed else em.b.uitofp  # bool: unsigned i1
    if is_fp8(dst):  # LLVM has no fp8 type: go through double, exact for all that fits fp8
        return to_reg(em.b, dst, float_to_mem(em.b, dst, convert(v, DOUBLE)))
    return to_reg(em.b, dst, convert(v, mem_type(dst)))


def _float_to_int(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    op = "fptosi" if dst.is_signed else "fptoui"
    return em.call(f"llvm.{op}.sat.i{dst.bits}.{v.type.intrinsic_name}", reg_type(dst), v)


def _nonzero(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    if src.is_float:
        return em.b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
    return em.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))


_CASTS = {  # (source kind, destination kind) -> lowering
    **{(s, "b"): _nonzero for s in "iuf"},
    **{(s, d): _resize_int for s in "biu" for d in "iu"},
    **{(s, "f"): _int_to_float for s in "biu"},
    ("f", "i"): _float_to_int, ("f", "u"): _float_to_int,
    ("f", "f"): lambda em, v, src, dst: to_reg(em.b, dst, float_to_mem(em.b, dst, v)),
}


def cast(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    if src is dst:
        return v
    return _CASTS[src.kind, dst.kind](em, v, src, dst)
