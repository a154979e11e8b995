"""`tile.sort` and `tile.argsort`: the frontend's checks of a sort, which it registers with
the tile intrinsics (`tiles.intrinsic`).

Takes: the tile the translator computes, the axis and the direction. Gives: a checked
`ir.tiles.TileSort`. Guarantees: the axis is a constant in range (negative counts from the
end), `descending` a constant bool, and the tile small enough for the network the GPU runs
(`MAX_SORT_ELEMENTS`); else a `CompileError` at the user's line that says what to change.
Every dtype sorts (bools as False < True).
"""
from __future__ import annotations

from math import prod

from .. import types as T
from ..errors import CompileError
from ..ir import tiles as X
from .tiles import axis_of, constant_flag, intrinsic, show, tile_operand
from .typing import Static

# Padded elements one sort may hold. The GPU sorts a tile in registers with a bitonic
# network unrolled into straight-line code, log2(n) * (log2(n) + 1) / 2 steps of every
# register. At 2^14 elements over 8 warps (64 per thread) an argsort's (key, position)
# pairs take 254 registers on sm_90a (no spills; ptxas takes ~10 s, and a minute for
# sm_80); past it they spill and the code grows past what ptxas handles in minutes.
MAX_SORT_ELEMENTS = 1 << 14


def _sort(op: str):
    def build(tr, loc, value, axis, descending):
        value = tile_operand(value, f"tile.{op}()", loc)
        axis = axis_of(axis, value.shape, loc)
        descending = constant_flag(descending, f"tile.{op}()'s descending", loc)
        from ..tile.layout import padded  # the lowering's modules load only where it runs

        elements = prod(padded(value.shape))
        if elements > MAX_SORT_ELEMENTS:
            raise CompileError(f"tile.{op}() of a tile of shape {show(value.shape)}: it holds "
                               f"{elements:,} elements (padded to powers of two), more than the "
                               f"{MAX_SORT_ELEMENTS:,} a sort takes", loc,
                               hint="a block sorts its tile in registers; sort fewer rows per "
                                    "block (a grid axis over rows), or shorter rows")
        dtype = T.int32 if op == "argsort" else value.dtype
        return X.TileSort(loc, op, value, axis, descending, dtype, value.shape)

    intrinsic(op, "tile", ("axis", Static(-1)), ("descending", Static(False)))(build)


for _op in X.SORT_OPS:
    _sort(_op)
