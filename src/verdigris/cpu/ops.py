"""NumPy meanings of the IR's operators, math functions and casts, for the cpu backend.

Takes: IR op names and `types.DType`s. Gives: lookups (`unary`, `binary`, `compare`,
`math`, `cast`) returning functions from NumPy values in *register form* to NumPy values in
register form, or None where the IR defines no such operation; `constant` and
`scalar_argument` (values into register form); `memory_codec` (array elements to and from
register form). Guarantees: exactly the semantics of the `ir.nodes` docstring: integers
wrap at their width, `//` and `%` floor, integer division by zero gives 0, shifts saturate,
float -> int casts truncate and saturate with NaN -> 0, floats follow IEEE. Callers run these
under `np.errstate(all="ignore")`: wrap-around and IEEE specials are meant, not errors.

Register form, the NumPy dtype an IR dtype's values take while a kernel runs:
- bool, integers, float16, float32, float64: their own NumPy dtype (NumPy computes float16
  in float32 and rounds back, which is the IR's meaning).
- bfloat16 and fp8: float32 holding a value the narrow format represents exactly; every
  operation computes in float32 and rounds back to nearest even. fp8 saturates at its
  largest finite value (infinities too), as PTX's only fp8 conversion `cvt.rn.satfinite`
  and the compiler's `codegen.casts` do; NaN is stored as code 0x7F with its sign.
In memory, bfloat16 and fp8 elements are handled as raw bits (uint16/uint8 views), so
ml_dtypes arrays and raw-bit arrays work alike.
"""
from __future__ import annotations

import numpy as np

from .. import types as T
from ..ir.nodes import ROUNDED_FUNCS


def _kind(dtype: T.DType) -> str:
    return "bool" if dtype.is_bool else "int" if dtype.is_int else "float"


# ----------------------------------------------------------------------------- narrow floats


class _Narrow:
    """A float format narrower than float32, kept in float32 registers."""

    def __init__(self, bits_dtype, mantissa_bits: int, min_exponent: int, max_finite: float,
                 saturate: bool):
        self.bits_dtype = np.dtype(bits_dtype)
        self.mantissa_bits = mantissa_bits
        self.min_exponent = min_exponent  # exponent of the smallest normal number
        self.max_finite = max_finite
        self.saturate = saturate  # overflow gives +-max_finite instead of +-inf

    def round(self, x) -> np.ndarray:
        """Any real values -> float32 values of this format, round to nearest even."""
        wide = np.asarray(x, np.float64)
        _, exponent = np.frexp(wide)  # wide = m * 2**exponent, 0.5 <= |m| < 1
        quantum = np.ldexp(1.0, np.maximum(exponent - 1, self.min_exponent) - self.mantissa_bits)
        rounded = np.rint(wide / quantum) * quantum  # exact: quantum is a power of two
        limit = self.max_finite if self.saturate else np.inf
        return np.where(np.abs(rounded) > self.max_finite, np.copysign(limit, rounded),
                        rounded).astype(np.float32)


