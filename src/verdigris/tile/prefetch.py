"""Finding a statement's tile loads, to issue them together before any of its arithmetic.

Takes: the `TileLowering`, a statement's tile expression and the layout the statement
stores it in. Gives: `loads(low, e, want)`, the (TileLoad, layout) pairs lowering `e` in
`want` reaches; `repeatable(e)`, whether `e` may be lowered twice (`TileLowering._statement`
lowers a statement once per path of its loads, `memory.with_loads`); and `prefetch(low,
found)`, which issues them through `memory.load_group` (one branch, every vector issued
before any is used) and leaves them in `low.ready` (node id -> TileValue), where
`TileLowering.tile` takes them, for statements lowered once.

Why: lowered where the expression reaches them, two loads of one statement (LayerNorm's
`xc * rstd * w + b`) each sit behind their own branch, and the arithmetic on the first,
between the two, waits for its data before the second is even issued: two memory
latencies in a row instead of one.

How: the layout each load will be lowered in is predicted by following
`TileLowering.tile`'s choices (`natural`: the layout an expression gets when nothing is
wanted of it). Guarantees: only where loads are issued changes, within one statement,
whose tile expressions have no side effects; a load whose layout was mispredicted is
lowered again where it is reached, and the unused prefetch is dead code LLVM removes.
"""
from __future__ import annotations

from ..ir import tiles as X
from . import memory
from .layout import only_unit_axes_differ, unit_reshaped


def anywhere(e) -> bool:
    """Whether `e` is made in whatever layout is wanted of it without moving data: splats,
    aranges (each thread computes its own coordinates) and elementwise maps, broadcasts and
    unit-axis reshapes of those. An elementwise map takes its layout from its other operands
    (`tile.arange(COLS) < n` beside a loaded row: the mask is made in the row's layout)."""
    kind = type(e)
    if kind in (X.Splat, X.Arange):
        return True
    if kind is X.TileMap:
        return all(anywhere(a) for a in e.args)
    if kind is X.Broadcast or (kind is X.Reshape and only_unit_axes_differ(e.value.shape, e.shape)):
        return anywhere(e.value)
    return False


def natural(low, e):
    """The layout `low.tile(e)` gives `e` when no layout is wanted (None: not predicted)."""
    kind = type(e)
    if kind in (X.TileLoad, X.Splat, X.Arange, X.Broadcast, X.Gather):
        return low.default(e.shape)
    if kind is X.Reshape and only_unit_axes_differ(e.value.shape, e.shape):
        source = natural(low, e.value)
        return None if source is None else unit_reshaped(source, e.value.shape, e.shape)
    if kind is X.TileVar:
        return low.tile_slots[e.name][0]
    if kind is X.TileMap:
        first = next((a for a in e.args if not anywhere(a)), None)
        return low.default(e.shape) if first is None else natural(low, first)
    if kind is X.Permute:
        source = natural(low, e.value)
        return None if source is None else source.permuted(e.perm)
    if kind in (X.TileScan, X.Flip, X.TileSort, X.Rand):  # made in their operand's layout
        return natural(low, e.offsets if kind is X.Rand else e.value)
    if kind is X.TileReduce and e.axis is not None:  # the source's layout, sliced
        source = natural(low, e.value)
        return None if source is None else source.sliced((e.axis,)).squeezed(e.axis)
    return None


def _loads(low, e, want, found: list) -> None:
    """(load, layout) for the loads of `e` reached with `e` wanted in `want`."""
    kind = type(e)
    if kind is X.TileLoad:
        found.append((e, want or low.default(e.shape)))
    elif kind in (X.TileMap, X.Rand, X.Gather):
        layout = want or natural(low, e)
        if layout is not None:
            for child in {X.TileMap: lambda: e.args, X.Rand: lambda: (e.offsets,),
                          X.Gather: lambda: e.indices}[kind]():
                _loads(low, child, layout, found)
    elif kind is X.Broadcast:
        layout = want or low.default(e.shape)
        _loads(low, e.value, layout.sliced({k for k, (a, b) in enumerate(zip(e.value.shape, e.shape)) if a != b}),
               found)
    elif kind is X.Reshape and only_unit_axes_differ(e.value.shape, e.shape):
        _loads(low, e.value, None if want is None else unit_reshaped(want, e.shape, e.value.shape), found)
    elif kind is X.Flip:
        _loads(low, e.value, want, found)
    elif kind in (X.Reshape, X.Permute, X.TileReduce, X.TileScan, X.TileSort, X.TileSlice):
        _loads(low, e.value, None, found)  # lowered with no layout wanted
    elif kind is X.Cat:
        for part in e.parts:
            _loads(low, part, None, found)


def loads(low, e, want) -> list:
    """(load, layout) for each `TileLoad` reached lowering `e` in `want`."""
    found: list = []
    _loads(low, e, want, found)
    return found


def repeatable(e) -> bool:
    """Whether `e` may be lowered twice (`TileLowering._statement`): nothing in it keeps
    lowering state of its own (a matrix product's staged operands and pipeline do), and
    nothing in it is worth more code than a scheduled load saves (a sort's network, which
    waits for every element anyway)."""
    from ..frontend import walk

    return not any(isinstance(n, (X.TileDot, X.TileSort)) for n in walk([e]))


def prefetch(low, found: list) -> None:
    """Issue the loads `found` together (one full/edge branch) and leave them in `low.ready`."""
    if len(found) > 1:
        values = memory.load_group(low, found)
        low.ready.update((id(node), value) for (node, _), value in zip(found, values))
