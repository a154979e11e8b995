"""How much work the race proof of a kernel may do: a time for the whole kernel, and z3
steps (its `rlimit`) for each query.

The time: a kernel's race proof (every solver query of `safety.analyze`, counterexamples
included) takes at most `KERNEL_S` seconds of CPU time. A query the time cuts short is a
VG205 refusal ("not proven": the proof ran past its time), never a pass, and it comes fast:
a query that ran 100 s now stops at the limit. CPU time of the proving thread, not wall
time: on a machine that other processes load three times over, a proof of 0.4 s of CPU
takes 1.2 s, and would be refused under a wall-clock limit. `proving()` starts the clock
(per thread: proofs may run beside compilation); `watch(context)` interrupts a running
query (a watchdog thread reads the proving thread's CPU clock).

The steps: within that time, each query also stops after a number of z3 steps, so that
most verdicts do not depend on how loaded the machine is (each query also gets a z3 context
of its own: `encoder._Encoder`; with only a wall-clock limit, a grouped GEMM ordering was
proven in 0.2 s after other kernels and refused alone). Steps are sized in milliseconds of
the CI machine, where z3 takes 3,000-9,000 steps a millisecond on most queries (far fewer
on some: the time limit catches those).
"""
from __future__ import annotations

import ctypes
import functools
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar

# a kernel's race proof, all its queries together, in CPU seconds: issue #25's bound. Every
# example and test kernel is decided within 0.4 s of it on the CI machine, late in a long
# test process too (bench/proof_times.py; bench/RESULTS.md): shared pairs proven apart by
# enumerating barrier intervals (`coverage.meetings`: the bitonic sort 0.6-0.85 s -> 0.05
# s), z3 contexts that keep their memory (`_keep_freed_memory`: the locked accumulation of
# tests/tile_lock_kernels.py took 1.002 s in a CI run, and 0.08 s alone), first imports
# not counted (`unclocked`). The limit is 3x that bound: a proof's CPU time varies with the
# machine, not only with its load (on 2026-12-07 the same 2-core CI machine ran a proof of
# gelu_backward at a one-block grid axis in 0.75 s early in the day and 1.1 s later, and
# the whole suite 2.5x slower), and a safe kernel refused for a slow hour is a wrong verdict;
# proofs that take more than 1 s are a performance bug to fix (bench/proof_times.py)
KERNEL_S = 3.0
STEPS_PER_MS = 5000

RACE = 8000 * STEPS_PER_MS  # a race query (within the kernel's time)
READ = 1000 * STEPS_PER_MS  # a VG213 proof that needs more is left to the cpu backend
BOUNDS = 200 * STEPS_PER_MS  # a bounds proof that needs more keeps its check
READABLE = 200 * STEPS_PER_MS  # each refinement of a counterexample towards a readable one
LOOSE_S = 0.4  # CPU seconds of a race query's first try, without the extents' bound
READABLE_S = 0.3  # CPU seconds of a counterexample's refinements after its divisors' (small values)
# a query's first try (`encoder._Encoder.decide`), by z3's nlsat or, quantified, its
# quantifier elimination: steps, so that its verdict does not depend on the machine's load
# (at load 9 a deep triangular loop nest's elimination, 100k steps or 0.07 s alone, ran past
# a 0.1 s limit, and the default solver then past the kernel's 1 s: a safe kernel refused),
# and CPU seconds as a backstop. The steps: 1.5x-3x the most the tests' first tries that
# decide take (nlsat 98k, quantifier elimination 100k); nlsat's other tries run ~7,000
# steps a ms, so 20 ms before the default solver
NLSAT = 150_000
NLSAT_S = 0.06
QE = 300_000
QE_S = 0.3
INTERRUPT_AGAIN_S = 0.01  # wall seconds between interrupts of a query past its time (`watch`)
BACKSTOP_MS = 120_000  # wall-clock, a query's last resort (the CPU clock stops a proof's)
ORDER = 200 * STEPS_PER_MS  # a block order's injectivity (`injective`); past it, the general query

