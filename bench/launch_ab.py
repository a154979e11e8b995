"""Launch overhead of two source trees, A/B on one machine: which launches faster?

The host's Python speed moves 1.2-1.5x between lent machines, so a change to the launch
path can only be judged against the code before it on the same machine, in the same
command. This runs `bench/runtime.py`'s launch variants (ours with vg.Arrays, torch
tensors and CuPy arrays, the raw `cuLaunchKernel` floor) in a fresh process per tree,
alternating the trees, and prints each variant's median over the processes, in µs per
launch and as a ratio to that process's raw floor.

Run: `python3 bench/launch_ab.py OLD_SRC NEW_SRC [--reps N] [--rounds R]`, each SRC a folder
holding the `verdigris` package (e.g. `git archive <commit> src | tar -x -C /tmp/old`, then
/tmp/old/src). Needs a GPU and torch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = '''
import json, sys, tempfile
sys.path[:0] = [{src!r}, {here!r}]
import runtime
variants = runtime.launch_variants(tempfile.mkdtemp())
keep = [n for n in variants if n.startswith(("ours", "raw cuLaunchKernel ", "raw cuLaunchKernel,"))]
print(json.dumps(runtime.measure({{n: variants[n] for n in keep}}, {rounds})))
'''


def one(src: str, rounds: int) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(src=src, here=HERE, rounds=rounds)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    runs: dict = {"old": [], "new": []}
    for _ in range(args.reps):
        for label in ("old", "new"):
            runs[label].append(one(getattr(args, label), args.rounds))
    names = [n for n in runs["new"][0] if all(n in r for rs in runs.values() for r in rs)]
    print(f"{'launch, µs per call (ratio to the raw floor)':<48}{'old':>16}{'new':>16}")
    for name in names:
        cells = []
        for label in ("old", "new"):
            floor = "raw cuLaunchKernel, 16-argument kernel" if "16" in name else \
                "raw cuLaunchKernel (cuda-bindings)"
            us = statistics.median(r[name] for r in runs[label])
            ratio = statistics.median(r[name] / r[floor] for r in runs[label])
            cells.append(f"{us:8.2f} ({ratio:.2f})")
        print(f"{name:<48}{cells[0]:>16}{cells[1]:>16}")


if __name__ == "__main__":
    main()
