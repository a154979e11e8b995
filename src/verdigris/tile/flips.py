"""`Flip` on the GPU: a tile reversed along some of its axes.

Takes: the `TileLowering`, a `Flip` node and the layout wanted (or None). Gives:
`flip(low, node, want) -> TileValue`.

How: element c of the result along a flipped axis of logical extent n is the source's
element n-1-c. Along an axis whose coordinate bits (`layout.Layout`) are all register
bits, that element is in another register of the same thread, known while compiling: the
result is the same registers in another order (no instruction), for any n. Along an axis
of extent n = 2^m (no padding), n-1-c is c with its m bits flipped: the register bits
flip as above and the lane bits in one `shfl.sync.bfly` per register. Warp bits along a
flipped axis, or lane bits along a padded one, take the layout conversion through shared
memory (`convert.moved`), reading the source at (n-1-c) mod the padded extent, which is
n-1-c for valid elements and padding for padding.

Guarantees (`ir.tiles`, as `np.flip`): valid elements come from valid elements only; the
padding of the result holds padding (or any value), never read as valid.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32
from . import convert, reduce
from .values import TileValue


def _axis_bits(bases: tuple, axes) -> int:
    """The mask of the bits among `bases` that move along any of `axes`."""
    return sum(1 << i for i, basis in enumerate(bases) if any(basis[k] for k in axes))


def _in_registers(layout, node) -> tuple | None:
    """(source register of each register, lane mask to exchange) for a flip that needs no
    shared memory in `layout`, else None."""
    extents = node.shape
    if _axis_bits(layout.warps, node.axes):
        return None
    through_lanes = [k for k in node.axes if _axis_bits(layout.lanes, (k,))]
    if any(extents[k] != layout.shape[k] for k in through_lanes):
        return None
    coords = [layout.register_coords(r) for r in range(layout.num_regs)]
    register_of = {c: r for r, c in enumerate(coords)}
    toggled = {k: sum(basis[k] for basis in layout.regs) for k in through_lanes}

    def source(c: tuple) -> tuple:
        return tuple(c[k] ^ toggled[k] if k in toggled else
                     (extents[k] - 1 - c[k]) % layout.shape[k] if k in node.axes else c[k]
                     for k in range(len(c)))
    if len(register_of) != len(coords) or any(source(c) not in register_of for c in coords):
        return None
    return [register_of[source(c)] for c in coords], _axis_bits(layout.lanes, through_lanes)


def flip(low, node, want):
    value = low.tile(node.value, want)
    layout = value.layout
    plan = _in_registers(layout, node)
    if plan is not None:
        sources, lane_mask = plan
        regs = [value.regs[s] for s in sources]
        if lane_mask:
            regs = [reduce._shuffle(low.em, reg, lane_mask) for reg in regs]
        return TileValue(layout, regs, node.dtype)
    b = low.b

    def source_of(coords: list) -> list:
        return [b.and_(b.sub(ir.Constant(I32, node.shape[k] - 1), c), ir.Constant(I32, layout.shape[k] - 1))
                if k in node.axes else c for k, c in enumerate(coords)]
    return convert.moved(low, value, want or layout, source_of)
