"""RMSNorm over rows, forward and backward.

`rmsnorm`: x / sqrt(mean(x^2) + eps) * weight, float32 arithmetic whatever the storage
dtype. The row's width is `x.shape[1]` (an array carries its shape).

For training: `rmsnorm_forward` is `rmsnorm` that also saves each row's rstd
(1 / sqrt(mean(x^2) + eps)), and `rmsnorm_backward` takes it back with dy to give dx and
each block's partial sums of dweight over its ROWS rows, which
`tile_column_sums.column_sums` adds up in a fixed order (deterministic, no float atomic);
`launch_rmsnorm_backward` runs both passes. The training kernels compute in the dtype of
the saved rstd (forward) and of the partial sums (backward): float32 for narrow inputs,
float64 to check gradients in float64."""
import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples.tile_column_sums import launch_column_sums
from verdigris.examples.tile_layernorm import tile_cols


@tile.kernel
def rmsnorm(x, w, out, eps, COLS: vg.constexpr):
    r = tile.bid(0)
    n = x.shape[1]
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(vg.float32)
    rstd = tile.rsqrt(tile.sum(t * t) / n + eps)
    y = t * rstd * tile.load(w, index=(0,), shape=(COLS,)).astype(vg.float32)
    tile.store(out, index=(r, 0), tile=y.astype(out.dtype))


@tile.kernel
def rmsnorm_forward(x, w, out, rstd, eps, COLS: vg.constexpr = 1024):
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(rstd.dtype)
    s = tile.rsqrt(tile.sum(t * t) / x.shape[1] + eps)
    y = t * s * tile.load(w, index=(0,), shape=(COLS,)).astype(rstd.dtype)
    tile.store(out, index=(r, 0), tile=y.astype(out.dtype))
    tile.store(rstd, index=(r,), tile=tile.full((1,), s, rstd.dtype))


@tile.kernel
def rmsnorm_backward(dy, x, w, rstd, dx, dw_partial, ROWS: vg.constexpr = 16,
                     COLS: vg.constexpr = 1024):
    # Block `blk` owns rows blk*ROWS ... blk*ROWS + ROWS - 1 and row `blk` of the partials.
    # Past the last row and the row's end every load gives 0, so those lanes add nothing.
    blk = tile.bid(0)
    n = x.shape[1]
    dw = tile.zeros((1, COLS), dw_partial.dtype)
    for i in range(ROWS):
        r = int(blk) * ROWS + i  # int64: blk * ROWS would wrap in int32 on a huge grid
        s = tile.load(rstd, index=(r,), shape=())
        xhat = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(dw_partial.dtype) * s
        g = tile.load(dy, index=(r, 0), shape=(1, COLS)).astype(dw_partial.dtype)
        # the weight is loaded again for each row (from cache) rather than kept: one row tile
        # less held across the loop, so that 16 warps fit a row of 8192 in 128 registers
        gw = g * tile.load(w, index=(0,), shape=(COLS,)).astype(dw_partial.dtype)
        dxhat_xhat_mean = tile.sum(gw * xhat) / n
        tile.store(dx, index=(r, 0), tile=((gw - xhat * dxhat_xhat_mean) * s).astype(dx.dtype))
        dw += g * xhat
    tile.store(dw_partial, index=(blk, 0), tile=dw)


def launch_rmsnorm_backward(dy, x, w, rstd, dx, dw, dw_partial, ROWS, **launch):
    """dx and dw from dy and the forward's saved rstd: the backward kernel on (rows / ROWS)
    blocks, each writing its row of the partials (a (blocks, cols) array in the arithmetic
    dtype), then their column sums into dw."""
    blocks, cols = dw_partial.shape
    rmsnorm_backward[blocks](dy, x, w, rstd, dx, dw_partial, ROWS=ROWS, COLS=tile_cols(cols),
                             **launch)
    launch_column_sums(dw_partial, dw)


def reference(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(1, keepdims=True) + eps) * w.astype(np.float64)


def reference_backward(dy, x, w, eps):
    """dx and dw in float64."""
    dy, x, w = (a.astype(np.float64) for a in (dy, x, w))
    rstd = 1 / np.sqrt((x * x).mean(1, keepdims=True) + eps)
    xhat = x * rstd
    g = dy * w
    return rstd * (g - xhat * (g * xhat).mean(1, keepdims=True)), (dy * xhat).sum(0)


def check(rng, rows=8, cols=1000, tile_cols=1024, eps=1e-5, train=(37, 300)):
    from verdigris.examples import Result

    x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    out = vg.asarray(np.full_like(x, np.nan))
    rmsnorm[rows](vg.asarray(x), vg.asarray(w), out, np.float32(eps), COLS=tile_cols)
    return [Result(f"RMSNorm of {rows} rows of {cols} (tiles of {tile_cols})", np.asarray(out),
                   reference(x, w, eps), 1e-5)] + check_training(rng, *train, eps)


def check_training(rng, rows, cols, eps):
    """The forward that saves rstd, and the backward on blocks of 4 rows (the last one
    short when rows is not a multiple of 4), float32, against float64."""
    from verdigris.examples import Result, on_backend

    x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    out, dx = (np.full_like(x, np.nan) for _ in range(2))
    rstd = np.full(rows, np.nan, np.float32)
    out, rstd = on_backend(rmsnorm_forward[rows], x, w, out, rstd, np.float32(eps),
                           COLS=tile_cols(cols))[2:4]
    ROWS = 4
    partial = np.full((vg.cdiv(rows, ROWS), cols), np.nan, np.float32)
    dw = np.full(cols, np.nan, np.float32)
    dx, dw = on_backend(launch_rmsnorm_backward, dy, x, w, rstd, dx, dw, partial, ROWS=ROWS)[4:6]
    x64 = x.astype(np.float64)
    want_dx, want_dw = reference_backward(dy, x, w, eps)
    name = f"{rows} rows of {cols}"
    return [Result(f"RMSNorm forward (saving rstd) of {name}", out, reference(x, w, eps), 1e-5),
            Result(f"RMSNorm saved rstd of {name}", rstd, 1 / np.sqrt((x64 * x64).mean(1) + eps), 1e-5),
            Result(f"RMSNorm backward dx of {name}", dx, want_dx, 1e-5),
            Result(f"RMSNorm backward dweight of {name}", dw, want_dw, 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