class _BFloat16(_Narrow):
    def __init__(self):
        max_finite = float(np.array(0x7F7F0000, np.uint32).view(np.float32))
        super().__init__(np.uint16, 7, -126, max_finite, saturate=False)

    def round(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype != np.float32:
            return super().round(x)
        # Round to nearest even on the bit pattern; NaN becomes the canonical quiet NaN so
        # that its top 16 bits stay a NaN.
        bits = x.view(np.uint32)
        bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) \
            & np.uint32(0xFFFF0000)
        return np.where(np.isnan(x), np.float32(np.nan), bits.view(np.float32))

    def decode(self, bits) -> np.ndarray:
        return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)

    def encode(self, x) -> np.ndarray:
        return (np.asarray(x, np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


class _Float8(_Narrow):
    """An 8-bit float: 1 sign bit, `exponent_bits`, `mantissa_bits`, IEEE-like or "fn"."""

    def __init__(self, exponent_bits: int, mantissa_bits: int, bias: int, has_inf: bool):
        codes = np.arange(256)
        exponent = (codes >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = codes & ((1 << mantissa_bits) - 1)
        magnitude = np.where(exponent == 0,
                             np.ldexp(mantissa.astype(np.float64), 1 - bias - mantissa_bits),
                             np.ldexp(1 + mantissa / (1 << mantissa_bits), exponent - bias))
        top = exponent == (1 << exponent_bits) - 1
        if has_inf:  # e5m2: all-ones exponent is inf (mantissa 0) or NaN
            magnitude = np.where(top & (mantissa == 0), np.inf, np.where(top, np.nan, magnitude))
        else:  # e4m3fn: only all-ones exponent and mantissa is NaN, no inf
            magnitude = np.where(top & (mantissa == (1 << mantissa_bits) - 1), np.nan, magnitude)
        self.table = np.where(codes & 0x80, -magnitude, magnitude).astype(np.float32)
        first_nan = int(np.flatnonzero(np.isnan(self.table))[0])
        self.ordered = self.table[:first_nan]  # codes 0.. in increasing value
        finite = self.ordered[np.isfinite(self.ordered)]
        super().__init__(np.uint8, mantissa_bits, 1 - bias, float(finite[-1]), saturate=True)

    def decode(self, bits) -> np.ndarray:
        return self.table[bits]

    def encode(self, x) -> np.ndarray:
        x = np.asarray(x, np.float32)  # values of this format: the search finds them exactly
        code = np.searchsorted(self.ordered, np.abs(x)).astype(np.uint8)
        code = np.where(np.isnan(x), np.uint8(_FP8_NAN), code)  # the compiler's NaN code
        return (code | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))).astype(np.uint8)


_FP8_NAN = 0x7F  # a NaN in both formats

NARROW = {
    "bfloat16": _BFloat16(),
    "float8_e4m3fn": _Float8(4, 3, 7, has_inf=False),
    "float8_e5m2": _Float8(5, 2, 15, has_inf=True),
}


def register_dtype(dtype: T.DType) -> np.dtype:
    return np.dtype(np.float32) if dtype.name in NARROW else dtype.np


def to_float(x, dtype: T.DType):
    """Real values (any NumPy dtype) -> register form of float `dtype`, correctly rounded
    (into tfloat32, whose casts come from float32 only: rounded as `cvt.rna.tf32.f32`)."""
    if dtype is T.tfloat32:
        return T.tf32_rounded(np.asarray(x, np.float32))
    narrow = NARROW.get(dtype.name)
    if narrow is not None:
        return narrow.round(x)
    return np.asarray(x).astype(dtype.np, copy=False)


def constant(value, dtype: T.DType):
    """A Python literal of `dtype` in register form (a NumPy scalar or 0-d array)."""
    if dtype.is_float:
        return to_float(np.float64(value), dtype)
    return dtype.np.type(value)


def scalar_argument(value, dtype: T.DType):
    """A scalar kernel argument in register form; bfloat16/fp8 may come as raw bits."""
    value = np.asarray(value)
    narrow = NARROW.get(dtype.name)
    if narrow is not None and value.dtype == narrow.bits_dtype:
        return narrow.decode(value)[()]
    if dtype.is_float:
        return to_float(value.astype(np.float64), dtype)[()]
    return value.astype(dtype.np)[()]


def identity(x):
    return x


def memory_codec(dtype: T.DType):
    """(bits dtype or None, decode, encode) between an array's elements and register form.

    With a bits dtype, the array is accessed through a view of that dtype.
    """
    narrow = NARROW.get(dtype.name)
    if narrow is None:
        return None, identity, identity
    return narrow.bits_dtype, narrow.decode, narrow.encode


def accepts_array_dtype(dtype: T.DType, np_dtype: np.dtype) -> bool:
    """Whether an array of NumPy dtype `np_dtype` can be a `dtype` kernel argument."""
    narrow = NARROW.get(dtype.name)
    if narrow is not None:
        return np_dtype == narrow.bits_dtype or np_dtype.name == dtype.name
    return np_dtype == dtype.np


# ----------------------------------------------------------------------------- operators


def _lshift(dtype):
    width = dtype.bits

    def lshift(a, b):
        # Amounts are of a's dtype: for unsigned ones "negative" is already >= width.
        outside = (b < 0) | (b >= width)
        return np.where(outside, 0, np.left_shift(a, np.where(outside, 0, b))).astype(dtype.np)
    return lshift


def _rshift(dtype):
    width = dtype.bits
    if dtype.is_signed:
        def rshift(a, b):  # shifting by width - 1 is the sign fill
            return np.right_shift(a, np.where((b < 0) | (b >= width), width - 1, b)).astype(dtype.np)
    else:
        def rshift(a, b):
            outside = b >= width
            return np.where(outside, 0, np.right_shift(a, np.where(outside, 0, b))).astype(dtype.np)
    return rshift


def _ufunc(f):
    return lambda dtype: f


# (op, operand kind) -> factory(dtype) -> f(a, b). NumPy's integer floor_divide and
# remainder already give 0 for a zero divisor and wrap INT_MIN // -1.
_BINARY = {
    **{(op, kind): _ufunc(f) for op, f in (("add", np.add), ("sub", np.subtract),
                                           ("mul", np.multiply), ("floordiv", np.floor_divide),
                                           ("mod", np.remainder))
       for kind in ("int", "float")},
    ("truediv", "float"): _ufunc(np.true_divide),
    ("pow", "float"): _ufunc(np.power),
    **{(op, kind): _ufunc(f) for op, f in (("and", np.bitwise_and), ("or", np.bitwise_or),
                                           ("xor", np.bitwise_xor))
       for kind in ("int", "bool")},
    ("lshift", "int"): _lshift,
    ("rshift", "int"): _rshift,
}

_UNARY = {
    ("neg", "int"): np.negative,
    ("neg", "float"): np.negative,
    ("not", "bool"): np.logical_not,
    ("invert", "int"): np.invert,
}

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}


