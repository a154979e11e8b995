"""The static checker on threads that work together (tests/safety/shared_pairs.py), and its
rules one by one: which conditions around barriers and warp operations are uniform, how
barriers order shared and global memory, loops whose iterations cross barriers, shared
atomics, reads of unwritten shared memory, and the proof cost.

Every racy kernel of `SHARED_PAIRS` is refused at its launch with its code, at the line
marked `# refused here`, before memory is touched; every fixed twin is accepted and
computes its reference on the cpu backend.
"""
from __future__ import annotations

import inspect
import re
import time

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt
from verdigris.safety import diagnose

from .shared_pairs import SHARED_PAIRS
from .test_static import fresh

IDS = [p.name for p in SHARED_PAIRS]
THREAD = r"thread \(block [^)]*\)?, thread [^)]*\)?\)"


def marked_line(kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return next(first + n for n, text in enumerate(lines) if "# refused here" in text)


def analyze(kernel, *args, block=(64, 1, 1), grid=None, **kwargs):
    k = fresh(kernel)
    values = k.bind(args, kwargs)
    return safety.analyze(k.build(k.spec_key(values, k.describe_args(values), block, grid)))


def test_the_suite_covers_every_cooperation_code():
    assert {p.code for p in SHARED_PAIRS} >= {"VG204", "VG210", "VG211", "VG212", "VG213", "VG214"}
    assert len(set(IDS)) == len(IDS) >= 15


@pytest.mark.parametrize("pair", SHARED_PAIRS, ids=IDS)
def test_racy_kernel_is_refused_at_its_line_before_memory_is_touched(pair, rng):
    grid, block, args, kwargs = pair.make(rng)
    before = [a.copy() for a in args]
    with pytest.raises(vg.SafetyError) as info:
        fresh(pair.racy)[grid, block](*args, **kwargs)
    err = info.value
    assert (err.code, err.loc.line) == (pair.code, marked_line(pair.racy)), str(err)
    for was, now in zip(before, args):
        np.testing.assert_array_equal(now, was)
    text = str(err)
    assert re.search(r"\n    .*\n    *\^", text) and "hint:" in text, text
    threads = re.findall(THREAD, text)
    assert len(threads) == (1 if pair.code == "VG213" else 2), text
    if pair.code not in ("VG210", "VG214"):
        assert re.search(r"\w+\[\d+(, \d+)*\]", text), text  # the element
    assert all(re.search(r"block 0\b|block \(0, 0\)", t) for t in threads), text  # one block


@pytest.mark.parametrize("pair", SHARED_PAIRS, ids=IDS)
def test_fixed_kernel_is_accepted_and_right(pair, rng):
    grid, block, args, kwargs = pair.make(rng)
    want = pair.reference(tuple(a.copy() for a in args))
    kernel = fresh(pair.fixed)
    block3 = tuple(block) + (1,) * (3 - len(block))
    analysis = analyze(pair.fixed, *args, block=block3, **kwargs)
    assert not analysis.errors, analysis.errors[0]
    kernel[grid, block](*args, **kwargs)
    for position, expected in want.items():
        np.testing.assert_allclose(args[position], expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- uniformity


@simt.kernel
def uniform_conditions(x, out, n, scale, FLAG: vg.constexpr):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    if FLAG:  # a constexpr
        simt.barrier()
    if n > 3 and scale > 0.5:  # scalar arguments, int and float
        simt.barrier()
    if simt.block_id(0) % 2 == 0:  # the block's id
        simt.barrier()
    if simt.block_dim(0) >= 64:
        simt.barrier()
    for k in range(n):  # a loop over a uniform bound, and its counter
        if k % 2 == 1:
            simt.barrier()
    if x[simt.block_id(0)] > 0.0:  # a value loaded at the same index by the whole block
        simt.barrier()
    simt.barrier()
    out[i] = buf[63 - t]


@simt.kernel
def early_return_of_idle_threads(x, out):
    buf = simt.shared.array(64, vg.float32)
    i = simt.global_id(0)
    if i >= x.shape[0]:
        return
    buf[simt.thread_id(0)] = x[i]
    simt.barrier()  # the returned threads never arrive
    out[i] = buf[simt.thread_id(0)]


@simt.kernel
def early_return_of_idle_blocks(x, out):
    buf = simt.shared.array(64, vg.float32)
    if simt.block_id(0) * 64 >= x.shape[0]:
        return  # the whole block leaves: fine
    i = simt.global_id(0)
    buf[simt.thread_id(0)] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    if i < x.shape[0]:
        out[i] = buf[63 - simt.thread_id(0)]


@simt.kernel
def break_by_one_thread(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for k in range(4):
        buf[t] = v
        simt.barrier()
        v = buf[63 - t]
        simt.barrier()
        if v > 100.0:
            break  # threads leave the loop at different iterations
    out[i] = v


@simt.kernel
def barrier_on_a_local_value(x, out):
    own = simt.local.array(2, vg.int32)
    i = simt.global_id(0)
    own[0] = simt.thread_id(0)
    if own[0] > 5:  # one index, but each thread's own array
        simt.barrier()
    out[i] = x[i]


@simt.kernel
def barrier_per_thread_loop(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    for k in range(t % 3):  # the trip count differs between threads
        simt.barrier()
    out[i] = buf[t]


F32 = np.zeros(256, np.float32)


def test_block_uniform_conditions_around_barriers_are_accepted():
    for flag in (True, False):
        result = analyze(uniform_conditions, F32, F32, 5, 1.0, FLAG=flag)
        assert not result.errors, result.errors[0]
    result = analyze(early_return_of_idle_blocks, F32, F32)
    assert not result.errors, result.errors[0]


@pytest.mark.parametrize("kernel, where", [
    (early_return_of_idle_threads, "simt.barrier()  # the returned threads never arrive"),
    (break_by_one_thread, "break  # threads leave the loop at different iterations"),
    (barrier_per_thread_loop, "simt.barrier()"),
    (barrier_on_a_local_value, "simt.barrier()"),
])
def test_thread_dependent_paths_to_a_barrier_are_refused(kernel, where):
    errors = analyze(kernel, F32, F32).errors
    assert errors and errors[0].code == "VG210", errors
    lines, first = inspect.getsourcelines(kernel.fn)
    assert lines[errors[0].loc.line - first].strip() == where
    assert "reaches it and" in errors[0].message


@simt.kernel
def warp_uniform_shuffles(x, out):
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    warp = t // 32
    if warp == 1:  # the same for the 32 lanes of a warp
        v = simt.shfl_xor(v, 1)
    if simt.ballot(v > 0.0) != 0:  # a vote is the same on every lane
        v = simt.shfl_down(v, 2)
    if simt.any_(v > 1.0):
        v += simt.shfl_idx(v, 0)
    if simt.shfl_idx(v, 0) > 0.0:  # lane 0's value, on every lane
        simt.syncwarp()
    out[i] = v


@simt.kernel
def syncwarp_for_half_a_warp(x, out):
    i = simt.global_id(0)
    v = x[i]
    if simt.lane_id() < 16:
        simt.syncwarp()
    out[i] = v


@simt.kernel
def shuffle_after_data_dependent_exit(x, out):
    i = simt.global_id(0)
    v = x[i]
    if v < 0.0:
        return
    out[i] = simt.shfl_down(v, 1)


def test_warp_operations_need_warp_uniform_conditions():
    result = analyze(warp_uniform_shuffles, F32, F32, block=(128, 1, 1))
    assert not result.errors, result.errors[0]
    for kernel in (syncwarp_for_half_a_warp, shuffle_after_data_dependent_exit):
        errors = analyze(kernel, F32, F32).errors
        assert [e.code for e in errors] == ["VG214"], errors
        assert "lanes of one warp" in errors[0].message
    # a warp-uniform condition is not block-uniform: a barrier under it is refused
    errors = analyze(warp_uniform_barrier, F32, F32, block=(128, 1, 1)).errors
    assert [e.code for e in errors] == ["VG210"], errors


@simt.kernel
def warp_uniform_barrier(x, out):
    i = simt.global_id(0)
    if simt.thread_id(0) // 32 == 1:
        simt.barrier()
    out[i] = x[i]


# ----------------------------------------------------------------------------- partial warps


@simt.kernel
def warp_sums_of_one_block(x, out, SHUFFLING: vg.constexpr):
    """Each warp of one block adds up its lanes' x; threads from SHUFFLING on keep their
    own. In a block of 40 threads, the last warp has 8 lanes."""
    t = simt.thread_id(0)
    v = x[t]
    if t < SHUFFLING:
        for k in range(5):
            v += simt.shfl_down(v, 16 >> k)  # refused here
    if simt.lane_id() == 0:
        out[t // 32] = v


@simt.kernel
def votes_of_a_2d_block(x, out):
    t = simt.thread_id(0) + simt.block_dim(0) * simt.thread_id(1)
    simt.syncwarp()
    out[t] = vg.float32(simt.ballot(x[t] > 0.0))


def test_a_shuffle_reading_a_lane_a_partial_warp_lacks_is_refused_before_memory_is_touched(rng):
    x, out = rng.standard_normal(40).astype(np.float32), np.full(2, -7, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        fresh(warp_sums_of_one_block)[1, 40](x, out, SHUFFLING=64)
    err = info.value
    assert (err.code, err.loc.line) == ("VG214", marked_line(warp_sums_of_one_block)), str(err)
    assert "thread (block 0, thread 3" in err.message and "last warp, which has 8 lanes" in err.message
    assert re.search(r"reads lane (\d+) with shfl_down\(\)", err.message), err.message
    assert 8 <= int(re.search(r"reads lane (\d+)", err.message)[1]) < 32
    assert err.hint == diagnose.HINTS["VG214 partial"] and "multiple of 32 threads" in err.hint
    np.testing.assert_array_equal(out, np.full(2, -7, np.float32))


@pytest.mark.parametrize("block, shuffling", [(64, 64), (40, 32)], ids=["whole warps", "guarded"])
def test_warp_operations_that_read_only_existing_lanes_are_accepted(rng, block, shuffling):
    """Votes and syncwarp() name only the lanes a partial warp has (as the GPU code's member
    mask does); a shuffle kept to whole warps reads only lanes that exist."""
    x, out = rng.standard_normal(block).astype(np.float32), np.full(2, -7, np.float32)
    fresh(warp_sums_of_one_block)[1, block](x, out, SHUFFLING=shuffling)
    want = [x[:32].astype(np.float64).sum(), x[32:].sum() if block == 64 else x[32]]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    for block2d in ((8, 4, 1), (10, 4, 1)):
        assert not analyze(votes_of_a_2d_block, F32, F32, block=block2d, grid=(1, 1, 1)).errors


def test_a_block_of_unknown_shape_is_assumed_to_be_whole_warps():
    """No launch runs this proof: each launch specializes the kernel on its block."""
    k = fresh(warp_sums_of_one_block)
    values = k.bind((F32, F32), {"SHUFFLING": 1024})
    result = safety.analyze(k.build(k.spec_key(values, k.describe_args(values), None, (1, 1, 1))))
    assert not result.errors and result.facts["whole_warps"], result.errors
    result = analyze(warp_sums_of_one_block, F32, F32, SHUFFLING=1024, grid=(1, 1, 1))
    assert not result.errors and not result.facts["whole_warps"], result.errors


# ----------------------------------------------------------------------------- ordering


@simt.kernel
def exchange_through_global(x, out, scratch):
    i = simt.global_id(0)
    t = simt.thread_id(0)
    scratch[i] = x[i] * 2
    simt.barrier()  # orders global memory within the block too
    out[i] = scratch[i - t + (t + 1) % 64]


@simt.kernel
def exchange_through_global_unordered(x, out, scratch):
    i = simt.global_id(0)
    t = simt.thread_id(0)
    scratch[i] = x[i] * 2
    out[i] = scratch[i - t + (t + 1) % 64]


@simt.kernel
def barrier_in_uniform_branch_of_a_loop(x, out, n):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for k in range(n):
        buf[t] = v
        if k % 2 == 0:
            simt.barrier()
            v = buf[63 - t]
        simt.barrier()
    out[i] = v


@simt.kernel
def barrier_every_other_iteration(x, out, n):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for k in range(n):
        buf[t] = v  # an odd iteration passes no barrier: this meets the reads after the last
        if k % 2 == 0:
            simt.barrier()
            v = buf[63 - t]
    out[i] = v


@simt.kernel
def nested_loops_with_barriers(x, out, n, m):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for a in range(n):
        for b in range(m):
            buf[t] = v + b
            simt.barrier()
            v = buf[(t + a) % 64]
            simt.barrier()
    out[i] = v


@simt.kernel
def nested_loops_missing_barrier(x, out, n, m):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for a in range(n):
        for b in range(m):
            buf[t] = v + b
            simt.barrier()
            v = buf[(t + a) % 64]
    out[i] = v


@simt.kernel
def read_after_loop_meets_last_iteration(x, out, n):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    simt.barrier()
    for k in range(n):
        simt.barrier()
        buf[t] = buf[t] + 1.0
    out[i] = buf[63 - t]  # no barrier after the loop's last write


@simt.kernel
def shared_atomics_and_atomics(x, out):
    counts = simt.shared.array(8, vg.int32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t < 8:
        counts[t] = 0
    simt.barrier()
    simt.atomic_add(counts, i % 8, 1)
    simt.atomic_max(counts, (i + 3) % 8, 5)
    simt.barrier()
    if t < 8:
        simt.atomic_add(out, t, counts[t])


@simt.kernel
def dynamic_shared_reversal(x, out):
    buf = simt.shared.dynamic(vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    simt.barrier()
    out[i] = buf[63 - t]


@simt.kernel
def dynamic_shared_reversal_racy(x, out):
    buf = simt.shared.dynamic(vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    out[i] = buf[63 - t]


@simt.kernel
def scan_double_buffered(x, out):  # one barrier per step: the buffers take turns
    buf = simt.shared.array((2, 64), vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[0, t] = x[i]
    simt.barrier()
    cur = 0
    offset = 1
    while offset < 64:
        nxt = 1 - cur
        buf[nxt, t] = buf[cur, t] + (buf[cur, t - offset] if t >= offset else vg.float32(0))
        simt.barrier()
        cur = nxt
        offset *= 2
    out[i] = buf[cur, t]


def test_barriers_order_the_threads_of_a_block():
    assert not analyze(scan_double_buffered, F32, F32).errors
    assert not analyze(exchange_through_global, F32, F32, F32).errors
    errors = analyze(exchange_through_global_unordered, F32, F32, F32).errors
    assert [e.code for e in errors] == ["VG203"] and "scratch[" in errors[0].message
    assert not analyze(barrier_in_uniform_branch_of_a_loop, F32, F32, 4).errors
    errors = analyze(barrier_every_other_iteration, F32, F32, 4).errors
    assert errors and errors[0].code == "VG211", errors
    assert not analyze(nested_loops_with_barriers, F32, F32, 3, 2).errors
    errors = analyze(nested_loops_missing_barrier, F32, F32, 3, 2).errors
    assert errors and errors[0].code == "VG211", errors  # the next iteration's store
    errors = analyze(read_after_loop_meets_last_iteration, F32, F32, 3).errors
    assert errors and errors[0].code == "VG211", errors
    assert "out[i] = buf[63 - t]" in str(errors[0])
    i32 = np.zeros(8, np.int32)
    assert not analyze(shared_atomics_and_atomics, F32, i32).errors
    assert not analyze(dynamic_shared_reversal, F32, F32).errors
    errors = analyze(dynamic_shared_reversal_racy, F32, F32).errors
    assert [e.code for e in errors] == ["VG211"], errors


@simt.kernel
def halving_loop_passes_its_barrier(x, out):  # runs 6 times: its barrier orders the read
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    d = 32
    while d > 0:
        simt.barrier()
        d >>= 1
    out[i] = buf[63 - t]


@simt.kernel
def empty_range_passes_no_barrier(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    for _ in range(0):
        simt.barrier()
    out[i] = buf[63 - t]


@simt.kernel
def halving_loop_of_a_parameter(x, out, n):  # n may be 0: the loop may pass no barrier
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    d = n
    while d > 0:
        simt.barrier()
        d >>= 1
    out[i] = buf[63 - t]


@simt.kernel
def halving_loop_left_early(x, out, n):  # the break may come before any barrier
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    d = 32
    while d > 0:
        if n > 3:
            break
        simt.barrier()
        d >>= 1
    out[i] = buf[63 - t]


@simt.kernel
def doubled_after_the_loop(x, out, gap: vg.constexpr):  # offset is 8 after the loop
    buf = simt.shared.array(512, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    offset = 1
    d = 8
    while d > 1:
        simt.barrier()
        offset *= 2
        d >>= 1
    buf[t * (offset - gap)] = x[i]  # gap 8: every thread writes buf[0]
    simt.barrier()
    out[i] = buf[t]


def test_loops_with_constant_bounds_run_a_known_number_of_times():
    """Their barriers count after them, and their variables are known after them."""
    assert not analyze(halving_loop_passes_its_barrier, F32, F32).errors
    for kernel, args in [(empty_range_passes_no_barrier, ()), (halving_loop_of_a_parameter, (5,)),
                         (halving_loop_left_early, (5,))]:
        errors = analyze(kernel, F32, F32, *args).errors
        assert [e.code for e in errors] == ["VG211"] and "buf[63 - t]" in str(errors[0]), errors
    assert not analyze(doubled_after_the_loop, F32, F32, gap=7).errors
    errors = analyze(doubled_after_the_loop, F32, F32, gap=8).errors
    assert errors[0].code == "VG211" and "buf[0]" in str(errors[0]), errors


def test_a_read_of_unwritten_shared_memory_needs_a_known_block_shape():
    """How many threads write depends on the block: without its shape, no VG213."""
    from .shared_pairs import half_tile_written

    assert [e.code for e in analyze(half_tile_written, F32, F32).errors] == ["VG213"]
    k = fresh(half_tile_written)
    values = k.bind((F32, F32), {})
    assert not safety.analyze(k.build(k.spec_key(values, k.describe_args(values), None))).errors


def test_proof_time_per_specialization_is_milliseconds(capsys):
    """Cold (the solver already loaded), per fixed kernel of the suite."""
    rows = []
    for pair in SHARED_PAIRS:
        grid, block, args, kwargs = pair.make(np.random.default_rng(0))
        block3 = tuple(block) + (1,) * (3 - len(block))
        start = time.perf_counter()
        result = analyze(pair.fixed, *args, block=block3, **kwargs)
        rows.append((pair.fixed.__name__, time.perf_counter() - start, result))
    assert all(not r.errors for _, _, r in rows)
    with capsys.disabled():
        print("\nproof time per cooperating kernel (build + analysis, solver queries):")
        for name, seconds, result in rows:
            print(f"  {name:24s} {seconds * 1e3:7.2f} ms  {result.solver_queries} queries")


@simt.kernel
def countdown_in_shared(x, out):
    flag = simt.shared.array(1, vg.int32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t == 0:
        flag[0] = 3
    simt.barrier()
    while flag[0] > 0:  # every thread reads the same element: a block-uniform condition
        simt.barrier()
        if t == 0:
            flag[0] -= 1
        simt.barrier()
    out[i] = x[i]


@simt.kernel
def countdown_in_shared_racy(x, out):
    flag = simt.shared.array(1, vg.int32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t == 0:
        flag[0] = 3
    simt.barrier()
    while flag[0] > 0:  # the next test reads what thread 0 is writing
        simt.barrier()
        if t == 0:
            flag[0] -= 1
    out[i] = x[i]


def test_a_condition_read_from_shared_memory_by_the_whole_block_is_uniform():
    assert not analyze(countdown_in_shared, F32, F32).errors
    errors = analyze(countdown_in_shared_racy, F32, F32).errors
    assert [e.code for e in errors] == ["VG211"], errors
    assert "while flag[0] > 0:" in str(errors[0]) and "flag[0]" in errors[0].message


@simt.kernel
def read_at_loaded_index(x, index, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t < 32:
        tile[t] = x[i]
    simt.barrier()
    out[i] = tile[index[i]]  # written or not: the data decide


@simt.kernel
def read_at_loaded_index_within_what_is_written(x, index, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t < 32:
        tile[t] = x[i]
    simt.barrier()
    out[i] = tile[index[i] % 32]


def test_an_unwritten_read_that_the_data_decide_is_refused(rng):
    """Nothing checks shared reads on a GPU: a read of an element nothing writes, possible
    for some values of the data, is refused (as a collision the data decide is), with the
    element; the cpu backend reports the read where it happens."""
    from .test_dynamic import run_on_cpu

    x, out = rng.standard_normal(64).astype(np.float32), np.full(64, -7, np.float32)
    index = rng.integers(0, 32, 64).astype(np.int64)
    (error,) = analyze(read_at_loaded_index, x, index, out).errors
    assert error.code == "VG213" and re.search(r"may read tile\[(3[2-9]|[4-6]\d)\]", error.message), error
    assert not analyze(read_at_loaded_index_within_what_is_written, x, index, out).errors
    read_at_loaded_index_within_what_is_written[1, 64](x, index, out)
    np.testing.assert_array_equal(out, x[index])
    index[5] = 40  # never written
    with pytest.raises(vg.SafetyError) as info:
        run_on_cpu(read_at_loaded_index, 1, 64, (x, index, out), {})
    assert info.value.code == "VG213" and "tile[40]" in info.value.message


@simt.kernel
def register_tile_store(c, K: vg.constexpr):
    t = simt.thread_id(0)
    row0 = simt.block_id(1) * 64 + t // 16 * 4
    col0 = simt.block_id(0) * 64 + t % 16 * 4
    for i in range(4):
        for j in range(4):
            if row0 + i < c.shape[0] and col0 + j < c.shape[1]:
                c[row0 + i, col0 + j] = K


def test_split_thread_ids_prove_register_tiles_without_the_solver():
    """t // 16 and t % 16 are digits that together determine t; `i` is bounded by its loop."""
    c = np.zeros((8, 8), np.float32)
    result = analyze(register_tile_store, c, K=1, block=(256, 1, 1))
    assert not result.errors and result.solver_queries == 0, result.errors


# ----------------------------------------------------------------------------- partners t ^ j


@simt.kernel
def merge_steps(x, out, ODD: vg.constexpr, SYNC: vg.constexpr):
    """Compare-exchange steps with partner t ^ j: j = 1 << jj, or (ODD) 3*jj + 1, which is no
    power of two; SYNC False drops the barrier after each step."""
    keys = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    keys[t] = x[i]
    simt.barrier()
    for jj in range(5, -1, -1):
        partner = t ^ (3 * jj + 1 if ODD else 1 << jj)
        if partner > t:
            a = keys[t]
            b = keys[partner]
            if a > b:
                keys[t] = b
                keys[partner] = a
        if SYNC:
            simt.barrier()
    out[i] = keys[t]


def test_a_partner_t_xor_j_is_known_where_j_is_a_power_of_two(rng):
    from .test_dynamic import run_on_cpu

    x, out = rng.standard_normal(64).astype(np.float32), np.full(64, -7, np.float32)
    assert not analyze(merge_steps, x, out, ODD=False, SYNC=True).errors
    errors = analyze(merge_steps, x, out, ODD=False, SYNC=False).errors
    assert errors and errors[0].code == "VG211", errors
    with pytest.raises(vg.SafetyError) as info:
        run_on_cpu(merge_steps, 1, 64, (x, out), {"ODD": False, "SYNC": False})
    assert info.value.code in ("VG211", "VG212"), info.value
    # 3*jj + 1 is no power of two: the checker does not pretend to see the partner
    errors = analyze(merge_steps, x, out, ODD=True, SYNC=True).errors
    assert errors and errors[0].code == "VG205" and "bitwise xor" in errors[0].message, errors


@simt.kernel
def halving_steps(x, out, GUARD: vg.constexpr, ZERO: vg.constexpr):
    """The steps of a bitonic merge with j halving in a while loop, a power of two where
    the loop runs; GUARD False lets both threads of a pair exchange; ZERO 1 also runs a
    step at j == 0, where j is no power of two (t ^ 0 is t: no exchange, but the checker
    must not take 0 for one)."""
    keys = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    keys[t] = x[i]
    simt.barrier()
    j = 32
    while j + ZERO > 0:
        partner = t ^ j
        if partner > t if GUARD else True:
            a = keys[t]
            b = keys[partner]
            if a > b:
                keys[t] = b
                keys[partner] = a
        simt.barrier()
        if j == 0:
            break
        j //= 2
    out[i] = keys[t]


def test_a_partner_t_xor_j_is_known_where_j_halves_while_it_is_positive(rng):
    x, out = rng.standard_normal(64).astype(np.float32), np.full(64, -7, np.float32)
    assert not analyze(halving_steps, x, out, GUARD=True, ZERO=0).errors
    errors = analyze(halving_steps, x, out, GUARD=False, ZERO=0).errors
    assert errors and errors[0].code == "VG211", errors
    errors = analyze(halving_steps, x, out, GUARD=True, ZERO=1).errors
    assert errors and errors[0].code == "VG205" and "bitwise xor" in errors[0].message, errors


@simt.kernel
def group_offsets(out, WHOLE: vg.constexpr):
    """Each thread writes at its group's start `t & ~(w - 1)` plus its offset in the group
    `t & (w - 1)` (that is t) for groups of w = 1, 2, ..., 32; without the offset (WHOLE False)
    the threads of a group write one element."""
    t = simt.global_id(0)
    for ww in range(6):
        w = 1 << ww
        start = t & ~(w - 1)
        if WHOLE:
            out[start + (t & (w - 1))] = vg.float32(ww)
        else:
            out[start] = vg.float32(ww)


def test_masks_below_a_power_of_two_are_remainders(rng):
    assert not analyze(group_offsets, F32, WHOLE=True).errors
    errors = analyze(group_offsets, F32, WHOLE=False).errors
    assert [e.code for e in errors] == ["VG202"] and "both write out[" in str(errors[0]), errors


@pytest.mark.parametrize("name", ["bitonic_sort", "bitonic_sort_halving", "bitonic_sort_by_position"])
def test_the_bitonic_sort_is_proven_in_a_hundredth_of_the_race_budget(name):
    """Partners `t ^ j` (with `j = 1 << jj`, or halving in a while loop), and the CUDA
    samples' positions `2*t - (t & (stride - 1))` (each query takes about 0.1M steps of the
    0.4M allowed here)."""
    from verdigris.safety import budgets

    from . import shared_pairs

    k = fresh(getattr(shared_pairs, name))
    values = k.bind((F32, F32), {})
    ir = k.build(k.spec_key(values, k.describe_args(values), (64, 1, 1)))
    result = safety.analyze(ir, budget=budgets.RACE // 100)
    assert not result.errors, result.errors[0]


@simt.kernel
def rounds_of_growing_length(x, out, n, SYNC: vg.constexpr):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for a in range(1, n):
        buf[t] = v
        for b in range(a):  # runs at least once: a >= 1
            simt.barrier()
            v = buf[(t + 1) % 64] + v
        if SYNC:
            simt.barrier()
    out[i] = v


def test_an_outer_iteration_ends_with_the_last_iteration_of_its_inner_loop(rng):
    """An inner loop's trip count is one function of the block and the outer iteration, so
    the next outer iteration starts after the inner loop's last barrier, not any of them (the
    bitonic sort's stages); a read in that last iteration still meets the next outer
    iteration's write when no barrier parts them."""
    from .test_dynamic import run_on_cpu

    assert not analyze(rounds_of_growing_length, F32, F32, 4, SYNC=True).errors
    errors = analyze(rounds_of_growing_length, F32, F32, 4, SYNC=False).errors
    assert errors and errors[0].code == "VG211" and "buf[(t + 1) % 64]" in str(errors[0]), errors
    x, out = rng.standard_normal(64).astype(np.float32), np.full(64, -7, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        run_on_cpu(rounds_of_growing_length, 1, 64, (x, out, 4), {"SYNC": False})
    assert info.value.code in ("VG211", "VG212"), info.value
