"""Atomics on the GPU against the cpu backend: a histogram, max/min, compare-and-swap."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.runtime import backend

pytestmark = pytest.mark.gpu


@simt.kernel
def histogram(x, weights, counts, sums):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(counts, x[i], 1)
        simt.atomic_add(sums, x[i], weights[i])


@simt.kernel
def extremes(x, bins, hi, lo, ihi, ilo):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_max(hi, bins[i], x[i])
        simt.atomic_min(lo, bins[i], x[i])
        simt.atomic_max(ihi, bins[i], simt.global_id(0))
        simt.atomic_min(ilo, bins[i], -simt.global_id(0))


@simt.kernel
def lock_free_max(x, best):
    i = simt.global_id(0)
    if i < x.shape[0]:
        v = x[i]
        seen = simt.atomic_add(best, 0, 0.0)  # an atomic read
        while seen < v:
            before = simt.atomic_cas(best, 0, seen, v)
            if before == seen:
                break
            seen = before


@simt.kernel
def half_sums(x, bins, sums16, sumsbf):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(sums16, bins[i], x[i])
        simt.atomic_add(sumsbf, bins[i], x[i])


def on_both(kernel, grid, block, *arrays):
    """Runs on the GPU and on the cpu backend from the same inputs; returns both results."""
    gpu = [vg.asarray(a) for a in arrays]
    kernel[grid, block](*gpu)
    gpu = [g.numpy() for g in gpu]
    backend.set_backend("cpu")
    try:
        cpu = [a.copy() for a in arrays]
        kernel[grid, block](*cpu)
    finally:
        backend.set_backend("cuda")
    return gpu, cpu


def test_histogram_matches_cpu(rng):
    n, bins = (1 << 20) + int(rng.integers(1, 999)), int(rng.integers(20, 300))
    x = rng.integers(0, bins, n).astype(np.int32)
    weights = rng.standard_normal(n).astype(np.float32)
    gpu, cpu = on_both(histogram, vg.cdiv(n, 256), 256, x, weights, np.zeros(bins, np.int64),
                       np.zeros(bins, np.float32))
    np.testing.assert_array_equal(gpu[2], cpu[2])
    np.testing.assert_array_equal(gpu[2], np.bincount(x, minlength=bins))
    ref = np.bincount(x, weights.astype(np.float64), bins)
    np.testing.assert_allclose(gpu[3], ref, rtol=1e-3, atol=1e-2)  # float adds in any order


def test_max_min_match_cpu(rng):
    n, bins = 200_000, 37
    x = rng.standard_normal(n).astype(np.float32)
    b = rng.integers(0, bins, n).astype(np.int64)
    gpu, cpu = on_both(extremes, vg.cdiv(n, 256), 256, x, b, np.full(bins, -np.inf, np.float32),
                       np.full(bins, np.inf, np.float32), np.zeros(bins, np.int64),
                       np.zeros(bins, np.int64))
    for g, c in zip(gpu[2:], cpu[2:]):
        np.testing.assert_array_equal(g, c)


def test_cas_max_matches_cpu(rng):
    n = 100_000
    x = rng.standard_normal(n).astype(np.float32)
    gpu, cpu = on_both(lock_free_max, vg.cdiv(n, 256), 256, x, np.full(1, -np.inf, np.float32))
    assert gpu[1][0] == cpu[1][0] == x.max()


def test_half_precision_adds(rng):
    n, bins = 4096, 8
    x = rng.integers(-4, 5, n).astype(np.float32)  # small integers: every order sums exactly
    b = rng.integers(0, bins, n).astype(np.int64)
    gpu = [vg.asarray(a) for a in (x, b)]
    s16, sbf = vg.zeros(bins, vg.float16), vg.zeros(bins, vg.bfloat16)
    half_sums[vg.cdiv(n, 256), 256](gpu[0], gpu[1], s16, sbf)
    want = np.bincount(b, x.astype(np.float64), bins)
    np.testing.assert_array_equal(s16.numpy().astype(np.float64), want)
    bits = sbf.numpy().view(np.uint16).astype(np.uint32) << 16  # ml_dtypes or raw bits
    np.testing.assert_array_equal(bits.view(np.float32).astype(np.float64), want)
