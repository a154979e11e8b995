"""What safety costs on the GPU, in one run: proven (safe) kernels beside the same kernels
inside `vg.unsafe()` and beside their fully checked variants, plus the launch-path checks.

Prints: throughput (bytes read + written over GPU time, median of interleaved timed
repetitions, CUDA events) of axpy and a 1-D 3-point stencil on 2^28 float32 elements in
three variants (safe: bounds proven, no check in the code; unsafe: the body inside
`with vg.unsafe()`; checked: every access checked, what a launch that breaks the proofs'
preconditions runs); the host cost per launch of the alias check, the bounds guard and the
fault-flag read; and the proof time (race check + bounds proofs) per example kernel.
Run: `PYTHONPATH=src python bench/safety_cost.py [--log2n 28] [--json FILE]`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import time

import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


@simt.kernel
def axpy_unsafe(alpha, x, y, out):
    with vg.unsafe():
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = alpha * x[i] + y[i]


@simt.kernel
def stencil(x, out):
    i = simt.global_id(0)
    if i >= 1 and i < out.shape[0] - 1:
        out[i] = x[i - 1] + x[i] + x[i + 1]


@simt.kernel
def stencil_unsafe(x, out):
    with vg.unsafe():
        i = simt.global_id(0)
        if i >= 1 and i < out.shape[0] - 1:
            out[i] = x[i - 1] + x[i] + x[i + 1]


BLOCK = 256


def _spec(kernel, grid, args):
    values = kernel.bind(args, {})
    infos = kernel.describe_args(values)
    return kernel.specialization(kernel.spec_key(values, infos, (BLOCK, 1, 1), grid)), values, infos


def checked_launcher(kernel, grid, args):
    """A launch of the fully checked variant of `kernel` for these arguments."""
    from verdigris.runtime import faults, launch_cuda

    spec, values, infos = _spec(kernel, grid, args)
    compiled = launch_cuda._compile(spec, 0, checked=True)
    abi = [launch_cuda._abi_value(s, values, infos) for s in spec.abi_slots] + [faults.block_address(0)]
    return lambda: compiled.launch(grid, (BLOCK, 1, 1), abi, 0)


def gpu_times_ms(variants: dict, rounds: int = 15, per_round: int = 4) -> dict:
    """Median GPU time per launch of each variant, interleaved round by round."""
    from verdigris.runtime import driver

    drv = driver.api()
    start, stop = (driver.check(drv.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    samples = {name: [] for name in variants}
    for fn in variants.values():  # compile and warm up
        fn()
    vg.synchronize()
    for _ in range(rounds):
        for name, fn in variants.items():
            for _ in range(per_round):
                drv.cuEventRecord(start, 0)
                fn()
                drv.cuEventRecord(stop, 0)
                drv.cuEventSynchronize(stop)
                samples[name].append(driver.check(drv.cuEventElapsedTime(start, stop), "elapsed"))
    vg.synchronize()
    return {name: float(np.median(s)) for name, s in samples.items()}


def host_us(fn, calls: int = 200_000) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def proof_times() -> list:
    """(example kernel, cold proof ms from its first specialization, re-proof ms)."""
    from verdigris import examples, safety

    rows = []
    for name in examples.SIMT_EXAMPLES:
        module = importlib.import_module(f"verdigris.examples.{name}")
        try:
            module.check(np.random.default_rng(0))
        except vg.Error:
            pass  # the racy example is refused, as it should be
        for attr in dir(module):
            k = getattr(module, attr)
            for spec in getattr(k, "_specializations", {}).values():
                start = time.perf_counter()
                safety.analyze(spec.kernel)
                safety.bounds.prove(spec.kernel)
                rows.append((f"{name}.{attr}", spec.kernel.facts.get("bounds_seconds", 0) * 1e3,
                             (time.perf_counter() - start) * 1e3))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log2n", type=int, default=28)
    parser.add_argument("--json")
    args = parser.parse_args()
    n = 1 << args.log2n
    rng = np.random.default_rng()
    x, y = (vg.asarray(rng.standard_normal(n, dtype=np.float32)) for _ in range(2))
    out = vg.empty(n, vg.float32)
    grid = (vg.cdiv(n, BLOCK), 1, 1)
    axpy_args, stencil_args = (2.0, x, y, out), (x, out)
    variants = {
        "axpy safe": lambda: axpy[grid[0], BLOCK](*axpy_args),
        "axpy unsafe": lambda: axpy_unsafe[grid[0], BLOCK](*axpy_args),
        "axpy checked": checked_launcher(axpy, grid, axpy_args),
        "stencil safe": lambda: stencil[grid[0], BLOCK](*stencil_args),
        "stencil unsafe": lambda: stencil_unsafe[grid[0], BLOCK](*stencil_args),
        "stencil checked": checked_launcher(stencil, grid, stencil_args),
    }
    ms = gpu_times_ms(variants)
    nbytes = {"axpy": 3 * 4 * n, "stencil": 2 * 4 * n}
    result = {"n": n, "ms": ms, "TBps": {k: nbytes[k.split()[0]] / (v * 1e-3) / 1e12 for k, v in ms.items()}}
    print(f"{'kernel (2^%d float32)' % args.log2n:28} {'ms':>8} {'TB/s':>7} {'vs unsafe':>10}")
    for name, t in ms.items():
        base = ms[name.split()[0] + " unsafe"]
        print(f"{name:28} {t:8.4f} {result['TBps'][name]:7.3f} {t / base - 1:+10.2%}")
    from verdigris.runtime import faults

    spec, values, infos = _spec(axpy, grid, axpy_args)
    host = {"alias check": host_us(lambda: axpy.check_aliasing(spec, infos)),
            "bounds guard": host_us(lambda: spec.bounds_guard(values, infos, grid, (BLOCK, 1, 1))),
            "fault flag read": host_us(lambda: faults.raise_pending(0))}
    result["host_us"] = host
    for name, us in host.items():
        print(f"{name + ' per launch':28} {us * 1e3:8.1f} ns")
    rows = proof_times()
    result["proofs_ms"] = rows
    print(f"{'example kernel':28} {'bounds ms (cold)':>16} {'race+bounds ms (re-run)':>24}")
    for name, cold, again in rows:
        print(f"{name:28} {cold:16.2f} {again:24.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
