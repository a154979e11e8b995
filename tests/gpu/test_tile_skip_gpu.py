"""Scatters and gathers that skip the lanes outside the array (`skip_out_of_bounds=True`)
on the GPU: the same outputs as the cpu backend and NumPy (outputs poisoned first), no
fault recorded for a skipped lane, and the default still a bounds fault at the next
synchronization."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris.runtime import backend
from safety.tile_pairs import skipping_odd_lanes, skipping_past_the_end, skipping_loaded_slots_unsafe
from tests.gpu.test_tile_gpu import run_both
from tile_skip_kernels import (copy_rows_skipping, count_and_max_per_slot, gather_tokens,
                               reverse_faulting, reverse_skipping, slots_with_padding)

pytestmark = pytest.mark.gpu


def test_skipping_scatters_write_only_the_lanes_inside(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    gpu, cpu = run_both(reverse_skipping, vg.cdiv(1000, 128), dict(x=x, out=x.copy(), B=128), ("out",))
    np.testing.assert_array_equal(gpu["out"], x[::-1])
    np.testing.assert_array_equal(cpu["out"], x[::-1])
    x = rng.standard_normal((50, 70)).astype(np.float32)
    gpu, cpu = run_both(copy_rows_skipping, vg.cdiv(50, 8), dict(x=x, out=x.copy(), R=8, C=128), ("out",))
    np.testing.assert_array_equal(gpu["out"], x)
    np.testing.assert_array_equal(cpu["out"], x)
    vg.synchronize()  # no fault was recorded


@pytest.mark.parametrize("kernel,size", [(skipping_odd_lanes, 500), (skipping_past_the_end, 1000)])
def test_padding_lanes_at_minus_one_and_past_the_end(rng, kernel, size):
    x = rng.standard_normal(1000).astype(np.float32)
    gpu, cpu = run_both(kernel, vg.cdiv(1000, 96), dict(x=x, out=np.zeros(size, np.float32), B=96), ("out",))
    want = x[::2] if size == 500 else x
    np.testing.assert_array_equal(gpu["out"], want)
    np.testing.assert_array_equal(cpu["out"], want)


def test_dispatch_count_and_gather_by_slots(rng):
    tokens, slots = 1000, 300
    x = rng.standard_normal(tokens).astype(np.float32)
    chosen = slots_with_padding(rng, tokens, slots)
    inside = (chosen >= 0) & (chosen < slots)
    gpu, cpu = run_both(skipping_loaded_slots_unsafe, vg.cdiv(tokens, 128),
                        dict(x=x, slots=chosen, out=np.zeros(slots, np.float32), B=128), ("out",))
    want = np.empty(slots, np.float32)
    want[chosen[inside]] = x[inside]
    np.testing.assert_array_equal(gpu["out"], want)
    np.testing.assert_array_equal(cpu["out"], want)
    repeated = rng.integers(-3, 40, tokens)
    gpu, cpu = run_both(count_and_max_per_slot, vg.cdiv(tokens, 300),
                        dict(x=x, slots=repeated, counts=np.zeros(37, np.int32),
                             best=np.zeros(37, np.float32), B=300), ("counts", "best"))
    kept = (repeated >= 0) & (repeated < 37)
    best = np.full(37, -7.0)  # the poison
    np.maximum.at(best, repeated[kept], x[kept].astype(np.float64))
    for got in (gpu, cpu):
        np.testing.assert_array_equal(got["counts"], np.bincount(repeated[kept], minlength=37) - 7)
        np.testing.assert_array_equal(got["best"], best.astype(np.float32))
    gpu, cpu = run_both(gather_tokens, vg.cdiv(tokens, 128),
                        dict(x=x[:slots].copy(), slots=chosen, out=x.copy(), B=128), ("out",))
    want = np.where(inside, x[np.clip(chosen, 0, slots - 1)], -1.0).astype(np.float32)
    np.testing.assert_array_equal(gpu["out"], want)
    np.testing.assert_array_equal(cpu["out"], want)


def test_without_the_option_a_lane_outside_is_still_a_bounds_fault(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    backend.set_backend("cuda")
    out = vg.asarray(np.zeros(1000, np.float32))
    reverse_faulting[vg.cdiv(1000, 128)](vg.asarray(x), out, B=128)
    with pytest.raises(vg.BoundsError, match=r"out\[.+\] with shape \(1000,\) in kernel reverse_faulting"):
        vg.synchronize()
    np.testing.assert_array_equal(out.numpy(), x[::-1])  # the faulting lanes were skipped
