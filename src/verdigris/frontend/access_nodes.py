"""The nodes of a kernel that access memory, and pairs of them as facts that outlive a process.

Takes: a kernel (`ir.Kernel`). Gives: `ACCESSING` (the node types that access an array:
scalar loads, stores and atomics, tile loads, gathers, stores, atomics and scatters),
`accessing(kernel)` (those nodes, in walk order), `as_positions(kernel, pairs)` and
`from_positions(kernel, positions)`: pairs of node ids (as `pair` makes them) to pairs of
positions in that order and back, so that a fact about pairs of accesses (the tile track's
`block_meets`) survives the disk cache, where ids do not.
"""
from __future__ import annotations

from ..ir import nodes as N
from ..ir import tiles as X

ACCESSING = (N.Load, N.Atomic, N.Store, X.TileLoad, X.Gather, X.TileStore, X.TileAtomic, X.Scatter)


def pair(x: int, y: int) -> tuple:
    """The key of two nodes' ids (either order; a node with itself is `(x, x)`)."""
    return (x, y) if x <= y else (y, x)


def accessing(kernel) -> list:
    from . import walk  # (this package's, defined after its imports)

    return [n for n in walk(kernel.body) if isinstance(n, ACCESSING)]


def as_positions(kernel, pairs) -> tuple:
    position = {id(n): i for i, n in enumerate(accessing(kernel))}
    return tuple(sorted(pair(position[x], position[y]) for x, y in pairs))


def from_positions(kernel, positions) -> frozenset:
    nodes = accessing(kernel)
    return frozenset(pair(id(nodes[i]), id(nodes[j])) for i, j in positions)
