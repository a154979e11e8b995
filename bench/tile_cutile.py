"""cuTile Python (`cuda.tile`) kernels for the tile track's memory-bound cases, in two
styles: a whole row as one tile (as its documentation writes them, cuTile choosing threads
and layouts), and, for the row kernels, the row in chunks of BLOCK columns read in passes
(as NVIDIA's TileGym writes them, which keeps a wide row out of a register-spill cliff).
The suite keeps the best of these and of a few `occupancy` hints, as it keeps Triton's
best warp count.

Loaded by bench/suite_tile.py only where cuda.tile is installed (on the H200 its wheel and
toolchain are carried; see bench/RESULTS.md). Each `launch_*` returns a function doing one
launch on torch's current stream with torch tensors. Tile shapes are powers of two, as
cuTile requires; the cases' sizes are multiples of them.
"""
from __future__ import annotations

import cuda.tile as ct
import torch

ConstInt = ct.Constant[int]


@ct.kernel
def add(a, b, out, TILE: ConstInt):
    i = ct.bid(0)
    x = ct.load(a, index=(i,), shape=(TILE,))
    y = ct.load(b, index=(i,), shape=(TILE,))
    ct.store(out, index=(i,), tile=x + y)


@ct.kernel
def softmax(x, out, COLS: ConstInt):
    r = ct.bid(0)
    t = ct.astype(ct.load(x, index=(r, 0), shape=(1, COLS)), ct.float32)
    e = ct.exp(t - ct.max(t, axis=1, keepdims=True))
    ct.store(out, index=(r, 0), tile=ct.astype(e / ct.sum(e, axis=1, keepdims=True), out.dtype))


@ct.kernel
def layernorm(x, w, b, out, eps: float, COLS: ConstInt):
    r = ct.bid(0)
    t = ct.astype(ct.load(x, index=(r, 0), shape=(1, COLS)), ct.float32)
    mean = ct.sum(t, axis=1, keepdims=True) / COLS
    xc = t - mean
    rstd = ct.rsqrt(ct.sum(xc * xc, axis=1, keepdims=True) / COLS + eps)
    y = xc * rstd * ct.astype(ct.load(w, index=(0,), shape=(COLS,)), ct.float32) \
        + ct.astype(ct.load(b, index=(0,), shape=(COLS,)), ct.float32)
    ct.store(out, index=(r, 0), tile=ct.astype(y, out.dtype))


@ct.kernel
def rmsnorm(x, w, out, eps: float, COLS: ConstInt):
    r = ct.bid(0)
    t = ct.astype(ct.load(x, index=(r, 0), shape=(1, COLS)), ct.float32)
    rstd = ct.rsqrt(ct.sum(t * t, axis=1, keepdims=True) / COLS + eps)
    y = t * rstd * ct.astype(ct.load(w, index=(0,), shape=(COLS,)), ct.float32)
    ct.store(out, index=(r, 0), tile=ct.astype(y, out.dtype))


@ct.kernel
def softmax_chunked(x, out, COLS: ConstInt, BLOCK: ConstInt):
    """Online softmax: one pass for the running maximum and rescaled sum, one to write."""
    r = ct.bid(0)
    m = ct.full((1, BLOCK), -float("inf"), ct.float32)
    s = ct.zeros((1, BLOCK), dtype=ct.float32)
    for j in range(COLS // BLOCK):
        t = ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32)
        grown = ct.maximum(m, t)
        s = s * ct.exp(m - grown) + ct.exp(t - grown)
        m = grown
    top = ct.max(m, axis=1, keepdims=True)
    total = ct.sum(s * ct.exp(m - top), axis=1, keepdims=True)
    for j in range(COLS // BLOCK):
        t = ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32)
        ct.store(out, index=(r, j), tile=ct.astype(ct.exp(t - top) / total, out.dtype))


