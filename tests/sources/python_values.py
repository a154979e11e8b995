"""Kernels whose expressions follow Python's value semantics, with their Python reference:
run by `tests/test_frontend.py` on the cpu backend and `tests/gpu/test_launch_gpu.py`."""
import numpy as np

import verdigris as vg
from verdigris import simt


@vg.func
def half(v):
    return v * 0.5


@simt.kernel
def and_or_values(x, n, out):
    """`and`/`or` give an operand's value; the right side runs only where it decides (x has
    n elements, out's rows are longer: x[i] past n is never read)."""
    i = simt.global_id(0)
    if i < out.shape[1]:
        inside = i < n
        v = x[i] if inside else vg.float32(0)
        out[0, i] = v or 7.0
        out[1, i] = v and 3.0
        out[2, i] = inside and x[i]
        out[3, i] = 0.0 or v or 2.0
        out[4, i] = v or half(v + 10.0)
        out[5, i] = (i < 2 or v > 1.0) and 5.0
        out[6, i] = (not inside) or x[i] > 0.5


def and_or_reference(x: np.ndarray, columns: int) -> np.ndarray:
    """The same expressions, element by element, in Python."""
    out = np.zeros((7, columns))
    for i in range(columns):
        inside = i < len(x)
        v = float(x[i]) if inside else 0.0
        out[:, i] = (v or 7.0, v and 3.0, inside and float(x[i]), 0.0 or v or 2.0,
                     v or (v + 10.0) * 0.5, (i < 2 or v > 1.0) and 5.0,
                     (not inside) or float(x[i]) > 0.5)
    return out


def and_or_inputs(rng, n=200):
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.random(n) < 0.3] = 0.0  # zeros: the falsy case
    return x


@simt.kernel
def min_max(x, y, out):
    """Builtin and vg.math min/max: IEEE minNum/maxNum (a NaN operand yields the other)."""
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[0, i] = min(x[i], y[i])
        out[1, i] = max(x[i], y[i])
        out[2, i] = vg.math.min(x[i], y[i])
        out[3, i] = vg.math.max(x[i], y[i])


def min_max_inputs():
    nan = np.nan
    x = np.array([nan, 1.0, nan, -0.5, 2.0], np.float32)
    y = np.array([1.0, nan, nan, 0.25, -3.0], np.float32)
    return x, y


def min_max_reference(x, y):
    return np.stack([np.fmin(x, y), np.fmax(x, y), vg.math.min(x, y), vg.math.max(x, y)])
