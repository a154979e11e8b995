"""Which tile variables live where their one value is made, rather than in the default.

Takes: a tile kernel. Gives: `made_once(kernel) -> {name: value}`, each tile variable
assigned in one place with the expression it is assigned, in program order. The lowering
keeps such a variable in the layout that expression is made in (`prefetch.natural`: a
reduction's result in its source's layout sliced on the reduced axis, an elementwise
result in that of its first operand not made in any layout (`prefetch.anywhere`), ...),
not the default of the variable's shape; a variable assigned in more than one place keeps
the default, so that every assignment agrees.

Why: a row statistic such as `mean = tile.sum(t, axis=1, keepdims=True) / n` is made in
the sliced layout of `t`, in which every thread already holds the means of its own rows;
kept in the default layout of its (rows, 1) shape, it would cross shared memory twice (into
the variable, then back out to broadcast against `t`), two barriers each. Guarantees: an
assignment moves no data where it moved none before; a layout the prediction gets wrong is
still correct (the lowering converts), only slower.
"""
from __future__ import annotations

from ..frontend import walk
from ..ir import nodes as N
from ..ir import tiles as X


def made_once(kernel: N.Kernel) -> dict:
    assigned: dict = {}
    for node in walk(kernel.body):
        if isinstance(node, N.Assign) and isinstance(kernel.locals.get(node.name), X.TileType):
            assigned.setdefault(node.name, []).append(node.value)
    return {name: values[0] for name, values in assigned.items() if len(values) == 1}
