"""Dtypes and their NumPy, LLVM, PTX and DLPack spellings, and the promotion rules.

Takes: a dtype name, a NumPy dtype, a DLPack (code, bits) pair or a Python scalar.
Gives: the one `DType` object for it. Guarantees: each dtype is a singleton (compare with
`is` or `==`), and every table here is keyed by `DType.name`, so adding a dtype is one row.
`tfloat32` is a dtype of tiles only (no array, scalar or NumPy dtype has it; NumPy reads it
as float32), which promotes with nothing: `tf32_rounded` is its rounding.

Promotion (documented in README "Types"):
- Python literals are *weak*: an int literal takes the type of the other operand; a float
  literal takes the other operand's float type, or float32 if that operand is an integer.
- Two integers promote as NumPy does (int32 + int64 -> int64, int32 + uint32 -> int64);
  uint64 with a signed integer is an error (NumPy would make float64): cast explicitly.
- Integer with float gives that float type (float32 for int + float32), as in Triton,
  because a silent float64 is slow on a GPU. Two floats give the wider; float16 with
  bfloat16 gives float32.
- `/` of two integers gives float64, as in Python and NumPy (an integer with a float
  literal stays float32, by the weak-literal rule). `//` and `%` on integers floor, as in
  Python.
- Python scalar arguments: int -> int64, bool -> bool, float -> float64 and *weak*: read
  directly it takes the float type of the operand it meets, as a float literal does
  (`scale * x` is float32 for float32 `x`, exact float64 for float64 `x`); a value too large
  for a float type it is converted to is refused at the launch (`float_range_bits`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    name: str
    kind: str  # "b" bool, "i" signed int, "u" unsigned int, "f" float
    bits: int
    short: str

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def np(self) -> np.dtype:
        found = _NUMPY.get(self.name)
        if found is None:
            _load_extended()
            found = _NUMPY[self.name]
        return found

    @property
    def dtype(self) -> np.dtype:
        """NumPy's dtype for it, which NumPy reads wherever it takes a dtype:
        `np.zeros(3, vg.bf16)`, `np.dtype(vg.f32)`, `a.dtype == vg.float32`."""
        return self.np

    def __repr__(self) -> str:
        return f"vg.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))

    def __call__(self, value):  # used inside kernels as a cast; on the host, a NumPy scalar
        scalar = self.np.type(value)
        return tf32_rounded(np.asarray(scalar))[()] if self is tfloat32 else scalar


def _d(name, kind, bits, short):
    return DType(name, kind, bits, short)


bool_ = _d("bool", "b", 8, "b1")
int8, int16, int32, int64 = (_d(f"int{b}", "i", b, f"i{b}") for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (_d(f"uint{b}", "u", b, f"u{b}") for b in (8, 16, 32, 64))
float16 = _d("float16", "f", 16, "f16")
bfloat16 = _d("bfloat16", "f", 16, "bf16")
float32 = _d("float32", "f", 32, "f32")
float64 = _d("float64", "f", 64, "f64")
float8_e4m3fn = _d("float8_e4m3fn", "f", 8, "f8e4m3")
float8_e5m2 = _d("float8_e5m2", "f", 8, "f8e5m2")
# A tile dtype only (docs/api.md "Dtypes"): float32 storage holding TF32 values (10 mantissa
# bits), the operands of TF32 products. No array or scalar has it, so it is not in ALL.
tfloat32 = _d("tfloat32", "f", 32, "tf32")

ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
       float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(bool_=bool_, tfloat32=tfloat32)
_BY_SHORT = {d.short: d for d in (*ALL, tfloat32)}  # "f32", "bf16", "i64", "u8", "b1", "tf32"


_EXTENDED = (bfloat16, float8_e4m3fn, float8_e5m2)  # NumPy holds them through ml_dtypes
_NUMPY = {d.name: np.dtype(d.name) for d in ALL if d.name in np.sctypeDict}
_NUMPY.update(bool=np.dtype(np.bool_), tfloat32=np.dtype(np.float32))  # NumPy reads tf32 as float32
_FROM_NUMPY = {np.dtype(d.name): d for d in ALL if d.name in np.sctypeDict}
_FROM_NUMPY[np.dtype(np.bool_)] = bool_


def _load_extended() -> None:
    """Add bfloat16/fp8 to the NumPy tables on first need, not at import: ml_dtypes' extension
    takes up to 2 s to load. With ml_dtypes (it comes with JAX) they are real NumPy dtypes;
    without it they are stored as raw bits of the same width."""
    try:
        import ml_dtypes

        for d in _EXTENDED:
            _NUMPY[d.name] = np.dtype(getattr(ml_dtypes, d.name))
            _FROM_NUMPY[_NUMPY[d.name]] = d
    except ImportError:
        _NUMPY.update(bfloat16=np.dtype(np.uint16), float8_e4m3fn=np.dtype(np.uint8),
                      float8_e5m2=np.dtype(np.uint8))


def tf32_rounded(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32's 10 mantissa bits, to nearest with ties away from zero
    (`cvt.rna.tf32.f32`): adding half of the last kept bit carries into it exactly at and
    past the halfway point; infinities stay, overflow gives one, NaN is kept as it is."""
    bits = (x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(np.isnan(x), x, bits.view(np.float32))


# DLPack type codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool, 10+ float8 variants (v1.1).
DLPACK = {
    "bool": (6, 8), "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64), "bfloat16": (4, 16),
    "float8_e4m3fn": (10, 8), "float8_e5m2": (12, 8),
}
_FROM_DLPACK = {v: _BY_NAME[k] for k, v in DLPACK.items()}


def from_name(name: str) -> DType:
    return _BY_NAME[name]


def from_numpy(dt) -> DType:
    dt = np.dtype(dt)
    found = _FROM_NUMPY.get(dt)
    if found is None and dt.name in _BY_NAME and "bfloat16" not in _NUMPY:
        _load_extended()  # an ml_dtypes array: ml_dtypes is loaded already
        found = _FROM_NUMPY.get(dt)
    if found is None:
        raise TypeError(f"arrays of NumPy dtype {dt} are not supported by verdigris")
    return found


def named_by_numpy(value) -> DType | None:
    """The dtype a NumPy dtype object or scalar type names (`np.dtype("float16")`,
    `np.float32`, `np.bool_`), where verdigris has it; None for anything else (other
    values, and NumPy types verdigris lacks: `np.complex64`, abstract `np.floating`)."""
    if not isinstance(value, np.dtype) and not (isinstance(value, type)
                                                and issubclass(value, np.generic)):
        return None
    try:
        return from_numpy(value)
    except TypeError:
        return None


def from_dlpack(code: int, bits: int) -> DType:
    try:
        return _FROM_DLPACK[(code, bits)]
    except KeyError:
        raise TypeError(f"DLPack dtype (code {code}, {bits} bits) is not supported") from None


def from_any(x) -> DType:
    """A DType from a DType, a NumPy dtype or type, a torch dtype, or a name."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        found = _BY_NAME.get(x) or _BY_SHORT.get(x)
        if found is None:
            raise TypeError(f"unknown dtype {x!r}: give a name such as 'float32' or 'f32', a "
                            "verdigris dtype (vg.float32) or a NumPy or torch dtype")
        return found
    name = getattr(x, "__module__", "")
    if name.startswith("torch"):
        return _BY_NAME[str(x).removeprefix("torch.")]
    return from_numpy(x)


def of_python_scalar(value) -> DType:
    """The dtype a Python or NumPy scalar argument takes (see module docstring)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, np.generic):
        return from_numpy(value.dtype)
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return float64
    raise TypeError(f"{type(value).__name__} is not a scalar type verdigris understands")


