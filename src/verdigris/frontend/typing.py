"""Typing of operands: literals, promotion, casts, truthiness, and the operator table.

Takes: values the translator computes — typed `ir.Expr`s or `Static` compile-time Python
values (literals, constexprs, tuples, modules, functions). Gives: typed IR for unary,
binary and comparison operators following the promotion rules of `types.py`, with the
`Cast`s inserted, and constant folding of operations on static values (numbers, and
`==`/`!=` of two dtypes or of compile-time strings, a compile-time bool); `static_value`,
which turns a Python value the kernel reads (a constant, constexpr or default) into a
`Static` (NumPy dtypes become verdigris's), and `dtype_arg`, the reader of every dtype
argument. Guarantees: every `ir.Expr` it returns satisfies the IR invariants (operands
of one dtype); type errors are `CompileError`s at the operator's location; a tile where a
scalar is needed is refused here (`tiles` lifts these rules to tiles), and so is any
other value that is not a number (an array, a dtype, a string).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N


@dataclass(frozen=True)
class Static:
    """A value known while compiling: a literal, constexpr, tuple, module or function."""

    value: object


def static_value(value) -> Static:
    """A Python value known while compiling (a module constant or closure variable, a
    constexpr argument, a helper's default) as kernels see it: a NumPy dtype or scalar type
    that verdigris has (`np.float32`, `np.dtype("float16")`), also inside a tuple, is that
    verdigris dtype, so it converts, compares and is taken as a dtype as `vg.float32` is."""
    return Static(_as_kernel_value(value))


def _as_kernel_value(value):
    if isinstance(value, tuple):
        return tuple(map(_as_kernel_value, value))
    return T.named_by_numpy(value) or value


def dtype_arg(v, what: str, loc: Loc) -> T.DType:
    """The dtype argument `v` of `what`: a verdigris dtype, or a NumPy one that verdigris
    has; anything else is a `CompileError` that names what was given."""
    value = v.value if isinstance(v, Static) else None
    dtype = value if isinstance(value, T.DType) else T.named_by_numpy(value)
    if dtype is not None:
        return dtype
    if isinstance(value, type) and issubclass(value, np.generic) or isinstance(value, np.dtype):
        raise CompileError(f"{what} takes a dtype verdigris has; NumPy's "
                           f"{getattr(value, '__name__', value)} is not one", loc,
                           hint="kernels have bool, int8 ... int64, uint8 ... uint64, float16, "
                                "bfloat16, float32, float64 and fp8 (vg.float32 or np.float32)")
    raise CompileError(f"{what} needs a dtype such as vg.float32 or np.float32", loc)


@dataclass(frozen=True)
class Multiple:
    """An integer scalar parameter's type when its values are multiples of `of`: the
    specialization fact `Param.multiple_of` (a signature's `i64:16`)."""

    dtype: T.DType
    of: int


@dataclass(frozen=True)
class Narrow:
    """An int64 or uint64 scalar parameter's type when its launch values lie in int32's
    range (-2**31 <= v < 2**31): the specialization fact `Param.narrow` (a signature's
    `i64:narrow`), and, where `of` > 1, multiples of `of` too."""

    dtype: T.DType
    of: int = 1


@dataclass(frozen=True)
class Weak:
    """A Python float parameter's type: float64, weak where it is read (`ir.nodes.Expr.weak`),
    as a launch given a Python float specializes it."""


# Element dtypes atomics (SIMT and tile) take; 16-bit floats: add only; floats: no bit ops.
ATOMIC_DTYPES = ("int32", "int64", "uint32", "uint64", "float32", "float64", "float16", "bfloat16")
_INTEGER_ATOMICS = ("and", "or", "xor")


def check_atomic(op: str, dtype: T.DType, what: str, loc: Loc) -> None:
    """Refuse atomic `op` (`ir.nodes.ATOMIC_OPS`) on elements of `dtype`, for `what` (the
    user's spelling, e.g. `tile.atomic_max()`), where the hardware has no such atomic."""
    if dtype.name not in ATOMIC_DTYPES or (dtype.bits == 16 and op != "add") \
            or (dtype.is_float and op in _INTEGER_ATOMICS):
        raise CompileError(f"{what} is not available for {dtype.name} arrays", loc,
                           hint="atomics take int32, int64, uint32, uint64, float32 and float64 "
                                "(float16 and bfloat16: add only; and, or, xor: integers only)")


def is_number(v) -> bool:
    return isinstance(v, Static) and isinstance(v.value, (bool, int, float))


# tfloat32 (docs/api.md "Dtypes") is a dtype of tiles, which products take and other
# operations only move; a scalar or an array holding TF32 values is a float32 one.
TFLOAT32_USES = ("tfloat32 tiles are operands of matrix products (tile.mma, tile.dot, @), "
                 "which other operations only move (reshape, transpose, slice, store)")


def no_tfloat32_scalar(dtype: T.DType, loc: Loc) -> None:
    if dtype is T.tfloat32:
        raise CompileError("tfloat32 is a dtype of tiles only; a scalar holding a TF32 value is "
                           "a float32", loc, hint="write vg.float32 here, and make tfloat32 "
                                                  "tiles with t.astype(vg.tfloat32)")


def array_dtype_arg(v, what: str, loc: Loc) -> T.DType:
    """`dtype_arg` for the element type of an array, which is never tfloat32."""
    dtype = dtype_arg(v, what, loc)
    if dtype is T.tfloat32:
        raise CompileError(f"{what}: tfloat32 is a dtype of tiles only; an array holding TF32 "
                           "values is a float32 array", loc, hint="give vg.float32")
    return dtype


def const(value, dtype: T.DType, loc: Loc) -> N.Const:
    no_tfloat32_scalar(dtype, loc)
    if dtype.is_bool:
        return N.Const(loc, bool(value), dtype)
    if dtype.is_int:
        value = int(value) & ((1 << dtype.bits) - 1)
        if dtype.is_signed and value >= 1 << (dtype.bits - 1):
            value -= 1 << dtype.bits
        return N.Const(loc, value, dtype)
    return N.Const(loc, float(value), dtype)


def typed(v, loc: Loc, dtype: T.DType | None = None) -> N.Expr:
    """`v` as a typed expression (of `dtype` if given)."""
    if isinstance(v, Static):
        if not is_number(v):
            raise CompileError(f"{_describe(v)} is not a value a kernel can compute with", loc,
                               hint=DTYPE_HINT if isinstance(v.value, T.DType) else
                               STRING_HINT if is_string(v) else "")
        if type(v.value) is int and (dtype is None or dtype.is_int) \
                and not -2**63 <= v.value < (2**63 if dtype is None else 2**64):
            what = "int64, the type of an integer constant" if dtype is None else "64 bits"
            raise CompileError(f"the integer {v.value} does not fit {what}", loc,  # never wrap
                               hint="keep integer constants within int64 (uint64 operands "
                                    "take them up to 2**64 - 1)")
        return const(v.value, dtype or T.literal_dtype(v.value), loc)
    if isinstance(v, N.ArrayRef):
        raise CompileError(f"array {v.name!r} used where a number is expected", loc,
                           hint="index it, e.g. a[i]")
    if getattr(v, "shape", ()):
        raise CompileError(f"a tile of shape {tuple(v.shape)} is used where a scalar is expected",
                           loc, hint="reduce it first (tile.sum, tile.max, ...), use tile.where "
                                     "to choose elementwise, or tile.store to write it")
    return v if dtype is None else cast(v, dtype, loc)


DTYPE_HINT = ("a dtype is a compile-time value: compare two with == or != (`if x.dtype == "
              "vg.float64:`), or convert with it (vg.float64(x), t.astype(vg.float64))")


def cast(e: N.Expr, dtype: T.DType, loc: Loc) -> N.Expr:
    if e.dtype is dtype:
        return e
    no_tfloat32_scalar(dtype, loc)
    if isinstance(e, N.Const) and _folds_exactly(e, dtype):
        return const(e.value, dtype, loc)
    return N.Cast(loc, e, dtype)


def _folds_exactly(c: N.Const, dtype: T.DType) -> bool:
    if dtype.is_float:
        return dtype.bits >= 32 or c.dtype.is_int and abs(int(c.value)) < 2048
    if dtype.is_int and not c.dtype.is_float:
        lo, hi = (-(1 << dtype.bits - 1), 1 << dtype.bits - 1) if dtype.is_signed else (0, 1 << dtype.bits)
        return lo <= int(c.value) < hi
    return dtype.is_bool and not c.dtype.is_float


def _describe(v) -> str:
    value = v.value if isinstance(v, Static) else v
    return f"{type(value).__name__} {value!r}" if not callable(value) else f"{value!r}"


def _weak(v) -> bool:
    """A Python float argument, or a float made of them and literals only (`Expr.weak`)."""
    return getattr(v, "weak", False)


def weakened(e: N.Expr, operands) -> N.Expr:
    """`e`, marked weak where it is a float computed from weak values and literals only
    (`-alpha`, `alpha * 2`, `alpha * beta`), as NumPy's Python scalars stay weak."""
    if e.dtype.is_float and any(map(_weak, operands)) \
            and all(_weak(v) or is_number(v) for v in operands):
        e.weak = True
    return e


def common_dtype(a, b, loc: Loc) -> T.DType:
    """The dtype two operands meet at; literals are weak (see types.py). Operands that are
    not numbers (arrays, dtypes, modules) are refused here, at the operator."""
    for v in (a, b):
        if not is_number(v):
            typed(v, loc)  # raises for arrays, tiles and values that are not numbers
    try:
        if isinstance(a, Static):
            return T.promote_weak(b.dtype, a.value)
        if isinstance(b, Static):
            return T.promote_weak(a.dtype, b.value)
        if _weak(a) and not _weak(b):
            return T.promote_weak(b.dtype, 0.0)  # a Python float argument, as a float literal
        if _weak(b) and not _weak(a):
            return T.promote_weak(a.dtype, 0.0)
        return T.promote(a.dtype, b.dtype)
    except TypeError as exc:
        raise CompileError(str(exc), loc) from None


def static_truth(cond: Static, loc: Loc) -> bool:
    """The truth of a condition known while compiling (`if BLOCK > 64:`), which decides the
    branch; a condition that is not a number (a string, a dtype) is refused."""
    if not is_number(cond) and cond.value is not None:
        raise CompileError("this condition is not a number", loc,
                           hint=STRING_HINT if is_string(cond) else "")
    return bool(cond.value)


def truth(v, loc: Loc) -> N.Expr:
    """Python truthiness: `x != 0` for numbers."""
    if isinstance(v, Static) and not is_number(v):
        raise CompileError(f"{_describe(v)} has no truth value in a kernel", loc,
                           hint=STRING_HINT if is_string(v) else "")
    e = typed(v, loc)
    if e.dtype.is_bool:
        return e
    return N.Compare(loc, "ne", e, const(0, e.dtype, loc), T.bool_)


_STATIC_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
    "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "lshift": operator.lshift, "rshift": operator.rshift,
}
_STATIC_COMPARE = {"lt": operator.lt, "le": operator.le, "gt": operator.gt,
                   "ge": operator.ge, "eq": operator.eq, "ne": operator.ne}
INT_ONLY = {"lshift", "rshift"}
INT_OR_BOOL = {"and", "or", "xor"}


def binary(op: str, a, b, loc: Loc):
    if is_number(a) and is_number(b):
        try:
            return Static(_STATIC_BINARY[op](a.value, b.value))
        except (ZeroDivisionError, ValueError, TypeError) as exc:
            raise CompileError(f"constant expression fails: {exc}", loc) from None
    dtype = common_dtype(a, b, loc)
    if op in INT_ONLY or op in INT_OR_BOOL:
        if dtype.is_float:
            raise CompileError(f"operator {_SYMBOL[op]!r} needs integer operands, not {dtype.name}", loc,
                               hint="cast with int(...) or vg.int32(...)")
        if op in INT_ONLY:
            lhs = typed(a, loc, dtype if not dtype.is_bool else T.int32)
            return N.Binary(loc, op, lhs, typed(b, loc, lhs.dtype), lhs.dtype)
        return N.Binary(loc, op, typed(a, loc, dtype), typed(b, loc, dtype), dtype)
    if dtype.is_bool:
        dtype = T.int32  # True + True == 2, as in Python
    if op == "truediv" and not dtype.is_float:
        dtype = T.float64  # true division of two integers, as Python and NumPy compute it
    if op == "pow":
        return _power(a, b, dtype, loc)
    lhs, rhs = typed(a, loc, dtype), typed(b, loc, dtype)
    if dtype.is_float and op in ("floordiv", "mod"):
        # Python's float // and % floor: q = floor(a / b), r = a - b * q.
        quotient = N.MathCall(loc, "floor", (N.Binary(loc, "truediv", lhs, rhs, dtype),), dtype)
        if op == "floordiv":
            return weakened(quotient, (a, b))
        return weakened(N.Binary(loc, "sub", lhs, N.Binary(loc, "mul", rhs, quotient, dtype),
                                  dtype), (a, b))
    return weakened(N.Binary(loc, op, lhs, rhs, dtype), (a, b))


def _power(a, b, dtype: T.DType, loc: Loc) -> N.Expr:
    if isinstance(b, Static) and isinstance(b.value, int) and 0 <= b.value <= 64:
        base, result, n = typed(a, loc, dtype), None, b.value
        # Square-and-multiply, unrolled at compile time: x**2 is one multiply.
        while n:
            if n & 1:
                result = base if result is None else N.Binary(loc, "mul", result, base, dtype)
            n >>= 1
            if n:
                base = N.Binary(loc, "mul", base, base, dtype)
        return result if result is not None else const(1, dtype, loc)
    if not dtype.is_float:
        raise CompileError("integer ** needs a constant exponent between 0 and 64", loc,
                           hint="use a float base for a run-time exponent")
    return N.MathCall(loc, "pow", (typed(a, loc, dtype), typed(b, loc, dtype)), dtype)


def is_string(v) -> bool:
    return isinstance(v, Static) and isinstance(v.value, str)


STRING_HINT = ("a string is a compile-time value (a literal, a vg.constexpr parameter or a "
               "module constant): compare two with == or != (`if ACTIVATION == \"relu\":`), "
               "or pass it on to a helper or a keyword argument")


def compare(op: str, a, b, loc: Loc):
    if is_number(a) and is_number(b):
        return Static(_STATIC_COMPARE[op](a.value, b.value))
    if is_string(a) or is_string(b):
        return _compare_strings(op, a, b, loc)
    if op in ("eq", "ne") and all(isinstance(v, Static) and isinstance(v.value, T.DType)
                                  for v in (a, b)):
        return Static((a.value is b.value) == (op == "eq"))  # `if x.dtype == vg.float64:`
    dtype = common_dtype(a, b, loc)
    return N.Compare(loc, op, typed(a, loc, dtype), typed(b, loc, dtype), T.bool_)


def _compare_strings(op: str, a, b, loc: Loc) -> Static:
    """`==` and `!=` of a compile-time string with another compile-time value (a string, a
    number, None: a constexpr left out), folded as Python computes it (`"relu" == 1` is
    False); other comparisons, and a
    string against a value computed at run time, are refused."""
    if op not in ("eq", "ne"):
        raise CompileError(f"strings compare only with == and != in kernels, not "
                           f"{_COMPARE_SYMBOL[op]!r}", loc, hint=STRING_HINT)
    other = b if is_string(a) else a
    if not (is_string(other) or is_number(other) or isinstance(other, Static)):  # None too
        raise CompileError("a string is compared with a value computed at run time", loc,
                           hint=STRING_HINT)
    return Static((a.value == b.value) == (op == "eq"))


_COMPARE_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def unary(op: str, v, loc: Loc):
    if is_number(v):
        fn = {"neg": operator.neg, "not": operator.not_, "invert": operator.invert,
              "pos": operator.pos}[op]
        return Static(fn(v.value))
    if op == "not":
        return N.Unary(loc, "not", truth(v, loc), T.bool_)
    e = typed(v, loc)
    if op == "pos":
        return e
    if op == "invert":
        if not e.dtype.is_int:
            raise CompileError(f"'~' needs an integer operand, not {e.dtype.name}", loc,
                               hint="use `not x` for a bool")
        return N.Unary(loc, "invert", e, e.dtype)
    if e.dtype.is_bool:
        e = cast(e, T.int32, loc)
    return weakened(N.Unary(loc, "neg", e, e.dtype), (e,))


_SYMBOL = {"lshift": "<<", "rshift": ">>", "and": "&", "or": "|", "xor": "^"}
