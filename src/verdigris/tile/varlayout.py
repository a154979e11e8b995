"""The layouts tile variables live in: where their one value is made, not the default.

Takes: a tile kernel and the lowering's `default(shape)` layout. Gives:
`defining_layouts(kernel, default) -> {name: Layout}` for each tile variable assigned in one
place: the layout the lowering makes its value in (a reduction's result is its source's
layout sliced on the reduced axis; elementwise results take their first tile operand's;
unit reshapes and permutations relabel; loads, broadcasts and the rest come in the
default). A variable assigned in more than one place keeps the default, so that every
assignment agrees.

Why: a row statistic such as `mean = tile.sum(t, axis=1, keepdims=True) / n` is made in
the sliced layout of `t`, in which every thread already holds the means of its own rows;
kept in the default layout of its (rows, 1) shape, it would cross shared memory twice (into
the variable, then back out to broadcast against `t`), two barriers each. Guarantees: the
layouts are those `TileLowering` produces for the same expressions, so an assignment moves
no data where it moved none before; any other layout would still be correct (the lowering
converts), only slower.
"""
from __future__ import annotations

from ..frontend import walk
from ..ir import nodes as N
from ..ir import tiles as X
from .layout import Layout, unit_reshaped


def defining_layouts(kernel: N.Kernel, default) -> dict:
    assigned: dict = {}
    for node in walk(kernel.body):
        if isinstance(node, N.Assign) and isinstance(kernel.locals.get(node.name), X.TileType):
            assigned.setdefault(node.name, []).append(node.value)
    layouts: dict = {}
    for name, values in assigned.items():  # in program order: a variable's uses come later
        if len(values) == 1:
            layouts[name] = _natural(values[0], layouts, default)
    return layouts


def _natural(e: X.TileExpr, layouts: dict, default) -> Layout:
    """The layout `TileLowering.tile(e)` gives `e` when nobody asks for one."""
    if isinstance(e, X.TileVar):
        return layouts.get(e.name) or default(e.shape)
    if isinstance(e, X.TileMap) and not _arange_compare(e):
        first = next((a for a in e.args if not isinstance(a, X.Splat)), None)
        return default(e.shape) if first is None else _natural(first, layouts, default)
    if isinstance(e, X.TileReduce) and e.axis is not None:
        return _natural(e.value, layouts, default).sliced((e.axis,)).squeezed(e.axis)
    if isinstance(e, X.Reshape) and _unit_only(e):
        return unit_reshaped(_natural(e.value, layouts, default), e.value.shape, e.shape)
    if isinstance(e, X.Permute):
        return _natural(e.value, layouts, default).permuted(e.perm)
    return default(e.shape)


def _arange_compare(e: X.TileMap) -> bool:
    from .lower import _arange_against_scalar

    return _arange_against_scalar(e) is not None


def _unit_only(e: X.Reshape) -> bool:
    return [n for n in e.value.shape if n != 1] == [n for n in e.shape if n != 1]
