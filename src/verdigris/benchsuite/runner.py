"""Run the selected cases: set each up at each size, check every implementation, time it.

Takes: cases (`registry.Case`), a timer (`timing.GpuTimer` or anything with its four
methods), `quick`, a progress bar (`progress.bar`). Gives: `run(...)` -> `Results`
(measurements, plus the cases skipped and why), `Measurement` and its stages (`SELECT`,
`FINAL`, `CONTROL`).

Guarantees: one failing implementation, setup or size never stops the run: its error is
recorded where its figure would be, and the rest go on. An implementation whose check
fails is not timed (a wrong kernel has no speed). A case whose `requires` names a peer
that is not installed is skipped with that reason. GPU memory is released between sizes.

Each case and size is timed in two passes, so that no peer's figure is the luckiest of
many: the first times every configuration of each peer that has several, together, and
chooses each peer's best; the second re-times only the chosen ones, together, in turn over
its rounds, with ours' chosen configuration timed a second time as an entry of its own
(the A-vs-A control: two figures of one kernel, whose ratio shows the noise of any ratio
of the pass). The report's figures are the second pass's; every round of both is kept.
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import traceback
from dataclasses import dataclass, field

from . import peers as peer_info
from .registry import KINDS, OURS, Case, Impl

SELECT, FINAL, CONTROL = "select", "final", "control"


@dataclass
class Measurement:
    case: str
    size: str  # the case's label for the size
    peer: str  # a key of peers.PEERS, "roofline", or "*" for a setup that failed
    config: str  # which configuration of the peer ("" where it has one)
    value: float | None  # the median of its rounds, in the unit of the case's kind; None
    #                      when it failed, or (SELECT) for a peer with nothing to choose
    error: str | None = None
    stage: str = SELECT  # SELECT: the first pass; FINAL: the second, the peer's chosen
    #                      configuration; CONTROL: ours' chosen one, timed a second time
    rounds: list = field(default_factory=list)  # the figure of every round, in order


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
    # the implementations timed in one pass take turns, since their figures are read as
    # ratios (`timing`); first calls are each a fresh process
    contested = {key: run for key, run in runs.items() if len(table[key[0]]) > 1}
    if contested:
        _record(rows, MEASURE[case.kind](case, size, contested, timer, False))
    chosen = {peer: _choose(case.kind, peer, configs, rows, runs)
              for peer, configs in table.items()}
    second = {(peer, config, FINAL): runs[peer, config] for peer, config in chosen.items()
              if config is not None}
    if chosen.get(OURS) is not None:  # last: as far from its twin as the turns allow
        second[OURS, chosen[OURS], CONTROL] = runs[OURS, chosen[OURS]]
    final = {key: Measurement(case.name, label, key[0], key[1], None, stage=key[2])
             for key in second}
    if second:
        _record(final, MEASURE[case.kind](case, size, second, timer, True))
    return [*rows.values(), *final.values()]


def _choose(kind: str, peer: str, configs: dict, rows: dict, runs: dict):
    """The configuration of `peer` that the second pass times: its only one, or the best of
    the first pass; None when none passed its check and was timed."""
    if len(configs) == 1:
        config = next(iter(configs))
        return config if (peer, config) in runs else None
    timed = {config: rows[peer, config].value for config in configs
             if rows[peer, config].value is not None}
    if not timed:
        return None
    return (max if KINDS[kind].higher_is_better else min)(timed, key=timed.get)


def _record(rows: dict, figures: dict) -> None:
    """Each key's rounds and their median into its row, or the exception as its error."""
    for key, rounds in figures.items():
        if isinstance(rounds, Exception):
            rows[key].error = _failure(rounds)
        else:
            rows[key].rounds, rows[key].value = rounds, statistics.median(rounds)


def _throughput(case: Case, size, runs: dict, timer, final: bool) -> dict:
    work = case.work(size)
    return {key: seconds if isinstance(seconds, Exception) else [work / s / 1e12 for s in seconds]
            for key, seconds in timer.device_seconds_in_turn(runs, final).items()}


def _launch(case: Case, size, runs: dict, timer, final: bool) -> dict:
    return timer.host_us_per_call(runs, final)


def _first_call(case: Case, size, runs: dict, timer, final: bool) -> dict:
    """The setup's callables time themselves (ms), each call a fresh process."""
    return timer.first_call_ms(runs, final)


# per kind: (case, size, {key: run}, timer, final) -> {key: [figure per round], or the
# exception it raised}
MEASURE = {"memory": _throughput, "compute": _throughput, "launch": _launch,
           "compile": _first_call}
assert set(MEASURE) == set(KINDS)


def _failure(exc: BaseException) -> str:
    if os.environ.get("VERDIGRIS_BENCH_TRACEBACK"):  # for whoever debugs a case
        traceback.print_exception(exc)
    return _short(exc)
