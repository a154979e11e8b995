"""Barrier intervals of loops nested three and four deep with run-time trip counts (issue
#25, docs/safety.md): an iteration of a loop passes a barrier where a chain of loops inside
it, down to one whose every iteration ends with a barrier, runs at least once; an access
after the loops (or in a later round of the outer one) is apart from one before them
exactly where the condition it is under says such a chain ran. Barriers in the innermost
loop only, in a middle loop only, in two chains side by side; trip counts from parameters,
constants and the outer counters (triangular ranges). Each safe kernel is run on the cpu
backend against a float64 reference for sizes with zeros, beside its racy twin (a chain
that may not run, a write after the last barrier, a `break`, a stop the middle loop
carries, a chain or a barrier skipped on one path), refused naming the two threads and
caught by the cpu backend with the sizes that race.
"""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt

from .test_simt_soundness import THREADS, accepted, analyze


@simt.kernel
def innermost(x, out, n, m, p, q):
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def innermost_may_be_empty(x, out, n, m, p, q):  # p == 0: no barrier after s[t] = v
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else v


@simt.kernel
def four_deep(x, out, n, m, p, q):  # a constant trip count in the chain
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(2):
                for h in range(p):
                    s[t] = v + vg.float32(i + j + k + h)
                    simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def four_deep_second_may_be_empty(x, out, n, m, p, q):  # m == 0
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(2):
                for h in range(p):
                    s[t] = v + vg.float32(i + j + k + h)
                    simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and p > 0 else v


@simt.kernel
def middle(x, out, n, m, p, q):  # the barrier ends the third loop; the innermost has none
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                for h in range(q):
                    v = v + vg.float32(1)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else x[simt.global_id(0)]


@simt.kernel
def middle_may_be_empty(x, out, n, m, p, q):  # p == 0
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                for h in range(q):
                    v = v + vg.float32(1)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 else x[simt.global_id(0)]


@simt.kernel
def two_chains(x, out, n, m, p, q):  # a barrier a loop deep, another two loops deep
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            simt.barrier()
        for k in range(p):
            for h in range(q):
                s[t] = v + vg.float32(i + k + h)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and (m > 0 or p > 0 and q > 0) else v


@simt.kernel
def two_chains_one_short(x, out, n, m, p, q):  # m == 0 and q == 0
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            simt.barrier()
        for k in range(p):
            for h in range(q):
                s[t] = v + vg.float32(i + k + h)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and (m > 0 or p > 0) else v


@simt.kernel
def triangle(x, out, n, m, p, q):  # range(j, n) is never empty for j < n
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(i, n):
            for k in range(j, n):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def triangle_empty_at_last(x, out, n, m, p, q):  # range(j + 1, n) is empty at n == 1
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(i, n):
            for k in range(j + 1, n):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def four_deep_triangle(x, out, n, m, p, q):
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(i, n):
            for k in range(j, n):
                for h in range(k, n):
                    s[t] = v + vg.float32(i + j + k + h)
                    simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def four_deep_triangle_empty_at_last(x, out, n, m, p, q):  # range(k + 1, n) at n == 1
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(i, n):
            for k in range(j, n):
                for h in range(k + 1, n):
                    s[t] = v + vg.float32(i + j + k + h)
                    simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 else v


@simt.kernel
def read_in_the_next_round(x, out, n, m, p, q):  # round i reads after round i - 1's barriers
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    acc = vg.float32(0)
    for i in range(n):
        if i > 0 and m > 0 and p > 0:
            acc += s[63 - t]
        for j in range(m):
            for k in range(p):
                simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def read_in_the_next_round_unguarded(x, out, n, m, p, q):  # p == 0
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    acc = vg.float32(0)
    for i in range(n):
        if i > 0 and m > 0:
            acc += s[63 - t]
        for j in range(m):
            for k in range(p):
                simt.barrier()
    out[simt.global_id(0)] = acc


@simt.kernel
def write_before_the_inner_loop(x, out, n, m, p, q):
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            s[t] = v + vg.float32(i + j)
            for k in range(p):
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def write_after_the_inner_loop(x, out, n, m, p, q):  # no barrier after the last write
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                simt.barrier()
            s[t] = v + vg.float32(i + j)
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def left_before_the_barrier(x, out, n, m, p, q):  # q == 0: every innermost loop breaks at once
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                if k >= q:
                    break
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def barrier_skipped_at_odd_k(x, out, n, m, p, q):  # p == 2: s[t] written after the last one
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        for j in range(m):
            for k in range(p):
                s[t] = v + vg.float32(i + j + k)
                if k % 2 == 0:
                    simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def stop_carried_by_the_middle_loop(x, out, n, m, p, q):  # w == 0 in round (0, 0) when p == 1
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    w = p - 1
    for i in range(n):
        for j in range(m):
            for k in range(w):
                s[t] = v + vg.float32(i + j + k)
                simt.barrier()
            w = w + 1
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


