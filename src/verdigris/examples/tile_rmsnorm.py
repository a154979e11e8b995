"""RMSNorm forward over rows: x / sqrt(mean(x^2) + eps) * weight, float32 arithmetic
whatever the storage dtype. The row's width is `x.shape[1]` (an array carries its shape)."""
import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def rmsnorm(x, w, out, eps, COLS: vg.constexpr):
    r = tile.bid(0)
    n = x.shape[1]
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(vg.float32)
    rstd = tile.rsqrt(tile.sum(t * t) / n + eps)
    y = t * rstd * tile.load(w, index=(0,), shape=(COLS,)).astype(vg.float32)
    tile.store(out, index=(r, 0), tile=y.astype(out.dtype))


def reference(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(1, keepdims=True) + eps) * w.astype(np.float64)


def check(rng, rows=8, cols=1000, tile_cols=1024, eps=1e-5):
    from verdigris.examples import Result

    x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    out = vg.asarray(np.full_like(x, np.nan))
    rmsnorm[rows](vg.asarray(x), vg.asarray(w), out, np.float32(eps), COLS=tile_cols)
    return [Result(f"RMSNorm of {rows} rows of {cols} (tiles of {tile_cols})", np.asarray(out),
                   reference(x, w, eps), 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
