"""`Unary`, `Binary` and `Compare` lowering, with the semantics ir.nodes defines.

Takes: an `Emitter`, the operator name, the operands' dtype and their register values.
Gives: the result's register value. `supports_unary/binary(op, dtype)` say whether an
operator exists for a dtype, so the caller can raise a located `CompileError`.

Guarantees: integers wrap (no `nsw`/`nuw`); signed `floordiv`/`mod` floor, unsigned are
plain; integer division by zero gives 0 and never traps (nor does INT_MIN // -1, which
wraps to INT_MIN); shifts by >= the width (negative amounts included) give 0, or the sign
fill for a signed `rshift`; float `floordiv`/`mod` are NumPy's (and Python's) divmod;
narrow-float (float16, bfloat16, fp8) results are computed in float32 and rounded once;
comparisons with NaN are false except `ne`.
"""
from __future__ import annotations

from llvmlite import ir

from .. import types as T
from ..types import DType
from .dtypes import is_narrow_float, round_narrow
from .emitter import Emitter
from . import mathlib


def _zero(v: ir.Value) -> ir.Constant:
    return ir.Constant(v.type, 0.0 if isinstance(v.type, (ir.FloatType, ir.DoubleType)) else 0)


# ----------------------------------------------------------------------------- integers


def _int_divmod(em: Emitter, a: ir.Value, b: ir.Value, signed: bool) -> tuple:
    """(a // b, a % b), flooring when `signed`; both 0 when b == 0."""
    bld, ty = em.b, a.type
    one, zero = ir.Constant(ty, 1), ir.Constant(ty, 0)
    by_zero = bld.icmp_unsigned("==", b, zero)
    if not signed:
        safe = bld.select(by_zero, one, b)
        q, r = bld.udiv(a, safe), bld.urem(a, safe)
    else:
        int_min = ir.Constant(ty, -(1 << (ty.width - 1)))
        overflows = bld.and_(bld.icmp_signed("==", a, int_min), bld.icmp_signed("==", b, ir.Constant(ty, -1)))
        safe = bld.select(bld.or_(by_zero, overflows), one, b)  # MIN // 1 == the wrapped MIN // -1
        q, r = bld.sdiv(a, safe), bld.srem(a, safe)
        # C truncates; Python floors: step down when the remainder and divisor differ in sign.
        floor = bld.and_(bld.icmp_signed("!=", r, zero), bld.icmp_signed("<", bld.xor(r, safe), zero))
        q = bld.sub(q, bld.zext(floor, ty))
        r = bld.select(floor, bld.add(r, safe), r)
    return bld.select(by_zero, zero, q), bld.select(by_zero, zero, r)


def _shift_left(em: Emitter, a: ir.Value, n: ir.Value, dt: DType) -> ir.Value:
    return em.b.select(_in_range(em, n, dt), em.b.shl(a, _masked(em, n, dt)), _zero(a))


def _in_range(em: Emitter, n: ir.Value, dt: DType) -> ir.Value:
    return em.b.icmp_unsigned("<", n, ir.Constant(n.type, dt.bits))


def _masked(em: Emitter, n: ir.Value, dt: DType) -> ir.Value:
    """The shift amount's low bits: where it is in range, the amount itself. The NVPTX
    back end folds `select(n < 64, shl(a, n), 0)` into PTX's shift, which clamps its 32-bit
    amount, after truncating a 64-bit n: n = -2**63 shifted by 0 (found on an H100); with
    the mask, the select stays."""
    return em.b.and_(n, ir.Constant(n.type, dt.bits - 1))


def _shift_right(em: Emitter, a: ir.Value, n: ir.Value, dt: DType) -> ir.Value:
    if dt.is_signed:  # shifting by width - 1 already gives the sign fill
        clamped = em.call(f"llvm.umin.i{dt.bits}", n.type, n, ir.Constant(n.type, dt.bits - 1))
        return em.b.ashr(a, clamped)
    return em.b.select(_in_range(em, n, dt), em.b.lshr(a, _masked(em, n, dt)), _zero(a))


# ----------------------------------------------------------------------------- floats


