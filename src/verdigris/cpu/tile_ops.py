"""What the tile interpreter's operations compute, in NumPy (`tiles` runs the kernels).

Takes: dtypes and op names of `ir.tiles`. Gives tables of functions on tiles in register
form (`ops`): `ELEMENTWISE` (op -> (op, operand dtype, result dtype) -> f(*args), or None:
the `ops` tables, `where` and `sigmoid`), `REDUCTIONS` and `SCANS` (op -> (source dtype,
result dtype) -> f(tile, axis); `from_the_end` turns a scan around), `sorting` (a sort's
f(tile, axis)), `DOT_ROUNDING` (a product's precision -> the operands' rounding); and the
geometry of a tile in its array: `window` (the part of a tile inside the array) and
`flat_indices` (row-major element numbers of a box). The semantics (what narrow floats
accumulate in, NaN in max and argmax, tf32's rounding, a sort's order) are `tiles`'
docstring's.
"""
from __future__ import annotations

import numpy as np

from .. import ir
from .. import types as T
from . import ops

def window(index: list, shape: tuple, extents: tuple):
    """The part of the tile at tile-index `index` inside the array: (slices of the array,
    slices of the tile), or None when no element of the tile is inside."""
    inside, within = [], []
    for i, n, extent in zip(index, shape, extents):
        start = int(i) * n
        lo, hi = max(start, 0), min(start + n, extent)
        if lo >= hi:
            return None
        inside.append(slice(lo, hi))
        within.append(slice(lo - start, hi - start))
    return tuple(inside), tuple(within)


def flat_indices(inside: tuple, extents: tuple) -> np.ndarray:
    """Row-major element numbers of a box of the array."""
    flat = np.zeros((), np.int64)
    for box, extent in zip(inside, extents):
        flat = flat[..., None] * extent + np.arange(box.start, box.stop, dtype=np.int64)
    return flat.reshape(-1)


def _where(cond, a, b):
    return np.where(cond, a, b)


def _sigmoid(dtype):
    wide = np.float64 if dtype.bits == 64 else np.float32

    def sigmoid(x):
        x = np.asarray(x, wide)
        return ops.to_float(np.reciprocal(1 + np.exp(-x)), dtype)
    return sigmoid


# op name -> (op, operand dtype, result dtype) -> f(*args) in register form, or None.
ELEMENTWISE = {
    **{op: lambda op, operand, result: ops.unary(op, result) for op in ir.UNARY_OPS},
    **{op: lambda op, operand, result: ops.binary(op, result) for op in ir.BINARY_OPS},
    **{op: lambda op, operand, result: ops.compare(op) for op in ir.COMPARE_OPS},
    **{op: lambda op, operand, result: ops.math(op, operand) for op in (*ir.MATH_FUNCS, *ir.ROUNDED_FUNCS)},
    "cast": lambda op, operand, result: ops.cast(operand, result),
    "where": lambda op, operand, result: _where,
    "sigmoid": lambda op, operand, result: _sigmoid(result) if result.is_float else None,
}


def _accumulator(dtype) -> np.dtype:
    """What sums and products of `dtype` results add in: float32 for narrower floats."""
    if dtype.is_float and dtype.bits < 32:
        return np.dtype(np.float32)
    return dtype.np


def _to_result(dtype):
    return (lambda x: ops.to_float(x, dtype)) if dtype.is_float else \
        (lambda x: np.asarray(x).astype(dtype.np))


def _accumulating(ufunc):
    def factory(source, result):
        acc, finish = _accumulator(result), _to_result(result)
        return lambda x, axis: finish(ufunc(np.asarray(x, acc), axis=axis, dtype=acc))
    return factory


def _extremum(float_ufunc, int_ufunc, how: str = "reduce"):
    """The ufunc's reduce (or, `how`, accumulate) over the axis: IEEE maxNum/minNum for
    floats (a NaN loses), as the GPU's."""
    def factory(source, result):
        ufunc, finish = float_ufunc if source.is_float else int_ufunc, _to_result(result)
        combine = getattr(ufunc, how)
        return lambda x, axis: finish(combine(x, axis=axis))
    return factory


def _position(find, nan_as):
    def factory(source, result):
        def position(x, axis):
            if source.is_float:
                x = np.where(np.isnan(x), nan_as, x)
            return np.asarray(find(x, axis=axis)).astype(np.int32)
        return position
    return factory


# reduce or scan op -> factory(source dtype, result dtype) -> f(tile, axis)
REDUCTIONS = {
    "sum": _accumulating(np.sum),
    "prod": _accumulating(np.prod),
    "max": _extremum(np.fmax, np.maximum),
    "min": _extremum(np.fmin, np.minimum),
    "argmax": _position(np.argmax, -np.inf),
    "argmin": _position(np.argmin, np.inf),
}
SCANS = {
    "cumsum": _accumulating(np.cumsum),
    "cumprod": _accumulating(np.cumprod),
    "cummax": _extremum(np.fmax, np.maximum, "accumulate"),
    "cummin": _extremum(np.fmin, np.minimum, "accumulate"),
}


def from_the_end(scan):
    """A scan run from the last element of the axis towards the first (`reverse=True`)."""
    return lambda x, axis: np.flip(scan(np.flip(x, axis), axis), axis)


# A sort's keys (`ir.tiles.TileSort`): the register form's bits xor a mask, as unsigned
# integers that order as the elements do. kind -> (mask of the bits, mask of the key), given
# (the top bit, all ones): a float's sign bit set flips every bit, else only the sign bit.
_KEY_MASKS = {
    "float": (lambda bits, top, ones: np.where(bits >= top, ones, top),
              lambda key, top, ones: np.where(key >= top, top, ones)),
    "signed": (lambda bits, top, ones: top, lambda key, top, ones: top),
    "unsigned": (lambda bits, top, ones: 0, lambda key, top, ones: 0),
}


def sorting(op: str, dtype, descending: bool):
    """f(tile, axis) for `op` in `ir.tiles.SORT_OPS` on tiles of `dtype`: NumPy's sort (or
    stable argsort) of the keys, of their complement when `descending`."""
    form = ops.register_dtype(dtype)
    unsigned = np.dtype(f"u{form.itemsize}")
    top, ones = unsigned.type(1 << 8 * form.itemsize - 1), unsigned.type(np.iinfo(unsigned).max)
    to_key, from_key = _KEY_MASKS["float" if dtype.is_float else "signed" if dtype.is_signed else "unsigned"]
    order = np.invert if descending else (lambda key: key)

    def keys(x):
        x = np.asarray(x, form)
        if dtype.is_float:  # every NaN as the canonical one; for positions, -0.0 as +0.0
            x = np.where(np.isnan(x), form.type(np.nan), x)
            if op == "argsort":
                x = np.where(x == 0, form.type(0), x)
        bits = x.view(unsigned)
        return order(bits ^ to_key(bits, top, ones))

    def values(key):
        key = order(key)
        return (key ^ from_key(key, top, ones)).astype(unsigned).view(form)

    if op == "argsort":
        return lambda x, axis: np.argsort(keys(x), axis=axis, kind="stable").astype(np.int32)
    return lambda x, axis: values(np.sort(keys(x), axis=axis))


# TileDot precision -> the operands' rounding, on arrays already in the accumulator's dtype
DOT_ROUNDING = {"ieee": lambda x: x, "tf32": T.tf32_rounded}
