"""Parts of tiles and tiles of parts: subscripts (`t[2:6]`, `t[:, None]`), `tile.extract`
and `tile.cat`.

Takes: tile expressions the translator computes and the items of a tile's subscript
(`slice` objects whose bounds are translated values or None, None for a new axis,
Ellipsis). Gives: `subscript(value, items, loc)` and `unsupported_subscript(loc)` for the
translator, and the intrinsics `tile.extract(t, index, shape)` (also the method
`t.extract`) and `tile.cat(tiles, axis)`, registered in `tiles.HANDLERS`.

Guarantees: a slice and an extract are one `TileSlice` (an extract is the slice of its
sub-tile) whose elements all lie inside the tile, decided while compiling: bounds are
constants read as NumPy reads them (negative ones count from the end, bounds past the end
clip), steps are positive, and a part without elements is refused. New axes (None) are
the `Reshape` that adds them. `tile.cat` is one `Cat` of tiles of one dtype that agree in
every extent but the axis'. Errors are `CompileError`s at the user's line that name the
shapes involved.
"""
from __future__ import annotations

from ..errors import CompileError, Loc
from ..ir import tiles as X
from .tiles import _ints, axis_of, constant_shape, intrinsic, is_tile, show, tile_operand
from .typing import Static


def subscript(value, items: list, loc: Loc):
    """`t[2:6]`, `t[:, 0:8:2]`, `t[:, None]`, `t[..., None]`: NumPy's basic slicing with
    constant bounds, then NumPy's new axes. `items` holds slices (`:` is `slice(None)`; one
    axis of `t` each), None (a new size-1 axis) and at most one Ellipsis (the axes no slice
    names; implied at the end, as in NumPy)."""
    if items.count(Ellipsis) > 1:
        raise CompileError("a tile subscript may hold one `...`", loc)
    if Ellipsis not in items:
        items = [*items, Ellipsis]
    ndim, named = len(value.shape), sum(isinstance(item, slice) for item in items)
    if named > ndim:
        raise CompileError(f"a tile of shape {show(value.shape)} has {ndim} "
                           f"ax{'ie'[ndim != 1]}s, indexed here with {named} slices", loc,
                           hint="write one slice (`:` for a whole axis) per axis of the tile, "
                                "and None for each new one")
    at = items.index(Ellipsis)
    items = items[:at] + [slice(None)] * (ndim - named) + items[at + 1:]
    ranges = [_range(item, n, loc) for item, n in zip((i for i in items if i is not None), value.shape)]
    value = sliced(value, tuple(r.start for r in ranges), tuple(r.step for r in ranges),
                   tuple(len(r) for r in ranges), loc)
    axes = iter(value.shape)
    shape = tuple(1 if item is None else next(axes) for item in items)
    return value if shape == value.shape else X.Reshape(loc, value, value.dtype, shape)


def _range(item: slice, n: int, loc: Loc) -> range:
    """The positions a slice with constant bounds takes along an axis of extent `n`."""
    lo, hi, step = (None if v is None or isinstance(v, Static) and v.value is None else
                    _ints(v, "a tile slice's bound", loc)[0] for v in (item.start, item.stop, item.step))
    if step is not None and step <= 0:
        raise CompileError(f"a tile slice's step must be positive, not {step}", loc,
                           hint="reverse a tile with tile.flip(t, axis), then slice it")
    positions = range(*slice(lo, hi, step).indices(n))
    if not positions:
        raise CompileError(f"the slice {_show_slice(lo, hi, step)} of an axis of extent {n} "
                           "holds no element, and a tile has one or more along each axis", loc)
    return positions


def _show_slice(lo, hi, step) -> str:
    text = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
    return text if step is None else f"{text}:{step}"


def sliced(value, starts: tuple, steps: tuple, shape: tuple, loc: Loc):
    """`value`'s elements `starts + steps * c` (every one inside `value`), of `shape`."""
    if shape == value.shape:  # the whole tile: starts are 0 and steps 1 wherever extents pass 1
        return value
    return X.TileSlice(loc, value, starts, steps, value.dtype, shape)


def unsupported_subscript(loc: Loc) -> CompileError:
    return CompileError("a tile is indexed only with slices of constant bounds (`t[2:6]`, `:`), "
                        "`None` (a new size-1 axis) and `...`", loc,
                        hint="keep an axis of one element with t[i:i + 1] (tile.sum(t[i:i + 1]) "
                             "is its value); take part of an array with tile.load, elements at "
                             "computed indices with tile.gather")


@intrinsic("extract", "tile", "index", "shape", moves_tfloat32=True)
def _extract(tr, loc, value, index, shape):
    """cuTile's extract: the tile cut into sub-tiles of `shape`, the one at `index` (one
    constant per axis, counting sub-tiles as a load's index counts tiles)."""
    value = tile_operand(value, "tile.extract()", loc)
    shape = constant_shape(shape, loc)
    index = _ints(index, "tile.extract()'s index", loc)
    if not len(index) == len(shape) == len(value.shape):
        raise CompileError(f"tile.extract() of a tile of shape {show(value.shape)} takes an index "
                           f"and a shape of {len(value.shape)} (one per axis); given "
                           f"{len(index)} and {len(shape)}", loc)
    outside = [k for k, (i, s, n) in enumerate(zip(index, shape, value.shape)) if i < 0 or (i + 1) * s > n]
    if outside:
        k = outside[0]
        raise CompileError(f"tile.extract() of a tile of shape {show(value.shape)}: the sub-tile "
                           f"{index[k]} of extent {shape[k]} along axis {k} (elements "
                           f"{index[k] * shape[k]} to {(index[k] + 1) * shape[k] - 1}) is not "
                           "inside the tile", loc,
                           hint="extract sub-tiles that lie inside the tile (a shape that divides "
                                "the tile's, as cuTile's powers of two do), or slice the part "
                                "you mean: t[a:b]")
    return sliced(value, tuple(i * s for i, s in zip(index, shape)), (1,) * len(shape), shape, loc)


@intrinsic("cat", "tiles", "axis", moves_tfloat32=True)
def _cat(tr, loc, parts, axis):
    """The tiles one after another along `axis`, as np.concatenate (cuTile's cat, whose
    two tiles have one shape only because its tiles' extents are powers of two)."""
    parts = parts.value if isinstance(parts, Static) and isinstance(parts.value, tuple) else None
    if parts is None or len(parts) < 2 or not all(is_tile(p) for p in parts):
        raise CompileError("tile.cat(tiles, axis) takes a tuple of two or more tiles", loc,
                           hint="tile.cat((a, b), axis)")
    first = parts[0]
    axis = axis_of(axis, first.shape, loc)
    for part in parts[1:]:
        if part.dtype != first.dtype:
            raise CompileError(f"tile.cat() of a {first.dtype.name} tile and a {part.dtype.name} "
                               "one: the tiles have one dtype", loc,
                               hint=f"convert one first: t.astype(vg.{first.dtype.name})")
        if len(part.shape) != len(first.shape) or any(
                a != b for k, (a, b) in enumerate(zip(part.shape, first.shape)) if k != axis):
            raise CompileError(f"tile.cat() along axis {axis} of tiles of shapes "
                               f"{show(first.shape)} and {show(part.shape)}: they agree in "
                               "every extent but the axis'", loc)
    shape = tuple(sum(p.shape[axis] for p in parts) if k == axis else n
                  for k, n in enumerate(first.shape))
    constant_shape(Static(shape), loc)  # within a tile's elements
    return X.Cat(loc, tuple(parts), axis, first.dtype, shape)
