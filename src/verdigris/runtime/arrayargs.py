"""What the array API is given, checked and converted: shapes, dtypes, fill values, host
data, the arrays of other libraries, and the views it writes.

Takes: what a user passed to `vg.full`, `a.fill`, `a[key] = value`, `a.reshape`... Gives:
`shape_arg`, `reshaped`, `dtype_arg`, `dtype_of_value`, `is_number`, `is_real`, `scalar`,
`host_data`, `describe_array`, `broadcast` and `check_writable`.

Guarantees: every mistake is an `ArrayError` that names the user's call and says what was
wrong, never an error from inside NumPy; values convert by NumPy's rules, except that a
number an integer dtype cannot hold is refused rather than wrapped.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .. import types as T
from ..errors import ArrayError, LaunchError
from .interop import ArrayInfo, describe, overlaps_itself

_PYTHON_DTYPES = ((bool, T.bool_), (int, T.int64), (float, T.float64))  # NumPy's, in order


def shape_arg(shape) -> tuple:
    """A shape: an int or a sequence of ints, none negative."""
    try:
        shape = tuple(map(operator.index, shape if isinstance(shape, (tuple, list))
                          else (shape,)))
    except TypeError:
        raise ArrayError(f"a shape is an int or a tuple of ints, not {shape!r}") from None
    if any(n < 0 for n in shape):
        raise ArrayError(f"negative dimensions are not allowed: {shape}")
    return shape


def reshaped(shape, size: int) -> tuple:
    """`shape` for `size` elements, its one -1 (if any) filled in."""
    shape = shape_arg(shape) if not any(_is_minus_one(n) for n in shape) else shape
    unknown = [k for k, n in enumerate(shape) if _is_minus_one(n)]
    known = shape_arg(tuple(1 if k in unknown else n for k, n in enumerate(shape)))
    rest = math.prod(known)
    if len(unknown) > 1 or (unknown and (rest == 0 or size % rest)) or \
            (not unknown and rest != size):
        raise ArrayError(f"cannot reshape an array of {size} elements into shape {shape}")
    if unknown:
        known = known[:unknown[0]] + (size // rest,) + known[unknown[0] + 1:]
    return known


def _is_minus_one(n) -> bool:
    return isinstance(n, (int, np.integer)) and n == -1


def dtype_arg(dtype) -> T.DType:
    """An array's dtype, from a DType, a NumPy or torch dtype, or a name (never tfloat32)."""
    try:
        found = T.from_any(dtype)
    except (TypeError, KeyError, ValueError) as err:
        message = err.args[0] if isinstance(err, TypeError) and err.args else \
            f"{dtype!r} is not a dtype verdigris has"
        raise ArrayError(message, hint="the dtypes: vg.bool_, vg.int8 ... vg.uint64, "
                         "vg.float16, vg.bfloat16, vg.float32, vg.float64, fp8") from None
    if found is T.tfloat32:
        raise ArrayError("tfloat32 is a dtype of tiles only: an array holding TF32 values is a "
                         "float32 array", hint="give vg.float32, and convert loaded tiles with "
                                               "t.astype(vg.tfloat32)")
    return found


def is_number(value) -> bool:
    """A number (Python or NumPy scalar, or a 0-d NumPy array), not an array."""
    return isinstance(value, (bool, int, float, np.generic)) or \
        (isinstance(value, np.ndarray) and value.ndim == 0)


def is_real(value) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def dtype_of_value(value) -> T.DType:
    """NumPy's dtype for a number: bool, int64 for an int, float64 for a float, a NumPy
    scalar's own."""
    value = _unwrapped(value)
    if isinstance(value, np.generic):
        return dtype_arg(value.dtype)
    for kind, dtype in _PYTHON_DTYPES:
        if isinstance(value, kind):
            return dtype
    raise ArrayError(f"a fill value is a number (bool, int, float or a NumPy scalar), not "
                     f"{type(value).__name__}")


