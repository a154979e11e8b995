"""SIMT race-model soundness (issue #25, items 2-4): each unsafe kernel beside its fixed twin.

- 64-bit wrap-around: a 64-bit result wraps modulo 2**64 in the race model as on the
  hardware (uint64 of a negative value, a shift or a product past 2**63, a run-time factor).
- Values a write may change with no race reported (read inside `vg.unsafe()`, or from an
  array atomics write) are not uniform: a barrier or a shuffle under them is refused.
- Shared memory read before anything wrote it (VG213): refused in while loops, under
  conditions on loaded values and in loops that write it only later in their body; a read
  neither proven written nor refused is listed in the facts (checked on the cpu backend).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt, tile
from verdigris.runtime.dispatch import KernelFunction, _dims

THREADS = re.compile(r"thread \(block (\d+|\([\d, ]+\)), thread (\d+|\([\d, ]+\))\)")


def analyze(kernel, grid, block, *args):
    """The static checker's analysis of `kernel` launched so (a fresh specialization)."""
    fresh = KernelFunction(kernel.fn, kernel.track)
    values = fresh.bind(args, {})
    key = fresh.spec_key(values, fresh.describe_args(values), _dims(block, "block", fresh.__name__),
                         _dims(grid, "grid", fresh.__name__))
    return safety.analyze(fresh.build(key))


def refused(kernel, code, *args, grid=(2,), block=(64,), threads=2):
    """The refusal's message, checked to carry `code` and name `threads` threads."""
    errors = analyze(kernel, grid, block, *args).errors
    assert errors and errors[0].code == code, errors
    message = errors[0].message
    assert len(THREADS.findall(message)) >= threads, message
    return message


def accepted(kernel, *args, grid=(2,), block=(64,)):
    analysis = analyze(kernel, grid, block, *args)
    assert not analysis.errors, analysis.errors[0]
    return analysis


# ----------------------------------------------------------------------------- 64-bit wrap


@simt.kernel
def uint64_of_a_negative(x, out):  # threads 0..4: t - 5 is 2**64 - 5 + t as a uint64 (and
    # no thread id is past 2**40: only they write)
    t = simt.global_id(0)
    if vg.uint64(t - 5) > vg.uint64(2**40):
        out[0] = x[t]


@simt.kernel
def uint64_of_a_non_negative(x, out):  # only thread 5
    t = simt.global_id(0)
    if t >= 5 and vg.uint64(t - 5) < vg.uint64(1):
        out[0] = x[t]


@simt.kernel
def shift_past_the_sign(x, out):  # g << 62 is 2**63, negative, for g = 2
    g = simt.global_id(0)
    if (g << 62) <= 0:
        out[0] = x[g]


@simt.kernel
def shift_within_int64(x, out):  # only g = 0
    g = simt.global_id(0)
    if (g << 30) <= 0:
        out[0] = x[g]


@simt.kernel
def product_past_2_64(x, out):  # i * 2**64 wraps to 0 for every i
    i = simt.global_id(0)
    out[i * 2**62 * 4] = x[i]