def _rounded(f, dtype: T.DType):
    """`f` with its result rounded back to `dtype` where registers are wider (bf16, fp8)."""
    narrow = NARROW.get(dtype.name)
    if narrow is None:
        return f
    return lambda *args: narrow.round(f(*args))


def unary(op: str, dtype: T.DType):
    f = _UNARY.get((op, _kind(dtype)))
    return None if f is None else _rounded(f, dtype)


def binary(op: str, dtype: T.DType):
    factory = _BINARY.get((op, _kind(dtype)))
    return None if factory is None else _rounded(factory(dtype), dtype)


def compare(op: str):
    return _COMPARE.get(op)


# ----------------------------------------------------------------------------- math

# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23
# (1969), coefficients as in Netlib SPECFUN's CALERF: erf on |x| <= 0.46875, erfc on
# (0.46875, 4], erfc on (4, inf). Within a few float64 ulp (7 seen) of libm.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
      2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
      2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
      2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
      1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
      3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
      6.05183413124413191e-2, 2.33520497626869185e-3)
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1
_ERFC_UNDERFLOW = 27.3  # erfc(x) rounds to 0 in float64 beyond this


def _erfc_tail(y):
    """erfc(y) for y > 0.46875 (float64 array)."""
    mid = y <= 4.0
    ym = y[mid]
    num, den = _C[8] * ym, ym
    for c, d in zip(_C[:7], _D[:7]):
        num, den = (num + c) * ym, (den + d) * ym
    scaled = np.empty_like(y)  # erfc(y) * exp(y * y)
    scaled[mid] = (num + _C[7]) / (den + _D[7])
    yl = y[~mid]
    z = 1.0 / (yl * yl)
    num, den = _P[5] * z, z
    for p, q in zip(_P[:4], _Q[:4]):
        num, den = (num + p) * z, (den + q) * z
    scaled[~mid] = (_ONE_OVER_SQRT_PI - z * (num + _P[4]) / (den + _Q[4])) / yl
    # exp(-y*y) in two factors, y*y split exactly at a multiple of 1/16, to keep precision.
    head = np.trunc(y * 16.0) / 16.0
    tail = (y - head) * (y + head)
    erfc = scaled * np.exp(-tail) * np.exp(-head * head)
    return np.where(y < _ERFC_UNDERFLOW, erfc, 0.0)


