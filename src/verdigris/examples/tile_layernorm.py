"""LayerNorm forward over rows: mean, variance (of the centred row, masked past the row's
end when the tile is wider), scale by the weight, shift by the bias; float32 arithmetic
whatever the storage dtype. The row's width is `x.shape[1]` (an array carries its shape):
on a launch where the tile fits the row (`COLS <= x.shape[1]`, and as many rows as blocks),
the compiler drops the masks, the loads' and the `where`'s alike."""
import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def layernorm(x, w, b, out, eps, COLS: vg.constexpr):
    r = tile.bid(0)
    n = x.shape[1]
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(vg.float32)
    mean = tile.sum(t) / n
    xc = tile.where(tile.arange(COLS) < n, t - mean, 0.0)
    rstd = tile.rsqrt(tile.sum(xc * xc) / n + eps)
    y = xc * rstd * tile.load(w, index=(0,), shape=(COLS,)).astype(vg.float32) \
        + tile.load(b, index=(0,), shape=(COLS,)).astype(vg.float32)
    tile.store(out, index=(r, 0), tile=y.astype(out.dtype))


def reference(x, w, b, eps):
    x = x.astype(np.float64)
    xc = x - x.mean(1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(1, keepdims=True) + eps) * w.astype(np.float64) + b


def check(rng, rows=8, cols=1000, tile_cols=1024, eps=1e-5):
    from verdigris.examples import Result

    x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    out = vg.asarray(np.full_like(x, np.nan))
    layernorm[rows](vg.asarray(x), vg.asarray(w), vg.asarray(b), out, np.float32(eps), COLS=tile_cols)
    return [Result(f"LayerNorm of {rows} rows of {cols} (tiles of {tile_cols})", np.asarray(out),
                   reference(x, w, b, eps), 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