@simt.kernel
def product_within_int64(x, out):
    i = simt.global_id(0)
    out[i * 2**30 * 4 // 2**32] = x[i]


@simt.kernel
def scaled_by_a_run_time_value(x, out, s):  # an int64 s = 2**62: i * s * 4 is 0 for every i
    i = simt.global_id(0)
    if s > 0:
        out[i * s * 4] = x[i]


@simt.kernel
def scaled_by_a_32_bit_value(x, out, s):  # an int32 s: i * s stays below 2**62
    i = simt.global_id(0)
    if s > 0:
        out[i * s] = x[i]


@pytest.mark.parametrize("racy,fixed,args", [
    (uint64_of_a_negative, uint64_of_a_non_negative, ()),
    (shift_past_the_sign, shift_within_int64, ()),
    (product_past_2_64, product_within_int64, ()),
])
def test_64_bit_results_wrap_as_on_the_hardware(rng, racy, fixed, args):
    x, out = rng.standard_normal(128).astype(np.float32), np.full(128, -7, np.float32)
    message = refused(racy, "VG202", x, out, *args)
    assert "int64 arithmetic" in message
    accepted(fixed, x, out, *args)


def test_a_run_time_factor_that_wraps_is_refused_and_its_32_bit_twin_accepted(rng):
    x, out = rng.standard_normal(128).astype(np.float32), np.full(128, -7, np.float32)
    message = refused(scaled_by_a_run_time_value, "VG202", x, out, np.int64(2**62))
    assert "wraps around in int64 arithmetic" in message
    accepted(scaled_by_a_32_bit_value, x, out, np.int32(1))
    scaled_by_a_32_bit_value[2, 64](x, out, np.int32(1))
    np.testing.assert_array_equal(out, x)


@simt.kernel
def scaled_by_a_32_bit_value_or_zero(x, out, s):  # s == 0: every thread writes out[0]
    i = simt.global_id(0)
    if s >= 0:
        out[i * s] = x[i]


def test_a_factor_positive_on_both_paths_keeps_the_ids_apart_without_the_solver(rng):
    """`out[i * s]` under `s > 0`: the fast path's mixed radix takes the guard for the
    multiplier's lower bound (0.3 s of a solver query before); under `s >= 0` it is refused."""
    x, out = rng.standard_normal(128).astype(np.float32), np.full(128, -7, np.float32)
    assert analyze(scaled_by_a_32_bit_value, (2,), (64,), x, out, np.int32(1)).solver_queries == 0
    refused(scaled_by_a_32_bit_value_or_zero, "VG202", x, out, np.int32(1))


# ----------------------------------------------------------------------------- uniformity


@simt.kernel
def barrier_under_a_flag_read_unsafely(x, flag, out):  # block 1 sets the flag meanwhile
    t = simt.thread_id(0)
    if simt.block_id(0) == 1 and t == 0:
        flag[0] = 1
    with vg.unsafe():
        f = flag[0]
    if f > 0:
        simt.barrier()
    out[simt.global_id(0)] = x[t]


@simt.kernel
def barrier_under_a_flag_nobody_writes(x, flag, out):  # unsafe vouches for the read only
    t = simt.thread_id(0)
    with vg.unsafe():
        f = flag[0]
    if f > 0:
        simt.barrier()
    out[simt.global_id(0)] = x[t]


@simt.kernel
def shuffle_under_a_counter_read_after_atomics(x, counter, out):
    t = simt.thread_id(0)
    simt.atomic_add(counter, 0, 1)
    with vg.unsafe():
        c = counter[0]
    if c < 100:
        out[simt.global_id(0)] = simt.shfl_down(x[t], 1)


@simt.kernel
def shuffle_under_a_read_only_value(x, counter, out):
    t = simt.thread_id(0)
    simt.atomic_add(counter, 0, 1)
    if x[0] < 100.0:
        out[simt.global_id(0)] = simt.shfl_down(x[t], 1)


def test_values_a_write_may_change_unreported_are_not_uniform(rng):
    x, out = rng.standard_normal(128).astype(np.float32), np.full(128, -7, np.float32)
    flag = np.zeros(1, np.int32)
    assert "barrier() is under `f > 0`" in refused(barrier_under_a_flag_read_unsafely, "VG210", x, flag, out)
    accepted(barrier_under_a_flag_nobody_writes, x, flag, out)
    refused(shuffle_under_a_counter_read_after_atomics, "VG214", x, flag, out)
    accepted(shuffle_under_a_read_only_value, x, flag, out)


# ----------------------------------------------------------------------------- VG213


@simt.kernel
def read_in_a_while_loop(x, out, m):  # nothing writes buf
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    acc = vg.float32(0)
    i = 0
    while i < m:
        acc += buf[t]
        i += 1
    out[simt.global_id(0)] = acc


@simt.kernel
def read_in_a_while_loop_after_writing(x, out, m):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[simt.global_id(0)]
    simt.barrier()
    acc = vg.float32(0)
    i = 0
    while i < m:
        acc += buf[t]
        i += 1
    out[simt.global_id(0)] = acc


@simt.kernel
def read_under_a_loaded_condition(x, out, m):  # only half of buf is written
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    if t < 32:
        buf[t] = x[simt.global_id(0)]
    simt.barrier()
    acc = vg.float32(0)
    if x[simt.global_id(0)] > 0.0:
        acc = buf[t]
    out[simt.global_id(0)] = acc


@simt.kernel
def read_under_a_loaded_condition_after_writing(x, out, m):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[simt.global_id(0)]
    simt.barrier()
    acc = vg.float32(0)
    if x[simt.global_id(0)] > 0.0:
        acc = buf[t]
    out[simt.global_id(0)] = acc


@simt.kernel
def written_only_later_in_the_loop(x, out, m):  # iteration 0 reads what nothing wrote
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    acc = vg.float32(0)
    for k in range(3):
        acc += buf[t]
        simt.barrier()
        buf[t] = x[simt.global_id(0)]
        simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def written_earlier_in_the_loop(x, out, m):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    acc = vg.float32(0)
    for k in range(3):
        buf[t] = x[simt.global_id(0)]
        simt.barrier()
        acc += buf[t]
        simt.barrier()
    out[simt.global_id(0)] = acc


@pytest.mark.parametrize("racy,fixed,certain", [
    # i's progression, narrowed by `i < m` in the body: with m = 1 the read surely happens
    (read_in_a_while_loop, read_in_a_while_loop_after_writing, True),
    (read_under_a_loaded_condition, read_under_a_loaded_condition_after_writing, False),
    (written_only_later_in_the_loop, written_earlier_in_the_loop, True),
])
def test_a_read_of_unwritten_shared_memory_is_refused_beside_its_fixed_twin(rng, racy, fixed, certain):
    x, out = rng.standard_normal(128).astype(np.float32), np.full(128, -7, np.float32)
    message = refused(racy, "VG213", x, out, 3, threads=1)
    assert ("may read" not in message) == certain, message
    analysis = accepted(fixed, x, out, 3)
    assert analysis.facts["unproven_shared_reads"] == ()
    with pytest.raises(vg.SafetyError, match="VG213"):  # the cpu backend sees it happen
        racy[2, 64](np.abs(x) + 1, out, 3)


@simt.kernel
def read_what_the_previous_iteration_wrote(x, out, m):  # proven: iteration k - 1 wrote it
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    acc = vg.float32(0)
    for k in range(3):
        if k > 0:
            acc += buf[t]
        simt.barrier()
        buf[t] = x[simt.global_id(0)]
        simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def read_what_the_data_may_have_written(x, out, m):  # x[i] <= 0 leaves buf[t] unwritten
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if x[i] > 0.0:
        buf[t] = x[i]
    simt.barrier()
    out[i] = buf[t]


def test_a_read_neither_proven_nor_refused_is_listed_and_checked_on_the_cpu(rng):
    x, out = rng.standard_normal(128).astype(np.float32), np.full(128, -7, np.float32)
    analysis = accepted(read_what_the_previous_iteration_wrote, x, out, 3)
    assert analysis.facts["unproven_shared_reads"] == ()
    read_what_the_previous_iteration_wrote[2, 64](x, out, 3)
    np.testing.assert_allclose(out, 2 * x.astype(np.float64), rtol=1e-6)
    analysis = accepted(read_what_the_data_may_have_written, x, out, 3)
    line = read_what_the_data_may_have_written.fn.__code__.co_firstlineno + 8
    assert analysis.facts["unproven_shared_reads"] == (("buf", line, 13),)
    positive = np.abs(x) + 1
    read_what_the_data_may_have_written[2, 64](positive, out, 3)
    np.testing.assert_array_equal(out, positive)
    with pytest.raises(vg.SafetyError, match="VG213"):
        read_what_the_data_may_have_written[2, 64](-positive, out, 3)


@simt.kernel
def doubling_past_2_63(x, out):  # int64 offset is 2**63 (negative) at k = 63, 0 from k = 64
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[t]
    simt.barrier()
    offset = vg.int64(1)
    for k in range(70):
        if offset <= 0:
            out[0] = buf[t]
        offset *= 2


@simt.kernel
def doubling_within_int64(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[t]
    simt.barrier()
    offset = vg.int64(1)
    for k in range(60):
        if offset <= 0:
            out[0] = buf[t]
        offset *= 2


def test_a_variable_a_loop_doubles_past_2_63_wraps(rng):
    x, out = rng.standard_normal(64).astype(np.float32), np.full(64, -7, np.float32)
    refused(doubling_past_2_63, "VG202", x, out, grid=(1,))
    accepted(doubling_within_int64, x, out, grid=(1,))


@simt.kernel
def rows_of_a_matrix(x, out):  # r * x.shape[1] + c < x.size < 2**63: exact
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < x.shape[0] and c < x.shape[1]:
        out[r * x.shape[1] + c] = x[r, c]


@simt.kernel
def rows_of_a_run_time_width(x, out, width):  # an int64 width near 2**62 wraps (the wide
    # variant; one in int32's range is the narrow variant, `Param.narrow`, and cannot)
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < x.shape[0] and c < width:
        out[r * width + c] = x[r, c]


def test_an_index_within_an_arrays_elements_is_exact_and_a_run_time_width_is_not(rng):
    x, out = rng.standard_normal((7, 10)).astype(np.float32), np.full(70, -7, np.float32)
    accepted(rows_of_a_matrix, x, out, grid=(1, 2), block=(16, 4))
    rows_of_a_matrix[(1, 2), (16, 4)](x, out)
    np.testing.assert_array_equal(out, x.reshape(-1))
    message = refused(rows_of_a_run_time_width, "VG202", x, out, np.int64(2**62), grid=(1, 2),
                      block=(16, 4))
    assert "int64 arithmetic" in message
    accepted(rows_of_a_run_time_width, x, out, np.int64(10), grid=(1, 2), block=(16, 4))
    accepted(rows_of_a_run_time_width, x, out, 10, grid=(1, 2), block=(16, 4))


# ----------------------------------------------------------------------------- the tile track

@tile.kernel
def tiles_at_a_wrapped_index(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i * 2**62 * 4,), tile=tile.load(x, index=(i,), shape=(B,)))  # all: 0


@tile.kernel
def tiles_at_an_exact_index(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i * 2**2 // 4,), tile=tile.load(x, index=(i,), shape=(B,)))


def test_a_tile_index_that_wraps_in_64_bits_is_refused_statically():
    """The tile track's indices are the hardware's: int64 arithmetic wraps (every block
    stores at 0), and the proof sees it, with its hint; the exact twin is proven."""
    x = np.zeros(64, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        tiles_at_a_wrapped_index.specialize(x, x.copy(), B=16)
    assert info.value.code == "VG202" and "wraps around in int64 arithmetic" in str(info.value)
    assert "no array is that long" in str(info.value)
    assert not safety.analyze(tiles_at_an_exact_index.specialize(x, x.copy(), B=16)).errors


def test_a_tile_index_that_wraps_is_refused_before_it_runs_on_the_cpu_backend(rng):
    x = rng.random(64).astype(np.float32)
    out = np.full_like(x, np.nan)
    with pytest.raises(vg.SafetyError) as info:
        tiles_at_a_wrapped_index[4](x, out, B=16)
    assert info.value.code == "VG202" and "block" in str(info.value)
    tiles_at_an_exact_index[4](x, out, B=16)  # the twin: block i stores tile i
    np.testing.assert_array_equal(out, x)
