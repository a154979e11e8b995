"""First calls on the host, without a GPU: where a cold compile's milliseconds go.

Runs each first call in a fresh process whose CUDA driver is tests/fakecuda (it loads any
image and launches nothing), with verdigris imported and the inputs allocated before the
clock starts, and an empty cache (cold) or the cache a cold run filled (warm): the time
from the launch call to its return, which on the fake driver is compile + load, plus the
stages `VERDIGRIS_LOG=compile` prints and the CPU time of the process and its children
(ptxas). Kernels: vector add (SIMT), softmax over 4096 columns (tile) and a SIMT kernel
calling seven libdevice functions; `import verdigris` in each process. Each figure is the minimum and
the median over `--runs` processes (the development machine is shared: minima are the
comparable figures).

Run: `.venv/bin/python bench/cold_host.py [--runs N] [--only NAME] [--json FILE]`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

KERNELS = '''
import math
import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def vector_add(a, b, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


@tile.kernel
def softmax(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS), padding=-math.inf)
    e = tile.exp(t - tile.max(t))
    tile.store(out, index=(r, 0), tile=e / tile.sum(e))


@simt.kernel
def mathy(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        v = x[i]
        out[i] = (math.exp(v) + math.sin(v) * math.log1p(v) + math.pow(v, 2.5)
                  + math.atan2(v, 1.5) + math.erf(v) + math.tanh(v))
'''

FIRST_CALL = '''
import resource, sys, time
sys.path[:0] = [{work!r}]
t0 = time.perf_counter()
import verdigris as vg
imported = time.perf_counter() - t0
import numpy as np
import host_kernels as k
which = {which!r}
if which == "softmax":
    x, out = (vg.asarray(np.ones((64, 4096), np.float32)) for _ in range(2))
    launch = lambda: k.softmax[64](x, out, COLS=4096)
else:
    a, b, out = (vg.asarray(np.ones(1024, np.float32)) for _ in range(3))
    launch = (lambda: k.vector_add[4, 256](a, b, out)) if which == "vector_add" \\
        else (lambda: k.mathy[4, 256](a, out))
if {warm_first!r}:  # the runtime warm: imports, driver, module; then a disk-cache hit
    k.vector_add[4, 256](*(vg.asarray(np.ones(1024, np.float32)) for _ in range(3)))


def cpu():
    me, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


c0, t = cpu(), time.perf_counter()
launch()
vg.synchronize()
wall, c1 = time.perf_counter() - t, cpu()
print("RESULT", imported * 1e3, wall * 1e3, (c1[0] - c0[0]) * 1e3, (c1[1] - c0[1]) * 1e3)
'''

_STAGE = re.compile(r"([\w ]+?) ([\d.]+)")


def first_call(work: str, which: str, cache: str, warm_first: bool = False) -> dict:
    from tests import fakecuda

    env = fakecuda.environment(VERDIGRIS_CACHE_DIR=cache, VERDIGRIS_LOG="compile")
    done = subprocess.run([sys.executable, "-c", FIRST_CALL.format(work=work, which=which,
                                                                      warm_first=warm_first)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    out = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT"):
            out["import"], out["first call"], out["cpu"], out["cpu children"] = \
                map(float, line.split()[1:])
        elif line.startswith("verdigris:") and which in line.split(" in ")[0] and "(" in line:
            stages = line[line.rindex("(") + 1:line.rindex(" ms)")]
            out.update({name.strip(): float(ms) for name, ms in _STAGE.findall(stages)})
    return out


def summarize(runs: list) -> dict:
    keys = dict.fromkeys(k for r in runs for k in r)
    return {k: (min(r.get(k, 0.0) for r in runs), statistics.median(r.get(k, 0.0) for r in runs))
            for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", action="append")
    parser.add_argument("--json")
    args = parser.parse_args()
    from tests import fakecuda

    if fakecuda.library_dir() is None:
        sys.exit("needs a C compiler for tests/fakecuda")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "src", "verdigris")])
    work = tempfile.mkdtemp(prefix="vg-cold-host-")
    with open(os.path.join(work, "host_kernels.py"), "w") as f:
        f.write(KERNELS)
    result = {}
    for which in args.only or ("vector_add", "softmax", "mathy"):
        runs = {"cold": [], "warm": [], "hit": []}
        for _ in range(args.runs):
            cache = tempfile.mkdtemp(prefix="vg-cold-cache-")
            runs["cold"].append(first_call(work, which, cache))
            runs["warm"].append(first_call(work, which, cache))
            if which != "vector_add":
                runs["hit"].append(first_call(work, which, cache, warm_first=True))
        result[which] = {label: summarize(r) for label, r in runs.items() if r}
        for label, rows in result[which].items():
            print(f"{which} {label}: " + ", ".join(f"{k} {lo:.1f}/{mid:.1f}" for k, (lo, mid)
                                                    in rows.items()) + "  (ms, min/median)",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
