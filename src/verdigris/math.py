"""`vg.math`: math functions for kernels of both tracks.

Inside a kernel each name lowers to NVIDIA's libdevice on the GPU and to NumPy on the cpu
backend; the `math` module's names (`math.exp`, ...) and the builtins `abs`, `min`, `max`
mean the same there. On the host these are NumPy's functions, so helpers can be tested in
plain Python.

`min` and `max` of floats are IEEE minNum/maxNum, as CUDA's `fminf`/`fmaxf` and NumPy's
`fmin`/`fmax` (not `np.minimum`, and not Python's order-dependent builtins): a NaN operand
yields the other operand, and only two NaNs give NaN. Where a NaN must carry through, test
for it: `x if vg.math.isnan(x) else max(x, y)`.

Integer bit functions, as CUDA's `__popc`, `__clz`, `__ffs` and `__brev` (numba's
`cuda.popc`, ...), for integers of any width: `popc(x)` counts the set bits, `clz(x)` the
leading zeros, `ffs(x)` is the position of the lowest set bit counted from 1 (0 for 0), all
int32; `brev(x)` reverses the bits, in x's dtype.
"""
from __future__ import annotations

import numpy as _np

from .ir.nodes import BIT_FUNCS as _BIT_FUNCS, MATH_FUNCS as _MATH_FUNCS


def _rsqrt(x):
    return 1.0 / _np.sqrt(x)


def _bit_function(name):
    def bits(x):
        from .cpu import ops  # on first use: a GPU launch never imports the cpu backend

        return getattr(ops, name)(x)
    return bits


def _host(name):
    special = {**{n: _bit_function(n) for n in _BIT_FUNCS},
               "rsqrt": _rsqrt, "min": _np.fmin, "max": _np.fmax, "pow": _np.power,
               "atan2": _np.arctan2, "asin": _np.arcsin, "acos": _np.arccos,
               "atan": _np.arctan, "asinh": _np.arcsinh, "acosh": _np.arccosh,
               "atanh": _np.arctanh, "fma": lambda a, b, c: a * b + c, "round": _np.rint,
               "erf": _np.vectorize(__import__("math").erf),
               "erfc": _np.vectorize(__import__("math").erfc)}
    fn = special.get(name) or getattr(_np, name)

    def host(*args):
        return fn(*args)

    host.__name__ = name
    host.__qualname__ = f"vg.math.{name}"
    host.__vg_intrinsic__ = f"math.{name}"
    return host


for _name in _MATH_FUNCS:
    globals()[_name] = _host(_name)

pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan

__all__ = sorted(_MATH_FUNCS) + ["pi", "e", "inf", "nan"]
