"""Row sum and row max of a matrix of any width: each block walks its row in tiles of COLS,
combining element by element in a tile it carries through the loop, and reduces that tile
once at the end (one shuffle-and-shared-memory reduction per row, not one per tile)."""
import math

import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def row_sum(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    acc = tile.zeros((1, COLS), vg.float32)
    for c in range((x.shape[1] + COLS - 1) // COLS):
        acc += tile.load(x, index=(r, c), shape=(1, COLS))
    tile.store(out, index=(r,), tile=acc.sum(1))


@tile.kernel
def row_max(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    best = tile.full((1, COLS), -math.inf, vg.float32)
    for c in range((x.shape[1] + COLS - 1) // COLS):
        best = tile.maximum(best, tile.load(x, index=(r, c), shape=(1, COLS), padding=-math.inf))
    tile.store(out, index=(r,), tile=best.max(1))


def check(rng, rows=6, cols=5000, tile_cols=2048):
    from verdigris.examples import Result

    x = rng.standard_normal((rows, cols)).astype(np.float32)
    sums, maxes = (vg.asarray(np.full(rows, np.nan, np.float32)) for _ in range(2))
    row_sum[rows](vg.asarray(x), sums, COLS=tile_cols)
    row_max[rows](vg.asarray(x), maxes, COLS=tile_cols)
    return [Result(f"row sums of {rows}x{cols:,} (tiles of {tile_cols})", np.asarray(sums),
                   x.astype(np.float64).sum(1), 1e-5),
            Result(f"row maxima of {rows}x{cols:,}", np.asarray(maxes), x.max(1), 0.0)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