def scalar(value, dtype: T.DType) -> np.ndarray:
    """`value` as a 0-d NumPy array of `dtype`, converted as NumPy converts (a float into an
    integer dtype truncates toward zero, any number into bool is `x != 0`, a float too
    large for a float dtype is infinity); ArrayError for what is not a number, and for a
    number an integer dtype cannot hold (out of its range, NaN, infinity)."""
    dtype_of_value(value)  # a number of a dtype verdigris has
    value = _unwrapped(value)
    if dtype.is_int:
        number = int(value) if isinstance(value, (int, np.integer, np.bool_)) else float(value)
        if not math.isfinite(number):
            raise ArrayError(f"{value!r} cannot be stored in {dtype.name}: integer dtypes "
                             "have no NaN or infinity")
        if not _fits(int(number), dtype):
            info = np.iinfo(dtype.np)
            raise ArrayError(f"{value!r} does not fit {dtype.name}, whose values go from "
                             f"{info.min} to {info.max}", hint="give a value in that range, "
                             "or another dtype")
        return np.array(int(number), dtype.np)
    with np.errstate(over="ignore"):
        try:
            return np.array(value, dtype.np)
        except OverflowError:  # a Python int past float64's range
            raise ArrayError(f"{value!r} is too large for {dtype.name}") from None


def _unwrapped(value):
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def _fits(number: int, dtype: T.DType) -> bool:
    info = np.iinfo(dtype.np)
    return info.min <= number <= info.max


def host_data(obj, dtype: T.DType | None) -> np.ndarray:
    """`obj` (a NumPy array, a list, a number, a host tensor) as a NumPy array, converted to
    `dtype` if given (as NumPy converts), without a copy where none is needed."""
    try:
        host = np.asarray(obj, None if dtype is None else dtype.np)
    except (TypeError, ValueError, OverflowError) as err:
        what = type(obj).__name__
        raise ArrayError(f"a {what} cannot be read as an array"
                         + (f" of {dtype.name}" if dtype else "") + f": {err}") from None
    dtype_arg(host.dtype)
    return host


def describe_array(obj) -> ArrayInfo | None:
    """`interop.describe`, its LaunchError an ArrayError."""
    try:
        return describe(obj)
    except LaunchError as err:
        raise ArrayError(err.message, hint=err.hint) from None


def broadcast(info: ArrayInfo, shape: tuple) -> ArrayInfo:
    """`info` read as an array of `shape` by NumPy's broadcasting (axes of one element, or
    missing in front, repeat: stride 0); leading axes of one element more than `shape` has
    are dropped, as NumPy's assignment drops them."""
    ours, strides = tuple(info.shape), tuple(info.strides)
    while len(ours) > len(shape) and ours[0] == 1:
        ours, strides = ours[1:], strides[1:]
    extra = len(shape) - len(ours)
    if extra < 0 or any(n not in (1, m) for n, m in zip(ours, shape[extra:])):
        raise ArrayError(f"an array of shape {tuple(info.shape)} does not broadcast to the "
                         f"shape {tuple(shape)} it is assigned to")
    strides = (0,) * extra + tuple(s if n == m else 0 for n, m, s in
                                   zip(ours, shape[extra:], strides))
    return ArrayInfo(info.ptr, tuple(shape), strides, info.dtype, info.device, info.readonly,
                     info.keepalive)


def check_writable(view: ArrayInfo, what: str) -> None:
    """Refuse writes to a read-only view, and to one whose elements share memory."""
    if view.readonly:
        raise ArrayError(f"cannot {what} a read-only array (it was shared read-only)",
                         hint="write to a copy: a.copy()")
    if overlaps_itself(view.shape, view.strides):
        raise ArrayError(f"cannot {what} a view whose elements share memory (a zero or "
                         "overlapping stride, as a broadcast tensor has)",
                         hint="write to a contiguous array, e.g. a.copy()")
