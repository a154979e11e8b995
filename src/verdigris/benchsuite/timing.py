"""How the suite times a call: device time of a kernel, host time of a launch.

Takes: zero-argument callables that enqueue GPU work. Gives: `GpuTimer` with
`device_seconds(fn)` (median device time of one call) and `host_us_per_call(fn)` (host
time per launch), and `synchronize()`; the runner takes any object
with these three methods, which is how the tests run the suite with a fake timer.

Guarantees: device times are `triton.testing.do_bench` medians where Triton is installed
(the method of bench/RESULTS.md: L2 flushed between calls, warm-up by time) and the same
procedure with torch's CUDA events otherwise; host times are the median over `repeats`
of `calls` back-to-back launches divided by `calls`, after a warm-up, synchronized only
between repeats.
"""
from __future__ import annotations

import statistics
import time

from . import peers


class GpuTimer:
    def __init__(self, quick: bool = False):
        self.warmup_ms, self.rep_ms = (10, 40) if quick else (25, 100)
        self.calls, self.repeats = (2000, 3) if quick else (10000, 5)

    def synchronize(self) -> None:
        from ..runtime import driver

        driver.synchronize()

    def device_seconds(self, fn) -> float:
        if peers.has("triton"):
            from triton.testing import do_bench

            ms = do_bench(fn, warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median")
        else:
            ms = self._events_median_ms(fn)
        return ms * 1e-3

    def _events_median_ms(self, fn) -> float:
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
        for _ in range(max(1, int(self.warmup_ms / estimate))):
            fn()
        times = []
        for _ in range(max(1, int(self.rep_ms / estimate))):
            flush.zero_()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def host_us_per_call(self, fn) -> float:
        for _ in range(200):
            fn()
        self.synchronize()
        per_call = []
        for _ in range(self.repeats):
            start = time.perf_counter()
            for _ in range(self.calls):
                fn()
            per_call.append((time.perf_counter() - start) / self.calls * 1e6)
            self.synchronize()
        return statistics.median(per_call)
