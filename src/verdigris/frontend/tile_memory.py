"""The tile intrinsics that touch arrays: `tile.load`, `tile.store`, `tile.atomic_<op>`,
`tile.gather`, `tile.scatter` and `tile.scatter_<op>` (op in `ir.tiles.TILE_ATOMIC_OPS`),
and `tile.num_tiles`, which register with the tile intrinsics (`tiles.intrinsic`).

Takes: the array parameter, the tile index (scalars that count tiles) or the element index
tiles, and the tile the translator computes. Gives: `TileLoad`/`Gather` expressions, and
`TileStore`/`TileAtomic`/`Scatter` statements emitted in place; a 0-d load (`shape=()`) is
a scalar read under the test that its element lies inside the array (else the padding);
`num_tiles` is scalar arithmetic on the array's extent. cuTile's `order=` on a load or
store (tile axis k runs along array axis order[k]) is the `Permute` of a tile loaded or
stored along the array's axes, which moves no data (`lower._permute` relabels a layout).
Guarantees: a tile
written has one axis per array axis and the array's dtype (converted, but never from a
float into an integer array); an atomic exists for the array's dtype on the hardware
(`typing.check_atomic`); index tiles are int64 and broadcast to one shape;
`skip_out_of_bounds` is a constant (a scatter's lanes outside the array fault unless it is
True; a gather's always take `padding`, so it only takes True), and cuTile's `check_bounds=`
is refused with the spelling that does what a port means; else a `CompileError` at the
user's line that says what to change.
"""
from __future__ import annotations

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..ir import tiles as X
from .tiles import (_ints, astype, axis_of, binary, broadcast_shape, compare, constant_flag, constant_shape,
                    intrinsic, is_tile, permuted, scalar_operand, shape_of, show, tile_operand, to_shape)
from .typing import Static, check_atomic, is_number


def _array(v, op: str, loc: Loc) -> N.ArrayRef:
    if not isinstance(v, N.ArrayRef) or v.type.space != "global":
        raise CompileError(f"tile.{op}() needs an array parameter of the kernel", loc)
    return v


def _tile_index(tr, array: N.ArrayRef, index, loc: Loc) -> tuple:
    items = index.value if isinstance(index, Static) and isinstance(index.value, tuple) else (index,)
    if any(is_tile(i) for i in items):
        raise CompileError("a tile index holds one scalar per axis (it counts tiles)", loc,
                           hint="use tile.gather/tile.scatter for per-element indices")
    return tr.indices_for(array, [(i, loc) for i in items], loc)


def _no_fraction_dropped(value, array: N.ArrayRef, verb: str, loc: Loc) -> None:
    if value.dtype.is_float and not array.dtype.is_float:
        raise CompileError(f"{verb} a {value.dtype.name} tile into {array.name!r}, an array of "
                           f"{array.dtype.name}, would drop the fraction", loc,
                           hint=f"convert explicitly: t.astype(vg.{array.dtype.name})")


def _stored(value, array: N.ArrayRef, op: str, loc: Loc) -> N.Expr:
    """A tile to write into `array`: one axis per array axis, converted to its dtype."""
    value = tile_operand(value, f"tile.{op}()", loc)
    ndim = array.type.ndim
    if len(value.shape) != ndim:
        raise CompileError(f"tile.{op}() of a tile of shape {show(value.shape)} into {array.name!r}, "
                           f"a {ndim}-d array: the tile needs one axis per array axis", loc,
                           hint="reshape the tile first, e.g. t.reshape((1, n))")
    _no_fraction_dropped(value, array, "storing", loc)
    return astype(value, array.dtype, loc)


def _element_indices(indices, array: N.ArrayRef, op: str, extra_shapes, loc: Loc):
    """Per-axis element index tiles (int64, all of one shape) and that shape."""
    items = indices.value if isinstance(indices, Static) and isinstance(indices.value, tuple) \
        else (indices,)
    ndim = array.type.ndim
    if len(items) != ndim:
        raise CompileError(f"tile.{op}() on {array.name!r}, a {ndim}-d array, needs {ndim} index "
                           f"tile{'s' * (ndim != 1)} (one per axis), got {len(items)}", loc)
    for i in items:
        if not (is_number(i) and isinstance(i.value, int)) and not (
                isinstance(i, N.Expr) and i.dtype.is_int):
            raise CompileError(f"tile.{op}() indices must be integers", loc)
    shapes = [shape_of(i) for i in items if is_tile(i)] + list(extra_shapes)
    if not shapes:
        raise CompileError(f"tile.{op}() needs at least one index tile", loc,
                           hint="use tile.load/tile.store for a tile at a tile index")
    shape = broadcast_shape(shapes, loc)
    return tuple(to_shape(i, T.int64, shape, loc) for i in items), shape


