"""How the suite times a call: device time of a kernel, host time of a launch.

Takes: zero-argument callables that enqueue GPU work. Gives: `GpuTimer` with
`device_seconds(fn)` (median device time of one call) and `host_us_per_call(fns)` (host
time per launch of several callables, timed in turn), and `synchronize()`; the runner
takes any object with these three methods, which is how the tests run the suite with a
fake timer.

Guarantees: device times are `triton.testing.do_bench` medians where Triton is installed
(the method of bench/RESULTS.md: L2 flushed between calls, warm-up by time) and the same
procedure with torch's CUDA events otherwise; host times are medians over batches of 500
back-to-back launches, the callables of one case taking turns batch by batch, synchronized
between batches.
"""
from __future__ import annotations

import statistics
import time

from . import peers


class GpuTimer:
    def __init__(self, quick: bool = False):
        self.warmup_ms, self.rep_ms = (10, 40) if quick else (25, 100)
        self.batch, self.rounds = 500, (10 if quick else 40)

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

    def host_us_per_call(self, fns: dict) -> dict:
        """Host µs per launch of each callable of `fns` (key -> callable), timed together:
        after a warm-up, rounds in which each callable in turn makes `batch` back-to-back
        launches, synchronized after each batch (so the launch queue never fills: a full
        queue would time the GPU, not the host); per callable the median of its batches.
        Taking turns cancels the host's drift from one callable to the next, which a
        ratio to the raw launch needs. A callable that raises gets its exception in place
        of a figure."""
        out: dict = {}
        live = {}
        for key, fn in fns.items():
            try:
                for _ in range(200):
                    fn()
                live[key] = fn
            except Exception as exc:
                out[key] = exc
        self.synchronize()
        samples: dict = {key: [] for key in live}
        for r in range(self.rounds):
            if not live:
                break
            keys = list(live)
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                fn = live[key]
                try:
                    start = time.perf_counter()
                    for _ in range(self.batch):
                        fn()
                    samples[key].append((time.perf_counter() - start) / self.batch * 1e6)
                except Exception as exc:
                    out[key] = exc
                    del live[key], samples[key]
                self.synchronize()
        out.update({key: statistics.median(v) for key, v in samples.items()})
        return {key: out[key] for key in fns}
