"""LayerNorm over rows, forward and backward.

`layernorm`: mean, variance (of the centred row, masked past the row's end when the tile is
wider), scale by the weight, shift by the bias; float32 arithmetic whatever the storage
dtype. The row's width is `x.shape[1]` (an array carries its shape): on a launch where the
tile fits the row (`COLS <= x.shape[1]`, and as many rows as blocks), the compiler drops the
masks, the loads' and the `where`'s alike.

For training: `layernorm_forward` is `layernorm` that also saves each row's mean and rstd
(1 / sqrt(variance + eps)), and `layernorm_backward` takes them back with dy to give dx and
each block's partial sums of dweight and dbias over its ROWS rows, which
`tile_column_sums.column_sums` adds up in a fixed order: the weight gradients are
deterministic, with no float atomic. `launch_layernorm_backward` runs both passes; given
`dsum`, the gradient x gets along a residual stream, it adds it into dx in the same kernel
(`verdigris.ops.residual`), so the two gradients of x take no pass of their own to sum, and
can sum dx's columns too (that layer's bias gradient) in the same pass. The
training kernels compute in the dtype of the saved statistics (forward) and of the partial
sums (backward): float32 for narrow inputs, float64 to check gradients in float64."""
import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples.tile_column_sums import launch_column_sums


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


@tile.kernel
def layernorm_forward(x, w, b, out, mean, rstd, eps, COLS: vg.constexpr = 1024):
    # layernorm's statistics, written out rather than shared through a helper: an inlined
    # helper's two reductions share one scratch buffer behind an extra barrier (the PTX
    # differs), and layernorm is tuned to Triton's line
    r = tile.bid(0)
    n = x.shape[1]
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(mean.dtype)
    mu = tile.sum(t) / n
    xc = tile.where(tile.arange(COLS) < n, t - mu, 0.0)
    s = tile.rsqrt(tile.sum(xc * xc) / n + eps)
    y = xc * s * tile.load(w, index=(0,), shape=(COLS,)).astype(mean.dtype) \
        + tile.load(b, index=(0,), shape=(COLS,)).astype(mean.dtype)
    tile.store(out, index=(r, 0), tile=y.astype(out.dtype))
    tile.store(mean, index=(r,), tile=tile.full((1,), mu, mean.dtype))
    tile.store(rstd, index=(r,), tile=tile.full((1,), s, rstd.dtype))


@tile.kernel
def layernorm_backward(dy, x, w, mean, rstd, dx, dw_partial, db_partial, dsum, dx_partial,
                       ROWS: vg.constexpr = 16, COLS: vg.constexpr = 1024,
                       PLUS_DSUM: vg.constexpr = False, SUM_DX: vg.constexpr = False):
    # Block `blk` owns rows blk*ROWS ... blk*ROWS + ROWS - 1 and row `blk` of the partials.
    # Past the last row and the row's end every load gives 0, so those lanes add nothing.
    # With PLUS_DSUM, dx also gets dsum (x's gradient along the residual stream) before its
    # one rounding; without, dsum is never read (the launcher passes dy) and the code is
    # the plain backward's. With SUM_DX, dx_partial's row `blk` gets the column sums of the
    # block's dx as stored (rounded): the first pass of the bias gradient of the layer
    # whose output x is; without, dx_partial is never touched (the launcher passes dy).
    blk = tile.bid(0)
    n = x.shape[1]
    dw = tile.zeros((1, COLS), dw_partial.dtype)
    db = tile.zeros((1, COLS), dw_partial.dtype)
    if SUM_DX:
        dxs = tile.zeros((1, COLS), dw_partial.dtype)
    for i in range(ROWS):
        r = int(blk) * ROWS + i  # int64: blk * ROWS would wrap in int32 on a huge grid
        s = tile.load(rstd, index=(r,), shape=())
        xhat = (tile.load(x, index=(r, 0), shape=(1, COLS)).astype(dw_partial.dtype)
                - tile.load(mean, index=(r,), shape=())) * s
        g = tile.load(dy, index=(r, 0), shape=(1, COLS)).astype(dw_partial.dtype)
        # the weight is loaded again for each row (from cache) rather than kept: one row tile
        # less held across the loop, so that 16 warps fit a row of 8192 in 128 registers
        gw = g * tile.load(w, index=(0,), shape=(COLS,)).astype(dw_partial.dtype)
        dxhat_mean = tile.sum(gw) / n
        dxhat_xhat_mean = tile.sum(gw * xhat) / n
        g_x = (gw - dxhat_mean - xhat * dxhat_xhat_mean) * s
        if PLUS_DSUM:
            g_x = g_x + tile.load(dsum, index=(r, 0), shape=(1, COLS)).astype(dw_partial.dtype)
        stored = g_x.astype(dx.dtype)
        tile.store(dx, index=(r, 0), tile=stored)
        dw += g * xhat
        db += g
        if SUM_DX:
            dxs += stored.astype(dw_partial.dtype)
    tile.store(dw_partial, index=(blk, 0), tile=dw)
    tile.store(db_partial, index=(blk, 0), tile=db.astype(db_partial.dtype))
    if SUM_DX:
        tile.store(dx_partial, index=(blk, 0), tile=dxs)


