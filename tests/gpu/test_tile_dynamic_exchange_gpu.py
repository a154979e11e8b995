"""Tile operations whose shared buffers are dynamic shared memory past 48 KiB
(tests/test_tile_dynamic_exchange.py) on the GPU against the cpu backend on the same
inputs: two buffers (a transpose, a concatenation), one buffer with a barrier after each
use (a concatenation of 128 KB), the buffers after a matrix product's part, and repeated
launches (the generated launcher must give the dynamic shared memory too). Sorts stage
at most 16 KB at a time and reductions and scans a few words per warp: none of theirs is
past 48 KiB."""
from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_tile_gpu import close, run_both, same_bits
from test_tile_dynamic_exchange import product_then_cat, transposed
from test_tile_pieces import joined

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("r,c", [(128, 64), (128, 128)])  # two buffers of 66 KB; one of 132 KB
def test_cat(r, c, rng):
    x = rng.standard_normal((r, c)).astype(np.float32)
    y = rng.standard_normal((r, c)).astype(np.float32)
    for _ in range(3):  # the general path, then the generated launcher
        got, want = run_both(joined, 1, dict(x=x, y=y, out=np.zeros((r, 2 * c), np.float32), R=r, CX=c,
                                             CY=c, AXIS=1), ("out",))
        same_bits(got["out"], want["out"])
        same_bits(got["out"], np.concatenate([x, y], 1))


def test_transpose(rng):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    for _ in range(3):
        got, want = run_both(transposed, 1, dict(x=x, out=np.zeros((128, 128), np.float32), R=128, C=128),
                             ("out",))
        same_bits(got["out"], want["out"])
        same_bits(got["out"], x.T * 2)


def test_after_a_products_part(rng):
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    got, want = run_both(product_then_cat, 1, dict(a=a, b=b, c=np.zeros((64, 64), np.float32), x=x,
                                                   out=np.zeros((64, 112), np.float32), R=64, C=64),
                         ("c", "out"))
    same_bits(got["out"], np.concatenate([x, x[:, 16:]], 1))
    close(got["c"], a.astype(np.float64) @ b.astype(np.float64), 1e-5)