FLOAT_MAX = {16: 65504.0, 32: 3.4028234663852886e38}  # float16's and float32's largest


def float_range_bits(value: float) -> int:
    """The narrowest of float16, float32 (and bfloat16 with it), float64 whose range holds
    `value` (NaN and infinities: 16, every float type has them)."""
    magnitude = abs(value)
    if magnitude <= FLOAT_MAX[16] or magnitude != magnitude or magnitude == float("inf"):
        return 16
    return 32 if magnitude <= FLOAT_MAX[32] else 64


_INT_ORDER = (int8, int16, int32, int64)


def promote(a: DType, b: DType) -> DType:
    """The common dtype of two *strong* operands. Raises TypeError with a reason."""
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float and b.is_float:
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return float32
        if a.bits == b.bits:
            raise TypeError(f"no common type for {a.name} and {b.name}: cast one explicitly")
        return a if a.bits > b.bits else b
    if a.is_float:
        return a
    if b.is_float:
        return b
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.is_signed else (b, a)
    if unsigned.bits >= 64:
        raise TypeError(f"mixing {unsigned.name} and {signed.name} has no exact common "
                        "type: cast one of them explicitly")
    if signed.bits > unsigned.bits:
        return signed
    return next(t for t in _INT_ORDER if t.bits > unsigned.bits)


def promote_weak(strong: DType, literal) -> DType:
    """The dtype of `strong <op> literal` where the literal is a Python int/float/bool."""
    if isinstance(literal, bool) or isinstance(literal, int):
        return strong if not strong.is_bool else int64
    if isinstance(literal, float):
        return strong if strong.is_float else float32
    raise TypeError(f"unsupported literal {literal!r}")


def literal_dtype(value) -> DType:
    """The dtype a literal takes when nothing else decides (e.g. `x = 1`)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64 if not -2**31 <= value < 2**31 else int32
    if isinstance(value, float):
        return float32
    raise TypeError(f"unsupported literal {value!r}")