def _memory_hints(latency, allow_tma, loc: Loc) -> None:
    """cuTile's hints on a load or store, accepted and checked, and not used yet (the
    compiler schedules loads and stores, and picks how they move, by itself): `latency=`
    (how heavy the DRAM traffic is, 1 to 10) and `allow_tma=` (whether the tensor memory
    accelerator may move the tile)."""
    value = latency.value if isinstance(latency, Static) else latency
    if value is not None and not (type(value) is int and 1 <= value <= 10):
        raise CompileError("latency= takes None or a constant int from 1 (light DRAM traffic) "
                           "to 10 (heavy)", loc, hint="it is a hint, and verdigris does not use "
                                                      "it yet: leaving it out changes nothing")
    value = allow_tma.value if isinstance(allow_tma, Static) else allow_tma
    if type(value) not in (type(None), bool):
        raise CompileError("allow_tma= takes None, True or False, a constant", loc,
                           hint="it is a hint, and verdigris does not use it yet: leaving it "
                                "out changes nothing")


def _axis_order(order, ndim: int, loc: Loc) -> tuple:
    """cuTile's `order=`: the array axis of each tile axis ("C": in order, "F": reversed,
    or a permutation of the array's axes)."""
    value = order.value if isinstance(order, Static) else order
    if value in ("C", "F"):
        return tuple(range(ndim))[::1 if value == "C" else -1]
    perm = _ints(order, "order=", loc) if not isinstance(value, str) else ()
    if sorted(perm) != list(range(ndim)):
        raise CompileError(f"order= takes 'C', 'F' or a permutation of the array's {ndim} axes, "
                           f"not {value!r}", loc,
                           hint="order=(1, 0) reads a 2-d array's tile transposed: tile axis k "
                                "runs along array axis order[k]")
    return perm


def _in_array_order(index, perm: tuple):
    """A tile index given along tile axes (tile axis k is array axis perm[k]) along the
    array's axes."""
    items = index.value if isinstance(index, Static) and isinstance(index.value, tuple) else (index,)
    if len(items) != len(perm) or perm == tuple(range(len(perm))):
        return index  # a wrong count is _tile_index's error
    return Static(tuple(items[perm.index(j)] for j in range(len(perm))))


@intrinsic("load", "array", "index", "shape", ("padding", Static(0)), ("latency", Static(None)),
           ("order", Static("C")), ("allow_tma", Static(None)))
def _load(tr, loc, array, index, shape, padding, latency, order, allow_tma):
    array = _array(array, "load", loc)
    _memory_hints(latency, allow_tma, loc)
    perm = _axis_order(order, array.type.ndim, loc)
    index = _in_array_order(index, perm)
    if isinstance(shape, Static) and shape.value == ():
        return _element(tr, array, index, scalar_operand(padding, array.dtype, "padding", loc), loc)
    shape = constant_shape(shape, loc)
    if len(shape) != array.type.ndim:
        raise CompileError(f"tile.load() of shape {show(shape)} from {array.name!r}, a "
                           f"{array.type.ndim}-d array: the tile needs one axis per array axis",
                           loc, hint="load with a size-1 axis and reshape, e.g. shape=(1, n)")
    loaded = X.TileLoad(loc, array, _tile_index(tr, array, index, loc),
                        scalar_operand(padding, array.dtype, "padding", loc), array.dtype,
                        tuple(shape[perm.index(j)] for j in range(len(perm))))
    return permuted(loaded, perm, loc)  # relabels the loaded layout's axes: no data moves


def _element(tr, array: N.ArrayRef, index, padding: N.Expr, loc: Loc) -> N.Expr:
    """`tile.load(array, index, shape=())`, cuTile's 0-d load: the element at `index` (one
    element index per axis: tiles of one element) as a scalar, or `padding` where it lies
    outside the array, as a load's edge tile has it (the read happens only inside)."""
    indices = _tile_index(tr, array, index, loc)
    inside = None
    for axis, i in enumerate(indices):
        extent = tr.shape_of(array, axis, loc)
        for test in (compare("ge", i, Static(0), loc), compare("lt", i, extent, loc)):
            if not isinstance(test, Static):
                inside = test if inside is None else N.Logical(loc, "and", inside, test, T.bool_)
            elif not test.value:
                return padding
    if inside is None:
        return N.Load(loc, array, indices, array.dtype)
    key = tr.fresh("element")
    tr.unit.types.setdefault(key, array.dtype)
    tr.emit(N.Assign(loc, key, padding))
    tr.emit(N.If(loc, inside, [N.Assign(loc, key, N.Load(loc, array, indices, array.dtype))], []))
    return N.Var(loc, key, array.dtype)


