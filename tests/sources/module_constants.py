"""Kernels reading module-level constants (tests/test_module_constants.py rebinds them)."""
import verdigris as vg
from verdigris import simt, tile

SCALE = 2.0
OFFSET = 1
DTYPE = vg.float32
WIDTHS = (1, 2)


@vg.func
def shifted(v):
    return v + OFFSET


@simt.kernel
def scaled(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = shifted(x[i] * SCALE) + DTYPE(WIDTHS[1])


@tile.kernel
def scaled_tiles(x, out):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(64,)) * SCALE + OFFSET)