def _float_divmod(em: Emitter, a: ir.Value, b: ir.Value, dt: DType) -> tuple:
    """(a // b, a % b) exactly as NumPy's npy_divmod (and Python's float divmod).

    Narrow floats run it in float32 and round only the results, as NumPy does for float16."""
    bld, ty = em.b, a.type
    dt = T.float32 if is_narrow_float(dt) else dt
    zero, one = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0)
    fmod = mathlib.call(em, "fmod", dt, (a, b))
    quotient = bld.fdiv(bld.fsub(a, fmod), b)
    fmod_nonzero = bld.fcmp_unordered("!=", fmod, zero)
    differ = bld.xor(bld.fcmp_ordered("<", b, zero), bld.fcmp_ordered("<", fmod, zero))
    adjust = bld.and_(fmod_nonzero, differ)
    mod = bld.select(adjust, bld.fadd(fmod, b), fmod)
    quotient = bld.select(adjust, bld.fsub(quotient, one), quotient)
    mod = bld.select(fmod_nonzero, mod, mathlib.call(em, "copysign", dt, (zero, b)))
    floor = mathlib.call(em, "floor", dt, (quotient,))
    above_half = bld.fcmp_ordered(">", bld.fsub(quotient, floor), ir.Constant(ty, 0.5))
    floor = bld.select(above_half, bld.fadd(floor, one), floor)
    true_quotient = bld.fdiv(a, b)
    signed_zero = mathlib.call(em, "copysign", dt, (zero, true_quotient))
    floor = bld.select(bld.fcmp_unordered("!=", quotient, zero), floor, signed_zero)
    by_zero = bld.fcmp_ordered("==", b, zero)
    return bld.select(by_zero, true_quotient, floor), bld.select(by_zero, fmod, mod)


# ----------------------------------------------------------------------------- tables

_INT = {
    "add": lambda em, a, b, dt: em.b.add(a, b),
    "sub": lambda em, a, b, dt: em.b.sub(a, b),
    "mul": lambda em, a, b, dt: em.b.mul(a, b),
    "and": lambda em, a, b, dt: em.b.and_(a, b),
    "or": lambda em, a, b, dt: em.b.or_(a, b),
    "xor": lambda em, a, b, dt: em.b.xor(a, b),
    "floordiv": lambda em, a, b, dt: _int_divmod(em, a, b, dt.is_signed)[0],
    "mod": lambda em, a, b, dt: _int_divmod(em, a, b, dt.is_signed)[1],
    "lshift": lambda em, a, b, dt: _shift_left(em, a, b, dt),
    "rshift": lambda em, a, b, dt: _shift_right(em, a, b, dt),
}
_FLOAT = {
    "add": lambda em, a, b, dt: em.flagged(em.b.fadd(a, b)),
    "sub": lambda em, a, b, dt: em.flagged(em.b.fsub(a, b)),
    "mul": lambda em, a, b, dt: em.flagged(em.b.fmul(a, b)),
    "truediv": lambda em, a, b, dt: em.b.fdiv(a, b),
    "floordiv": lambda em, a, b, dt: _float_divmod(em, a, b, dt)[0],
    "mod": lambda em, a, b, dt: _float_divmod(em, a, b, dt)[1],
    "pow": lambda em, a, b, dt: mathlib.call(em, "pow", dt, (a, b)),
}
_BOOL = {op: _INT[op] for op in ("and", "or", "xor")}
BINARY = {"i": _INT, "u": _INT, "f": _FLOAT, "b": _BOOL}

UNARY = {
    "i": {"neg": lambda em, v: em.b.neg(v), "invert": lambda em, v: em.b.not_(v)},
    "f": {"neg": lambda em, v: em.b.fneg(v)},
    "b": {"not": lambda em, v: em.b.not_(v)},
}
UNARY["u"] = UNARY["i"]

_PREDICATES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def supports_binary(op: str, dt: DType) -> bool:
    return op in BINARY.get(dt.kind, {})


def supports_unary(op: str, dt: DType) -> bool:
    return op in UNARY.get(dt.kind, {})


def binary(em: Emitter, op: str, dt: DType, a: ir.Value, b: ir.Value) -> ir.Value:
    return round_narrow(em.b, dt, BINARY[dt.kind][op](em, a, b, dt))


def unary(em: Emitter, op: str, dt: DType, v: ir.Value) -> ir.Value:
    return UNARY[dt.kind][op](em, v)


def compare(em: Emitter, op: str, dt: DType, a: ir.Value, b: ir.Value) -> ir.Value:
    """`a op b` as i1, for operands of dtype `dt`."""
    pred = _PREDICATES[op]
    if dt.is_float:
        fcmp = em.b.fcmp_unordered if op == "ne" else em.b.fcmp_ordered
        return fcmp(pred, a, b)
    icmp = em.b.icmp_signed if dt.is_signed else em.b.icmp_unsigned
    return icmp(pred, a, b)
