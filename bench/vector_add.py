"""Vector add: ours beside torch and Triton, in one run on the current GPU.

Prints one table: throughput on 2^28 float32 elements (bytes read + written over time,
median of timed repetitions) for one and several elements per thread. Run:
`PYTHONPATH=src python bench/vector_add.py`. With `--json FILE` it also writes the figures.
Launch overhead and first-call times are `bench/runtime.py`'s (`suite_runtime.py` registers
them with `verdigris bench`).

It also registers its case with `verdigris bench` (see verdigris.benchsuite): the SIMT
vector add against torch, Triton and CuPy over sizes 2^20..2^28.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
from verdigris.benchsuite import case, checked, has  # noqa: E402

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


def _write_kernel_module(directory: str) -> str:
    path = os.path.join(directory, "vadd_kernel.py")
    with open(path, "w") as f:
        f.write(KERNEL_SOURCE)
    return path


def throughput(fn, nbytes: int) -> float:
    from triton.testing import do_bench

    ms = do_bench(fn, warmup=100, rep=1000, return_mode="median")
    return nbytes / (ms * 1e-3) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log2n", type=int, default=28)
    parser.add_argument("--json")
    args = parser.parse_args()
    sys.path.insert(0, SRC)
    import torch
    import triton

    import verdigris as vg

    _, kernels = _kernels()
    vector_add, vector_add_ilp, add_kernel = kernels.vector_add, kernels.vector_add_ilp, _triton_add()
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

    card = torch.cuda.get_device_name()
    print(f"\nvector add, {n:,} float32, {card}, {time.strftime('%Y-%m-%d')}")
    print(f"{'throughput':<32}{'TB/s':>8}{'vs torch':>10}")
    for name, tbs in rows.items():
        print(f"{name:<32}{tbs:8.2f}{tbs / rows['torch']:10.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"card": card, "n": n, "throughput_tbs": rows}, f, indent=2)


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


if __name__ == "__main__":
    main()
