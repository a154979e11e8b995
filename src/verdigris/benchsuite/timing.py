"""How the suite times a call: device time of a kernel, host time of a launch, first calls.

Takes: zero-argument callables that enqueue GPU work (or, for first calls, that time one
themselves and return milliseconds). Gives: `GpuTimer` with `device_seconds(fn)` (median
device time of one call), and, for several callables timed together in rounds,
`device_seconds_in_turn(fns, final)`, `host_us_per_call(fns, final)` and
`first_call_ms(fns, final)` (each: key -> the figure of every round, or the exception the
callable raised), and `synchronize()`; the runner takes any object with the last four,
which is how the tests run the suite with a fake timer. `final` picks the rounds of the
runner's second pass (the chosen configurations re-timed) over its first (selection).

Guarantees: device times are `triton.testing.do_bench` medians where Triton is installed
(the method of bench/RESULTS.md: L2 flushed between calls, warm-up by time) and the same
procedure with torch's CUDA events otherwise; the callables timed together take turns,
round by round, each round starting one further on, so the card's and the host's drift
falls on all of them alike. A device round gives each callable an equal share of the
timer's warm-up and repetition time; a host round is a batch of 500 back-to-back
launches, synchronized after it; a first-call round is one call (one fresh process).
"""
from __future__ import annotations

import statistics
import time

from . import peers


class GpuTimer:
    def __init__(self, quick: bool = False):
        # per implementation and pass, spread over its rounds
        self.warmup_ms, self.rep_ms = (10, 40) if quick else (25, 100)
        self.batch = 500
        # rounds of the selection pass and of the final pass: enough in the final one for a
        # spread and an A-vs-A control; first calls are a fresh process each
        self.device_rounds = (3, 5 if quick else 7)
        self.host_rounds = (5 if quick else 10, 10 if quick else 40)
        self.first_call_rounds = (1, 3)

    def synchronize(self) -> None:
        from ..runtime import driver

        driver.synchronize()

    def device_seconds(self, fn, share: float = 1.0) -> float:
        """Median device seconds of one call, over `share` of the timer's warm-up and
        repetition time."""
        warmup, rep = self.warmup_ms * share, self.rep_ms * share
        if peers.has("triton"):
            from triton.testing import do_bench

            ms = do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
        else:
            ms = self._events_median_ms(fn, warmup, rep)
        return ms * 1e-3

    def device_seconds_in_turn(self, fns: dict, final: bool) -> dict:
        """`device_seconds` of each callable of `fns` (key -> callable), per round, the
        callables taking turns; each gets an equal share of the warm-up and repetition time
        in each round."""
        rounds = self.device_rounds[final]
        return _in_turn(fns, rounds, lambda fn: self.device_seconds(fn, 1 / rounds))

    def _events_median_ms(self, fn, warmup_ms: float, rep_ms: float) -> float:
        import torch

        flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")  # larger than L2
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(warmup_ms / estimate))):
            fn()
        times = []
        for _ in range(max(1, int(rep_ms / estimate))):
            flush.zero_()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def host_us_per_call(self, fns: dict, final: bool) -> dict:
        """Host µs per launch of each callable of `fns` (key -> callable), per batch: after
        a warm-up, rounds in which each callable in turn makes `batch` back-to-back
        launches, synchronized after each batch (so the launch queue never fills: a full
        queue would time the GPU, not the host). A callable that raises gets its exception
        in place of its figures."""
        warmed, failed = {}, {}
        for key, fn in fns.items():
            try:
                for _ in range(200):
                    fn()
                warmed[key] = fn
            except Exception as exc:
                failed[key] = exc
        self.synchronize()

        def batch(fn):
            try:
                start = time.perf_counter()
                for _ in range(self.batch):
                    fn()
                return (time.perf_counter() - start) / self.batch * 1e6
            finally:
                self.synchronize()

        timed = _in_turn(warmed, self.host_rounds[final], batch)
        return {key: failed[key] if key in failed else timed[key] for key in fns}

    def first_call_ms(self, fns: dict, final: bool) -> dict:
        """What each callable of `fns` returns (the milliseconds of a first call it timed,
        in a fresh process), per round, the callables taking turns."""
        return _in_turn(fns, self.first_call_rounds[final], lambda fn: float(fn()))


def _in_turn(fns: dict, rounds: int, measure) -> dict:
    """`measure(fn)` of each callable once per round, the callables taking turns (each
    round starting one further on); per callable the list of its figures, or the exception
    `measure` raised (the callable then leaves the later rounds)."""
    live, failed = dict(fns), {}
    samples: dict = {key: [] for key in fns}
    for r in range(rounds):
        if not live:
            break
        keys = list(live)
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            try:
                samples[key].append(measure(live[key]))
            except Exception as exc:
                failed[key] = exc
                del live[key]
    return {key: failed.get(key, samples[key]) for key in fns}