def _erf_erfc(x):
    """(erf(x), erfc(x)) in float64, elementwise."""
    x64 = np.asarray(x, np.float64)
    flat = x64.reshape(-1)
    y = np.abs(flat)
    erf = np.full_like(y, np.nan)
    erfc = np.full_like(y, np.nan)
    near = y <= 0.46875
    z = y[near] ** 2
    num, den = _A[4] * z, z
    for a, b in zip(_A[:3], _B[:3]):
        num, den = (num + a) * z, (den + b) * z
    erf[near] = flat[near] * (num + _A[3]) / (den + _B[3])
    erfc[near] = 1.0 - erf[near]
    far = y > 0.46875
    tail = _erfc_tail(y[far])
    negative = flat[far] < 0
    erf[far] = np.where(negative, tail - 1.0, 1.0 - tail)
    erfc[far] = np.where(negative, 2.0 - tail, tail)
    return erf.reshape(x64.shape), erfc.reshape(x64.shape)


def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e == a + b exactly (Knuth)."""
    s = a + b
    b_part = s - a
    return s, (a - (s - b_part)) + (b - b_part)


def _two_product(a, b):
    """(p, e) with p = fl(a * b) and p + e == a * b exactly (Dekker, Veltkamp splits)."""
    p = a * b
    (a_hi, a_lo), (b_hi, b_lo) = (_split(v) for v in (a, b))
    return p, ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def _split(v):
    scaled = 134217729.0 * v  # 2**27 + 1
    high = scaled - (scaled - v)
    return high, v - high


def _sum_round_to_odd(a, b):
    """a + b rounded to odd: exact, or the neighbour whose last bit is 1."""
    s, error = _two_sum(a, b)
    even = (np.asarray(s).view(np.int64) & 1) == 0
    inexact = (error != 0) & np.isfinite(error)
    return np.where(inexact & even, np.nextafter(s, np.copysign(np.inf, error)), s)


def _fma(a, b, c):
    """a * b + c with one rounding (Boldo and Melquiond's emulation by rounding to odd)."""
    narrow = np.asarray(a).dtype != np.float64
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    if narrow:  # the product is exact; rounding to odd makes the caller's rounding the only one
        return _sum_round_to_odd(a * b, c)
    product, product_error = _two_product(a, b)
    high, low = _two_sum(c, product)
    fused = high + _sum_round_to_odd(low, product_error)
    return np.where(np.isfinite(fused), fused, a * b + c)  # infinities and NaNs as unfused


_FLOAT_MATH = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "cbrt": np.cbrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": lambda x: _erf_erfc(x)[0], "erfc": lambda x: _erf_erfc(x)[1],
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": np.rint,  # Python's round(): half to even
    "abs": np.abs, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "pow": np.power, "atan2": np.arctan2,
    "min": np.fmin, "max": np.fmax,  # IEEE minNum/maxNum: a NaN operand yields the other
    "copysign": np.copysign, "fmod": np.fmod, "hypot": np.hypot, "fma": _fma,
}
_BYTE_BITS = np.array([bin(b).count("1") for b in range(256)], np.int32)
_BYTE_REVERSED = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], np.uint8)


def _bytes(x) -> tuple:
    """The bytes of an integer array (or scalar) as (n, itemsize) uint8, little end first,
    and the array's shape and dtype."""
    x = np.asarray(x)
    flat = np.ascontiguousarray(x).reshape(-1)
    return flat.view(np.uint8).reshape(flat.size, x.dtype.itemsize), x.shape, x.dtype


def popc(x):
    """The number of set bits of each integer (two's complement for negative ones), int32."""
    b, shape, _ = _bytes(x)
    return _BYTE_BITS[b].sum(axis=1, dtype=np.int32).reshape(shape)


