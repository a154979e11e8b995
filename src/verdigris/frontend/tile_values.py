"""The intrinsics of `verdigris.tile` that compute tile values, and the attributes of tiles.

Takes: the calls `tiles.HANDLERS` dispatches (operands already translated). Gives, registered
in `tiles.HANDLERS` through `tiles.intrinsic`: the creators (`tile.arange`, `zeros`, `full`),
`where` and `sigmoid`, the reductions (`sum`, `max`, ..., `mean`), the scans (`cumsum`, ...),
the layout changes (`flip`, `astype`, `reshape`, `broadcast_to`, `permute`, `transpose`) and
`rand`; and `attribute(tile, name, loc)` for `t.shape`, `t.dtype`, `t.ndim`, `t.T` and the
methods (`t.astype`, `t.reshape`, `t.sum`, ...; a method is a `TileMethod`).
Guarantees: as `tiles`: every result satisfies `ir.tiles`' contract, and shape errors are
`CompileError`s at the user's line naming the shapes.
"""
from __future__ import annotations

import dataclasses
from math import prod

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..ir import tiles as X
from . import typing as typing_
from .tiles import (HANDLERS, _ints, astype, axis_of, binary, broadcast_shape, broadcast_to, constant_flag,
                    constant_shape, elementwise, intrinsic, is_tile, permuted, scalar_operand, show,
                    tile_operand)
from .typing import Static, common_dtype, dtype_arg, is_number, truth, typed

@intrinsic("arange", "n", ("dtype", Static(T.int32)))
def _arange(tr, loc, n, dtype):
    """0, 1, ..., n-1 as int32, converted to `dtype` (as np.arange(n, dtype=...) rounds the
    integers a float dtype cannot hold); an integer dtype must hold n - 1, and bools are
    refused (NumPy too has no bool arange beyond two elements)."""
    shape = constant_shape(n, loc)
    if len(shape) != 1:
        raise CompileError("tile.arange(n) takes one constant size", loc)
    dtype = dtype_arg(dtype, "tile.arange()", loc)
    if dtype.is_bool or dtype.is_int and shape[0] - 1 > (1 << dtype.bits - dtype.is_signed) - 1:
        raise CompileError(f"tile.arange({shape[0]}, dtype={dtype.name}): {dtype.name} cannot "
                           f"hold {shape[0] - 1}", loc,
                           hint="use a wider integer dtype (the default, int32, holds every "
                                "tile size), or a float dtype")
    return astype(X.Arange(loc, T.int32, shape), dtype, loc)


@intrinsic("zeros", "shape", ("dtype", Static(T.float32)))
def _zeros(tr, loc, shape, dtype):
    return _full(tr, loc, shape, Static(0), Static(dtype_arg(dtype, "tile.zeros()", loc)))


@intrinsic("full", "shape", "value", ("dtype", Static(None)))
def _full(tr, loc, shape, value, dtype):
    """A tile of `value`; a tfloat32 one is the float32 one converted (the value rounded)."""
    dtype = typed(value, loc).dtype if isinstance(dtype, Static) and dtype.value is None \
        else dtype_arg(dtype, "tile.full()", loc)
    held = T.float32 if dtype is T.tfloat32 else dtype
    return astype(X.Splat(loc, scalar_operand(value, held, "the fill value", loc), held,
                          constant_shape(shape, loc)), dtype, loc)


def _select(c, a, b, loc: Loc):
    if is_number(a) and is_number(b):
        dtype = T.literal_dtype(a.value if isinstance(a.value, float) else b.value)
    else:
        dtype = common_dtype(a, b, loc)
    return N.Select(loc, truth(c, loc), typed(a, loc, dtype), typed(b, loc, dtype), dtype)


@intrinsic("where", "cond", "x", "y")
def _where(tr, loc, cond, x, y):
    return elementwise(lambda c, a, b: _select(c, a, b, loc), [cond, x, y], loc)


@intrinsic("sigmoid", "x")
def _sigmoid(tr, loc, x):
    dtype = typed(x, loc).dtype if not is_tile(x) else x.dtype
    dtype = dtype if dtype.is_float else T.float32
    if is_tile(x):
        return X.TileMap(loc, "sigmoid", (astype(x, dtype, loc),), dtype, x.shape)
    v, one = scalar_operand(x, dtype, "sigmoid's argument", loc), typing_.const(1, dtype, loc)
    exp = N.MathCall(loc, "exp", (N.Unary(loc, "neg", v, dtype),), dtype)
    return N.Binary(loc, "truediv", one, N.Binary(loc, "add", one, exp, dtype), dtype)


_ACCUMULATING = ("sum", "prod")  # reductions whose bools and narrow integers widen


