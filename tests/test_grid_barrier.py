"""`simt.grid_barrier()`: every thread of the grid waits for all the others.

What it promises: Laplace's iterations (Jacobi sweeps: read grid A, write grid B, grid
barrier, the other way round) give the float64 reference's values on the cpu backend, and
the race checker proves them race-free across blocks; each racy twin is refused with two
threads of different blocks named: no grid barrier at all, or only one of the two a sweep
needs. A grid barrier some threads of the grid may skip (under a condition on the block,
on shared memory or on a value loaded per block, in a loop whose trip count differs
between blocks, after a `return` of some threads) is refused (VG210) at its line, and the
cpu backend stops at one it meets that way; one under a value loaded for the whole grid is
proven, so iterations until a flag says the values are still stop together. Values pass
between blocks across a grid barrier (atomic counts read plainly, one thread's store read
by another block's thread). The code is cooperative groups' grid sync (ptxas on sm_80 and
sm_90a); the cooperative launch path is in test_grid_barrier_launch.py (fake driver), the
GPU's run in tests/gpu/test_grid_barrier_gpu.py.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, safety, simt
from verdigris.cpu import run_simt
from verdigris.errors import DivergenceError

from located import assert_points_at

BLOCK = (16, 8)


@simt.kernel
def jacobi_sweeps(a, b, sweeps):
    """`sweeps` Jacobi sweeps of Laplace's equation on a plate with fixed edges: b from a,
    then a from b (b's edges must hold a's)."""
    i = simt.global_id(1)
    j = simt.global_id(0)
    inside = i > 0 and i < a.shape[0] - 1 and j > 0 and j < a.shape[1] - 1
    for _ in range(sweeps):
        if inside:
            b[i, j] = 0.25 * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
        simt.grid_barrier()
        if inside:
            a[i, j] = 0.25 * (b[i - 1, j] + b[i + 1, j] + b[i, j - 1] + b[i, j + 1])
        simt.grid_barrier()


@simt.kernel
def jacobi_sweeps_racy(a, b, sweeps):
    i = simt.global_id(1)
    j = simt.global_id(0)
    inside = i > 0 and i < a.shape[0] - 1 and j > 0 and j < a.shape[1] - 1
    for _ in range(sweeps):
        if inside:
            b[i, j] = 0.25 * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
        if inside:
            a[i, j] = 0.25 * (b[i - 1, j] + b[i + 1, j] + b[i, j - 1] + b[i, j + 1])


@simt.kernel
def jacobi_sweeps_one_barrier(a, b, sweeps):
    """The barrier between a sweep's write of `a` and the next sweep's reads of it is missing."""
    i = simt.global_id(1)
    j = simt.global_id(0)
    inside = i > 0 and i < a.shape[0] - 1 and j > 0 and j < a.shape[1] - 1
    for _ in range(sweeps):
        if inside:
            b[i, j] = 0.25 * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])  # next read
        simt.grid_barrier()
        if inside:
            a[i, j] = 0.25 * (b[i - 1, j] + b[i + 1, j] + b[i, j - 1] + b[i, j + 1])


@simt.kernel
def rod_sweeps(a, b, sweeps):
    """The same on a rod, each thread taking every (grid size)-th point: any grid covers it."""
    n = a.shape[0]
    stride = simt.grid_dim(0) * simt.block_dim(0)
    for _ in range(sweeps):
        for i in range(simt.global_id(0) + 1, n - 1, stride):
            b[i] = 0.5 * (a[i - 1] + a[i + 1])
        simt.grid_barrier()
        for i in range(simt.global_id(0) + 1, n - 1, stride):
            a[i] = 0.5 * (b[i - 1] + b[i + 1])
        simt.grid_barrier()


def plate(rng, rows, cols):
    """A plate of random values and its partner, poisoned inside, holding its edges."""
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    b = np.full_like(a, np.nan)
    b[[0, -1], :], b[:, [0, -1]] = a[[0, -1], :], a[:, [0, -1]]
    return a, b


def jacobi_reference(a, sweeps: int) -> tuple:
    """(a, b) after `sweeps` sweeps, in float64."""
    a, b = a.astype(np.float64), a.astype(np.float64)
    for _ in range(sweeps):
        b[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
        a[1:-1, 1:-1] = 0.25 * (b[:-2, 1:-1] + b[2:, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:])
    return a, b


def grid_for(shape) -> tuple:
    return (-(-shape[1] // BLOCK[0]), -(-shape[0] // BLOCK[1]))


def test_laplace_iterations_match_the_float64_reference(rng):
    a, b = plate(rng, 37, 45)  # blocks at both edges are partly outside the plate
    want_a, want_b = jacobi_reference(a, 6)
    jacobi_sweeps[grid_for(a.shape), BLOCK](a, b, 6)
    np.testing.assert_allclose(a, want_a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, want_b, rtol=1e-5, atol=1e-5)


def test_a_grid_stride_loop_between_grid_barriers_covers_any_grid(rng):
    n = 1000
    a = rng.standard_normal(n).astype(np.float32)
    b = np.full_like(a, np.nan)
    b[[0, -1]] = a[[0, -1]]
    ref_a, ref_b = a.astype(np.float64), a.astype(np.float64)
    for _ in range(5):
        ref_b[1:-1] = 0.5 * (ref_a[:-2] + ref_a[2:])
        ref_a[1:-1] = 0.5 * (ref_b[:-2] + ref_b[2:])
    rod_sweeps[3, 64](a, b, 5)  # 192 threads for 998 points
    np.testing.assert_allclose(a, ref_a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, ref_b, rtol=1e-5, atol=1e-5)


def test_the_cpu_backend_refuses_a_grid_no_gpu_holds_at_once(rng):
    a = rng.standard_normal(1000).astype(np.float32)
    before = a.copy()
    with pytest.raises(vg.LaunchError) as info:
        rod_sweeps[8193, 64](a, a.copy(), 1)  # 524352 threads
    assert "grid has 524352 threads, more than any GPU holds at once (524288)" in str(info.value)
    np.testing.assert_array_equal(a, before)
    rod_sweeps[8192, 64](a, np.full_like(a, np.nan), 0)  # the most


def specialized(kernel, shape=(37, 45), block=BLOCK):
    a = np.zeros(shape, np.float32)
    return kernel.specialize(a, a.copy(), 3, block=block)


def test_the_checker_proves_the_sweeps_race_free():
    for kernel, shape, block in ((jacobi_sweeps, (37, 45), BLOCK), (rod_sweeps, (1000,), (64,))):
        analysis = safety.analyze(specialized(kernel, shape, block))
        assert not analysis.errors, analysis.errors[0]


def _blocks_named(err) -> list:
    return re.findall(r"thread \(block (\(\d+, \d+\)|\d+), thread", str(err))


@pytest.mark.parametrize("kernel", [jacobi_sweeps_racy, jacobi_sweeps_one_barrier])
def test_a_sweep_missing_a_grid_barrier_is_refused_naming_two_threads(kernel):
    with pytest.raises(vg.SafetyError) as info:
        specialized(kernel)
    err = info.value
    assert err.code in ("VG202", "VG203"), err
    assert len(_blocks_named(err)) == 2, str(err)
    if kernel is jacobi_sweeps_one_barrier:  # the threads meet only across blocks
        one, two = _blocks_named(err)
        assert one != two, str(err)
        assert_points_at(err, "# next read", __file__)


@pytest.mark.parametrize("kernel", [jacobi_sweeps_racy, jacobi_sweeps_one_barrier])
def test_the_cpu_backend_observes_the_race_of_a_missing_grid_barrier(rng, kernel):
    a, b = plate(rng, 37, 45)
    with pytest.raises(vg.SafetyError) as info:
        run_simt(built(kernel, a.shape), grid_for(a.shape) + (1,), BLOCK + (1,),
                 {"a": a, "b": b, "sweeps": 3})
    assert info.value.code in ("VG202", "VG203") and "observed while running" in str(info.value)


@simt.kernel
def barrier_of_some_blocks(x, out):
    i = simt.global_id(0)
    if simt.block_id(0) > 0:
        simt.grid_barrier()  # some blocks
    out[i] = x[i]


@simt.kernel
def barrier_after_some_returned(x, out):
    i = simt.global_id(0)
    if i >= x.shape[0]:
        return
    out[i] = x[i]
    simt.grid_barrier()  # after a return
    out[i] += 1


@simt.kernel
def barrier_in_a_loop_per_block(x, out):
    i = simt.global_id(0)
    for _ in range(simt.block_id(0)):
        simt.grid_barrier()  # per-block trips
    out[i] = x[i]


@simt.kernel
def barrier_under_a_value_loaded_per_block(x, out):
    i = simt.global_id(0)
    if x[simt.block_id(0)] > 0:
        simt.grid_barrier()  # loaded condition
    out[i] = x[i]


@simt.kernel
def barrier_under_a_value_from_shared_memory(x, out):
    i = simt.global_id(0)
    first = simt.shared.array(1, vg.float32)
    if simt.thread_id(0) == 0:
        first[0] = x[0]
    simt.barrier()
    if first[0] > 0:
        simt.grid_barrier()  # shared condition
    out[i] = x[i]


@simt.kernel
def barrier_under_one_value_for_the_grid(x, out):
    i = simt.global_id(0)
    if x[0] > 0:  # x[0] is one value for every thread: nothing writes it
        simt.grid_barrier()
    out[i] = x[i]


@pytest.mark.parametrize("kernel, marker", [
    (barrier_of_some_blocks, "# some blocks"), (barrier_after_some_returned, "# after a return"),
    (barrier_in_a_loop_per_block, "# per-block trips"),
    (barrier_under_a_value_loaded_per_block, "# loaded condition"),
    (barrier_under_a_value_from_shared_memory, "# shared condition")])
def test_a_grid_barrier_some_threads_may_skip_is_refused(kernel, marker):
    x = np.zeros(256, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        kernel[2, 128](x, x.copy())
    err = info.value
    assert err.code == "VG210" and "grid_barrier()" in str(err), str(err)
    assert "threads of the grid" in str(err) and "grid_barrier()" in err.hint, str(err)
    assert_points_at(err, marker, __file__)


@simt.kernel
def trips_per_thread(x, out):
    i = simt.global_id(0)
    for _ in range(simt.thread_id(0) % 2 + 1):
        simt.grid_barrier()  # per-thread trips
    out[i] = x[i]


@simt.kernel
def break_per_block(x, out):
    i = simt.global_id(0)
    for r in range(4):
        if simt.block_id(0) == r:
            break  # per-block break
        simt.grid_barrier()
    out[i] = x[i]


def test_a_grid_barrier_under_one_loaded_value_for_the_whole_grid_is_proven(rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.full_like(x, np.nan)
    barrier_under_one_value_for_the_grid[2, 128](x, out)
    np.testing.assert_array_equal(out, x)


@simt.kernel
def relax_until_still(a, b, diff, still, tol, most):
    """Laplace's iterations on a rod until no point moves by `tol` (at most `most` sweeps):
    thread 0 finds the largest move and says whether to stop, for everyone to read."""
    i = simt.global_id(0)
    n = a.shape[0]
    inside = 0 < i < n - 1
    for _ in range(most):
        if inside:
            b[i] = 0.5 * (a[i - 1] + a[i + 1])
            diff[i] = abs(b[i] - a[i])
        simt.grid_barrier()
        if i == 0:
            largest = vg.float32(0.0)
            for j in range(1, n - 1):
                largest = max(largest, diff[j])
            still[0] = 1 if largest < tol else 0
        simt.grid_barrier()
        if still[0] != 0:
            break
        if inside:
            a[i] = b[i]
        simt.grid_barrier()


@simt.kernel
def relax_until_a_block_says(a, b, most):
    i = simt.global_id(0)
    inside = 0 < i < a.shape[0] - 1
    flag = simt.shared.array(1, vg.int32)
    for _ in range(most):
        if inside:
            b[i] = 0.5 * (a[i - 1] + a[i + 1])
        if simt.thread_id(0) == 0:
            flag[0] = simt.block_id(0)
        simt.barrier()
        if flag[0] != 0:
            break  # per-block flag
        simt.grid_barrier()


def test_iterations_until_convergence_stop_together(rng):
    n, tol = 20, np.float32(1e-2)  # 36 to 393 sweeps (2000 seeds), on two blocks of 16 threads
    a = rng.standard_normal(n).astype(np.float32)
    b, diff = np.full_like(a, np.nan), np.zeros_like(a)
    b[[0, -1]] = a[[0, -1]]
    want, sweeps = a.copy(), 0
    while sweeps < 1000:  # the reference: the kernel's float32 steps, so its very decisions
        sweeps += 1
        nxt = want.copy()
        nxt[1:-1] = np.float32(0.5) * (want[:-2] + want[2:])
        if np.abs(nxt - want)[1:-1].max() < tol:
            break
        want = nxt
    assert 10 < sweeps < 1000
    still = np.zeros(1, np.int32)
    relax_until_still[2, 16](a, b, diff, still, tol, 1000)
    assert still[0] == 1
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b[1:-1], nxt[1:-1])
    with pytest.raises(vg.SafetyError) as info:
        relax_until_a_block_says[2, 16](a, b, 10)
    assert info.value.code == "VG210"
    assert_points_at(info.value, "# per-block flag", __file__)


@pytest.mark.parametrize("kernel, marker", [(trips_per_thread, "# per-thread trips"),
                                            (break_per_block, "# per-block break")])
def test_a_loop_around_a_grid_barrier_must_run_alike_in_the_whole_grid(kernel, marker):
    x = np.zeros(256, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        kernel[2, 128](x, x.copy())
    assert info.value.code == "VG210" and "grid_barrier()" in str(info.value), str(info.value)
    assert_points_at(info.value, marker, __file__)


@simt.kernel
def grid_barriers_that_may_not_run(a, out, rounds):
    i = simt.global_id(0)
    if i < a.shape[0]:
        a[i] = 1.0
    for _ in range(rounds):
        simt.grid_barrier()
    if i + 1 < a.shape[0]:
        out[i] = a[i + 1]  # after rounds = 0


@simt.kernel
def block_barrier_after_a_grid_barrier(a, out):
    i = simt.global_id(0)
    simt.grid_barrier()
    if i < a.shape[0]:
        a[i] = 1.0
    simt.barrier()
    if i + 1 < a.shape[0]:
        out[i] = a[i + 1]  # a block barrier orders one block only


@pytest.mark.parametrize("kernel, args, marker", [
    (grid_barriers_that_may_not_run, (3,), "# after rounds = 0"),
    (block_barrier_after_a_grid_barrier, (), "# a block barrier orders one block only")])
def test_what_no_grid_barrier_separates_across_blocks_is_a_race(kernel, args, marker):
    a = np.zeros(256, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        kernel[2, 128](a, a.copy(), *args)
    err = info.value
    assert err.code == "VG203" and len(set(_blocks_named(err))) == 2, str(err)
    assert_points_at(err, marker, __file__)


@simt.kernel
def counts_then_reads(keys, counts, out):
    """Atomic counts, a grid barrier, plain reads of the counts (a sessionization's first
    steps): the reads come after every count."""
    i = simt.global_id(0)
    if i < keys.shape[0]:
        simt.atomic_add(counts, keys[i], 1)
    simt.grid_barrier()
    if i < keys.shape[0]:
        out[i] = counts[keys[i]]


@simt.kernel
def counts_and_reads(keys, counts, out):
    i = simt.global_id(0)
    if i < keys.shape[0]:
        simt.atomic_add(counts, keys[i], 1)
        out[i] = counts[keys[i]]  # while others count


def test_atomics_before_a_grid_barrier_are_done_for_plain_reads_after_it(rng):
    keys = rng.integers(0, 7, 1000).astype(np.int32)
    counts, out = np.zeros(7, np.int32), np.full(1000, -1, np.int32)
    counts_then_reads[8, 128](keys, counts, out)
    np.testing.assert_array_equal(counts, np.bincount(keys, minlength=7))
    np.testing.assert_array_equal(out, counts[keys])
    with pytest.raises(vg.SafetyError) as info:
        counts_and_reads[8, 128](keys, np.zeros(7, np.int32), out)
    assert info.value.code in ("VG204", "VG205"), str(info.value)


@simt.kernel
def handoff(x, out):
    i = simt.global_id(0)
    if i == 0:
        out[0] = x[0]
    simt.grid_barrier()
    if i == 200:
        out[0] = out[0] + x[1]


@simt.kernel
def handoff_racy(x, out):
    i = simt.global_id(0)
    if i == 0:
        out[0] = x[0]  # before a block barrier only
    simt.barrier()
    if i == 200:
        out[0] = out[0] + x[1]


@simt.kernel
def shift_left_each_round(a, rounds):
    """Each round every element takes its right neighbour's value (the last keeps its own):
    all reads of a round, a grid barrier, all writes, a grid barrier."""
    i = simt.global_id(0)
    for _ in range(rounds):
        v = a[i]
        if i + 1 < a.shape[0]:
            v = a[i + 1]
        simt.grid_barrier()
        a[i] = v
        simt.grid_barrier()


def test_one_thread_hands_a_value_to_a_thread_of_another_block(rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.full(4, np.nan, np.float32)
    handoff[2, 128](x, out)
    assert out[0] == x[0] + x[1] and np.isnan(out[1:]).all()
    with pytest.raises(vg.SafetyError) as info:
        handoff_racy[2, 128](x, out)
    assert info.value.code == "VG202" and len(set(_blocks_named(info.value))) == 2
    assert_points_at(info.value, "# before a block barrier only", __file__)


def test_reads_and_writes_of_one_array_in_turn_between_grid_barriers(rng):
    a = rng.standard_normal(256).astype(np.float32)
    want = np.concatenate([a[3:], np.repeat(a[-1], 3)])
    shift_left_each_round[2, 128](a, 3)
    np.testing.assert_array_equal(a, want)


def test_the_cpu_backend_stops_at_a_grid_barrier_some_blocks_skip():
    x = np.zeros(256, np.float32)
    ir = built(barrier_of_some_blocks, x.shape, (128,))
    with pytest.raises(DivergenceError) as info:
        run_simt(ir, (2, 1, 1), (128, 1, 1), {"x": x, "out": x.copy()})
    assert "block (1, 0, 0) thread (0, 0, 0) reached grid_barrier()" in str(info.value)
    assert info.value.code == "VG210"


def built(kernel, shape=(37, 45), block=BLOCK):
    """The kernel's IR, not checked."""
    a = np.zeros(shape, np.float32)
    values = kernel.bind((a, a.copy(), 3)[:len(kernel.params)], {})
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), block + (1,)))


