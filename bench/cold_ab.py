"""Cold first calls of two source trees, A/B on one machine: which is faster to compile?

Host-side times move 1.3-2x between lent machines, so a change to the compile path can only
be judged against the code before it on the same machine, in the same command. This runs
`bench/runtime.py`'s cold first-call script (a fresh process, an empty cache, the library
imported and the inputs made before the clock starts, the kernels defined after it) for
vector add, softmax and GEMM, alternating the two trees, with our background warm-up and
without it (VERDIGRIS_WARMUP=0; a tree older than that switch always warms up), and
prints each tree's median and range per kernel and warm-up, then the last run's stage log
(`VERDIGRIS_LOG=compile`) of each.

Run: `python3 bench/cold_ab.py OLD_SRC NEW_SRC [--reps N] [--warmup on|off|both]`, each
SRC a folder holding the `verdigris` package (e.g. `git archive <commit> src | tar -x -C
/tmp/old`, then /tmp/old/src). Needs a GPU (or the fake driver of tests/fakecuda).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from runtime import OURS, first_call

KERNELS = ("vector_add", "softmax", "gemm")
WARMUPS = {"on": (True,), "off": (False,), "both": (True, False)}


def cold_call(src: str, which: str, work: str, warmup: bool) -> tuple:
    """(ms, stage log lines) of one cold first call with the package in `src`."""
    ms, stages = first_call("ours", which, work, tempfile.mkdtemp(prefix="vg-ab-cache-"),
                            src=src, warmup=warmup)
    if ms is None:
        raise SystemExit(f"{src} {which}: {stages}")
    return ms, stages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--reps", type=int, default=4, help="fresh processes per figure")
    parser.add_argument("--warmup", choices=WARMUPS, default="both",
                        help="with our background warm-up, without it, or both (default)")
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
            for warmup in WARMUPS[args.warmup]:
                for which in KERNELS:
                    ms, logs[label, warmup, which] = cold_call(trees[label], which, work, warmup)
                    times.setdefault((label, warmup, which), []).append(ms)
    print(f"{'kernel':12}{'warm-up':9}{'old ms':>10}{'new ms':>10}   (medians of {args.reps} "
          "fresh processes; range)")
    for which in KERNELS:
        for warmup in WARMUPS[args.warmup]:
            old, new = times["old", warmup, which], times["new", warmup, which]
            print(f"{which:12}{'on' if warmup else 'off':9}{statistics.median(old):10.1f}"
                  f"{statistics.median(new):10.1f}   old {min(old):.0f}-{max(old):.0f}, "
                  f"new {min(new):.0f}-{max(new):.0f}")
    for (label, warmup, which), lines in sorted(logs.items()):
        for line in lines:
            print(f"  {label} {which} (warm-up {'on' if warmup else 'off'}): {line}")


if __name__ == "__main__":
    main()
