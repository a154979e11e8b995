"""How long the race proof of every kernel that a set of tests specializes takes.

Runs pytest on the given test paths (default: the safety suite, the examples and the docs)
with `verdigris.safety.analyze` wrapped, and prints, slowest first, each kernel's proof time
(`Analysis.cpu_seconds`, CPU time of the proving thread, the most any of its specializations
took, beside its wall time), its solver queries and its verdict; the kernels over the limit
(1 s of CPU, `safety.budgets.KERNEL_S`: a proof that needs more is refused, VG205) are
marked. Proofs are cached per specialization on disk, so
the run uses a fresh cache directory. The machine is shared: run it twice.
Run: `PYTHONPATH=src:. python bench/proof_times.py [--limit 1.0] [--top 40] [pytest args...]` (`.`: test
files that import the `tests` package, such as tests/test_tile_dynamic_exchange.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

LIMIT_S = 1.0
DEFAULT_PATHS = ["tests/safety", "tests/test_examples.py", "tests/test_docs.py", "tests/test_readme.py"]


class Recorder:
    """A pytest plugin that keeps the slowest proof of each kernel."""

    def __init__(self):
        self.slowest: dict = {}  # (file, kernel) -> (cpu seconds, wall seconds, queries, verdict)

    def pytest_configure(self, config):
        from verdigris import safety

        analyze = safety.analyze

        def timed(kernel, *args, **kwargs):
            analysis = analyze(kernel, *args, **kwargs)
            key = (os.path.relpath(kernel.loc.file), kernel.name)
            verdict = "proven" if not analysis.errors else analysis.errors[0].code
            if analysis.cpu_seconds > self.slowest.get(key, (-1,))[0]:
                self.slowest[key] = (analysis.cpu_seconds, analysis.seconds, analysis.solver_queries, verdict)
            return analysis

        safety.analyze = timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=LIMIT_S)
    parser.add_argument("--top", type=int, default=40)
    options, rest = parser.parse_known_args()
    os.environ["VERDIGRIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="vg-proof-times-")
    import pytest

    recorder = Recorder()
    # in this process (-n 0: the suite runs on pytest-xdist workers otherwise), where the
    # recorder wraps the checker
    pytest.main(["-q", "-p", "no:cacheprovider", "-n", "0", *(rest or DEFAULT_PATHS)], plugins=[recorder])
    rows = sorted(recorder.slowest.items(), key=lambda kv: -kv[1][0])
    print(f"\n{len(rows)} kernels; slowest proofs first:")
    print(f"{'cpu s':>7} {'wall s':>7} {'queries':>7}  {'verdict':<7} kernel")
    for (path, name), (cpu, wall, queries, verdict) in rows[:options.top]:
        mark = "  <-- over the limit" if cpu > options.limit else ""
        print(f"{cpu:7.3f} {wall:7.3f} {queries:7d}  {verdict:<7} {path}::{name}{mark}")
    over = sum(cpu > options.limit for cpu, *_ in recorder.slowest.values())
    print(f"{over} over {options.limit} s")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