def _accumulated(value, op: str, loc: Loc):
    """`value` in the dtype reduction `op` runs in: sums and products of bools and narrow
    integers accumulate in int32 (as Triton's)."""
    dtype = value.dtype
    if op in _ACCUMULATING and (dtype.is_bool or (dtype.is_int and dtype.bits < 32)):
        return astype(value, T.int32, loc)
    return value


def reduce(op: str, value, axis, keepdims, loc: Loc) -> N.Expr:
    """`tile.<op>(value, axis, keepdims)` for `op` in `ir.tiles.REDUCE_OPS`."""
    value = tile_operand(value, f"tile.{op}()", loc)
    shape = value.shape
    axis = axis_of(axis, shape, loc, allow_none=True)
    if len(shape) == 1:
        axis = None  # over every axis: a scalar
    value = _accumulated(value, op, loc)
    dtype = T.int32 if op in ("argmax", "argmin") else value.dtype
    kept = tuple(1 if axis in (None, k) else n for k, n in enumerate(shape))
    out_shape = () if axis is None else shape[:axis] + shape[axis + 1:]
    result = X.TileReduce(loc, op, value, axis, dtype, out_shape)
    if not constant_flag(keepdims, "keepdims", loc):
        return result
    return X.Splat(loc, result, dtype, kept) if axis is None else \
        X.Reshape(loc, result, dtype, kept)


_REDUCTION_PARAMS = ("tile", ("axis", Static(None)), ("keepdims", Static(False)))
for _op in X.REDUCE_OPS:
    intrinsic(_op, *_REDUCTION_PARAMS)(
        lambda tr, loc, value, axis, keepdims, op=_op: reduce(op, value, axis, keepdims, loc))


@intrinsic("mean", *_REDUCTION_PARAMS)
def _mean(tr, loc, value, axis, keepdims):
    """The sum over the count, in the tile's float dtype (float32 for integers and bools,
    the float an integer meets by default); narrower floats are summed in float32, as NumPy
    sums float16."""
    value = tile_operand(value, "tile.mean()", loc)
    dtype = value.dtype if value.dtype.is_float else T.float32
    over = axis_of(axis, value.shape, loc, allow_none=True)
    count = prod(value.shape) if over is None else value.shape[over]
    total = reduce("sum", astype(value, T.promote(dtype, T.float32), loc), axis, keepdims, loc)
    return astype(binary("truediv", total, Static(count), loc), dtype, loc)


def scan(op: str, value, axis, reverse, loc: Loc) -> N.Expr:
    """`tile.<op>(value, axis, reverse)` for `op` in `ir.tiles.SCAN_OPS`."""
    value = tile_operand(value, f"tile.{op}()", loc)
    axis = axis_of(axis, value.shape, loc)
    reverse = constant_flag(reverse, f"tile.{op}()'s reverse", loc)
    value = _accumulated(value, X.SCAN_OPS[op], loc)
    return X.TileScan(loc, op, value, axis, value.dtype, value.shape, reverse)


for _op in X.SCAN_OPS:
    intrinsic(_op, "tile", ("axis", Static(0)), ("reverse", Static(False)))(
        lambda tr, loc, value, axis, reverse, op=_op: scan(op, value, axis, reverse, loc))


@intrinsic("flip", "tile", ("axis", Static(None)))
def _flip(tr, loc, value, axis):
    """NumPy's flip: along `axis`, an int or a tuple of ints, or every axis (None)."""
    value = tile_operand(value, "tile.flip()", loc)
    rank = len(value.shape)
    if isinstance(axis, Static) and axis.value is None:
        axes = tuple(range(rank))
    else:
        items = axis.value if isinstance(axis, Static) and isinstance(axis.value, tuple) else (axis,)
        axes = tuple(axis_of(a, value.shape, loc) for a in items)
        if len(set(axes)) != len(axes):
            raise CompileError(f"tile.flip() names an axis twice: {show(_ints(axis, 'axes', loc))}",
                               loc, hint="name each axis to reverse once")
    axes = tuple(sorted(k for k in axes if value.shape[k] > 1))  # reversing one element: no-op
    return X.Flip(loc, value, axes, value.dtype, value.shape) if axes else value


@intrinsic("astype", "tile", "dtype", moves_tfloat32=True)
def _astype(tr, loc, value, dtype):
    return astype(tile_operand(value, "astype()", loc), dtype_arg(dtype, "astype()", loc), loc)


@intrinsic("reshape", "tile", "shape", moves_tfloat32=True)
def _reshape(tr, loc, value, shape):
    value = tile_operand(value, "reshape()", loc)
    shape = constant_shape(shape, loc)
    if prod(shape) != prod(value.shape):
        raise CompileError(f"cannot reshape a tile of shape {show(value.shape)} "
                           f"({prod(value.shape)} elements) to {show(shape)} ({prod(shape)} "
                           "elements)", loc)
    return value if shape == value.shape else X.Reshape(loc, value, value.dtype, shape)


