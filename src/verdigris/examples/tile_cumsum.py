"""Cumulative sum along rows of any width: a scan of each tile (`tile.cumsum`), plus the
running total of the tiles before it, carried through the loop as a scalar."""
import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def cumsum_rows(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    carry = 0.0
    for c in range((x.shape[1] + COLS - 1) // COLS):
        t = tile.load(x, index=(r, c), shape=(1, COLS)).astype(vg.float32)
        tile.store(out, index=(r, c), tile=tile.cumsum(t, axis=1) + carry)
        carry += tile.sum(t)


def check(rng, rows=4, cols=3000, tile_cols=1024):
    from verdigris.examples import Result

    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = vg.asarray(np.full_like(x, np.nan))
    cumsum_rows[rows](vg.asarray(x), out, COLS=tile_cols)
    want = np.cumsum(x.astype(np.float64), 1)
    return [Result(f"cumulative sums of {rows} rows of {cols:,} (tiles of {tile_cols})", np.asarray(out),
                   want, 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
