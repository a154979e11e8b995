"""The kernels of tests/test_specialize_paths.py on the GPU, against float64 NumPy, on the
device's own target and on sm_80 code: K loops inside a loop over panels and an if, and
with a counter stepped after them (on sm_90a warp-specialized, the producer running the
loops and ifs again, on a persistent grid of more tiles than multiprocessors, so that a
block's stages run on across its tiles), the unspecialized twin with a break, and a
product scattered before (or after) its whole-tile store (a TMA store behind a global
proxy fence, or a plain one)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_tile_mma import target  # noqa: F401 -- the fixture: native and sm_80
from tests.gpu.test_tile_gpu import run_both
from tests.test_norm_backward import relative_error
from tests.test_specialize_paths import (BK, BM, BN, panels, panels_with_break, scattered_then_stored,
                                         stepped_panels)
from verdigris.examples.tile_gemm import _narrow

pytestmark = pytest.mark.gpu

TILES = 2 * 132 + 5  # row tiles: more than an H100's or H200's multiprocessors, twice over


@pytest.mark.parametrize("kernel", [panels, stepped_panels, panels_with_break])
def test_k_loops_inside_loops_and_ifs(rng, target, kernel):  # noqa: F811
    k_tiles, count = 5, 2
    a, a64 = _narrow(rng, (TILES * BM, k_tiles * BK), "bfloat16")
    b, b64 = _narrow(rng, (k_tiles * BK, BN), "bfloat16")
    counts = np.array([count], np.int32)
    used = (count if kernel is panels_with_break else min(2 * count, k_tiles)) * BK
    got, cpu = run_both(kernel, TILES, dict(a=a, b=b, c=np.zeros((TILES * BM, BN), np.float32),
                                            counts=counts), ("c",))
    assert relative_error(got["c"], a64[:, :used] @ b64[:used]) < 1e-5
    assert relative_error(got["c"], cpu["c"]) < 1e-5


@pytest.mark.parametrize("split", [0, 1])
def test_a_product_scattered_and_stored(rng, target, split):  # noqa: F811
    """One tile (a.shape[0] < 2 * BM: the scatter runs), then many (it does not)."""
    for rows in (BM, TILES * BM):
        a, a64 = _narrow(rng, (rows, 3 * BK), "bfloat16")
        b, b64 = _narrow(rng, (3 * BK, BN), "bfloat16")
        got, _ = run_both(scattered_then_stored, rows // BM,
                          dict(a=a, b=b, c=np.zeros((rows, BN), np.float32), SPLIT=split), ("c",))
        assert relative_error(got["c"], a64 @ b64) < 1e-5
