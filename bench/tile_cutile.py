"""cuTile Python (`cuda.tile`) kernels for the tile track's memory-bound cases, written the
way its documentation writes them: one block per tile, cuTile choosing threads and layouts.

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


def _launch(grid, kernel, *args):
    return lambda: ct.launch(torch.cuda.current_stream(), grid, kernel, args)


def launch_add(a, b, out, tile: int):
    return _launch((a.numel() // tile,), add, a, b, out, tile)


def launch_softmax(x, out):
    return _launch((x.shape[0],), softmax, x, out, x.shape[1])


def launch_layernorm(x, w, b, out, eps: float):
    return _launch((x.shape[0],), layernorm, x, w, b, out, eps, x.shape[1])


def launch_rmsnorm(x, w, out, eps: float):
    return _launch((x.shape[0],), rmsnorm, x, w, out, eps, x.shape[1])


def launch_row_sum(x, out, block: int):
    return _launch((x.shape[0],), row_sum, x, out, block)


def launch_transpose(x, out, tile: int):
    return _launch((x.shape[0] // tile, x.shape[1] // tile), transpose, x, out, tile)
