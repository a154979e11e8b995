"""`TileSlice` and `Cat` on the GPU: part of a tile, and tiles one after another.

Takes: the `TileLowering`, a `TileSlice` or `Cat` node and the layout wanted (or None).
Gives: `tile_slice(low, node, want)` and `cat(low, node, want)`, each a `TileValue` in
`want` (the result shape's default layout when None).

How: both move elements between threads through one shared buffer (`convert.staged`).
A slice writes its source as it lies and reads element c of the result at `start + step
* c` along each axis, masked to the source's padded extent: for a valid c that is the
element itself (it lies inside the source), for a padding c any element of the buffer.
A concatenation writes each part at its offset along the axis (only the part's valid
elements there, so a part's padding never lands on the next part) into a buffer of the
result's padded shape, and reads the result as it lies.

Guarantees (`ir.tiles`, as NumPy's slices and `np.concatenate`): valid elements come from
valid elements only; the result's padding holds any value, never read as valid.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32
from . import convert


def _const(n: int) -> ir.Constant:
    return ir.Constant(I32, n)


def tile_slice(low, node, want):
    value = low.tile(node.value)
    extents, b = value.layout.shape, low.b

    def source_of(coords: list) -> list:
        return [c if (start, step) == (0, 1) else
                b.and_(b.add(_const(start), c if step == 1 else b.mul(c, _const(step))), _const(extent - 1))
                for c, start, step, extent in zip(coords, node.starts, node.steps, extents)]
    return convert.moved(low, value, want or low.default(node.shape), source_of)


def cat(low, node, want):
    layout, axis, b = want or low.default(node.shape), node.axis, low.b
    pieces, start = [], 0
    for part in node.parts:  # every part lowered before the buffer is taken
        value = low.tile(part)
        n = part.shape[axis]

        def place(coords: list, start=start, n=n, padded=value.layout.shape[axis] != n):
            moved = [b.add(c, _const(start)) if k == axis and start else c for k, c in enumerate(coords)]
            return moved, b.icmp_unsigned("<", coords[axis], _const(n)) if padded else None
        pieces.append((value, place))
        start += n
    return convert.staged(low, pieces, layout, layout.shape, lambda coords: coords)
