"""The runtime on the host, without a GPU: where a cold compile's milliseconds and a
launch's microseconds go (the fake CUDA driver, tests/fakecuda).

First calls (`--first`, the default):
Runs each first call in a fresh process whose CUDA driver is tests/fakecuda (it loads any
image and launches nothing), with verdigris imported and the inputs allocated before the
clock starts, and an empty cache (cold) or the cache a cold run filled (warm): the time
from the launch call to its return, which on the fake driver is compile + load, plus the
stages `VERDIGRIS_LOG=compile` prints and the CPU time of the process and its children
(ptxas). Kernels: vector add (SIMT), softmax over 4096 columns (tile) and a SIMT kernel
calling seven libdevice functions; `import verdigris` in each process. Each figure is the minimum and
the median over `--runs` processes (the development machine is shared: minima are the
comparable figures).

Launches (`--launch`): host time per call of the axpy (three arrays, one scalar) and the
16-argument kernel of tests/fakecuda/kernels.py on vg.Arrays: the raw `cuLaunchKernel`
through cuda-bindings with the arguments packed once (the floor; the fake driver returns
at once, so the real driver's own time, ~3 us on the H200, is not in it), our generated
launcher called directly, and `k[1, 256](...)` as users write it. Minimum and median over
`--rounds` rounds of 20000 calls each, interleaved.

Run: `.venv/bin/python bench/host_runtime.py [--first] [--launch] [--runs N] [--rounds N]
[--only NAME] [--json FILE]`.
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


def _runtime_script():
    """bench/runtime.py as a module (it imports NumPy and the standard library only)."""
    import importlib.util

    path = os.path.join(ROOT, "bench", "runtime.py")
    spec = importlib.util.spec_from_file_location("bench_runtime", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# bench/runtime.py's kernels (vector add, softmax, ...), and one calling seven libdevice
# functions.
KERNELS = _runtime_script().OURS + '''

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

_STAGES = re.compile(r"\((frontend [^)]*) ms\)")  # the stage timings in a compile's log line
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
        elif line.startswith("verdigris:") and which in line.split(" in ")[0]:
            stages = _STAGES.search(line)
            if stages:
                out.update({name.strip(): float(ms) for name, ms in _STAGE.findall(stages[1])})
    return out


def summarize(runs: list) -> dict:
    keys = dict.fromkeys(k for r in runs for k in r)
    return {k: (min(r.get(k, 0.0) for r in runs), statistics.median(r.get(k, 0.0) for r in runs))
            for k in keys}


LAUNCHES = '''
import json, statistics, sys, timeit
sys.path.insert(0, "bench")
import numpy as np
import runtime
import verdigris as vg
from tests.fakecuda.kernels import axpy, sixteen

arrays = [vg.asarray(np.random.default_rng().standard_normal(runtime.N).astype(np.float32))
          for _ in range(9)]
x, y, out = arrays[0], arrays[1], arrays[8]
a0, a1, a2, a3, a4, a5, a6, a7 = arrays[:8]
calls = {"axpy": lambda: axpy[1, 256](2.0, x, y, out), "16 args": runtime.sixteen_call(sixteen, arrays)}
for call in calls.values():  # compile, check, install the launchers
    call(); call()
direct_axpy, direct_16 = axpy[1, 256], sixteen[1, 256]
raw = runtime.raw_variants(axpy, sixteen, arrays)
variants = {
    "raw axpy": raw["raw cuLaunchKernel (cuda-bindings)"],
    "raw 16 args": raw["raw cuLaunchKernel, 16-argument kernel"],
    "ours axpy, launcher called directly": lambda: direct_axpy(2.0, x, y, out),
    "ours 16 args, launcher called directly": lambda: direct_16(
        a0, a1, a2, a3, a4, a5, a6, a7, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, out),
    "ours axpy, k[1, 256](...)": calls["axpy"],
    "ours 16 args, k[1, 256](...)": calls["16 args"],
}
samples = {name: [] for name in variants}
for _ in range(ROUNDS):
    for name, call in variants.items():
        samples[name].append(timeit.timeit(call, number=20000) / 20000 * 1e6)
print("RESULT", json.dumps({name: (min(v), statistics.median(v)) for name, v in samples.items()}))
'''


def launches(rounds: int) -> dict:
    from tests import fakecuda

    done = fakecuda.run(LAUNCHES.replace("ROUNDS", str(rounds)), timeout=600)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first", action="store_true")
    parser.add_argument("--launch", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", action="append")
    parser.add_argument("--json")
    args = parser.parse_args()
    from tests import fakecuda

    if fakecuda.library_dir() is None:
        sys.exit("needs a C compiler for tests/fakecuda")
    result = {}
    if args.launch:
        result["launch_us"] = rows = launches(args.rounds)
        for name, (lo, mid) in rows.items():
            floor = rows["raw 16 args" if "16" in name else "raw axpy"][0]
            print(f"{name:<42}{lo:7.3f} us min {mid:7.3f} median  +{lo - floor:6.3f} over raw",
                  flush=True)
        if not args.first:
            _save(args.json, result)
            return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "src", "verdigris")])
    work = tempfile.mkdtemp(prefix="vg-cold-host-")
    with open(os.path.join(work, "host_kernels.py"), "w") as f:
        f.write(KERNELS)
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
    _save(args.json, result)


def _save(path, result) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
