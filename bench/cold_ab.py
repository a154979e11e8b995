"""Cold first calls of two source trees, A/B on one machine: which is faster to compile?

Host-side times move 1.3-2x between lent machines, so a change to the compile path can only
be judged against the code before it on the same machine, in the same command. This runs
`bench/runtime.py`'s cold first-call script (a fresh process, an empty cache, the library
imported and the inputs made before the clock starts) for vector add, softmax and GEMM,
alternating the two trees, and prints each tree's median and range, then the last run's
stage log (`VERDIGRIS_LOG=compile`) of each.

Run: `python3 bench/cold_ab.py OLD_SRC NEW_SRC [--reps N]`, each SRC a folder holding the
`verdigris` package (e.g. `git archive <commit> src | tar -x -C /tmp/old`, then
/tmp/old/src). Needs a GPU (or the fake driver of tests/fakecuda).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from runtime import FIRST_CALL, OURS

KERNELS = ("vector_add", "softmax", "gemm")


def first_call(src: str, which: str, work: str) -> tuple:
    """(ms, stage log lines) of one cold first call with the package in `src`."""
    script = FIRST_CALL["ours"].format(src=src, work=work, which=which)
    env = dict(os.environ, VERDIGRIS_CACHE_DIR=tempfile.mkdtemp(prefix="vg-ab-cache-"),
               VERDIGRIS_LOG="compile")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{src} {which}: {done.stderr.strip()[-300:]}")
    lines = done.stdout.strip().splitlines()
    return float(lines[-1]), [line for line in lines if line.startswith("verdigris:")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--reps", type=int, default=4)
    args = parser.parse_args()
    trees = {"old": os.path.abspath(args.old), "new": os.path.abspath(args.new)}
    work = tempfile.mkdtemp(prefix="vg-ab-")
    with open(os.path.join(work, "vg_runtime_kernels.py"), "w") as f:
        f.write(OURS)
    for src in trees.values():  # fresh processes import with the bytecode a user has
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(src, "verdigris")])
    times: dict = {}
    logs: dict = {}
    for rep in range(args.reps):
        order = list(trees) if rep % 2 == 0 else list(reversed(trees))
        for label in order:
            for which in KERNELS:
                ms, logs[label, which] = first_call(trees[label], which, work)
                times.setdefault((label, which), []).append(ms)
    print(f"{'kernel':12}{'old ms':>10}{'new ms':>10}   (medians of {args.reps}; range)")
    for which in KERNELS:
        old, new = times["old", which], times["new", which]
        print(f"{which:12}{statistics.median(old):10.1f}{statistics.median(new):10.1f}   "
              f"old {min(old):.0f}-{max(old):.0f}, new {min(new):.0f}-{max(new):.0f}")
    for (label, which), lines in sorted(logs.items()):
        for line in lines:
            print(f"  {label} {which}: {line}")


if __name__ == "__main__":
    main()
