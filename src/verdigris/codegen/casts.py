"""`Cast` lowering: conversions between any two dtypes, with the IR's exact semantics.

Takes: an `Emitter`, a register value and its source and destination dtypes. Gives: the
register value of the destination dtype.

Guarantees (ir.nodes): integers wrap (truncate, or extend by the source's signedness);
float -> int truncates toward zero, saturates at the target's range, NaN -> 0
(`llvm.fpto[su]i.sat`); x -> bool is `x != 0` (NaN -> True, as Python's `bool`); every
conversion into a float rounds once, to nearest-even. fp8 is converted in software, the
same on every target: decoding is exact; encoding rounds to nearest-even and saturates to
the largest finite value (also for +-inf, as the hardware's `cvt.rn.satfinite`), NaN ->
the NaN code 0x7F with the input's sign.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .. import types as T
from ..types import DType
from .dtypes import FLOAT, HALF, I8, I16, is_fp8, is_narrow_float, kind, mem_type, reg_type, to_reg
from .emitter import Emitter


def _float_reg_bits(dt: DType) -> int:
    return 32 if is_narrow_float(dt) else dt.bits


def _resize_int(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    to = reg_type(dst)
    if dst.bits < src.bits:
        return em.b.trunc(v, to)
    if dst.bits > src.bits:
        return em.b.sext(v, to) if src.is_signed else em.b.zext(v, to)
    return v


def _resize_float(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    to = mem_type(dst)
    if dst.bits < _float_reg_bits(src):
        v = em.b.fptrunc(v, to)
    elif dst.bits > _float_reg_bits(src):
        v = em.b.fpext(v, to)
    return to_reg(em.b, dst, v)


def _float_to_int(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    op = "fptosi" if dst.is_signed else "fptoui"
    return em.call(f"llvm.{op}.sat.i{dst.bits}.{v.type.intrinsic_name}", reg_type(dst), v)


_CASTS = {
    ("b", "i"): lambda em, v, s, d: em.b.zext(v, reg_type(d)),
    ("b", "u"): lambda em, v, s, d: em.b.zext(v, reg_type(d)),
    ("b", "f"): lambda em, v, s, d: to_reg(em.b, d, em.b.uitofp(v, mem_type(d))),
    ("i", "b"): lambda em, v, s, d: em.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)),
    ("u", "b"): lambda em, v, s, d: em.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)),
    ("f", "b"): lambda em, v, s, d: em.b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0)),
    ("i", "i"): _resize_int, ("i", "u"): _resize_int, ("u", "i"): _resize_int, ("u", "u"): _resize_int,
    ("i", "f"): lambda em, v, s, d: to_reg(em.b, d, em.b.sitofp(v, mem_type(d))),
    ("u", "f"): lambda em, v, s, d: to_reg(em.b, d, em.b.uitofp(v, mem_type(d))),
    ("f", "i"): _float_to_int, ("f", "u"): _float_to_int,
    ("f", "f"): _resize_float,
}


def cast(em: Emitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    if src is dst:
        return v
    if is_fp8(src):
        return cast(em, fp8_decode(em, v, src), T.float32, dst)
    if is_fp8(dst):
        wide = T.float64 if src is T.float64 else T.float32
        return fp8_encode(em, cast(em, v, src, wide), dst)
    return _CASTS[kind(src), kind(dst)](em, v, src, dst)


# ----------------------------------------------------------------------------- fp8


@dataclass(frozen=True)
class Fp8Format:
    mantissa_bits: int
    bias: int
    max_code: int  # the largest finite magnitude's bits
    finite_only: bool  # no infinities; 0x7F/0xFF are its only NaNs ("fn")


FP8_FORMATS = {
    "float8_e4m3fn": Fp8Format(3, 7, 0x7E, True),
    "float8_e5m2": Fp8Format(2, 15, 0x7B, False),
}
NAN_CODE = 0x7F
# (integer type width, mantissa bits, exponent bias) of the formats fp8 is encoded from.
_WIDE = {"float": (32, 23, 127), "double": (64, 52, 1023)}


def fp8_decode(em: Emitter, bits: ir.Value, dt: DType) -> ir.Value:
    """fp8 bits -> float32, exactly: the fp8 fields placed in a float16, then rescaled."""
    fmt, b = FP8_FORMATS[dt.name], em.b
    wide = b.zext(bits, I16)
    sign = b.shl(b.and_(wide, ir.Constant(I16, 0x80)), ir.Constant(I16, 8))
    magnitude = b.shl(b.and_(wide, ir.Constant(I16, 0x7F)), ir.Constant(I16, 10 - fmt.mantissa_bits))
    half = b.bitcast(b.or_(sign, magnitude), HALF)
    value = b.fmul(b.fpext(half, FLOAT), ir.Constant(FLOAT, 2.0 ** (15 - fmt.bias)))
    if fmt.finite_only:
        is_nan = b.icmp_unsigned("==", b.and_(bits, ir.Constant(I8, 0x7F)), ir.Constant(I8, 0x7F))
        value = b.select(is_nan, ir.Constant(FLOAT, float("nan")), value)
    return value


def fp8_encode(em: Emitter, v: ir.Value, dt: DType) -> ir.Value:
    """float32/float64 -> fp8 bits, round to nearest-even, saturating (module docstring)."""
    fmt, b = FP8_FORMATS[dt.name], em.b
    width, mantissa, bias = _WIDE[str(v.type)]
    iw = ir.IntType(width)
    bits = b.bitcast(v, iw)
    sign = b.and_(b.trunc(b.lshr(bits, ir.Constant(iw, width - 8)), I8), ir.Constant(I8, 0x80))
    magnitude = b.and_(bits, ir.Constant(iw, (1 << (width - 1)) - 1))
    # Normal results: round the mantissa to nearest-even in the integer bits, rebias.
    shift = mantissa - fmt.mantissa_bits
    odd = b.and_(b.lshr(magnitude, ir.Constant(iw, shift)), ir.Constant(iw, 1))
    rounded = b.add(b.add(magnitude, ir.Constant(iw, (1 << (shift - 1)) - 1)), odd)
    normal = b.sub(b.lshr(rounded, ir.Constant(iw, shift)),
                   ir.Constant(iw, (bias - fmt.bias) << fmt.mantissa_bits))
    # Subnormal results: the code is the magnitude in units of the smallest subnormal.
    absolute = em.call(f"llvm.fabs.{v.type.intrinsic_name}", v.type, v)
    scaled = b.fmul(absolute, ir.Constant(v.type, 2.0 ** (fmt.bias - 1 + fmt.mantissa_bits)))
    subnormal = b.fptoui(em.call(f"llvm.rint.{v.type.intrinsic_name}", v.type, scaled), iw)
    is_subnormal = b.fcmp_ordered("<", absolute, ir.Constant(v.type, 2.0 ** (1 - fmt.bias)))
    code = b.select(is_subnormal, subnormal, normal)
    max_code = ir.Constant(iw, fmt.max_code)
    code = b.select(b.icmp_unsigned(">", code, max_code), max_code, code)
    code = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(iw, NAN_CODE), code)
    return b.or_(b.trunc(code, I8), sign)
