"""Kernels for tests that run fresh processes against one disk cache (tests/test_warmup.py,
tests/test_records.py, tests/gpu/test_records_gpu.py): each test copies this file into its
own folder, so no other test's kernels are defined (or compiled) beside them. `SCALE` comes
from the environment: a changed global between processes."""
import math
import os

import verdigris as vg
from verdigris import simt, tile

SCALE = float(os.environ.get("SCALE", "1"))


@vg.func
def scaled(v):
    return v * SCALE


@simt.kernel
def axpy(alpha, x, y, out):
    """out = alpha * x + SCALE * y."""
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + scaled(y[i])


@tile.kernel
def add(a, b, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(a, index=(i,), shape=(BLOCK,))
               + tile.load(b, index=(i,), shape=(BLOCK,)))


@tile.kernel
def softmax(x, out, COLS: vg.constexpr):
    t = tile.load(x, index=(tile.bid(0), 0), shape=(1, COLS), padding=-math.inf)
    e = tile.exp(t - tile.max(t))
    tile.store(out, index=(tile.bid(0), 0), tile=e / tile.sum(e))
