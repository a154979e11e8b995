"""rounding_mode= / flush_to_zero= (tests/test_tile_rounding.py) on the GPU against the cpu
backend on the same inputs: round to nearest bit for bit, "full" and "approx" within a few
ulps (the cpu computes the IEEE result), `.ftz` flushing subnormals to a zero of their sign."""
from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_tile_gpu import run_both, same_bits
from test_tile_rounding import (MODES, TINY, normalized, powers_of_two, quotients, roots,
                                simt_roots)

pytestmark = pytest.mark.gpu

ULPS = 4 * np.finfo(np.float32).eps  # approx and full: within 2 ulps by PTX's manual


def _exact(mode) -> bool:
    return mode in (None, "rn")


@pytest.mark.parametrize("mode, ftz", MODES)
def test_division_modes(mode, ftz, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    y = (rng.standard_normal(1000) + 3).astype(np.float32)
    got, want = run_both(quotients, 8, dict(x=x, y=y, out=np.zeros(1000, np.float32), B=128,
                                           MODE=mode, FTZ=ftz), ("out",))
    if _exact(mode):
        same_bits(got["out"], want["out"])
    else:
        np.testing.assert_allclose(got["out"], want["out"], rtol=ULPS)


@pytest.mark.parametrize("mode, ftz", [m for m in MODES if m[0] not in ("full", "FULL")])
def test_sqrt_modes(mode, ftz, rng):
    x = rng.uniform(0, 100, 1000).astype(np.float32)
    got, want = run_both(roots, 8, dict(x=x, out=np.zeros(1000, np.float32), B=128, MODE=mode,
                                       FTZ=ftz), ("out",))
    if _exact(mode):
        same_bits(got["out"], want["out"])
    else:
        np.testing.assert_allclose(got["out"], want["out"], rtol=ULPS)


@pytest.mark.parametrize("ftz", [False, True])
def test_exp2(ftz, rng):
    x = rng.uniform(-100, 100, 1000).astype(np.float32)
    got, want = run_both(powers_of_two, 8, dict(x=x, out=np.zeros(1000, np.float32), B=128,
                                               FTZ=ftz), ("out",))
    np.testing.assert_allclose(got["out"], want["out"], rtol=ULPS)


@pytest.mark.parametrize("mode", [None, "rn", "full", "approx"])
def test_flush_to_zero_flushes_as_the_cpu_does(mode):
    x = np.array([TINY / 4, -TINY / 4, TINY * 4, 1.0, -TINY * 4, 3.0, 0.0, -0.0], np.float32)
    y = np.array([1.0, 1.0, 16.0, 1.0, 8.0, 3.0, 1.0, 1.0], np.float32)
    got, want = run_both(quotients, 1, dict(x=x, y=y, out=np.zeros(8, np.float32), B=8,
                                           MODE=mode, FTZ=True), ("out",))
    np.testing.assert_array_equal(np.signbit(got["out"]), np.signbit(want["out"]))
    np.testing.assert_allclose(got["out"], want["out"], rtol=0 if _exact(mode) else ULPS, atol=0)


def test_flushed_exp2_of_a_subnormal_result():
    x = np.array([-130.0, -149.0, -120.0, 0.0], np.float32)  # ex2.approx: near, not exact
    got, want = run_both(powers_of_two, 1, dict(x=x, out=np.zeros(4, np.float32), B=4, FTZ=True),
                         ("out",))
    assert list(got["out"][:2]) == [0, 0] and list(want["out"][:2]) == [0, 0]
    np.testing.assert_allclose(got["out"], want["out"], rtol=ULPS, atol=0)


def test_simt_sqrt_approx(rng):
    x = rng.uniform(0, 10, 1000).astype(np.float32)
    got, want = run_both(simt_roots, (8, 128), dict(x=x, out=np.zeros(1000, np.float32)), ("out",))
    np.testing.assert_allclose(got["out"], want["out"], rtol=ULPS)


def test_scalar_modes_in_a_tile_kernel(rng):
    x = rng.uniform(0.1, 1, 4 * 64).astype(np.float32)
    got, want = run_both(normalized, 4, dict(x=x, out=np.zeros(4 * 64, np.float32), B=64), ("out",))
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-5)  # the sums add in another order
