"""`vg.assume` on the GPU: a kernel proven under its fact runs and computes its result; a
launch that breaks the fact is refused before anything is enqueued, on the general path and
through the generated launcher; a tile kernel's fact over its grid likewise."""
import numpy as np
import pytest

import verdigris as vg
from tests.fakecuda.kernels import assumed_rows
from tests.safety.test_assume import copy_twice

pytestmark = pytest.mark.gpu


def test_rows_under_their_fact_run_and_a_breaking_launch_is_refused(rng):
    host = rng.random(100).astype(np.float32)
    x, out = vg.asarray(host), vg.asarray(np.full(800, np.nan, np.float32))
    for _ in range(3):  # general path, then the generated launcher
        assumed_rows[1, 128](x, out, 8, 5)
        with pytest.raises(vg.AssumptionError, match=r"m = 9, n = 8"):
            assumed_rows[1, 128](x, out, 8, 9)
    want = np.full((100, 8), np.nan, np.float32)
    want[:, :5] = host[:, None]
    assert np.array_equal(out.numpy().reshape(100, 8), want, equal_nan=True)


def test_a_tile_kernel_under_a_fact_over_its_grid(rng):
    host = rng.random(1024).astype(np.float32)
    x, out = vg.asarray(host), vg.asarray(np.full(2048, np.nan, np.float32))
    copy_twice[8](x, out, 1024, B=128)
    with pytest.raises(vg.AssumptionError, match=r"k = 1000"):
        copy_twice[8](x, out, 1000, B=128)
    assert np.array_equal(out.numpy(), np.concatenate([host, host]))
