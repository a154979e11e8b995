"""How many warps a tile kernel's block runs, and the widths of its memory accesses.

Takes: a specialized tile `ir.Kernel`. Gives `num_warps(kernel)`, `launch_block(kernel)`
(the 1-D block the kernel must be launched with: 32 * num_warps) and
`vector_widths(kernel)` (padded shape -> elements per 16-byte access).

The warp count (`num_warps`): `kernel.block` when the launch gave `num_warps=` (the
block is then part of the specialization); otherwise the largest tile's padded element
count / (32 lanes * 8 elements per thread), clamped to 1..8 (a power of two, as padded
sizes are) and to 4 per 64x64 block of each matrix product's result (`_product_warps`).
Each padded shape's default layout (`layout.blocked`) puts 16 bytes of the narrowest
dtype loaded or stored at that shape in each thread's consecutive registers (fewer when
the tile has fewer elements than that many per thread).
"""
from __future__ import annotations

import weakref
from math import prod

from ..ir import nodes as N
from ..ir import tiles as X
from .layout import WARP_SIZE, padded

MAX_WARPS = 8
ELEMENTS_PER_THREAD = 8


def _tile_nodes(kernel: N.Kernel):
    from ..frontend import walk

    return (n for n in walk(kernel.body) if isinstance(n, (X.TileExpr, X.TileStore, X.TileAtomic, X.Scatter)))


def _shape_of(node) -> tuple:
    return node.shape if isinstance(node, X.TileExpr) else node.value.shape


_WARPS: "weakref.WeakKeyDictionary[N.Kernel, int]" = weakref.WeakKeyDictionary()


def num_warps(kernel: N.Kernel) -> int:
    if kernel.block is not None:
        return kernel.block[0] // WARP_SIZE
    warps = _WARPS.get(kernel)
    if warps is None:
        nodes = list(_tile_nodes(kernel))
        largest = max((prod(padded(_shape_of(n))) for n in nodes), default=1)
        warps = max(1, min(MAX_WARPS, largest // (WARP_SIZE * ELEMENTS_PER_THREAD),
                           *(_product_warps(n) for n in nodes if isinstance(n, X.TileDot))))
        _WARPS[kernel] = warps
    return warps


def _product_warps(dot: X.TileDot) -> int:
    """The most warps a matrix product's (M x N) result keeps busy: a warpgroup (4 warps)
    per 64x64 block of it. A 64x64 product on 8 warps would split its 64 columns between
    two warpgroups, narrower than wgmma's 64-column panels, and fall back to mma.sync
    without a pipeline (75 TFLOP/s at 1024^3 bf16 on the H200, against 210 for 64x128)."""
    m, n = padded(dot.shape)
    return 4 * max(1, (m // 64) * (n // 64))


def launch_block(kernel: N.Kernel) -> tuple:
    return (num_warps(kernel) * WARP_SIZE, 1, 1)


def vector_widths(kernel: N.Kernel) -> dict:
    """Padded shape -> elements per 16-byte access of the narrowest dtype moved at it."""
    widths: dict = {}
    for n in _tile_nodes(kernel):
        if isinstance(n, (X.TileLoad, X.TileStore, X.TileAtomic)):
            shape = padded(_shape_of(n))
            widths[shape] = max(widths.get(shape, 1), 16 // n.array.dtype.itemsize)
    return widths
