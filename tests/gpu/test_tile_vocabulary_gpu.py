"""cuTile's spellings (tests/test_tile_vocabulary.py) on the GPU against the cpu backend on the
same inputs, bit for bit: arange of a dtype, num_tiles as a loop bound, transpose, 0-d loads
inside and outside the array, latency and allow_tma hints."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from tests.gpu.test_tile_gpu import run_both, same_bits
from test_tile_vocabulary import (corner_scaled, hinted, offsets, row_sums, running_elements,
                                  swapped, tma_hinted)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.float16, np.float32])
def test_arange_of_a_dtype(dtype):
    got, want = run_both(offsets, 3, dict(out=np.zeros(3 * 256, np.float64), start=5, B=256,
                                          DT=dtype), ("out",))
    same_bits(got["out"], want["out"])


@pytest.mark.parametrize("cols", [1, 64, 200])
def test_num_tiles_bounds_a_loop(cols, rng):
    x = rng.standard_normal((37, cols)).astype(np.float32)
    got, want = run_both(row_sums, vg.cdiv(37, 8), dict(x=x, out=np.zeros(37, np.float32),
                                                       BM=8, BK=64), ("out",))
    # the GPU's reduction order is not the cpu backend's: rounding to a few ulps of sum |x|
    assert np.all(np.abs(got["out"] - want["out"]) <= 4 * np.finfo(np.float32).eps * np.abs(x).sum(axis=1))


@pytest.mark.parametrize("method", [False, True])
def test_transpose(method, rng):
    x = rng.standard_normal((50, 70)).astype(np.float32)
    got, want = run_both(swapped, (vg.cdiv(50, 16), vg.cdiv(70, 32)),
                         dict(x=x, out=np.zeros((70, 50), np.float32), BM=16, BN=32,
                              METHOD=method), ("out",))
    same_bits(got["out"], want["out"])


def test_0d_loads_inside_and_outside(rng):
    x = rng.standard_normal(6 * 32).astype(np.float32)
    scale = rng.standard_normal((4, 5)).astype(np.float32)
    got, want = run_both(corner_scaled, 6, dict(x=x, scale=scale, out=np.zeros(6 * 32, np.float32),
                                                pad=-2.5, B=32), ("out",))
    same_bits(got["out"], want["out"])


def test_0d_loads_in_a_loop_and_a_helper(rng):
    x = rng.standard_normal(4 * 16).astype(np.float32)
    w = rng.standard_normal(5).astype(np.float32)
    got, want = run_both(running_elements, 4, dict(x=x, w=w, out=np.zeros(4 * 16, np.float32),
                                                   B=16, STEPS=3), ("out",))
    same_bits(got["out"], want["out"])


def test_latency_hints(rng):
    x = rng.standard_normal(100).astype(np.float32)
    got, want = run_both(hinted, 4, dict(x=x, out=np.zeros(100, np.float32), B=32, L=4), ("out",))
    same_bits(got["out"], want["out"])


@pytest.mark.parametrize("allow_tma", [None, True, False])
def test_allow_tma_hints(allow_tma, rng):
    x = rng.standard_normal(100).astype(np.float32)
    got, want = run_both(tma_hinted, 4, dict(x=x, out=np.zeros(100, np.float32), B=32,
                                             TMA=allow_tma), ("out",))
    same_bits(got["out"], want["out"])
