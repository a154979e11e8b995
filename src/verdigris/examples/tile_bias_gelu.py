"""Fused bias + GELU (erf form) over 2-D tiles: one read of x, one write, the bias row
broadcast down the tile, the arithmetic in float32 whatever the storage dtype."""
import math

import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def bias_gelu(x, bias, out, R: vg.constexpr, C: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    t = tile.load(x, index=(i, j), shape=(R, C)).astype(vg.float32) \
        + tile.load(bias, index=(j,), shape=(C,)).astype(vg.float32)
    y = 0.5 * t * (1.0 + tile.erf(t * 0.7071067811865476))
    tile.store(out, index=(i, j), tile=y.astype(out.dtype))


def reference(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    t = x.astype(np.float64) + bias.astype(np.float64)
    return 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2)))


def check(rng, rows=20, cols=700, r=8, c=256):
    from verdigris.examples import Result

    x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    out = vg.asarray(np.full((rows, cols), np.nan, np.float32))
    bias_gelu[vg.cdiv(rows, r), vg.cdiv(cols, c)](vg.asarray(x), vg.asarray(bias), out, R=r, C=c)
    return [Result(f"GELU(x + bias) on {rows}x{cols} float32 in {r}x{c} tiles", np.asarray(out),
                   reference(x, bias), 2e-6)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