@simt.kernel
def chain_skipped_in_even_rounds(x, out, n, m, p, q):  # n == 1: round 0 passes no barrier
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    v = x[simt.global_id(0)]
    s[t] = v
    for i in range(n):
        if i % 2 == 1:
            for j in range(m):
                for k in range(p):
                    s[t] = v + vg.float32(i + j + k)
                    simt.barrier()
    out[simt.global_id(0)] = s[63 - t] if n > 0 and m > 0 and p > 0 else v


def _last(x, guard, loops, value):
    """out of a kernel that writes s[t] = value(x, *iteration) in each iteration of `loops`
    (after s[t] = x) and reads s[63 - t] after them under `guard`."""
    s = x.copy()
    for it in loops:
        s = value(x, *it)
    return s[::-1] if guard else x


def _innermost(x, n, m, p, q):
    return _last(x, n > 0 and m > 0 and p > 0, itertools.product(range(n), range(m), range(p)),
                 lambda x, i, j, k: x + (i + j + k))


def _four_deep(x, n, m, p, q):
    return _last(x, n > 0 and m > 0 and p > 0, itertools.product(range(n), range(m), range(2), range(p)),
                 lambda x, i, j, k, h: x + (i + j + k + h))


def _middle(x, n, m, p, q):
    return _last(x, n > 0 and m > 0 and p > 0, (), None)


def _two_chains(x, n, m, p, q):
    return _last(x, n > 0 and (m > 0 or p > 0 and q > 0), itertools.product(range(n), range(p), range(q)),
                 lambda x, i, k, h: x + (i + k + h))


def _triangle(x, n, m, p, q):
    loops = ((i, j, k) for i in range(n) for j in range(i, n) for k in range(j, n))
    return _last(x, n > 0, loops, lambda x, i, j, k: x + (i + j + k))


def _four_deep_triangle(x, n, m, p, q):
    loops = ((i, j, k, h) for i in range(n) for j in range(i, n) for k in range(j, n) for h in range(k, n))
    return _last(x, n > 0, loops, lambda x, i, j, k, h: x + (i + j + k + h))


def _read_in_the_next_round(x, n, m, p, q):
    return x[::-1] * (max(n - 1, 0) if m > 0 and p > 0 else 0)


def _write_before_the_inner_loop(x, n, m, p, q):
    return _last(x, n > 0 and m > 0 and p > 0, itertools.product(range(n), range(m)),
                 lambda x, i, j: x + (i + j))


PAIRS = [  # (safe, its float64 reference, racy twin, sizes that race)
    (innermost, _innermost, innermost_may_be_empty, (2, 2, 0, 0)),
    (innermost, _innermost, stop_carried_by_the_middle_loop, (1, 1, 1, 0)),
    (innermost, _innermost, chain_skipped_in_even_rounds, (1, 1, 1, 0)),
    (four_deep, _four_deep, four_deep_second_may_be_empty, (2, 0, 1, 0)),
    (middle, _middle, middle_may_be_empty, (1, 2, 0, 0)),
    (two_chains, _two_chains, two_chains_one_short, (2, 0, 2, 0)),
    (triangle, _triangle, triangle_empty_at_last, (1, 0, 0, 0)),
    (four_deep_triangle, _four_deep_triangle, four_deep_triangle_empty_at_last, (1, 0, 0, 0)),
    (read_in_the_next_round, _read_in_the_next_round, read_in_the_next_round_unguarded, (2, 1, 0, 0)),
    (write_before_the_inner_loop, _write_before_the_inner_loop, write_after_the_inner_loop, (1, 1, 1, 0)),
    (write_before_the_inner_loop, _write_before_the_inner_loop, left_before_the_barrier, (1, 1, 1, 0)),
    (write_before_the_inner_loop, _write_before_the_inner_loop, barrier_skipped_at_odd_k, (1, 1, 2, 0)),
]
SIZES = [(2, 3, 2, 2), (1, 1, 1, 1), (3, 0, 2, 1), (2, 2, 0, 3), (0, 2, 2, 2), (2, 1, 3, 0)]


@pytest.mark.parametrize("safe,reference,racy,races", PAIRS, ids=[p[2].__name__ for p in PAIRS])
def test_accesses_after_deep_barrier_loops_are_apart_exactly_where_a_chain_ran(rng, safe, reference, racy,
                                                                              races):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    started = time.perf_counter()
    accepted(safe, x, out, 3, 2, 2, 2, grid=(1,))
    assert time.perf_counter() - started < 2.0  # under 1 s alone (2 cores shared in CI)
    for sizes in SIZES:
        out[:] = np.nan
        safe[1, 64](x, out, *sizes)
        np.testing.assert_allclose(out, reference(x.astype(np.float64), *sizes), rtol=1e-5, atol=1e-5)

    errors = analyze(racy, (1,), (64,), x, out, 3, 2, 2, 2).errors
    assert errors and errors[0].code == "VG211", errors
    assert len(THREADS.findall(errors[0].message)) == 2, errors[0].message
    with pytest.raises(vg.SafetyError, match="VG211"):  # the cpu backend sees it happen
        racy[1, 64](x, out, *races)
