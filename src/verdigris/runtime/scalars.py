"""Scalar arguments of a launch: the dtype a number takes, the range a 64-bit integer
specializes on, and the floats a kernel narrows.

Takes: a launch's scalar argument (a Python or NumPy number), or a kernel's typed IR and
the float range (`types.float_range_bits`) of each Python float argument it was specialized
for. Gives: `scalar_dtype(value, name, kernel)` (`types.of_python_scalar`, a Python int
checked against int64), `is_narrow(value)`, `scalar_entry(...)` and `narrowness(entry)`
(a number's specialization key entry and its "in int32's range" fact, `Param.narrow`),
and `refuse_narrowed_floats(kernel, range_bits, name)`. Guarantees: what does not fit is
a `LaunchError` naming the argument (and the line converting it), never a silent wrap or
infinity; an int64 or uint64 entry says whether its value lies in int32's range.
"""
from __future__ import annotations

from .. import types as T
from ..errors import LaunchError
from ..ir import nodes as N

NARROW_AT = 3  # where a 64-bit integer scalar's key entry holds its narrow fact
NARROW_LOW, NARROW_END = N.NARROW_RANGE[0], N.NARROW_RANGE[1] + 1  # narrow: LOW <= v < END


def narrowness(entry: tuple) -> bool | None:
    """A specialization key entry's narrow fact: whether an int64 or uint64 scalar's launch
    value lies in int32's range (`ir.nodes.Param.narrow`); None for every other entry."""
    return entry[NARROW_AT] if entry[0] == "s" and len(entry) == NARROW_AT + 1 else None


def is_narrow(value) -> bool:
    """Whether an integer scalar's launch value lies in int32's range (one comparison: a
    uint64 is never below it)."""
    return NARROW_LOW <= value < NARROW_END


def scalar_entry(dtype: T.DType, tile: bool, multiple: bool, narrow: bool) -> tuple:
    """The key entry of a number of `dtype` (not a Python float): a tile kernel's integer's
    divisibility fact, then a 64-bit integer's narrow fact (with None for the first on
    the SIMT track)."""
    divisible = (multiple,) if tile and dtype.is_int else ()
    if dtype.name not in N.NARROW_DTYPES:
        return ("s", dtype.name) + divisible
    return ("s", dtype.name) + (divisible or (None,)) + (narrow,)


def refuse_narrowed_floats(kernel: N.Kernel, range_bits: dict, name: str) -> None:
    """LaunchError where a Python float argument too large for a float type is converted
    to it (`scale * x` of float32 `x` with scale = 1e40), instead of becoming infinity."""
    from ..frontend import walk

    for node in walk(kernel.body):
        if not (isinstance(node, N.Cast) and isinstance(node.value, N.Var) and node.value.weak
                and node.dtype.is_float and node.dtype.bits in (16, 32)):
            continue  # fp8 saturates, as every fp8 conversion (codegen.casts); float64 holds all
        holds = 16 if node.dtype.name == "float16" else 32  # bfloat16: float32's range
        if range_bits.get(node.value.name, 16) > holds:
            limit = T.FLOAT_MAX[holds]
            raise LaunchError(f"{name}: argument {node.value.name!r} is a Python float beyond "
                              f"{node.dtype.name}'s range (±{limit:.4g}), and the kernel "
                              f"converts it to {node.dtype.name} at {node.loc}: it would be "
                              "infinity", hint=f"pass a value {node.dtype.name} can hold, or "
                              "compute in float64 (vg.float64(...) of the other operand)")


def scalar_dtype(value, name: str, kernel: str) -> T.DType:
    """The dtype of scalar argument `name` (`types.of_python_scalar`); LaunchError for what
    is not a number, and for a Python int beyond int64."""
    try:
        dtype = T.of_python_scalar(value)
    except TypeError:
        raise LaunchError(f"{kernel}: argument {name!r} is a {type(value).__name__}; kernels "
                          "take arrays (NumPy, vg.Array, torch, CuPy, JAX) and numbers",
                          hint="wrap lists with numpy.asarray(...)" if isinstance(value, (list, tuple))
                          else "pass an array or a number") from None
    if type(value) is int and not -2**63 <= value < 2**63:
        raise LaunchError(f"{kernel}: argument {name!r} is {value}, which does not fit int64, "
                          "the dtype of a Python int argument",
                          hint="pass a NumPy scalar of the dtype you mean, e.g. np.uint64(...), "
                               "or a float")
    return dtype
