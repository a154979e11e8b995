"""What testing module-level constants costs a generated launcher (runtime/constants.py),
on the fake CUDA driver (tests/fakecuda: launches run nothing), A/B of two source trees.

Run: `python bench/constants_launch_ab.py OLD_SRC NEW_SRC [rounds]`, each SRC a folder
holding the `verdigris` package (`git archive <commit> src | tar -x -C /tmp/old`). Each
round runs a fresh process per tree, alternating; per process, the best of 7 batches of
5000 launches of `scaled` (reads one module constant) and `axpy` (reads none), in µs per
launch; printed: the median over rounds. Needs a C compiler (the fake driver), no GPU.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests import fakecuda  # noqa: E402

CODE = '''
import sys, time, json
sys.path.insert(0, {src!r})
import numpy as np, verdigris as vg
from tests.fakecuda.kernels import scaled, axpy
x, y, o = (vg.asarray(np.ones(1000, np.float32)) for _ in range(3))
res = {{}}
for name, f in (("scaled (1 constant)", lambda: scaled[4, 256](x, o)),
                ("axpy (none)", lambda: axpy[4, 256](2.0, x, y, o))):
    for _ in range(2000):
        f()
    best = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(5000):
            f()
        best.append((time.perf_counter() - t) / 5000 * 1e6)
    res[name] = min(best)
print(json.dumps(res))
'''


def main(old: str, new: str, rounds: int) -> None:
    trees = {"old": old, "new": new}
    got: dict = {k: [] for k in trees}
    for _ in range(rounds):
        for name, src in trees.items():
            done = fakecuda.run(CODE.format(src=os.path.abspath(src)))
            if done.returncode:
                raise SystemExit(done.stderr[-2000:])
            got[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for name in trees:
        print(name, {k: round(statistics.median(r[k] for r in got[name]), 3)
                     for k in got[name][0]})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
