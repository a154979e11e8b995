"""Race-free patterns the checker proves (docs/safety.md, "Patterns the checker accepts"),
each beside a racy twin that it still refuses with two threads and the element they meet on:

- tickets: indices from an atomic counter's old values, distinct across threads where the
  counter only moves one way by constants and cannot wrap around (`safety.tickets`);
- tuple constants indexed by a run-time value (`W[k]`): the proof reads their values.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt

from .test_static import fresh

B = 64
THREAD = r"thread \(block [^)]*\)?, thread [^)]*\)?\)"


def analyze(kernel, *args, block=(B, 1, 1), **kwargs):
    k = fresh(kernel)
    values = k.bind(args, kwargs)
    return safety.analyze(k.build(k.spec_key(values, k.describe_args(values), block, None)))


def assert_refused_with_two_threads(analysis, code="VG202"):
    assert analysis.errors, "the racy kernel was accepted"
    err = analysis.errors[0]
    text = str(err)
    assert err.code == code, text
    assert len(re.findall(THREAD, text)) == 2, text
    assert re.search(r"\w+\[-?\d+\]", text), text


def assert_proven(analysis):
    assert not analysis.errors, analysis.errors[0]


# ----------------------------------------------------------------------------- tickets

@simt.kernel
def compact(x, out, count):  # stream compaction: each kept value gets its own slot
    i = simt.global_id(0)
    if i < x.shape[0] and x[i] > 0.0:
        slot = simt.atomic_add(count, 0, 1)
        out[slot] = x[i]


@simt.kernel
def compact_halved(x, out, count):  # two tickets, one slot
    i = simt.global_id(0)
    if i < x.shape[0] and x[i] > 0.0:
        slot = simt.atomic_add(count, 0, 1)
        out[slot // 2] = x[i]


@simt.kernel
def compact_pairs(x, out, count):  # tickets of 2: out[slot] and out[slot + 1] are a thread's own
    i = simt.global_id(0)
    if i < x.shape[0] and x[i] > 0.0:
        slot = simt.atomic_add(count, 0, 2)
        out[slot] = x[i]
        out[slot + 1] = -x[i]


@simt.kernel
def compact_pairs_overlapping(x, out, count):  # tickets of 1, two slots each
    i = simt.global_id(0)
    if i < x.shape[0] and x[i] > 0.0:
        slot = simt.atomic_add(count, 0, 1)
        out[slot] = x[i]
        out[slot + 1] = -x[i]


@simt.kernel
def compact_downwards(x, out, count):  # a counter that counts down hands out distinct values too
    i = simt.global_id(0)
    if i < x.shape[0] and x[i] > 0.0:
        slot = simt.atomic_sub(count, 0, 1)
        out[slot - 1] = x[i]


@simt.kernel
def compact_two_sites(x, out, count):  # every add moves the counter up: all tickets differ
    i = simt.global_id(0)
    if i < x.shape[0]:
        if x[i] > 0.0:
            out[simt.atomic_add(count, 0, 1)] = x[i]
        else:
            out[simt.atomic_add(count, 0, 1)] = -x[i]


@simt.kernel
def compact_up_and_down(x, out, count):  # one add and one sub: a value may come back
    i = simt.global_id(0)
    if i < x.shape[0]:
        if x[i] > 0.0:
            out[simt.atomic_add(count, 0, 1)] = x[i]
        else:
            out[simt.atomic_sub(count, 0, 1)] = -x[i]


@simt.kernel
def compact_per_parity(x, out, count):  # two counters (elements): their tickets may meet
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[simt.atomic_add(count, i % 2, 1)] = x[i]


@simt.kernel
def compact_max_too(x, out, count):  # an atomic_max may set the counter back
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[simt.atomic_add(count, 0, 1)] = x[i]
        simt.atomic_max(count, 0, 3)


@simt.kernel
def compact_in_loop(x, out, count, rounds):  # a 32-bit counter in a loop may wrap around
    i = simt.global_id(0)
    if i < x.shape[0]:
        for r in range(rounds):
            out[simt.atomic_add(count, 0, 1)] = x[i]


def _compaction_args(rng, n=3 * B - 5, dtype=np.int32):
    x = rng.standard_normal(n).astype(np.float32)
    return x, np.full(2 * n + 2, -7, np.float32), np.zeros(2, dtype)


def test_tickets_index_distinct_elements_and_the_kernel_computes_them(rng):
    x, out, count = _compaction_args(rng)
    assert_proven(analyze(compact, x, out, count))
    fresh(compact)[vg.cdiv(len(x), B), B](x, out, count)
    kept = int(count[0])
    assert kept == (x > 0).sum()
    np.testing.assert_array_equal(np.sort(out[:kept]), np.sort(x[x > 0]))
    assert (out[kept:] == -7).all()


@pytest.mark.parametrize("kernel", [compact_pairs, compact_downwards, compact_two_sites])
def test_counters_that_move_one_way_by_constants_hand_out_tickets(kernel, rng):
    x, out, count = _compaction_args(rng)
    assert_proven(analyze(kernel, x, out, count))


@pytest.mark.parametrize("kernel", [compact_halved, compact_pairs_overlapping, compact_per_parity])
def test_indices_that_tickets_do_not_keep_apart_are_refused_with_two_threads(kernel, rng):
    x, out, count = _compaction_args(rng)
    assert_refused_with_two_threads(analyze(kernel, x, out, count))


@pytest.mark.parametrize("kernel", [compact_up_and_down, compact_max_too])
def test_a_counter_that_may_come_back_gives_no_tickets(kernel, rng):
    x, out, count = _compaction_args(rng)
    analysis = analyze(kernel, x, out, count)
    assert analysis.errors and analysis.errors[0].code == "VG205", analysis.errors


def test_a_32_bit_counter_that_may_wrap_gives_no_tickets(rng):
    x, out, count = _compaction_args(rng)
    assert analyze(compact_in_loop, x, out, count, 3).errors[0].code == "VG205"
    assert_proven(analyze(compact_in_loop, x, out, count.astype(np.int64), 3))  # 64-bit: no wrap
    # 4 threads along y of 2**31 - 1 along x: more adds than a 32-bit counter has values
    assert analyze(compact, x, out, count, block=(B, 4, 1)).errors


# ----------------------------------------------------------------------------- tuple constants

SWAP_MIDDLE = (0, 2, 1, 3)  # a permutation of a thread's four elements
SHIFTED = (0, 2, 1, 4)  # its last element is the next thread's first
OFFSETS = (0, 64, 128, 192)  # row starts of a 4 x 64 tile
OFFSETS_TOO_CLOSE = (0, 8, 128, 192)  # the second row starts inside the first


@simt.kernel
def permute_fours(x, out):
    i = simt.global_id(0)
    if 4 * i + 3 < x.shape[0]:
        for j in range(4):
            out[4 * i + SWAP_MIDDLE[j]] = x[4 * i + j]


@simt.kernel
def permute_fours_shifted(x, out):
    i = simt.global_id(0)
    if 4 * i + 4 < x.shape[0]:
        for j in range(4):
            out[4 * i + SHIFTED[j]] = x[4 * i + j]


@simt.kernel
def scatter_rows(x, out):  # thread i: row i % 4, column (i % 256) // 4 of its block's tile
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[(i // 256) * 256 + OFFSETS[i % 4] + (i % 256) // 4] = x[i]


@simt.kernel
def scatter_rows_too_close(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[(i // 256) * 256 + OFFSETS_TOO_CLOSE[i % 4] + (i % 256) // 4] = x[i]


def test_a_tuple_constant_indexed_by_a_loop_variable_is_read_by_the_proof(rng):
    n = 4 * 3 * B
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, -7, np.float32)
    assert_proven(analyze(permute_fours, x, out))
    fresh(permute_fours)[3, B](x, out)
    np.testing.assert_array_equal(out.reshape(-1, 4), x.reshape(-1, 4)[:, list(SWAP_MIDDLE)])
    assert_refused_with_two_threads(analyze(permute_fours_shifted, x, out))


def test_a_tuple_constant_indexed_by_the_thread_is_read_by_the_proof(rng):
    n = 3 * 256
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, -7, np.float32)
    assert_proven(analyze(scatter_rows, x, out, block=(256, 1, 1)))
    fresh(scatter_rows)[3, 256](x, out)
    i = np.arange(n)
    want = np.empty(n, np.float32)
    want[(i // 256) * 256 + np.array(OFFSETS)[i % 4] + (i % 256) // 4] = x
    np.testing.assert_array_equal(out, want)
    assert_refused_with_two_threads(analyze(scatter_rows_too_close, x, out, block=(256, 1, 1)))


# ----------------------------------------------------------------------------- proof time

@simt.kernel
def cubes(x, out):  # i**3 is injective, but z3 finds no proof of it in the time
    i = simt.global_id(0)
    if i < 1000000:
        out[i * i * i] = x[i]


def test_a_proof_that_runs_past_its_time_is_refused_as_not_proven_when_the_time_is_spent():
    from verdigris.safety import budgets

    x = np.zeros(8, np.float32)
    analysis = analyze(cubes, x, x.copy())
    assert [e.code for e in analysis.errors] == ["VG205"], analysis.errors
    assert re.search(r"ran past its time limit|spent its budget of [\d,]+ steps", str(analysis.errors[0]))
    assert analysis.cpu_seconds < budgets.KERNEL_S + 0.5  # the CPU time of the proof, all of it


def test_the_time_limit_stops_a_proof_that_needs_more(monkeypatch):
    """The bitonic sort of while loops is proven in its time (test_shared_static, 6 solver
    queries); given a tenth of what it needs, it is refused, and stops there."""
    from verdigris.safety import budgets

    from . import shared_pairs

    keys = np.zeros(64, np.float32)
    monkeypatch.setattr(budgets, "KERNEL_S", 0.02)
    analysis = analyze(shared_pairs.bitonic_sort_halving, keys, keys.copy())
    assert analysis.errors and all(e.code == "VG205" for e in analysis.errors), analysis.errors
    assert "ran past its time limit of 0.02 s" in str(analysis.errors[0])
    assert analysis.cpu_seconds < 0.3


# ----------------------------------------------------------------------------- nested loops

@simt.kernel
def rounds_of_rounds(x, out, n, m):  # every inner iteration ends with a barrier
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def rounds_of_rounds_barrier_first(x, out, n, m):  # the last write has no barrier after it
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            simt.barrier()
            s[t] = v + vg.float32(i + j)
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def rounds_then_a_write(x, out, n, m):  # a write after the inner loop, in the outer one
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
        s[t] = v
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def rounds_of_rounds_read_first(x, out, n, m):  # the read meets the first inner write after it
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        if i > 0 and m > 0:
            v = v + s[63 - t]
        for j in range(m):
            s[t] = v
            simt.barrier()
    out[simt.global_id(0)] = v


def test_a_barrier_that_ends_every_inner_iteration_orders_what_comes_after_the_loops(rng):
    """With run-time trip counts an outer iteration may pass no barrier (m == 0); the last
    barrier before the loops end is then the one of the last outer iteration whose inner
    loop ran, which comes after every write of the inner loops."""
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, -7, np.float32)
    assert_proven(analyze(rounds_of_rounds, x, out, 3, 2))
    fresh(rounds_of_rounds)[1, 64](x, out, 3, 2)
    np.testing.assert_allclose(out, x[::-1] + np.float32(2 + 1), rtol=1e-6)


@pytest.mark.parametrize("kernel", [rounds_of_rounds_barrier_first, rounds_then_a_write,
                                    rounds_of_rounds_read_first])
def test_accesses_with_no_barrier_between_them_in_nested_loops_are_refused(kernel, rng):
    x = rng.standard_normal(64).astype(np.float32)
    assert_refused_with_two_threads(analyze(kernel, x, x.copy(), 3, 2), "VG211")


# ----------------------------------------------------------------------------- scans

@simt.kernel
def up_sweep(x, out, LEVELS: vg.constexpr):  # Blelloch's up-sweep, in shifts
    s = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    base = simt.block_id(0) * 128
    s[2 * t] = x[base + 2 * t]
    s[2 * t + 1] = x[base + 2 * t + 1]
    for d in range(LEVELS):
        simt.barrier()
        if t < 64 >> d:
            s[((2 * t + 2) << d) - 1] += s[((2 * t + 1) << d) - 1]
    simt.barrier()
    out[base + 2 * t] = s[2 * t]
    out[base + 2 * t + 1] = s[2 * t + 1]


@simt.kernel
def up_sweep_one_barrier(x, out, LEVELS: vg.constexpr):  # no barrier between the levels
    s = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    base = simt.block_id(0) * 128
    s[2 * t] = x[base + 2 * t]
    s[2 * t + 1] = x[base + 2 * t + 1]
    simt.barrier()
    for d in range(LEVELS):
        if t < 64 >> d:
            s[((2 * t + 2) << d) - 1] += s[((2 * t + 1) << d) - 1]
    simt.barrier()
    out[base + 2 * t] = s[2 * t]
    out[base + 2 * t + 1] = s[2 * t + 1]


def test_the_up_sweep_of_a_scan_is_proven_in_its_time(rng):
    from verdigris.safety import budgets

    x = rng.standard_normal(3 * 128).astype(np.float32)
    out = np.full(3 * 128, -7, np.float32)
    analysis = analyze(up_sweep, x, out, block=(64, 1, 1), LEVELS=7)
    assert_proven(analysis)
    assert analysis.cpu_seconds < budgets.KERNEL_S
    fresh(up_sweep)[3, 64](x, out, LEVELS=7)
    want = x.astype(np.float64).reshape(3, 128).copy()
    for d in range(7):
        step = 2 << d
        want[:, step - 1::step] += want[:, step // 2 - 1::step]
    np.testing.assert_allclose(out.reshape(3, 128), want, rtol=1e-5, atol=1e-5)
    assert_refused_with_two_threads(analyze(up_sweep_one_barrier, x, out, block=(64, 1, 1), LEVELS=7),
                                    "VG211")


@simt.kernel
def compact_up_and_wrapped_down(x, out, count):  # 2**64 - 1 as int64 is -1: a sub in disguise
    i = simt.global_id(0)
    if i < x.shape[0]:
        if x[i] > 0.0:
            out[simt.atomic_add(count, 0, 1)] = x[i]
        else:
            out[simt.atomic_add(count, 0, vg.int64(vg.uint64(18446744073709551615)))] = -x[i]


def test_a_constant_is_read_as_its_dtype_wraps_it(rng):
    x, out, count = _compaction_args(rng, dtype=np.int64)
    analysis = analyze(compact_up_and_wrapped_down, x, out, count)
    assert analysis.errors and analysis.errors[0].code == "VG205", analysis.errors
