"""`MathCall` lowering: every name of `ir.nodes.MATH_FUNCS`, per dtype.

Takes: an `Emitter`, a function name, the dtype of its arguments and their register values.
Gives: the result's register value (i1 for the predicates isnan/isinf/isfinite).

Guarantees:
- float32/float64: libdevice's `__nv_<name>f` / `__nv_<name>` (correctly rounded or within
  its documented ulp bounds, non-FTZ: `nvptx` sets the reflect flags), except where an LLVM
  intrinsic lowers to one exact PTX instruction: sqrt (sqrt.rn), floor/ceil/trunc, round
  (half to even, as Python and NumPy: cvt.rni), abs, copysign, fma (fma.rn), min/max.
- the rounding variants of `ir.nodes.ROUNDED_FUNCS` (float32 and narrower only): the one
  PTX instruction each names (div.approx.f32, div.full.ftz.f32, sqrt.approx.f32,
  ex2.approx.ftz.f32, ...) through its NVVM intrinsic.
- min/max on floats are IEEE minNum/maxNum (C's fmin/fmax, NumPy's fmin/fmax): when one
  argument is NaN the other is returned.
- float16, bfloat16, fp8: computed in float32, rounded once to the dtype.
- integers: abs (wraps: abs(INT_MIN) == INT_MIN; identity on unsigned), min, max, and the
  bit functions popc, clz, ffs (int32 results) and brev (LLVM's ctpop, ctlz, cttz,
  bitreverse: PTX popc, clz, brev).

Also `may_call_libdevice(kernel)`: whether a kernel's IR holds a float operation that
lowers to a libdevice call (a math function above, float `%`, `//` and `**`, a tile
sigmoid), to start reading libdevice before the lowering asks for it.
"""
from __future__ import annotations

from llvmlite import ir

from ..ir.nodes import MATH_FUNCS, ROUNDED_FUNCS
from ..types import DType
from .dtypes import FLOAT, round_narrow
from .emitter import Emitter

LIBDEVICE_FUNCS = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "rsqrt", "cbrt",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "erf", "erfc", "pow", "atan2", "fmod", "hypot",
)
INTRINSICS = {
    "sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc",
    "round": "llvm.rint", "abs": "llvm.fabs", "copysign": "llvm.copysign", "fma": "llvm.fma",
    "min": "llvm.minnum", "max": "llvm.maxnum",
}

ROUNDED_INTRINSICS = {  # ROUNDED_FUNCS name -> its float32 NVVM intrinsic
    "div.rn.ftz": "llvm.nvvm.div.rn.ftz.f", "div.full": "llvm.nvvm.div.full",
    "div.full.ftz": "llvm.nvvm.div.full.ftz", "div.approx": "llvm.nvvm.div.approx.f",
    "div.approx.ftz": "llvm.nvvm.div.approx.ftz.f", "sqrt.rn.ftz": "llvm.nvvm.sqrt.rn.ftz.f",
    "sqrt.approx": "llvm.nvvm.sqrt.approx.f", "sqrt.approx.ftz": "llvm.nvvm.sqrt.approx.ftz.f",
    "exp2.approx.ftz": "llvm.nvvm.ex2.approx.ftz.f",
}
assert ROUNDED_INTRINSICS.keys() == ROUNDED_FUNCS.keys()


def _fabs(em: Emitter, v: ir.Value) -> ir.Value:
    return em.call(f"llvm.fabs.{v.type.intrinsic_name}", v.type, v)


def _infinity(v: ir.Value) -> ir.Constant:
    return ir.Constant(v.type, float("inf"))


PREDICATES = {
    "isnan": lambda em, v: em.b.fcmp_unordered("uno", v, v),
    "isinf": lambda em, v: em.b.fcmp_ordered("==", _fabs(em, v), _infinity(v)),
    "isfinite": lambda em, v: em.b.fcmp_ordered("<", _fabs(em, v), _infinity(v)),
}


