"""Row softmax: one pass when a row fits in one tile (`softmax`), and an online softmax
for rows up to 64K wide (`softmax_online`: a running maximum and rescaled running sum per
column position, one reduction at the end, then a second pass that normalizes)."""
import math

import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def softmax(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS), padding=-math.inf).astype(vg.float32)
    e = tile.exp(t - tile.max(t))
    tile.store(out, index=(r, 0), tile=(e * (1.0 / tile.sum(e))).astype(out.dtype))


@tile.kernel
def softmax_online(x, out, BLOCK: vg.constexpr):
    r = tile.bid(0)
    chunks = (x.shape[1] + BLOCK - 1) // BLOCK
    m = tile.full((1, BLOCK), -math.inf, vg.float32)  # running max of each column position
    s = tile.zeros((1, BLOCK), vg.float32)  # running sum of exp(x - m) there
    for c in range(chunks):
        t = tile.load(x, index=(r, c), shape=(1, BLOCK), padding=-math.inf).astype(vg.float32)
        new_m = tile.maximum(m, t)
        empty = new_m == -math.inf  # nothing but padding so far: exp(-inf - -inf) is NaN
        s = s * tile.where(empty, 1.0, tile.exp(m - new_m)) + tile.where(empty, 0.0, tile.exp(t - new_m))
        m = new_m
    row_max = tile.max(m)
    inv = 1.0 / tile.sum(s * tile.exp(m - row_max))
    for c in range(chunks):
        t = tile.load(x, index=(r, c), shape=(1, BLOCK), padding=-math.inf).astype(vg.float32)
        tile.store(out, index=(r, c), tile=(tile.exp(t - row_max) * inv).astype(out.dtype))


def reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def check(rng, rows=8, cols=1000, wide=65536, block=8192):
    from verdigris.examples import Result

    results = []
    x = (3 * rng.standard_normal((rows, cols))).astype(np.float32)
    out = vg.asarray(np.full_like(x, np.nan))
    softmax[rows](vg.asarray(x), out, COLS=cols)
    results.append(Result(f"softmax of {rows} rows of {cols:,} (one pass)", np.asarray(out), reference(x), 1e-5))
    x = (3 * rng.standard_normal((2, wide - 5))).astype(np.float32)
    out = vg.asarray(np.full_like(x, np.nan))
    softmax_online[2](vg.asarray(x), out, BLOCK=block)
    results.append(Result(f"online softmax of 2 rows of {wide - 5:,} in chunks of {block}", np.asarray(out),
                          reference(x), 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
