"""`simt.grid_barrier()` on the GPU: a cooperative launch (cuLaunchCooperativeKernel) of
Laplace's iterations gives the float64 reference's values (the kernels and references of
tests/test_grid_barrier.py, which the cpu backend meets too) with hundreds of blocks across
every multiprocessor, launch after launch (the arrival counter needs no reset); a grid as
large as the occupancy allows runs, and one block more is refused with a LaunchError naming
both numbers."""
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris.runtime import driver

import test_grid_barrier as gb

pytestmark = pytest.mark.gpu


def test_laplace_iterations_across_the_gpu(rng):
    a, b = gb.plate(rng, 250, 260)  # 17 x 32 blocks of 128 threads
    want_a, want_b = gb.jacobi_reference(a, 2 * 40)
    ga, gbuf = vg.asarray(a), vg.asarray(b)
    for _ in range(2):  # a second launch starts from the first's counter
        gb.jacobi_sweeps[gb.grid_for(a.shape), gb.BLOCK](ga, gbuf, 40)
    np.testing.assert_allclose(np.asarray(ga), want_a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gbuf), want_b, rtol=1e-4, atol=1e-5)


def rod(rng, n):
    a = rng.standard_normal(n).astype(np.float32)
    b = np.full_like(a, np.nan)
    b[[0, -1]] = a[[0, -1]]
    return a, b


def test_a_grid_larger_than_the_gpu_holds_at_once_is_refused_and_the_largest_runs(rng):
    a, b = rod(rng, 1 << 20)
    ga, gbuf = vg.asarray(a), vg.asarray(b)
    with pytest.raises(vg.LaunchError) as info:
        gb.rod_sweeps[100_000, 64](ga, gbuf, 3)
    message = str(info.value)
    assert "grid_barrier()" in message and "the grid has 100000 blocks" in message, message
    most, per_sm, sms = map(int, re.search(
        r"at most (\d+) blocks of 64 threads fit on this GPU at once \((\d+) per "
        r"multiprocessor x (\d+) multiprocessors", message).groups())
    assert most == per_sm * sms and sms == driver.properties(0).multiprocessors and per_sm >= 1
    with pytest.raises(vg.LaunchError, match=f"the grid has {most + 1} blocks"):
        gb.rod_sweeps[most + 1, 64](ga, gbuf, 3)
    np.testing.assert_array_equal(np.asarray(ga), a)  # nothing ran
    ref_a, ref_b = a.astype(np.float64), a.astype(np.float64)
    for _ in range(3):
        ref_b[1:-1] = 0.5 * (ref_a[:-2] + ref_a[2:])
        ref_a[1:-1] = 0.5 * (ref_b[:-2] + ref_b[2:])
    gb.rod_sweeps[most, 64](ga, gbuf, 3)
    np.testing.assert_allclose(np.asarray(ga), ref_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gbuf), ref_b, rtol=1e-5, atol=1e-6)


def test_launches_on_two_streams_do_not_share_the_counter_at_once(rng):
    plates = [gb.plate(rng, 120, 130) for _ in range(4)]
    wants = [gb.jacobi_reference(a, 25) for a, _ in plates]
    on_gpu = [(vg.asarray(a), vg.asarray(b)) for a, b in plates]
    streams = [vg.Stream(), vg.Stream()]
    for k, (ga, gbuf) in enumerate(on_gpu):  # each launch would fit beside the other
        gb.jacobi_sweeps[gb.grid_for(plates[k][0].shape), gb.BLOCK](ga, gbuf, 25,
                                                                    stream=streams[k % 2])
    vg.synchronize()
    for (ga, gbuf), (want_a, want_b) in zip(on_gpu, wants):
        np.testing.assert_allclose(np.asarray(ga), want_a, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(gbuf), want_b, rtol=1e-4, atol=1e-5)