@intrinsic("num_tiles", "array", "axis", "shape")
def _num_tiles(tr, loc, array, axis, shape):
    """cuTile's `num_tiles`: how many tiles of `shape` cover `array` along `axis`, a partial
    edge tile included (the extent over the tile's size there, rounded up; int64, as
    extents are). `shape` has one size per array axis; () means tiles of one element."""
    array = _array(array, "num_tiles", loc)
    ndim = array.type.ndim
    shape = (1,) * ndim if isinstance(shape, Static) and shape.value == () else \
        constant_shape(shape, loc)
    if len(shape) != ndim:
        raise CompileError(f"tile.num_tiles() of tiles of shape {show(shape)} over {array.name!r}, "
                           f"a {ndim}-d array: the tile shape needs one size per array axis",
                           loc, hint="give the shape you load the tiles with")
    axis = axis_of(axis, shape, loc)
    size, extent = shape[axis], tr.shape_of(array, axis, loc)
    return binary("floordiv", binary("add", extent, Static(size - 1), loc), Static(size), loc)


@intrinsic("store", "array", "index", "tile", ("latency", Static(None)), ("order", Static("C")),
           ("allow_tma", Static(None)), moves_tfloat32=True)
def _store(tr, loc, array, index, value, latency, order, allow_tma):
    array = _array(array, "store", loc)
    _memory_hints(latency, allow_tma, loc)
    perm = _axis_order(order, array.type.ndim, loc)
    value = _stored(value, array, "store", loc)
    value = permuted(value, tuple(perm.index(j) for j in range(len(perm))), loc)
    tr.emit(X.TileStore(loc, array, _tile_index(tr, array, _in_array_order(index, perm), loc), value))
    return Static(None)


def _tile_atomic(op: str):
    name = f"atomic_{op}"

    def build(tr, loc, array, index, value):
        array = _array(array, name, loc)
        check_atomic(op, array.dtype, f"tile.{name}()", loc)
        value = _stored(value, array, name, loc)
        tr.emit(X.TileAtomic(loc, op, array, _tile_index(tr, array, index, loc), value))
        return Static(None)

    intrinsic(name, "array", "index", "tile")(build)


def _no_check_bounds(check_bounds, op: str, loc: Loc) -> None:
    """cuTile's `check_bounds=` (True, its default: lanes outside the array are skipped;
    False: not checked, undefined there) reads as the opposite of what it does here, where
    every lane is checked: refused, naming the option a port wants."""
    if not (isinstance(check_bounds, Static) and check_bounds.value is None):
        raise CompileError(f"tile.{op}() takes skip_out_of_bounds=, not cuTile's check_bounds=", loc,
                           hint="cuTile's check_bounds=True (its default) is skip_out_of_bounds=True "
                                "here; its check_bounds=False (lanes outside undefined) has no "
                                "equal: leave it out")


@intrinsic("gather", "array", "indices", ("padding", Static(0)), ("skip_out_of_bounds", Static(True)),
           ("check_bounds", Static(None)))
def _gather(tr, loc, array, indices, padding, skip_out_of_bounds, check_bounds):
    array = _array(array, "gather", loc)
    _no_check_bounds(check_bounds, "gather", loc)
    if not constant_flag(skip_out_of_bounds, "tile.gather()'s skip_out_of_bounds", loc):
        raise CompileError("tile.gather() always skips the lanes whose index lies outside the "
                           "array (they take `padding`): skip_out_of_bounds=False is not offered",
                           loc, hint="leave skip_out_of_bounds out, or pass True")
    indices, shape = _element_indices(indices, array, "gather", (), loc)
    return X.Gather(loc, array, indices, scalar_operand(padding, array.dtype, "padding", loc),
                    array.dtype, shape)


def _scatter(atomic):
    """`tile.scatter` (`atomic` None) or `tile.scatter_<atomic>`."""
    name = "scatter" if atomic is None else f"scatter_{atomic}"

    def build(tr, loc, array, indices, value, mask, skip_out_of_bounds, check_bounds):
        array = _array(array, name, loc)
        _no_check_bounds(check_bounds, name, loc)
        skip = constant_flag(skip_out_of_bounds, f"tile.{name}()'s skip_out_of_bounds", loc)
        if atomic is not None:
            check_atomic(atomic, array.dtype, f"tile.{name}()", loc)
        value = tile_operand(value, f"tile.{name}()", loc)
        shapes = [value.shape] + ([mask.shape] if is_tile(mask) else [])
        indices, shape = _element_indices(indices, array, name, shapes, loc)
        _no_fraction_dropped(value, array, "scattering", loc)
        if is_tile(mask) and not mask.dtype.is_bool:
            raise CompileError(f"tile.{name}()'s mask is a tile of {mask.dtype.name}; it takes "
                               "a bool tile", loc, hint="compare, e.g. mask=offsets < n")
        keep = None if isinstance(mask, Static) and mask.value is None else \
            to_shape(mask, T.bool_, shape, loc)
        tr.emit(X.Scatter(loc, array, indices, to_shape(value, array.dtype, shape, loc), atomic,
                          keep, skip))
        return Static(None)

    intrinsic(name, "array", "indices", "tile", ("mask", Static(None)),
              ("skip_out_of_bounds", Static(False)), ("check_bounds", Static(None)))(build)


_scatter(None)
for _op in X.TILE_ATOMIC_OPS:
    _tile_atomic(_op)
    _scatter(_op)