def tile_cols(cols: int) -> int:
    """The row tile: the power of two at or above the row's width."""
    return 1 << max(int(cols) - 1, 0).bit_length()


def rows_per_block(rows: int, cols: int) -> int:
    """Rows each backward block takes: a power of two, so that about 256 blocks run (few
    enough that the partial sums stay small beside the inputs), 512 for rows of a tile of
    1024 or fewer columns (bench/norm_backward.py, H100: at 8192 x 768, 16 rows a block
    0.80 TB/s against 0.71 at 32; 16384 x 8192 was tuned at 256)."""
    blocks = 512 if tile_cols(cols) <= 1024 else 256
    return tile_cols(vg.cdiv(int(rows), blocks))


def launch_layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, dw_partial, db_partial, ROWS,
                              dsum=None, dx_sums=None, dx_partial=None, **launch):
    """dx, dw, db from dy and the forward's saved mean and rstd: the backward kernel on
    (rows / ROWS) blocks, each writing its row of the partials ((blocks, cols) arrays in
    the arithmetic dtype), then their column sums into dw and db. Given dsum (shaped as x:
    the gradient x gets from its other use, a residual stream's), dx is dsum plus the
    norm's gradient, added in the same kernel. Given dx_sums (cols,) and dx_partial (a
    third such partials array), dx_sums gets dx's column sums (the bias gradient of the
    layer that made x) from partials the same kernel writes: no pass over dx of its own."""
    blocks, cols = dw_partial.shape
    layernorm_backward[blocks](dy, x, w, mean, rstd, dx, dw_partial, db_partial,
                               dy if dsum is None else dsum, dy if dx_sums is None else dx_partial,
                               ROWS=ROWS, COLS=tile_cols(cols), PLUS_DSUM=dsum is not None,
                               SUM_DX=dx_sums is not None, **launch)
    launch_column_sums(dw_partial, dw)
    launch_column_sums(db_partial, db)
    if dx_sums is not None:
        launch_column_sums(dx_partial, dx_sums)


def reference(x, w, b, eps):
    x = x.astype(np.float64)
    xc = x - x.mean(1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(1, keepdims=True) + eps) * w.astype(np.float64) + b


def reference_backward(dy, x, w, eps):
    """dx, dw, db in float64 (the textbook formulas)."""
    dy, x, w = (a.astype(np.float64) for a in (dy, x, w))
    rstd = 1 / np.sqrt(x.var(1, keepdims=True) + eps)
    xhat = (x - x.mean(1, keepdims=True)) * rstd
    g = dy * w
    dx = rstd * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))
    return dx, (dy * xhat).sum(0), dy.sum(0)


def check(rng, rows=8, cols=1000, tile_cols=1024, eps=1e-5, train=(37, 300)):
    from verdigris.examples import Result

    x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    out = vg.asarray(np.full_like(x, np.nan))
    layernorm[rows](vg.asarray(x), vg.asarray(w), vg.asarray(b), out, np.float32(eps), COLS=tile_cols)
    return [Result(f"LayerNorm of {rows} rows of {cols} (tiles of {tile_cols})", np.asarray(out),
                   reference(x, w, b, eps), 1e-5)] + check_training(rng, *train, eps)


def check_training(rng, rows, cols, eps):
    """The forward that saves mean and rstd, and the backward on blocks of 4 rows (the last
    one short when rows is not a multiple of 4), float32, against float64."""
    from verdigris.examples import Result, on_backend

    x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    out, dx = (np.full_like(x, np.nan) for _ in range(2))
    mean, rstd = (np.full(rows, np.nan, np.float32) for _ in range(2))
    out, mean, rstd = on_backend(layernorm_forward[rows], x, w, b, out, mean, rstd, np.float32(eps),
                                 COLS=tile_cols(cols))[3:6]
    ROWS = 4
    partials = [np.full((vg.cdiv(rows, ROWS), cols), np.nan, np.float32) for _ in range(2)]
    dw, db = (np.full(cols, np.nan, np.float32) for _ in range(2))
    dx, dw, db = on_backend(launch_layernorm_backward, dy, x, w, mean, rstd, dx, dw, db, *partials,
                            ROWS=ROWS)[5:8]
    x64 = x.astype(np.float64)
    want_dx, want_dw, want_db = reference_backward(dy, x, w, eps)
    name = f"{rows} rows of {cols}"
    return [Result(f"LayerNorm forward (saving mean, rstd) of {name}", out, reference(x, w, b, eps), 1e-5),
            Result(f"LayerNorm saved mean of {name}", mean, x64.mean(1), 1e-5),
            Result(f"LayerNorm saved rstd of {name}", rstd, 1 / np.sqrt(x64.var(1) + eps), 1e-5),
            Result(f"LayerNorm backward dx of {name}", dx, want_dx, 1e-5),
            Result(f"LayerNorm backward dweight of {name}", dw, want_dw, 1e-5),
            Result(f"LayerNorm backward dbias of {name}", db, want_db, 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
