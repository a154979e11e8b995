"""Matrix transpose through a padded shared-memory tile: reads and writes of global memory
are both coalesced, and the padding column keeps the tile's column reads free of bank
conflicts."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def transpose(x, out, TILE: vg.constexpr = 32, ROWS: vg.constexpr = 8):
    """out = x.T. Blocks of (TILE, ROWS) threads, grid (cdiv(cols, TILE), cdiv(rows, TILE))."""
    tile = simt.shared.array((TILE, TILE + 1), vg.float32)
    tx, ty = simt.thread_id(0), simt.thread_id(1)
    rows, cols = x.shape[0], x.shape[1]
    r0 = int(simt.block_id(1)) * TILE  # the tile's first row and column in x
    c0 = int(simt.block_id(0)) * TILE
    for k in range(0, TILE, ROWS):
        r, c = r0 + ty + k, c0 + tx
        # Past the edge the tile gets a zero, so every element read below was written.
        tile[ty + k, tx] = x[r, c] if r < rows and c < cols else vg.float32(0)
    simt.barrier()
    for k in range(0, TILE, ROWS):
        r, c = c0 + ty + k, r0 + tx  # in out: rows are x's columns
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = tile[tx, ty + k]


def transposed(x, tile: int = 32, rows: int = 8):
    out = vg.empty((x.shape[1], x.shape[0]), vg.float32)
    grid = (vg.cdiv(x.shape[1], tile), vg.cdiv(x.shape[0], tile))
    transpose[grid, (tile, rows)](x, out, TILE=tile, ROWS=rows)
    return out


def check(rng):
    from verdigris.examples import Result

    results = []
    for shape, tile, rows in (((301, 517), 32, 8), ((64, 45), 16, 16)):
        x = rng.standard_normal(shape).astype(np.float32)
        out = vg.asarray(np.full(shape[::-1], np.nan, np.float32))
        grid = (vg.cdiv(shape[1], tile), vg.cdiv(shape[0], tile))
        transpose[grid, (tile, rows)](vg.asarray(x), out, TILE=tile, ROWS=rows)
        results.append(Result(f"transpose of {shape[0]}x{shape[1]} float32, tiles of {tile}",
                              np.asarray(out), x.T.astype(np.float64), 0.0))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