def brev(x):
    """Each integer's bits in reverse order, in its own dtype."""
    b, shape, dtype = _bytes(x)
    return np.ascontiguousarray(_BYTE_REVERSED[b][:, ::-1]).view(dtype).reshape(shape)


def clz(x):
    """The number of leading zero bits of each integer, int32."""
    x = np.asarray(x)
    u = x.view(np.dtype(f"u{x.dtype.itemsize}")).copy()
    for shift in (1, 2, 4, 8, 16, 32)[:x.dtype.itemsize.bit_length() + 2]:
        u |= u >> u.dtype.type(shift)  # every bit below the highest set one set too
    return (8 * x.dtype.itemsize - popc(u)).astype(np.int32)


def ffs(x):
    """The position of each integer's lowest set bit, counted from 1; 0 for 0; int32."""
    x = np.asarray(x)
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    lowest = u & (~u + u.dtype.type(1))
    return np.where(u == 0, 0, popc(lowest - u.dtype.type(1)) + 1).astype(np.int32)


_INT_MATH = {"abs": np.abs, "min": np.minimum, "max": np.maximum,  # abs(INT_MIN) wraps
             "popc": popc, "clz": clz, "ffs": ffs, "brev": brev}
_PREDICATES = ("isnan", "isinf", "isfinite")


def _flushed(x):
    """float32's subnormals as a zero of their sign, as PTX's `.ftz` flushes them."""
    x = np.asarray(x)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(x.dtype.type(0), x), x)


def _rounding_variant(name: str):
    """A `ROUNDED_FUNCS` variant: the IEEE result of its function (round to nearest; the
    GPU's approx and full modes differ by a few ulps), with `.ftz`'s flushing."""
    function, _mode, *ftz = name.split(".")
    f = {"div": np.true_divide, "sqrt": np.sqrt, "exp2": np.exp2}[function]
    return (lambda *args: _flushed(f(*map(_flushed, args)))) if ftz else f


_FLOAT_MATH.update({name: _rounding_variant(name) for name in ROUNDED_FUNCS})


def math(name: str, operand: T.DType):
    """The function for `MathCall(name)` on operands of dtype `operand`; its result is of
    that dtype too, except for the predicates (bool)."""
    if operand.is_int:
        return _INT_MATH.get(name)
    f = _FLOAT_MATH.get(name) if operand.is_float else None
    if f is None or name in _PREDICATES:
        return f
    return lambda *args: to_float(f(*args), operand)


# ----------------------------------------------------------------------------- casts


def _saturating_to_int(dtype: T.DType):
    info = np.iinfo(dtype.np)
    upper = 2.0 ** (dtype.bits - 1 if dtype.is_signed else dtype.bits)  # first too large
    lower = float(info.min)  # exact in float64

    def cast(x):
        x = np.asarray(x, np.float64)
        too_big, too_small = x >= upper, x < lower
        fits = np.where(too_big | too_small | np.isnan(x), 0.0, x)
        out = np.trunc(fits).astype(dtype.np)
        return np.where(too_big, info.max, np.where(too_small, info.min, out)).astype(dtype.np)
    return cast


def _astype(dtype: T.DType):
    return lambda x: np.asarray(x).astype(dtype.np)


def _to_float(dtype: T.DType):
    return lambda x: to_float(x, dtype)


def _nonzero(dtype: T.DType):
    return lambda x: np.not_equal(x, 0)


# (source kind, target kind) -> factory(target dtype) -> f(x). Integer narrowing wraps.
_CASTS = {
    ("bool", "bool"): lambda dtype: identity,
    ("bool", "int"): _astype,
    ("int", "int"): _astype,
    ("bool", "float"): _to_float,
    ("int", "float"): _to_float,
    ("float", "float"): _to_float,
    ("int", "bool"): _nonzero,
    ("float", "bool"): _nonzero,
    ("float", "int"): _saturating_to_int,
}


def cast(source: T.DType, target: T.DType):
    return _CASTS[_kind(source), _kind(target)](target)