@ct.kernel
def layernorm_chunked(x, w, b, out, eps: float, COLS: ConstInt, BLOCK: ConstInt):
    r = ct.bid(0)
    acc = ct.zeros((1, BLOCK), dtype=ct.float32)
    for j in range(COLS // BLOCK):
        acc += ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32)
    mean = ct.sum(acc, axis=1, keepdims=True) / COLS
    acc = ct.zeros((1, BLOCK), dtype=ct.float32)
    for j in range(COLS // BLOCK):
        xc = ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32) - mean
        acc += xc * xc
    rstd = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / COLS + eps)
    for j in range(COLS // BLOCK):
        xc = ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32) - mean
        y = xc * rstd * ct.astype(ct.load(w, index=(j,), shape=(BLOCK,)), ct.float32) \
            + ct.astype(ct.load(b, index=(j,), shape=(BLOCK,)), ct.float32)
        ct.store(out, index=(r, j), tile=ct.astype(y, out.dtype))


@ct.kernel
def rmsnorm_chunked(x, w, out, eps: float, COLS: ConstInt, BLOCK: ConstInt):
    r = ct.bid(0)
    acc = ct.zeros((1, BLOCK), dtype=ct.float32)
    for j in range(COLS // BLOCK):
        t = ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32)
        acc += t * t
    rstd = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / COLS + eps)
    for j in range(COLS // BLOCK):
        t = ct.astype(ct.load(x, index=(r, j), shape=(1, BLOCK)), ct.float32)
        y = t * rstd * ct.astype(ct.load(w, index=(j,), shape=(BLOCK,)), ct.float32)
        ct.store(out, index=(r, j), tile=ct.astype(y, out.dtype))


@ct.kernel
def row_sum(x, out, BLOCK: ConstInt):
    r = ct.bid(0)
    acc = ct.full((1, BLOCK), 0.0, ct.float32)
    for j in range(ct.num_tiles(x, axis=1, shape=(1, BLOCK))):
        acc += ct.load(x, index=(r, j), shape=(1, BLOCK))
    ct.store(out, index=(r,), tile=ct.sum(acc, axis=1))


@ct.kernel
def transpose(x, out, T: ConstInt):
    i, j = ct.bid(0), ct.bid(1)
    ct.store(out, index=(j, i), tile=ct.transpose(ct.load(x, index=(i, j), shape=(T, T))))


OCCUPANCY = (None, 2, 4)  # cuTile's hint: active blocks per SM (None: its own choice)
ROW_BLOCKS = (1024, 2048)  # the chunked row kernels' column chunks


def _hinted(kernel, occupancy):
    return kernel if occupancy is None else kernel.replace_hints(occupancy=occupancy)


def _launch(grid, kernel, *args):
    return lambda: ct.launch(torch.cuda.current_stream(), grid, kernel, args)


def _row_variants(whole, chunked, x, *args) -> dict:
    """label -> launch: the whole-row kernel under each occupancy hint, and the chunked one
    for each chunk width."""
    rows, cols = x.shape
    out = {f"whole row, occupancy {o or 'auto'}": _launch((rows,), _hinted(whole, o), x, *args,
                                                          cols) for o in OCCUPANCY}
    out.update({f"chunks of {block}": _launch((rows,), chunked, x, *args, cols, block)
                for block in ROW_BLOCKS if cols % block == 0})
    return out


def launch_add(a, b, out, tile: int):
    return _launch((a.numel() // tile,), add, a, b, out, tile)


def softmax_variants(x, out) -> dict:
    return _row_variants(softmax, softmax_chunked, x, out)


def layernorm_variants(x, w, b, out, eps: float) -> dict:
    return _row_variants(layernorm, layernorm_chunked, x, w, b, out, eps)


def rmsnorm_variants(x, w, out, eps: float) -> dict:
    return _row_variants(rmsnorm, rmsnorm_chunked, x, w, out, eps)


def launch_row_sum(x, out, block: int):
    return _launch((x.shape[0],), row_sum, x, out, block)


def launch_transpose(x, out, tile: int):
    return _launch((x.shape[0] // tile, x.shape[1] // tile), transpose, x, out, tile)