_deadline: ContextVar = ContextVar("deadline", default=None)  # (cpu clock, its deadline)


def _clock():
    """The CPU clock of the calling thread (z3 runs its queries in the caller's thread)."""
    return time.pthread_getcpuclockid(threading.get_ident())


class Proof:
    """What one proof's clock did not count (`excluded`, CPU seconds: first imports)."""

    excluded: float = 0.0


@contextmanager
def proving(seconds: float | None = None):
    """The clock of one kernel's race proof: its queries share `seconds` (`KERNEL_S`) of
    this thread's CPU time (what other processes on a loaded machine take does not count).
    Gives a `Proof`, whose `excluded` time is known once the proof ends."""
    clock = _clock()
    end = time.clock_gettime(clock) + (KERNEL_S if seconds is None else seconds)
    token = _deadline.set((clock, end))
    proof = Proof()
    try:
        yield proof
    finally:
        proof.excluded = _deadline.get()[1] - end
        _deadline.reset(token)


def z3():
    """The z3 module. Its first import (a 39 MB library: up to seconds of CPU on a loaded
    machine) is no proof's work, so the current proof's time does not count it; and the
    memory its contexts free stays in the process (`_keep_freed_memory`)."""
    module = sys.modules.get("z3")
    if module is None:
        with unclocked():
            import z3 as module
    _keep_freed_memory()
    return module


@contextmanager
def unclocked():
    """What runs inside is no proof's work (a module's first import: tenths of a second
    where its bytecode is not compiled yet, in a fresh clone), so the current proof's time
    does not count it."""
    started = time.thread_time()
    try:
        yield
    finally:
        deadline = _deadline.get()
        if deadline is not None:
            _deadline.set((deadline[0], deadline[1] + time.thread_time() - started))


# glibc's malloc options (mallopt): blocks of up to 32 MB come from the heap, and up to 64 MB
# freed at its top stay there
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 64 << 20


@functools.cache  # (once a process)
def _keep_freed_memory() -> None:
    """Keep the memory of z3's contexts in the process once freed. Each query makes a few
    z3 contexts of ~16 MB of blocks; where glibc's malloc maps such blocks anew each time
    (its threshold for that adapts to what the process freed before: a long test process
    with a large heap), every context costs ~4,000 page faults, 9 ms of CPU instead of 1,
    and a proof of 20 contexts took twice its time late in a test process (the locked
    accumulation: 0.08 s alone, 0.2 s). Fixed thresholds keep the blocks for reuse. Other
    C libraries: nothing to do."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def _left() -> float | None:
    """Seconds of CPU time left to the current proof; None outside any proof."""
    deadline = _deadline.get()
    return None if deadline is None else deadline[1] - time.clock_gettime(deadline[0])


def spent() -> bool:
    """Whether the current proof's time is up."""
    left = _left()
    return left is not None and left <= 0


@contextmanager
def watch(context, seconds: float | None = None):
    """Interrupt z3 (`context`: the z3 context of the running query) when the current
    proof's time is up, or `seconds` of CPU from now, from a watchdog thread that reads the
    proving thread's CPU clock."""
    deadline = _deadline.get()
    if seconds is not None:
        clock = _clock() if deadline is None else deadline[0]
        end = time.clock_gettime(clock) + seconds
        deadline = (clock, end if deadline is None else min(end, deadline[1]))
    if deadline is None:
        yield
        return
    done = threading.Event()

    def watchdog():
        while not done.is_set():
            left = deadline[1] - time.clock_gettime(deadline[0])
            if left <= 0:
                # again until the query ends: an interrupt that comes before z3's check has
                # begun is lost, and the check then ran to its steps' end (1.5 s of nlsat)
                context.interrupt()
                left = INTERRUPT_AGAIN_S
            done.wait(min(left, 0.05))

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
