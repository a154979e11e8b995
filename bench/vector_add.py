"""Vector add: ours beside torch and Triton, in one run on the current GPU.

Prints one table: throughput on 2^28 float32 elements (bytes read + written over time,
median of timed repetitions), cold compile (fresh process, empty cache), first call with
a warm disk cache (fresh process), and host launch overhead per call beside a raw
`cuLaunchKernel` through cuda-bindings. Run: `PYTHONPATH=src python bench/vector_add.py`.
With `--json FILE` it also writes the figures.

It also registers its cases with `verdigris bench` (see verdigris.benchsuite): the SIMT
vector add against torch, Triton and CuPy over sizes 2^20..2^28, host launch overhead
against a raw `cuLaunchKernel`, and first-call times (cold and with a warm disk cache)
beside Triton's and CuPy's.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
from verdigris.benchsuite import ROOFLINE, case, checked, has  # noqa: E402

KERNEL_SOURCE = '''
import verdigris as vg
from verdigris import simt

@simt.kernel
def vector_add(a, b, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]

@simt.kernel
def vector_add_ilp(a, b, out, PER_THREAD: vg.constexpr):
    # Each block covers PER_THREAD * block_dim consecutive elements; a thread's elements are
    # block_dim apart, so every load of a warp is still coalesced and PER_THREAD loads are
    # in flight at once. int(): the block's first element can pass 2**31, and the race
    # checker refuses an index that might wrap.
    base = int(simt.block_id(0)) * (simt.block_dim(0) * PER_THREAD) + simt.thread_id(0)
    for k in range(PER_THREAD):
        i = base + k * simt.block_dim(0)
        if i < out.shape[0]:
            out[i] = a[i] + b[i]
'''


CUPY_ADD_SOURCE = r'''
extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
'''


def _write_kernel_module(directory: str) -> str:
    path = os.path.join(directory, "vadd_kernel.py")
    with open(path, "w") as f:
        f.write(KERNEL_SOURCE)
    return path


def first_call_ms(kernel_dir: str, cache_dir: str, which: str) -> float:
    """Time from just before the first launch to its completion, in a fresh process."""
    if which == "verdigris":
        body = f"""
            import sys; sys.path[:0] = [{SRC!r}, {kernel_dir!r}]
            import torch, verdigris as vg
            from vadd_kernel import vector_add, vector_add_ilp
            a = torch.rand(1 << 20, device="cuda"); b = torch.rand_like(a); out = torch.empty_like(a)
            torch.cuda.synchronize()
            t = time.perf_counter()
            vector_add[vg.cdiv(a.numel(), 256), 256](a, b, out)
            torch.cuda.synchronize()
        """
        env = {"VERDIGRIS_CACHE_DIR": cache_dir}
    elif which == "cupy":
        body = f"""
            import torch, cupy
            a = torch.rand(1 << 20, device="cuda"); b = torch.rand_like(a); out = torch.empty_like(a)
            a, b, out = (cupy.asarray(t) for t in (a, b, out))
            torch.cuda.synchronize()
            t = time.perf_counter()
            add = cupy.RawKernel({CUPY_ADD_SOURCE!r}, "add")
            add((a.size // 256,), (256,), (a, b, out, cupy.int64(a.size)))
            torch.cuda.synchronize()
        """
        env = {"CUPY_CACHE_DIR": cache_dir}
    else:
        body = """
            import torch, triton, triton.language as tl
            @triton.jit
            def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                mask = offs < n
                tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)
            a = torch.rand(1 << 20, device="cuda"); b = torch.rand_like(a); out = torch.empty_like(a)
            torch.cuda.synchronize()
            t = time.perf_counter()
            add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
            torch.cuda.synchronize()
        """
        env = {"TRITON_CACHE_DIR": cache_dir}
    script = "import time\n" + textwrap.dedent(body) + "print((time.perf_counter() - t) * 1e3)\n"
    if which == "triton":  # triton.jit needs the source in a file
        path = os.path.join(kernel_dir, f"triton_first_call_{abs(hash(cache_dir))}.py")
        with open(path, "w") as f:
            f.write(script)
        argv = [sys.executable, path]
    else:
        argv = [sys.executable, "-c", script]
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
    if result.returncode:
        raise RuntimeError(result.stderr)
    return float(result.stdout.strip().splitlines()[-1])


def throughput(fn, nbytes: int) -> float:
    from triton.testing import do_bench

    ms = do_bench(fn, warmup=100, rep=1000, return_mode="median")
    return nbytes / (ms * 1e-3) / 1e12


def launch_overhead_us(fn, calls: int = 20000, repeats: int = 5) -> float:
    """Host time per launch of a tiny kernel (median over repeats of `calls` launches)."""
    import torch

    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return float(np.median(times))


def raw_launcher(vector_add, a, b, out):
    """cuLaunchKernel of our own compiled function with pre-packed arguments: the floor."""
    import ctypes

    from cuda.bindings import driver as drv

    from verdigris.runtime.interop import describe

    vector_add[1, 256](a, b, out)
    spec = next(iter(vector_add._specializations.values()))
    kernel = next(iter(spec.compiled.values()))  # keyed by device or variant
    n = a.numel()
    args = [describe(t).ptr for t in (a, b, out)]
    # ABI: a.ptr, a.shape0, b.ptr, b.shape0, out.ptr, out.shape0 (unit strides are not passed)
    values = (ctypes.c_uint64 * 6)(args[0], n, args[1], n, args[2], n)
    pointers = (ctypes.c_void_p * 6)(*(ctypes.addressof(values) + 8 * i for i in range(6)))
    address = ctypes.addressof(pointers)
    function = kernel.function
    launch = drv.cuLaunchKernel
    stream = torch_stream()

    def raw(keep=(values, pointers)):  # the closure keeps the argument buffers alive
        launch(function, 1, 1, 1, 256, 1, 1, 0, stream, address, 0)

    return raw


def torch_stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log2n", type=int, default=28)
    parser.add_argument("--json")
    parser.add_argument("--profile-launch", action="store_true",
                        help="also print where the host time of a launch goes (cProfile)")
    args = parser.parse_args()
    sys.path.insert(0, SRC)
    import torch
    import triton
    import triton.language as tl

    import verdigris as vg

    work = tempfile.mkdtemp(prefix="vg-bench-")
    sys.path.insert(0, work)
    _write_kernel_module(work)
    from vadd_kernel import vector_add, vector_add_ilp

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    n = 1 << args.log2n
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    out = torch.full_like(a, float("nan"))
    vector_add[vg.cdiv(n, 256), 256](a, b, out)
    torch.cuda.synchronize()
    assert torch.equal(out, a + b), "verdigris vector add is wrong"
    nbytes = 3 * n * 4
    rows = {}
    rows["copy (torch clone_, ceiling)"] = throughput(lambda: out.copy_(a), 2 * n * 4)
    rows["verdigris (1 per thread, 256)"] = throughput(
        lambda: vector_add[vg.cdiv(n, 256), 256](a, b, out), nbytes)
    rows["verdigris (1 per thread, 1024)"] = throughput(
        lambda: vector_add[vg.cdiv(n, 1024), 1024](a, b, out), nbytes)
    for per_thread in (4, 8):
        out.fill_(float("nan"))
        vector_add_ilp[vg.cdiv(n, 256 * per_thread), 256](a, b, out, PER_THREAD=per_thread)
        assert torch.equal(out, a + b), "verdigris ILP vector add is wrong"
        rows[f"verdigris ({per_thread} per thread, 256)"] = throughput(
            lambda p=per_thread: vector_add_ilp[vg.cdiv(n, 256 * p), 256](a, b, out, PER_THREAD=p),
            nbytes)
    rows["torch"] = throughput(lambda: torch.add(a, b, out=out), nbytes)
    rows["triton"] = throughput(
        lambda: add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024), nbytes)

    small_a, small_b, small_out = a[:256], b[:256], out[:256]
    launch = {
        "raw cuLaunchKernel": launch_overhead_us(raw_launcher(vector_add, small_a, small_b, small_out)),
        "verdigris": launch_overhead_us(lambda: vector_add[1, 256](small_a, small_b, small_out)),
        "torch add": launch_overhead_us(lambda: torch.add(small_a, small_b, out=small_out)),
        "triton": launch_overhead_us(
            lambda: add_kernel[(1,)](small_a, small_b, small_out, 256, BLOCK=1024)),
    }
    if args.profile_launch:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20000):
            vector_add[1, 256](small_a, small_b, small_out)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
    compile_ms = {}
    for which in ("verdigris", "triton"):
        cache = tempfile.mkdtemp(prefix=f"{which}-cache-")
        compile_ms[f"{which} cold"] = first_call_ms(work, cache, which)
        compile_ms[f"{which} warm disk cache"] = first_call_ms(work, cache, which)

    card = torch.cuda.get_device_name()
    print(f"\nvector add, {n:,} float32, {card}, {time.strftime('%Y-%m-%d')}")
    print(f"{'throughput':<32}{'TB/s':>8}{'vs torch':>10}")
    for name, tbs in rows.items():
        print(f"{name:<32}{tbs:8.2f}{tbs / rows['torch']:10.3f}")
    print(f"\n{'host launch overhead':<32}{'us/call':>8}{'vs raw':>10}")
    for name, us in launch.items():
        print(f"{name:<32}{us:8.2f}{us / launch['raw cuLaunchKernel']:10.2f}")
    print(f"\n{'first call (fresh process)':<32}{'ms':>8}")
    for name, ms in compile_ms.items():
        print(f"{name:<32}{ms:8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"card": card, "n": n, "throughput_tbs": rows, "launch_us": launch,
                       "first_call_ms": compile_ms}, f, indent=2)


# ----------------------------------------------------------------- `verdigris bench` cases


@functools.lru_cache(maxsize=None)
def _kernels():
    """(the directory of the kernel module, the module): written and imported once."""
    work = tempfile.mkdtemp(prefix="vg-bench-")
    _write_kernel_module(work)
    sys.path.insert(0, work)
    import vadd_kernel

    return work, vadd_kernel


@functools.lru_cache(maxsize=None)
def _triton_add():
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    return add_kernel


@functools.lru_cache(maxsize=None)
def _cupy_add():
    import cupy

    return cupy.RawKernel(CUPY_ADD_SOURCE, "add")


@case("vector add (SIMT) f32", kind="memory", sizes=[1 << k for k in (20, 22, 24, 26, 28)],
      quick=[1 << 26], work=lambda n: 3 * 4 * n, requires=["torch"])
def bench_vector_add(n):
    import torch

    import verdigris as vg

    _, kernels = _kernels()
    a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(a)
    want = a + b

    def ours(per_thread):
        if per_thread == 1:
            return lambda: kernels.vector_add[vg.cdiv(n, 256), 256](a, b, out)
        return lambda: kernels.vector_add_ilp[vg.cdiv(n, 256 * per_thread), 256](
            a, b, out, PER_THREAD=per_thread)

    impls = {"verdigris": {f"{p} per thread, block 256": checked(ours(p), out, want, 1e-7)
                           for p in (1, 4, 8)},
             "torch": checked(lambda: torch.add(a, b, out=out), out, want, 1e-7)}
    if has("triton"):
        add = _triton_add()
        impls["triton"] = checked(lambda: add[(vg.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024),
                                  out, want, 1e-7)
    if has("cupy"):
        import cupy

        ca, cb, cout = (cupy.asarray(t) for t in (a, b, out))  # views, no copies
        impls["cupy"] = checked(lambda: cupy.add(ca, cb, out=cout), out, want, 1e-7)
    return impls


@case("launch overhead", kind="launch", sizes=[256], requires=["torch"],
      size_label=lambda n: f"add of {n} f32")
def bench_launch(n):
    import torch

    _, kernels = _kernels()
    a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(a)
    impls = {ROOFLINE: raw_launcher(kernels.vector_add, a, b, out),
             "verdigris": lambda: kernels.vector_add[1, 256](a, b, out),
             "torch": lambda: torch.add(a, b, out=out)}
    if has("triton"):
        add = _triton_add()
        impls["triton"] = lambda: add[(1,)](a, b, out, n, BLOCK=1024)
    if has("cupy"):
        import cupy

        add = _cupy_add()
        args = (*(cupy.asarray(t) for t in (a, b, out)), cupy.int64(n))  # views, no copies
        impls["cupy"] = lambda: add((1,), (256,), args)
    return impls


@case("first call of a vector add", kind="compile", sizes=["cold", "warm disk cache"],
      quick=["cold"], requires=["torch"], size_label=str)
def bench_first_call(which_cache):
    work, _ = _kernels()
    peers = ["verdigris"] + [p for p in ("triton", "cupy") if has(p)]

    def first_call(peer):
        def measure():
            cache = tempfile.mkdtemp(prefix=f"{peer}-cache-")
            if which_cache != "cold":
                first_call_ms(work, cache, peer)  # fills the cache
            return first_call_ms(work, cache, peer)

        return measure

    return {peer: first_call(peer) for peer in peers}


if __name__ == "__main__":
    main()
