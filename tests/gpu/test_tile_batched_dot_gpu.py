"""Batched (3-d) tile.dot / tile.mma (tests/test_tile_batched_dot.py) on the GPU against float64
NumPy, on the device's own target and on sm_80 code: a batch with a shared operand, both
operands batched, the accumulator of a batch of one shared, and a K loop carrying the
batch's accumulators."""
from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_tile_mma import target  # noqa: F401 -- the fixture: native and sm_80
from tests.gpu.test_tile_gpu import run_both
from test_tile_batched_dot import batched, batched_k_loop, operands

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("ba,bb,bc,acc", [(3, 0, 1, True), (0, 4, 1, False), (2, 2, 2, True),
                                          (1, 4, 1, True)])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_batches(rng, target, ba, bb, bc, acc, dtype):  # noqa: F811
    m, n, k = 64, 64, 32
    a, b = operands(rng, ba, bb, m, n, k, dtype)
    c = rng.standard_normal((bc, m, n)).astype(np.float32)
    got, _ = run_both(batched, 1, dict(a=a, b=b, c=c, out=np.zeros((max(ba, bb), m, n), np.float32),
                                       BA=ba, BB=bb, BC=bc, M=m, N=n, K=k, ACC=acc), ("out",))
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)) + (c if acc else 0)
    np.testing.assert_allclose(got["out"], want, rtol=1e-4, atol=1e-3)


def test_a_k_loop_over_batches(rng, target):  # noqa: F811
    a = rng.standard_normal((8, 64, 300)).astype(np.float16)
    b = rng.standard_normal((300, 64)).astype(np.float16)
    got, _ = run_both(batched_k_loop, 4, dict(a=a, b=b, out=np.zeros((8, 64, 64), np.float32), BT=2,
                                              M=64, N=64, BK=64), ("out",))
    np.testing.assert_allclose(got["out"], np.matmul(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-4, atol=1e-3)
