"""Run the selected cases: set each up at each size, check every implementation, time it.

Takes: cases (`registry.Case`), a timer (`timing.GpuTimer` or anything with its three
methods), `quick`, a progress bar (`progress.bar`). Gives: `run(...)` -> `Results`
(measurements, plus the cases skipped and why) and `Measurement`.

Guarantees: one failing implementation, setup or size never stops the run: its error is
recorded where its figure would be, and the rest go on. An implementation whose check
fails is not timed (a wrong kernel has no speed). A case whose `requires` names a peer
that is not installed is skipped with that reason. GPU memory is released between sizes.
"""
from __future__ import annotations

import gc
import os
import sys
import traceback
from dataclasses import dataclass, field

from . import peers as peer_info
from .registry import KINDS, Case, Impl


@dataclass
class Measurement:
    case: str
    size: str  # the case's label for the size
    peer: str  # a key of peers.PEERS, "roofline", or "*" for a setup that failed
    config: str  # which configuration of the peer ("" where it has one)
    value: float | None  # in the unit of the case's kind; None when it failed
    error: str | None = None


@dataclass
class Results:
    cases: list  # the Case objects that were selected
    measurements: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)  # case name -> why it did not run
    ceilings: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def normalize(impls) -> dict:
    """A setup function's answer as {peer: {config: Impl}}."""
    table = {}
    for peer, value in impls.items():
        configs = value if isinstance(value, dict) else {"": value}
        table[peer] = {str(config): v if isinstance(v, Impl) else Impl(v)
                       for config, v in configs.items()}
    return table


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def missing_peers(case: Case) -> list:
    """The peers of `case.requires` that are not installed here."""
    return [p for p in case.requires if not peer_info.has(p)]


def steps(cases, quick: bool) -> int:
    return sum(len(c.quick_sizes if quick else c.sizes) for c in cases)


def run(cases, *, timer, quick: bool, bar, results: Results | None = None) -> Results:
    """Measure `cases`; with `results`, add to it (so an interrupted run keeps what it had)."""
    results = results if results is not None else Results(list(cases))
    for case in cases:
        missing = missing_peers(case)
        sizes = case.quick_sizes if quick else case.sizes
        if missing:
            results.skipped[case.name] = f"needs {', '.join(missing)}, not installed"
            for size in sizes:
                bar.step(f"{case.name} (skipped)")
            continue
        for size in sizes:
            label = case.size_label(size)
            results.measurements.extend(_measure_size(case, size, label, timer))
            _release_memory()
            bar.step(f"{case.name} {label}")
    return results


def _measure_size(case: Case, size, label: str, timer) -> list:
    try:
        table = normalize(case.setup(size))
    except Exception as exc:
        return [Measurement(case.name, label, "*", "", None, "setup: " + _short(exc))]
    rows, runs = {}, {}  # (peer, config) -> its Measurement; -> its run, once checked
    for peer, configs in table.items():
        for config, impl in configs.items():
            row = rows[peer, config] = Measurement(case.name, label, peer, config, None)
            try:
                problem = impl.check() if impl.check else None
            except Exception as exc:
                row.error = _failure(exc)
                continue
            if problem:
                row.error = "wrong: " + problem
            else:
                runs[peer, config] = impl.run
    # the implementations of one case and size are timed together, in turn, since their
    # figures are read as ratios (`timing.GpuTimer`); first calls are each a fresh process
    values = MEASURE[case.kind](case, size, runs, timer)
    for key, value in values.items():
        if isinstance(value, Exception):
            rows[key].error = _failure(value)
        else:
            rows[key].value = value
    return list(rows.values())


def _throughput(case: Case, size, runs: dict, timer) -> dict:
    return {key: seconds if isinstance(seconds, Exception) else case.work(size) / seconds / 1e12
            for key, seconds in timer.device_seconds_in_turn(runs).items()}


def _launch(case: Case, size, runs: dict, timer) -> dict:
    return timer.host_us_per_call(runs)


def _first_call(case: Case, size, runs: dict, timer) -> dict:
    """The setup's callables time themselves (ms); one that raises gets its exception."""
    values = {}
    for key, run in runs.items():
        try:
            values[key] = float(run())
        except Exception as exc:
            values[key] = exc
    return values


# per kind: (case, size, {key: run}, timer) -> {key: figure, or the exception it raised}
MEASURE = {"memory": _throughput, "compute": _throughput, "launch": _launch,
           "compile": _first_call}
assert set(MEASURE) == set(KINDS)


def _failure(exc: BaseException) -> str:
    if os.environ.get("VERDIGRIS_BENCH_TRACEBACK"):  # for whoever debugs a case
        traceback.print_exception(exc)
    return _short(exc)
