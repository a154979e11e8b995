"""Shared memory written in nested barrier loops with run-time trip counts, read after them
(VG213, docs/safety.md): a read under a condition that implies the loops ran is proven
written (a `for` loop over a range runs exactly its length: `Space.ranged`), at any depth,
with an inner range that depends on the outer loop's variable, in the same iteration of an
outer loop or in a later one. Each safe kernel is beside its racy twin, whose condition
lets an empty loop leave the element unwritten: refused with the thread, the element and
the sizes that leave it so, and caught by the cpu backend when launched with those sizes.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt

from .test_simt_soundness import THREADS, accepted, analyze


@simt.kernel
def three_deep(x, out, n, m, p):
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            for k in range(p):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def three_deep_innermost_may_be_empty(x, out, n, m, p):  # p == 0 writes nothing
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            for k in range(p):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def three_deep_one_barrier(x, out, n, m, p):  # only the innermost loop has a barrier
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            for k in range(p):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def triangle(x, out, n, m, p):  # the inner range of iteration i: range(i, n, 2), never empty
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(i, n, 2):
            s[t] = v + vg.float32(j)
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def triangle_empty_at_last(x, out, n, m, p):  # range(i + 1, n, 2) is empty at i == n - 1
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(i + 1, n, 2):
            s[t] = v + vg.float32(j)
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def read_in_the_same_round(x, out, n, m, p):  # after the inner loop, in the outer one
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    acc = vg.float32(0)
    for i in range(n):
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
        if m > 0:
            acc += s[63 - t]
        simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def read_in_the_same_round_unguarded(x, out, n, m, p):  # m == 0 writes nothing
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    acc = vg.float32(0)
    for i in range(n):
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
        acc += s[63 - t]
        simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def read_in_the_next_round(x, out, n, m, p):  # round i reads what round i - 1 wrote
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    acc = vg.float32(0)
    for i in range(n):
        if i > 0 and m > 0:
            acc += s[63 - t]
        simt.barrier()
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def read_in_the_next_round_unguarded(x, out, n, m, p):  # m == 0 writes nothing
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    acc = vg.float32(0)
    for i in range(n):
        if i > 0:
            acc += s[63 - t]
        simt.barrier()
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def counting_down(x, out, n, m, p):  # range(m, 0, -1) runs m times
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m, 0, -1):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def counting_down_one_short(x, out, n, m, p):  # range(m, 1, -1) is empty for m == 1
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m, 1, -1):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def left_before_writing(x, out, n, m, p):  # p == 0 leaves the loop before any write
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    for i in range(n):
        for j in range(m):
            if j >= p:
                break
            s[t] = v + vg.float32(i + j)
            simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def stop_carried_by_the_outer_loop(x, out, n, m, p):  # w == 0 in round 0 when m == 1
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    w = m - 1
    for i in range(n):
        for j in range(w):
            s[t] = v + vg.float32(i + j)
            simt.barrier()
        w = w + 1
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


def _three_deep(x, n, m, p):
    return x[::-1] + (n - 1 + m - 1 + p - 1)


def _triangle(x, n, m, p):
    return x[::-1] + (n - 1)


def _counting_down(x, n, m, p):
    return x[::-1] + (n - 1 + 1)


def _same_round(x, n, m, p):
    return sum(x[::-1] + (i + m - 1) for i in range(n))


def _next_round(x, n, m, p):
    return sum(x[::-1] + (i - 1 + m - 1) for i in range(1, n))


PAIRS = [  # (safe, its reference in float64, racy twin, sizes that leave the element unwritten)
    (three_deep, _three_deep, three_deep_innermost_may_be_empty, (2, 3, 0)),
    (triangle, _triangle, triangle_empty_at_last, (1, 0, 0)),
    (counting_down, _counting_down, counting_down_one_short, (1, 1, 0)),
    (read_in_the_same_round, _same_round, read_in_the_same_round_unguarded, (2, 0, 0)),
    (read_in_the_next_round, _next_round, read_in_the_next_round_unguarded, (2, 0, 0)),
]


@pytest.mark.parametrize("safe,reference,racy,empty", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_reads_after_nested_barrier_loops_that_surely_ran_are_proven_written(rng, safe, reference, racy,
                                                                            empty):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    analysis = accepted(safe, x, out, 3, 2, 2, grid=(1,))
    assert analysis.facts["unproven_shared_reads"] == ()
    for n, m, p in [(3, 2, 2), (1, 1, 1), (4, 1, 3)]:
        out[:] = np.nan
        safe[1, 64](x, out, n, m, p)
        np.testing.assert_allclose(out, reference(x.astype(np.float64), n, m, p), rtol=1e-5, atol=1e-5)

    errors = analyze(racy, (1,), (64,), x, out, 3, 2, 2).errors
    assert errors and errors[0].code == "VG213", errors
    message = errors[0].message
    assert len(THREADS.findall(message)) == 1 and re.search(r"reads s\[\d+\]", message), message
    with pytest.raises(vg.SafetyError, match="VG213"):  # the cpu backend sees it happen
        racy[1, 64](x, out, *empty)


def test_a_read_after_three_loops_with_one_barrier_is_proven_written(rng):
    x = rng.standard_normal(64).astype(np.float32)
    analysis = analyze(three_deep_one_barrier, (1,), (64,), x, x.copy(), 3, 2, 2)
    assert "VG213" not in [e.code for e in analysis.errors], analysis.errors
    assert analysis.facts["unproven_shared_reads"] == ()


def test_a_read_after_three_loops_with_one_barrier_is_accepted(rng):
    """An iteration of the outer loop passes a barrier where an iteration of the middle loop
    runs the innermost one (`barriers.passing_loops`, at any depth: tests/safety/
    test_deep_barrier_loops.py has the class)."""
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    accepted(three_deep_one_barrier, x, out, 3, 2, 2, grid=(1,))
    for n, m, p in [(3, 2, 2), (1, 1, 1), (2, 0, 3), (2, 3, 0)]:
        out[:] = np.nan
        three_deep_one_barrier[1, 64](x, out, n, m, p)
        expected = _three_deep(x.astype(np.float64), n, m, p) if n and m and p else x
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_a_loop_whose_trip_count_the_range_does_not_give_proves_no_read(rng):
    """A `break` (the loop may end before its range does) or a stop the outer loop carries
    (its value in an iteration is unknown): an empty inner loop is still possible, so the
    read is refused, or listed as not proven and checked on the cpu backend."""
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    errors = analyze(left_before_writing, (1,), (64,), x, out, 3, 2, 2).errors
    unwritten = [e for e in errors if e.code == "VG213"]
    assert unwritten and len(THREADS.findall(unwritten[0].message)) == 1, errors
    analysis = analyze(stop_carried_by_the_outer_loop, (1,), (64,), x, out, 3, 2, 2)
    line = stop_carried_by_the_outer_loop.fn.__code__.co_firstlineno + 11
    assert analysis.facts["unproven_shared_reads"] == (("s", line, 29),), analysis
    with pytest.raises(vg.SafetyError, match="VG213"):  # the cpu backend sees it happen
        stop_carried_by_the_outer_loop[1, 64](x, out, 1, 1, 0)
