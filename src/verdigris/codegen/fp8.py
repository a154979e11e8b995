"""fp8 (float8_e4m3fn, float8_e5m2) <-> float32/float64, in software, the same on every target.

Takes: an IRBuilder and either fp8 bits (i8) or a float/double value. Gives: `decode`
(bits -> float32) and `encode` (float32/float64 -> bits). `FORMATS` describes the formats.

Guarantees: decoding is exact. Encoding rounds once to nearest-even and saturates to the
largest finite value (+-inf included), as the hardware's `cvt.rn.satfinite` (sm_89+) and
the cpu backend do; NaN gives the NaN code 0x7F with the input's sign.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .emitter import Emitter

I8, I16, I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
FLOAT = ir.FloatType()


@dataclass(frozen=True)
class Fp8Format:
    mantissa_bits: int
    bias: int
    max_code: int  # the bits of the largest finite magnitude
    max_finite: float
    finite_only: bool  # no infinities; 0x7F/0xFF are its only NaNs ("fn")


FORMATS = {
    "float8_e4m3fn": Fp8Format(3, 7, 0x7E, 448.0, True),
    "float8_e5m2": Fp8Format(2, 15, 0x7B, 57344.0, False),
}
NAN_CODE = 0x7F
# (integer width, mantissa bits, exponent bias) of the formats fp8 is encoded from.
_WIDE = {"float": (32, 23, 127), "double": (64, 52, 1023)}


def decode(b: ir.IRBuilder, bits: ir.Value, name: str) -> ir.Value:
    """fp8 bits -> float32: the fp8 fields placed in a float16 (exact), then rescaled."""
    fmt = FORMATS[name]
    wide = b.zext(bits, I16)
    sign = b.shl(b.and_(wide, ir.Constant(I16, 0x80)), ir.Constant(I16, 8))
    magnitude = b.shl(b.and_(wide, ir.Constant(I16, 0x7F)), ir.Constant(I16, 10 - fmt.mantissa_bits))
    half = b.bitcast(b.or_(sign, magnitude), ir.HalfType())
    value = b.fmul(b.fpext(half, FLOAT), ir.Constant(FLOAT, 2.0 ** (15 - fmt.bias)))
    if fmt.finite_only:  # e5m2's infinities and NaNs carry over through float16; e4m3fn's don't
        is_nan = b.icmp_unsigned("==", b.and_(bits, ir.Constant(I8, 0x7F)), ir.Constant(I8, 0x7F))
        signed_nan = b.or_(b.shl(b.zext(sign, I32), ir.Constant(I32, 16)), ir.Constant(I32, 0x7FC00000))
        value = b.select(is_nan, b.bitcast(signed_nan, FLOAT), value)
    return value


def encode(b: ir.IRBuilder, v: ir.Value, name: str) -> ir.Value:
    """float32/float64 -> fp8 bits (module docstring)."""
    fmt, em = FORMATS[name], Emitter(b.module, b)
    width, mantissa, bias = _WIDE[str(v.type)]
    iw = ir.IntType(width)
    bits = b.bitcast(v, iw)
    sign = b.and_(b.trunc(b.lshr(bits, ir.Constant(iw, width - 8)), I8), ir.Constant(I8, 0x80))
    magnitude = b.and_(bits, ir.Constant(iw, (1 << (width - 1)) - 1))
    # Normal results: round the mantissa to nearest-even in the integer bits, then rebias.
    shift = mantissa - fmt.mantissa_bits
    odd = b.and_(b.lshr(magnitude, ir.Constant(iw, shift)), ir.Constant(iw, 1))
    rounded = b.add(b.add(magnitude, ir.Constant(iw, (1 << (shift - 1)) - 1)), odd)
    normal = b.sub(b.lshr(rounded, ir.Constant(iw, shift)),
                   ir.Constant(iw, (bias - fmt.bias) << fmt.mantissa_bits))
    # Subnormal results: the code is the magnitude in units of the smallest subnormal.
    absolute = b.bitcast(magnitude, v.type)
    scaled = b.fmul(absolute, ir.Constant(v.type, 2.0 ** (fmt.bias - 1 + fmt.mantissa_bits)))
    subnormal = b.fptoui(em.call(f"llvm.rint.{v.type.intrinsic_name}", v.type, scaled), iw)
    is_subnormal = b.fcmp_ordered("<", absolute, ir.Constant(v.type, 2.0 ** (1 - fmt.bias)))
    code = b.select(is_subnormal, subnormal, normal)
    max_code = ir.Constant(iw, fmt.max_code)
    code = b.select(b.icmp_unsigned(">", code, max_code), max_code, code)
    code = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(iw, NAN_CODE), code)
    return b.or_(b.trunc(code, I8), sign)
