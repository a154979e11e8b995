"""How each verdigris dtype lives in LLVM IR: in memory, in registers, and as a constant.

Takes: a `types.DType`. Gives: `mem_type` (the type loaded and stored, and passed as a
scalar kernel argument), `reg_type` (the type expressions compute in), the conversions
between them, `round_narrow` (rounds a float32 register to the dtype's precision) and
`const` (an exact register constant).

Guarantees: bool is i8 in memory and i1 in registers. The narrow floats (float16,
bfloat16 and the fp8s) compute in float32 registers that always hold a value the narrow
type represents exactly, so an operation done in float32 and rounded back once gives the
correctly rounded narrow result (float32 has more than twice their precision), the same
as the cpu backend. fp8 is its raw bits (i8) in memory; `fp8` converts.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ..types import DType
from . import fp8


class BFloatType(ir.Type):
    """LLVM's `bfloat`, which llvmlite.ir does not provide."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, BFloatType)

    def __hash__(self) -> int:
        return hash(BFloatType)


I1, I8, I16, I32, I64 = (ir.IntType(b) for b in (1, 8, 16, 32, 64))
HALF, BFLOAT, FLOAT, DOUBLE = ir.HalfType(), BFloatType(), ir.FloatType(), ir.DoubleType()

_MEM = {
    "bool": I8, "int8": I8, "int16": I16, "int32": I32, "int64": I64,
    "uint8": I8, "uint16": I16, "uint32": I32, "uint64": I64,
    "float16": HALF, "bfloat16": BFLOAT, "float32": FLOAT, "float64": DOUBLE,
    "float8_e4m3fn": I8, "float8_e5m2": I8, "tfloat32": FLOAT,  # tile_lower rounds into it
}
_REG = {**_MEM, "bool": I1, "float16": FLOAT, "bfloat16": FLOAT, "float8_e4m3fn": FLOAT, "float8_e5m2": FLOAT}

# The narrow floats: (significant bits including the implicit one, exponent of the smallest
# normal, largest finite value, whether overflow saturates to it instead of an infinity).
NARROW_FORMATS = {
    "float16": (11, -14, 65504.0, False),
    "bfloat16": (8, -126, (2 - 2 ** -7) * 2.0 ** 127, False),
    **{name: (f.mantissa_bits + 1, 1 - f.bias, f.max_finite, True) for name, f in fp8.FORMATS.items()},
}


def mem_type(dt: DType) -> ir.Type:
    return _MEM[dt.name]


def reg_type(dt: DType) -> ir.Type:
    return _REG[dt.name]


def is_fp8(dt: DType) -> bool:
    return dt.name in fp8.FORMATS


def is_narrow_float(dt: DType) -> bool:
    """float16, bfloat16 and the fp8s: computed in float32 registers."""
    return dt.name in NARROW_FORMATS


def to_reg(b: ir.IRBuilder, dt: DType, value: ir.Value) -> ir.Value:
    """A value of `mem_type(dt)` (a load or a scalar argument) as a register value."""
    if dt.is_bool:
        return b.icmp_unsigned("!=", value, ir.Constant(I8, 0))
    if is_fp8(dt):
        return fp8.decode(b, value, dt.name)
    if is_narrow_float(dt):
        return b.fpext(value, FLOAT)
    return value


def float_to_mem(b: ir.IRBuilder, dt: DType, value: ir.Value) -> ir.Value:
    """A float or double value rounded once to float dtype `dt`, as `mem_type(dt)`."""
    if is_fp8(dt):
        return fp8.encode(b, value, dt.name)
    width = 64 if value.type == DOUBLE else 32
    if width == 64 and dt.bits == 16:  # through float32, rounded to odd: still one rounding
        return b.fptrunc(_float_rounded_to_odd(b, value), mem_type(dt))
    if dt.bits < width:
        return b.fptrunc(value, mem_type(dt))
    if dt.bits > width:
        return b.fpext(value, mem_type(dt))
    return value


def _float_rounded_to_odd(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A double rounded to float32 toward zero, its last bit set where that was inexact
    (round to odd): rounding this to a 16-bit float is the one rounding of the double, where
    rounding to float32 to nearest first would round twice. The GPU has no single
    instruction for it (`cvt.rn.bf16.f64` runs as two roundings on sm_90, seen on an H100),
    as CUDA's `__double2bfloat16` does in software too. Infinities and NaN pass through."""
    nearest = b.fptrunc(value, FLOAT)
    back = b.fpext(nearest, DOUBLE)
    # nearest lies farther from zero than value: (back - value) has value's sign
    away = b.fcmp_ordered(">", b.fmul(b.fsub(back, value), value), ir.Constant(DOUBLE, 0.0))
    bits = b.bitcast(nearest, I32)
    toward_zero = b.select(away, b.sub(bits, ir.Constant(I32, 1)), bits)  # sign and magnitude
    inexact = b.fcmp_ordered("!=", back, value)
    odd = b.select(inexact, b.or_(toward_zero, ir.Constant(I32, 1)), toward_zero)
    return b.bitcast(odd, FLOAT)


def to_mem(b: ir.IRBuilder, dt: DType, value: ir.Value) -> ir.Value:
    """A register value as `mem_type(dt)`, ready to store."""
    if dt.is_bool:
        return b.zext(value, I8)
    return float_to_mem(b, dt, value) if dt.is_float else value


def round_narrow(b: ir.IRBuilder, dt: DType, value: ir.Value) -> ir.Value:
    """A float32 result of narrow-float arithmetic, rounded to that dtype (else as is)."""
    if is_narrow_float(dt):
        return to_reg(b, dt, to_mem(b, dt, value))
    return value


def round_to_format(value: float, precision: int, min_normal_exp: int, max_finite: float,
                    saturate: bool) -> float:
    """`value` rounded to nearest-even in a binary format; overflow gives a signed infinity
    or, when `saturate`, the largest finite value (infinities too)."""
    if math.isnan(value) or value == 0 or (math.isinf(value) and not saturate):
        return value
    if math.isfinite(value):
        exponent = max(math.frexp(value)[1], min_normal_exp + 1)  # subnormals: a fixed quantum
        magnitude = math.ldexp(round(math.ldexp(abs(value), precision - exponent)), exponent - precision)
    else:
        magnitude = math.inf
    if magnitude > max_finite:
        magnitude = max_finite if saturate else math.inf
    return math.copysign(magnitude, value)


def i32(value: int) -> ir.Constant:
    """An i32 constant (indices, lanes, offsets, barrier ids of the lowering)."""
    return ir.Constant(I32, value)


def const(dt: DType, value) -> ir.Constant:
    """The register constant for a Python value of dtype `dt`, rounded to it."""
    if dt.is_float:
        value = float(value)
        if is_narrow_float(dt):
            value = round_to_format(value, *NARROW_FORMATS[dt.name])
        return ir.Constant(reg_type(dt), value)
    width = reg_type(dt).width
    bits = int(value) & ((1 << width) - 1)  # LLVM spells integer constants signed
    if width == 1:
        return ir.Constant(I1, bool(bits))
    return ir.Constant(reg_type(dt), bits - (1 << width) if bits >> (width - 1) else bits)
