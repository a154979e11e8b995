"""Shared accesses proven apart by enumerating barrier intervals (`coverage.meetings`): every
thread of the block at every iteration, each point keyed by its element and by the barrier
instance it comes after (its epochs evaluated, trip counts of `for` loops over ranges
included), so that the stages of a bitonic sort, which meet only across barriers, need no
solver query.

Each racy kernel beside its fixed twin: where a wrong trip count or a barrier that only some
iterations pass would put two meeting points into different intervals, the kernel must
still be refused. And the enumeration never contradicts the solver: each pair it proves
apart, z3's race query finds no example for.
"""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt
from verdigris.safety import budgets, coverage, shared, solver
from verdigris.safety.symbolic import execute

from . import shared_pairs
from .test_shared_static import marked_line
from .test_static import fresh

B = 64  # threads: two warps, and partners `t ^ 32` in the other one (VG211, not VG212)


@simt.kernel
def inner_rounds(x, out, EXTRA: vg.constexpr):
    s = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    g = simt.global_id(0)
    s[t] = x[t]
    for i in range(3):
        for j in range(i + EXTRA):  # EXTRA 0: no iteration, so no barrier, when i == 0
            simt.barrier()
        out[g] += s[t ^ 32]  # refused here (EXTRA 0: at i == 0, right after the other warp's write)


@simt.kernel
def shrinking_stages(x, out, END: vg.constexpr):
    s = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    g = simt.global_id(0)
    s[t] = x[t]
    for i in range(1, 4):
        for j in range(4 - i):  # 3, 2, 1 rounds: the read below follows the last one
            s[t] = s[t] + 1.0
            simt.barrier()
        out[g] += s[t ^ 32]  # refused here (no END: the next stage's first write follows no barrier)
        if END:
            simt.barrier()


@simt.kernel
def rounds(x, out, EVERY: vg.constexpr, PARTNER: vg.constexpr):
    s = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    g = simt.global_id(0)
    for i in range(4):
        s[t] = x[i * B + t]
        simt.barrier()
        out[g] += s[t ^ PARTNER]  # refused here (no EVERY: odd rounds end with no barrier)
        if EVERY or i % 2 == 0:
            simt.barrier()


PAIRS = [(inner_rounds, "EXTRA", {}), (shrinking_stages, "END", {}), (rounds, "EVERY", {"PARTNER": 32})]


def specialized(kernel, **constexprs):
    k = fresh(kernel)
    x, out = np.zeros(4 * B, np.float32), np.zeros(4 * B, np.float32)
    values = k.bind((x, out), constexprs)
    return k.build(k.spec_key(values, k.describe_args(values), (B, 1, 1), None))


@pytest.mark.parametrize("kernel, fix, more", PAIRS, ids=[k.__name__ for k, _, _ in PAIRS])
def test_a_racy_kernel_is_refused_and_its_twin_proven_without_the_solver(kernel, fix, more):
    errors = safety.analyze(specialized(kernel, **{fix: 0}, **more)).errors
    assert errors and errors[0].code == "VG211", errors
    assert errors[0].loc.line == marked_line(kernel) and "thread" in str(errors[0])
    proof = safety.analyze(specialized(kernel, **{fix: 1}, **more))
    assert not proof.errors, proof.errors[0]
    assert proof.solver_queries == 0  # every pair by enumeration


def test_the_bitonic_sort_is_proven_by_enumeration():
    proof = safety.analyze(specialized(shared_pairs.bitonic_sort))
    assert not proof.errors and proof.solver_queries == 0
    assert proof.cpu_seconds < 0.3  # (0.04 s alone; 0.6 s with 15 solver queries before)


@pytest.mark.parametrize("kernel, constexprs", [
    (kernel, {fix: flag, **more}) for kernel, fix, more in PAIRS for flag in (0, 1)] + [
    (shared_pairs.bitonic_sort, {}), (shared_pairs.bitonic_sort_by_position_one_barrier_per_stage, {})],
    ids=lambda v: getattr(v, "__name__", None) or "-".join(f"{k}{x}" for k, x in v.items()) or "-")
def test_every_pair_enumeration_proves_apart_has_no_race_example(kernel, constexprs):
    trace = execute(specialized(kernel, **constexprs))
    accesses = [a for group in shared.by_array(trace).values() for a in group]
    proven = 0
    for i, a in enumerate(accesses):
        for b in accesses[i:]:
            if "write" in (a.kind, b.kind) and coverage.meetings(a, b, trace.space) == []:
                proven += 1
                with budgets.proving(30):
                    assert solver.collide(a, b, trace.space, budgets.RACE).status == "unsat", (a.loc, b.loc)
    assert proven


def test_threads_that_meet_only_within_a_warp_are_two_lanes_of_it():
    """The enumeration's meetings are of two warps where any are, so a race of lanes of one
    warp alone is VG212 without asking the solver about two warps."""
    errors = safety.analyze(specialized(rounds, EVERY=0, PARTNER=1)).errors
    assert errors and errors[0].code == "VG212", errors
    assert errors[0].loc.line == marked_line(rounds)


# Kernels the enumeration must not prove apart: a run-time trip count, an index loaded from
# memory, a barrier only some iterations pass, an int32 product that wraps. Each racy
# kernel beside its twin (FIX), whatever decides it (enumeration, witness or solver).


@simt.kernel
def run_time_rounds(x, out, n, FIX: vg.constexpr):  # threads t and t + 1 meet at d = 1 and 0
    s = simt.shared.array(2 * B, vg.float32)
    t = simt.thread_id(0)
    for d in range(n):
        s[t + d] = x[t]
        if FIX:
            simt.barrier()
    out[simt.global_id(0)] = x[t]


@simt.kernel
def loaded_slot(x, slots, out, FIX: vg.constexpr):  # any two threads may load one slot
    s = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    if FIX:
        s[t] = x[t]
    else:
        s[slots[t] % B] = x[t]
    simt.barrier()
    out[simt.global_id(0)] = s[t]


@simt.kernel
def barrier_every_other_round(x, out, FIX: vg.constexpr):
    s = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    s[t] = x[t]
    for i in range(4):
        if i % 2 == 0 or FIX:
            simt.barrier()
        v = s[(t + 1) % B]
        if FIX:
            simt.barrier()
        s[t] = v
    out[simt.global_id(0)] = s[t]


@simt.kernel
def wrapped_slot(x, out, FIX: vg.constexpr):  # t * 2**26 as int32 is 0 modulo 64 for every t
    s = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    k = vg.int32(t * 67108864 + t) if FIX else vg.int32(t * 67108864)
    s[k % B] = x[t]
    simt.barrier()
    out[simt.global_id(0)] = s[t]


def _twin_args(kernel, fix):
    x, out = np.ones(2 * B, np.float32), np.zeros(2 * B, np.float32)
    if kernel is run_time_rounds:
        return x, out, np.int32(3), fix
    if kernel is loaded_slot:
        return x, np.arange(B, dtype=np.int32), out, fix
    return x, out, fix


@pytest.mark.parametrize("kernel", [run_time_rounds, loaded_slot, barrier_every_other_round, wrapped_slot])
def test_what_enumeration_cannot_see_is_refused_beside_its_twin(kernel):
    from .test_simt_soundness import analyze

    assert analyze(kernel, (1,), (B,), *_twin_args(kernel, False)).errors
    fixed = analyze(kernel, (1,), (B,), *_twin_args(kernel, True))
    assert not fixed.errors, fixed.errors[0]