@intrinsic("broadcast_to", "tile", "shape", moves_tfloat32=True)
def _broadcast_to(tr, loc, value, shape):
    value = tile_operand(value, "tile.broadcast_to()", loc)
    shape = constant_shape(shape, loc)
    if broadcast_shape([value.shape, shape], loc) != shape:
        raise CompileError(f"a tile of shape {show(value.shape)} does not broadcast to "
                           f"{show(shape)}: broadcasting adds leading axes and stretches "
                           "size-1 ones, and drops none", loc,
                           hint="reduce the tile first (tile.sum, ...), or reshape it")
    return broadcast_to(value, shape, loc)


@intrinsic("permute", "tile", "axes", moves_tfloat32=True)
def _permute(tr, loc, value, axes):
    value = tile_operand(value, "permute()", loc)
    rank = len(value.shape)
    axes = _ints(axes, "permute axes", loc)
    perm = tuple(a % rank for a in axes if -rank <= a < rank)
    if sorted(perm) != list(range(rank)):
        raise CompileError(f"axes {show(axes)} are not a permutation of the {rank} axes of a tile "
                           f"of shape {show(value.shape)}", loc)
    return permuted(value, perm, loc)


@intrinsic("transpose", "tile", ("axis0", Static(None)), ("axis1", Static(None)),
           moves_tfloat32=True)
def _transpose(tr, loc, value, axis0, axis1):
    """cuTile's transpose: axes `axis0` and `axis1` swapped; a 2-d tile's two axes when
    neither is given (its `t.T`, the same `Permute`)."""
    value = tile_operand(value, "tile.transpose()", loc)
    rank = len(value.shape)
    unnamed = [isinstance(a, Static) and a.value is None for a in (axis0, axis1)]
    if all(unnamed) and rank == 2:
        return permuted(value, (1, 0), loc)
    if any(unnamed):
        raise CompileError(f"tile.transpose() of a tile of shape {show(value.shape)} needs the "
                           "two axes to swap (only a 2-d tile's are implied)" if rank != 2 else
                           "tile.transpose() takes both axes to swap or neither", loc,
                           hint="tile.transpose(t, axis0, axis1) swaps two axes; t.permute(axes) "
                                "reorders any, and t.T reverses them all")
    first, second = axis_of(axis0, value.shape, loc), axis_of(axis1, value.shape, loc)
    perm = list(range(rank))
    perm[first], perm[second] = second, first
    return permuted(value, tuple(perm), loc)


@intrinsic("rand", "seed", "offsets")
def _rand(tr, loc, seed, offsets):
    offsets = tile_operand(offsets, "tile.rand()", loc)
    if not offsets.dtype.is_int:
        raise CompileError(f"tile.rand() offsets must be integers, not {offsets.dtype.name}", loc)
    if is_tile(seed) or not (is_number(seed) and isinstance(seed.value, int) or
                             isinstance(seed, N.Expr) and seed.dtype.is_int):
        raise CompileError("tile.rand() seed must be an integer scalar", loc)
    return X.Rand(loc, scalar_operand(seed, T.int64, "the seed", loc), offsets, T.float32, offsets.shape)


# ----------------------------------------------------------------------------- attributes


@dataclasses.dataclass(frozen=True, eq=False)
class TileMethod:
    """`t.<name>` before the call: the tile intrinsic `name` with `t` as first argument."""

    name: str
    tile: N.Expr

    def call(self, tr, args, kwargs, loc: Loc):
        if self.name in ("reshape", "permute") and len(args) > 1:  # t.reshape(4, 8)
            args = [Static(tuple(args))]
        return HANDLERS[f"tile.{self.name}"](tr, [self.tile, *args], kwargs, loc)


# Tile methods -> the intrinsic each calls with the tile first; `to` is Triton's astype.
METHODS = {"to": "astype", **{name: name for name in ("astype", "reshape", "permute", "transpose",
                                                      "extract", "flip", "mean", *X.REDUCE_OPS,
                                                      *X.SCAN_OPS)}}


def attribute(tile: N.Expr, name: str, loc: Loc):
    if name == "shape":
        return Static(tuple(Static(n) for n in tile.shape))
    if name == "dtype":
        return Static(tile.dtype)
    if name == "ndim":
        return Static(len(tile.shape))
    if name == "T":
        return permuted(tile, tuple(reversed(range(len(tile.shape)))), loc)
    if name in METHODS:
        return Static(TileMethod(METHODS[name], tile))
    raise CompileError(f"tiles have no attribute {name!r}", loc,
                       hint="available: shape, dtype, ndim, T, " + ", ".join(METHODS))
