"""How long `import verdigris` takes in a fresh process, beside `import numpy` (its floor).

Run: python bench/import_time.py [runs]. Each figure is the wall time of a fresh
interpreter running the statement, minus an empty interpreter's, over `runs` alternating
runs (min and median); the modules named in HEAVY must not be loaded by it.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

HEAVY = ("ml_dtypes", "z3", "llvmlite", "cuda.bindings", "torch")
STATEMENTS = {"python": "pass", "numpy": "import numpy", "verdigris": "import verdigris"}


def wall_ms(statement: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], check=True)
    return (time.perf_counter() - start) * 1e3


def main(runs: int = 15) -> None:
    times = {name: [] for name in STATEMENTS}
    for _ in range(runs):  # alternate so that load on the machine falls on all alike
        for name, statement in STATEMENTS.items():
            times[name].append(wall_ms(statement))
    empty = min(times["python"])
    for name in ("numpy", "verdigris"):
        print(f"{name:10s} min {min(times[name]) - empty:7.1f} ms   "
              f"median {statistics.median(times[name]) - empty:7.1f} ms")
    check = ("import sys, verdigris; print(sorted(m for m in sys.modules "
             f"if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}))")
    print("heavy modules loaded:", subprocess.run([sys.executable, "-c", check], check=True,
                                                  capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