def test_only_a_kernel_that_calls_it_is_cooperative():
    assert built(jacobi_sweeps).cooperative
    assert not built(jacobi_sweeps_racy).cooperative


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_grid_barrier_is_cooperative_groups_grid_sync(target):
    ptx = codegen.compile_to_ptx(specialized(jacobi_sweeps), target).ptx
    assert ".global .align 4 .u32 vg_grid_arrivals;" in ptx
    # two barriers: each bar.sync, one arrival, a spin on the counter, two fences, bar.sync
    assert ptx.count("atom.relaxed.gpu.global.add.u32") == 2, ptx
    assert ptx.count("ld.relaxed.gpu.global.u32") == 2 and ptx.count("fence.acq_rel.gpu") == 4
    assert ptx.count("bar.sync") == 4
    assert codegen.assemble(ptx, target, optimize=False)[:4] == b"\x7fELF"
    plain = codegen.compile_to_ptx(built(jacobi_sweeps_racy), target).ptx
    assert "vg_grid_arrivals" not in plain


def test_one_thread_debugged_passes_its_grid_barriers(rng):
    a, b = plate(rng, 37, 45)
    before = a.copy()
    jacobi_sweeps.debug[grid_for(a.shape), BLOCK](a, b, 2, block_id=(1, 2), thread_id=(3, 4))
    i, j = 2 * BLOCK[1] + 4, 1 * BLOCK[0] + 3  # its element; nobody else wrote b (poisoned)
    assert np.isnan(b[1:-1, 1:-1]).sum() == 35 * 43 - 1
    neighbours = before[[i - 1, i + 1, i, i], [j, j, j - 1, j + 1]].astype(np.float64)
    np.testing.assert_allclose(b[i, j], 0.25 * neighbours.sum(), rtol=1e-6)
    assert np.isnan(a[i, j])  # from b's poisoned neighbours
    a[i, j] = before[i, j]
    np.testing.assert_array_equal(a, before)
