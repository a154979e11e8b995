"""How the suite times a call: device time of a kernel, host time of a launch.

Takes: zero-argument callables that enqueue GPU work. Gives: `GpuTimer` with
`device_seconds(fn)` (median device time of one call), `device_seconds_in_turn(fns)` and
`host_us_per_call(fns)` (device time of a call, host time of a launch, of several callables
timed in turn), and `synchronize()`; the runner takes any object with the last three,
which is how the tests run the suite with a fake timer.

Guarantees: device times are `triton.testing.do_bench` medians where Triton is installed
(the method of bench/RESULTS.md: L2 flushed between calls, warm-up by time) and the same
procedure with torch's CUDA events otherwise, and the implementations of one case at one
size take turns over three rounds (the median of each's rounds); host times are medians
over batches of 500 back-to-back launches, the callables of one case taking turns batch by
batch, synchronized between batches.
"""
from __future__ import annotations

import statistics
import time

from . import peers


class GpuTimer:
    def __init__(self, quick: bool = False):
        # per call of device_seconds; device_seconds_in_turn gives each round a third
        self.warmup_ms, self.rep_ms = (10, 40) if quick else (25, 100)
        self.device_rounds = 3
        self.batch, self.rounds = 500, (10 if quick else 40)

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

    def device_seconds_in_turn(self, fns: dict) -> dict:
        """`device_seconds` of each callable of `fns` (key -> callable), timed together:
        `device_rounds` rounds, each callable in turn getting a share of the time in each;
        per callable the median of its rounds. Taking turns spreads the card's drift
        (clocks, temperature) over all of them alike, which their ratios need. A callable
        that raises gets its exception in place of a figure."""
        share = 1 / self.device_rounds
        return _in_turn(fns, self.device_rounds, lambda fn: self.device_seconds(fn, share))

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

    def host_us_per_call(self, fns: dict) -> dict:
        """Host µs per launch of each callable of `fns` (key -> callable), timed together:
        after a warm-up, rounds in which each callable in turn makes `batch` back-to-back
        launches, synchronized after each batch (so the launch queue never fills: a full
        queue would time the GPU, not the host); per callable the median of its batches.
        Taking turns cancels the host's drift from one callable to the next, which a
        ratio to the raw launch needs. A callable that raises gets its exception in place
        of a figure."""
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

        timed = _in_turn(warmed, self.rounds, batch)
        return {key: failed[key] if key in failed else timed[key] for key in fns}


def _in_turn(fns: dict, rounds: int, measure) -> dict:
    """`measure(fn)` of each callable once per round, the callables taking turns (each
    round starting one further on); per callable the median of its figures, or the
    exception `measure` raised (the callable then leaves the later rounds)."""
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
    return {key: failed[key] if key in failed else statistics.median(samples[key])
            for key in fns}