def _int_abs(em: Emitter, dt: DType, v: ir.Value) -> ir.Value:
    if not dt.is_signed:
        return v
    return em.call(f"llvm.abs.i{dt.bits}", v.type, v, ir.Constant(ir.IntType(1), 0))


def _int_minmax(which: str):
    def emit(em: Emitter, dt: DType, a: ir.Value, b: ir.Value) -> ir.Value:
        return em.call(f"llvm.{'s' if dt.is_signed else 'u'}{which}.i{dt.bits}", a.type, a, b)
    return emit


def _as_int32(em: Emitter, v: ir.Value) -> ir.Value:
    i32 = ir.IntType(32)
    return v if v.type == i32 else em.b.trunc(v, i32) if v.type.width > 32 else em.b.zext(v, i32)


def _count(intrinsic: str, zero_poison: bool | None):
    """A bit count as int32: `llvm.<intrinsic>` (ctpop; ctlz/cttz defined at zero)."""
    def emit(em: Emitter, dt: DType, v: ir.Value) -> ir.Value:
        flag = () if zero_poison is None else (ir.Constant(ir.IntType(1), int(zero_poison)),)
        return _as_int32(em, em.call(f"llvm.{intrinsic}.i{dt.bits}", v.type, v, *flag))
    return emit


def _ffs(em: Emitter, dt: DType, v: ir.Value) -> ir.Value:
    """The lowest set bit's position from 1, 0 for 0: cttz + 1 (PTX: brev, clz)."""
    position = em.b.add(_count("cttz", False)(em, dt, v), ir.Constant(ir.IntType(32), 1))
    return em.b.select(em.b.icmp_unsigned("==", v, ir.Constant(v.type, 0)),
                       ir.Constant(ir.IntType(32), 0), position)


INT_FUNCS = {"abs": _int_abs, "min": _int_minmax("min"), "max": _int_minmax("max"),
             "popc": _count("ctpop", None), "clz": _count("ctlz", False), "ffs": _ffs,
             "brev": lambda em, dt, v: em.call(f"llvm.bitreverse.i{dt.bits}", v.type, v)}


# Float operations that call libdevice: its functions, divmod (fmod), pow, and sigmoid (exp).
LIBDEVICE_OPS = frozenset(LIBDEVICE_FUNCS) | {"mod", "floordiv", "pow", "sigmoid"}


def may_call_libdevice(kernel) -> bool:
    """Whether lowering `kernel` (SIMT or tile IR) may declare a libdevice function."""
    from ..frontend import walk

    for node in walk(kernel.body):
        op = getattr(node, "func", None) or getattr(node, "op", None)
        if op in LIBDEVICE_OPS and getattr(node, "dtype", None) is not None and node.dtype.is_float:
            return True
    return False


def supports(name: str, dt: DType) -> bool:
    if dt.is_int:
        return name in INT_FUNCS
    return dt.is_float and (name in MATH_FUNCS or name in ROUNDED_FUNCS and dt.bits <= 32)


def libdevice_name(name: str, ty: ir.Type) -> str:
    return f"__nv_{name}{'f' if ty == FLOAT else ''}"


def call(em: Emitter, name: str, dt: DType, args: tuple) -> ir.Value:
    """`name(*args)` for arguments of dtype `dt` (see `supports`)."""
    if dt.is_int:
        return INT_FUNCS[name](em, dt, *args)
    if name in PREDICATES:
        return PREDICATES[name](em, *args)
    ty = args[0].type
    if name in ROUNDED_INTRINSICS:
        result = em.call(ROUNDED_INTRINSICS[name], ty, *args)
    elif name in INTRINSICS:
        result = em.call(f"{INTRINSICS[name]}.{ty.intrinsic_name}", ty, *args)
    else:
        result = em.call(libdevice_name(name, ty), ty, *args)
    return round_narrow(em.b, dt, result)
