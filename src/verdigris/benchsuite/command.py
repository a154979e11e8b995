"""`verdigris bench`: find the cases, measure them on this GPU, print and write the results.

Takes: the parsed arguments of the `bench` subcommand (filter, quick, out, bench_dir, list,
plain_progress). Gives: `run_bench(args, env=None) -> exit status`, `find_bench_dir`,
`gpu_environment()`, and `NO_GPU`, the status of a run on a machine without a GPU.

Guarantees:
- Without a GPU it says so on stderr, runs nothing and returns NO_GPU (3), so a script can
  tell "nothing was measured" from success (0) and from a usage error (2); `--list` works
  anywhere.
- Results go to `--out DIR`, by default `docs/bench/<date>-<card>/` of the checkout that
  holds the bench directory (`-quick` appended for a `--quick` run): results.json,
  index.md (the table and the plots), table.txt and one PNG per plot group when matplotlib
  is installed. An interrupted run (Ctrl-C) still writes what it measured.
- results.json records the commit of the checkout verdigris runs from and the GPU's clocks
  at the start and the end of the run (`machine`).
- `env` replaces the GPU, its timer, its ceilings and its clocks (the tests use a fake one).
"""
from __future__ import annotations

import platform
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import ceilings, machine, peers, plots, progress, registry, report, runner

NO_GPU = 3
INTERRUPTED = 130


class BenchUsageError(Exception):
    """A mistake in the command line (the CLI prints it and exits with status 2)."""


@dataclass
class Environment:
    card: str
    timer: object  # timing.GpuTimer or a stand-in
    measure_ceilings: Callable = field(repr=False)  # (memory: bool, compute: bool) -> dict
    details: dict = field(default_factory=dict)  # arch, driver, SMs: for the JSON
    clocks: Callable = field(default=machine.clocks, repr=False)  # () -> the GPU's clocks now


def find_bench_dir(explicit=None) -> Path:
    """`explicit`, else ./bench, else the bench/ of the checkout verdigris runs from."""
    if explicit:
        path = Path(explicit)
        if not path.is_dir():
            raise BenchUsageError(f"no such directory: {explicit}")
        return path
    candidates = [Path.cwd() / "bench", Path(__file__).resolve().parents[3] / "bench"]
    for path in candidates:
        if path.is_dir():
            return path
    raise BenchUsageError("found no bench/ directory (looked in ./bench and beside the "
                          "verdigris sources); run from a checkout of verdigris or pass "
                          "--bench-dir DIR")


def gpu_environment(quick: bool):
    """(Environment, None) on a machine with a GPU, else (None, why not)."""
    from ..runtime import driver
    from .timing import GpuTimer

    if not driver.is_available():
        try:
            driver.device_count()
            why = "the driver reports no GPU"
        except Exception as err:  # the driver's own words, e.g. no libcuda
            why = getattr(err, "message", str(err))
        return None, why
    props = driver.properties(0)
    timer = GpuTimer(quick)

    def measure(memory: bool, compute: bool) -> dict:
        return ceilings.measure(timer, props.name, quick, compute) if memory or compute else {}

    details = {"arch": props.arch, "sms": props.multiprocessors,
               "driver": ".".join(map(str, driver.driver_version()))}
    return Environment(props.name, timer, measure, details), None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_out_dir(bench_dir: Path, date: str, card: str, quick: bool) -> Path:
    name = f"{date}-{slug(card)}" + ("-quick" if quick else "")
    docs = bench_dir.resolve().parent / "docs"
    return docs / "bench" / name if docs.is_dir() else Path.cwd() / f"verdigris-bench-{name}"


def _list(cases, problems, quick: bool, out) -> int:
    lacking = 0
    width = max(32, *(len(c.name) + 1 for c in cases))
    for case in cases:
        sizes = case.quick_sizes if quick else case.sizes
        missing = runner.missing_peers(case)
        lacking += bool(missing)
        print(f"{case.name:{width}} {case.kind:8} {', '.join(map(case.size_label, sizes))}  "
              f"({Path(case.source).name})"
              + (f"  [needs {', '.join(missing)}: not installed here]" if missing else ""),
              file=out)
    print(f"{len(cases)} case(s), {runner.steps(cases, quick)} size(s) to measure"
          + (f" ({lacking} case(s) need peers that are not installed here)" if lacking else "")
          + f"; peers installed: {', '.join(f'{p} {v}' for p, v in peers.installed().items())}",
          file=out)
    _print_problems(problems, out)
    return 0


def _print_problems(problems: dict, out) -> None:
    for script, why in problems.items():
        print(f"note: bench/{script} not loaded: {why}", file=out)


def run_bench(args, env: Environment | None = None, out=None, err=None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    bench_dir = find_bench_dir(getattr(args, "bench_dir", None))
    if env is None and not args.list:  # before importing the scripts: torch takes seconds
        env, why = gpu_environment(args.quick)
        if env is None:
            print(f"verdigris bench: no NVIDIA GPU here ({why}).\nThe benchmarks time GPU "
                  "kernels, so nothing was run. `verdigris bench --list` shows the cases; "
                  "`verdigris doctor` shows what was found.", file=err)
            return NO_GPU
    problems = registry.discover(bench_dir)
    if not registry.REGISTRY:
        _print_problems(problems, err)
        raise BenchUsageError(f"the scripts of {bench_dir} register no benchmark case")
    try:
        cases = registry.select(args.filter)
    except ValueError as exc:
        raise BenchUsageError(str(exc)) from None
    if not cases:
        raise BenchUsageError(f"no benchmark case matches --filter {args.filter!r}; "
                              "`verdigris bench --list` shows them")
    if args.list:
        return _list(cases, problems, args.quick, out)
    _print_problems(problems, err)
    date = time.strftime("%Y-%m-%d")
    results = runner.Results(cases)
    results.meta = {"date": date, "card": env.card, **env.details, "quick": args.quick,
                    "filter": args.filter, "peers": peers.installed(),
                    "python": platform.python_version(), "bench_dir": str(bench_dir),
                    **machine.commit(), "clocks": {"start": env.clocks()}}
    status = 0
    with progress.bar(runner.steps(cases, args.quick) + 1, err,
                      plain=getattr(args, "plain_progress", False)) as bar:
        try:
            results.ceilings = env.measure_ceilings(
                any(c.kind == "memory" for c in cases), any(c.kind == "compute" for c in cases))
            bar.step("rooflines")
            runner.run(cases, timer=env.timer, quick=args.quick, bar=bar, results=results)
        except KeyboardInterrupt:
            results.meta["interrupted"] = True
            status = INTERRUPTED
    results.meta["clocks"]["end"] = env.clocks()
    out.write("\n" + report.format_table(results))
    out_dir = Path(args.out) if args.out else default_out_dir(bench_dir, date, env.card,
                                                               args.quick)
    written = plots.write_plots(results, out_dir) if plots.available() else []
    paths = report.write(results, out_dir, written)
    print(f"\nwrote {paths['json']}, {paths['markdown'].name}, {paths['table'].name}"
          + "".join(f", {p.name}" for p in written), file=out)
    if not plots.available():
        print("no plots: matplotlib is not installed (pip install 'verdigris[bench]')", file=out)
    return status
