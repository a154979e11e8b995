"""`TileSlice` and `Cat` on the GPU: part of a tile, and tiles one after another.

Takes: the `TileLowering`, a `TileSlice` or `Cat` node and the layout wanted (or None).
Gives: `tile_slice(low, node, want)` and `cat(low, node, want)`, each a `TileValue` in
`want` (the result shape's default layout when None).

How: where the layouts allow, no data moves. A slice along axes that only register bits
of the source's layout move along (a batch axis, a slice within each thread's registers)
picks registers: the result's layout keeps the source's lanes and warps, and the
register bits below its padded extents. A concatenation of parts with one layout and one
power-of-two extent E along the axis (a batch of matrix products) is their registers one
after another: the parts' layout with register bits of E, 2E, ... added along the axis.

Otherwise both move elements between threads through one shared buffer
(`convert.staged`) of the result's padded shape. A slice writes only the source
elements that lie in it, element `start + step * c` along each axis at c (so a small
part of a large tile moves only its own elements), and reads the result as it lies: a
valid c was written by the threads holding its source element, a padding c holds any
value. A concatenation writes each part at its offset along the axis
(only the part's valid elements there, so a part's padding never lands on the next part)
into a buffer of the result's padded shape, and reads the result as it lies.

Guarantees (`ir.tiles`, as NumPy's slices and `np.concatenate`): valid elements come from
valid elements only; the result's padding holds any value, never read as valid.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32
from . import convert
from .layout import Layout, next_pow2, padded, stacked
from .values import TileValue, forced_all


def _const(n: int) -> ir.Constant:
    return ir.Constant(I32, n)


def _source_coords(coords, node, extents: tuple) -> list:
    """The source coordinates (within its padded `extents`) of result element `coords`."""
    return [(start + step * c) & (extent - 1)
            for c, start, step, extent in zip(coords, node.starts, node.steps, extents)]


def _picked(value, node):
    """The slice as a choice of registers (a `TileValue`), or None where lane or warp bits
    move along a sliced axis."""
    source = value.layout
    cut = [k for k, n in enumerate(node.shape) if n != node.value.shape[k]]
    if any(basis[k] for basis in source.lanes + source.warps for k in cut):
        return None
    extents = padded(node.shape)
    layout = Layout(extents, tuple(basis for basis in source.regs if all(basis[k] < extents[k] for k in cut)),
                    source.lanes, source.warps)
    register_of = {source.register_coords(r): r for r in range(source.num_regs)}
    regs = [value.regs[register_of[tuple(_source_coords(layout.register_coords(r), node, source.shape))]]
            for r in range(layout.num_regs)]
    return TileValue(layout, regs, value.dtype)


def _placed(b, coords, node, extents: tuple) -> tuple:
    """(the result coordinates of source element `coords` (i32 values), the i1 that it
    lies in the slice, or None: every element the source's padded `extents` hold does)."""
    out, keep = [], None
    for c, start, step, n, extent in zip(coords, node.starts, node.steps, node.shape, extents):
        if (start, step) == (0, 1) and extent <= next_pow2(n):  # lands inside the buffer
            out.append(c)
            continue
        offset = b.sub(c, _const(start)) if start else c  # below start: wraps past the bound
        inside = b.icmp_unsigned("<=", offset, _const(step * (n - 1)))
        if step > 1:
            inside = b.and_(inside, b.icmp_unsigned("==", b.urem(offset, _const(step)), _const(0)))
            offset = b.udiv(offset, _const(step))
        out.append(offset)
        keep = inside if keep is None else b.and_(keep, inside)
    return out, keep


def tile_slice(low, node, want):
    value = low.tile(node.value, lazy=True)
    picked = _picked(value, node)
    if picked is not None:
        return picked
    value = forced_all(value)
    layout = want or low.default(node.shape)
    place = lambda coords: _placed(low.b, coords, node, value.layout.shape)  # noqa: E731
    return convert.staged(low, [(value, place)], layout, layout.shape, lambda coords: coords)


def stackable(node, layouts: list):
    """The layout in which `node`'s parts, held in `layouts`, are one after another as
    registers (`layout.stacked`), or None: that needs one layout and one extent along the
    axis, which fills it (no padding)."""
    axis, first = node.axis, layouts[0]
    if first is None or any(l != first for l in layouts) or \
            any(part.shape[axis] != first.shape[axis] for part in node.parts):
        return None
    return stacked(first, axis, next_pow2(len(node.parts)))


def cat(low, node, want):
    axis, b = node.axis, low.b
    values = [low.tile(part, lazy=True) for part in node.parts]  # every part before the buffer
    layout = stackable(node, [v.layout for v in values])
    if layout is not None:
        fill = values[:1] * (layout.num_regs // values[0].layout.num_regs - len(values))  # padding: any
        return TileValue(layout, [reg for v in values + fill for reg in v.regs], node.dtype)
    layout = want or low.default(node.shape)
    pieces, start = [], 0
    for part, value in zip(node.parts, values):
        value = forced_all(value)
        n = part.shape[axis]

        def place(coords: list, start=start, n=n, ragged=value.layout.shape[axis] != n):
            moved = [b.add(c, _const(start)) if k == axis and start else c for k, c in enumerate(coords)]
            return moved, b.icmp_unsigned("<", coords[axis], _const(n)) if ragged else None
        pieces.append((value, place))
        start += n
    return convert.staged(low, pieces, layout, layout.shape, lambda coords: coords)
