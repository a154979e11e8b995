"""The runtime beside its peers, in one run: launch overhead and first-call (compile) times.

Launch overhead: host time per launch of a tiny kernel (256 elements, one block), median
over interleaved rounds of BATCH launches, the device synchronized between rounds (not
timed). Ours for two kernels, axpy (three arrays and a scalar) and one of sixteen arguments
(nine arrays, seven scalars), each with torch tensors, CuPy arrays and vg.Arrays, the alias
check and every other launch check included (vg.Arrays also launched from two sets in turn,
a stencil's ping-pong, and from three, where `runtime.fastpath`'s memo of the last two
launches never hits);
beside: the raw floor (`cuLaunchKernel`
through cuda-bindings on our compiled axpy with its arguments packed once), CuPy's
RawKernel (the same axpy in CUDA C), torch (`torch.add(x, y, out=)`) and Triton (an axpy).

First call: in a fresh process with the library imported and the inputs on the GPU, the
time from defining the kernel (importing its module) to the end of its first launch and
its synchronization, with an empty cache (cold) and again with the cache the cold run
filled (warm). Ours for vector add (SIMT), softmax (tile,
4096 columns) and GEMM (tile, 1024^3 bf16, when the tile matmul exists), beside Triton's
and CuPy's (NVRTC) of the same kernels; our per-stage times come from VERDIGRIS_LOG=compile.
Also: `import verdigris`, a disk-cache hit in a warm process, and the first call with torch
tensors (which includes importing cuda-bindings).

Run: `PYTHONPATH=src python3 bench/runtime.py [--json FILE] [--rounds N]`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
N = 256
BATCH = 500

# ------------------------------------------------------------------------------- kernels

OURS = '''
import math
import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


@simt.kernel
def sixteen(a0, a1, a2, a3, a4, a5, a6, a7, s0, s1, s2, s3, s4, s5, s6, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = (a0[i] + a1[i] + a2[i] + a3[i] + a4[i] + a5[i] + a6[i] + a7[i]
                  + s0 + s1 + s2 + s3 + s4 + s5 + s6)


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


@tile.kernel
def gemm(a, b, c, BM: vg.constexpr, BN: vg.constexpr, BK: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range((a.shape[1] + BK - 1) // BK):
        acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                       tile.load(b, index=(k, j), shape=(BK, BN)), acc)
    tile.store(c, index=(i, j), tile=acc.astype(c.dtype))
'''

TRITON = '''
import triton
import triton.language as tl


@triton.jit
def axpy(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask),
             mask=mask)


@triton.jit
def vector_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def softmax(x, out, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    t = tl.load(x + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(t - tl.max(t, 0))
    tl.store(out + row * stride + cols, e / tl.sum(e, 0), mask=cols < n)


@triton.jit
def gemm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    rm = i * BM + tl.arange(0, BM)
    rn = j * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))
'''

CUPY = {
    "axpy": r'''extern "C" __global__ void axpy(float alpha, const float* x, const float* y,
                                       float* out, long long n) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) out[i] = alpha * x[i] + y[i];
    }''',
    "vector_add": r'''extern "C" __global__ void vector_add(const float* x, const float* y,
                                                 float* out, long long n) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) out[i] = x[i] + y[i];
    }''',
    "softmax": r'''extern "C" __global__ void softmax(const float* x, float* out, int cols) {
        // one block of 256 threads per row
        __shared__ float scratch[256];
        const float* row = x + (long long)blockIdx.x * cols;
        float m = __int_as_float(0xff800000);  // -inf (NVRTC has no math.h)
        for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
        scratch[threadIdx.x] = m;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s /= 2) {
            if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
            __syncthreads();
        }
        m = scratch[0];
        __syncthreads();
        float sum = 0;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
        scratch[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s /= 2) {
            if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
            __syncthreads();
        }
        sum = scratch[0];
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            out[(long long)blockIdx.x * cols + c] = expf(row[c] - m) / sum;
    }''',
}

# ------------------------------------------------------------------------------- launch overhead


def _module(directory: str, name: str, text: str):
    import importlib

    with open(os.path.join(directory, f"{name}.py"), "w") as f:
        f.write(text)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return importlib.import_module(name)


def launch_variants(work: str) -> dict:
    """name -> a function doing one launch; every variant launches a 256-element kernel."""
    import torch

    import verdigris as vg

    ours = _module(work, "vg_runtime_kernels", OURS)
    rng = np.random.default_rng()
    host = [rng.standard_normal(N).astype(np.float32) for _ in range(9)]
    kinds = {"vg.Array": [vg.asarray(h) for h in host],
             "torch": [torch.from_numpy(h).cuda() for h in host]}
    # more sets of vg.Arrays, launched in turn with the first
    others = [[vg.asarray(h) for h in host] for _ in range(2)]
    try:
        import cupy

        kinds["cupy"] = [cupy.asarray(h) for h in host]
    except ImportError:
        cupy = None
    from verdigris import simt

    variants, launched = {}, {}
    for kind, arrays in kinds.items():
        x, y, out = arrays[0], arrays[1], arrays[8]
        # A kernel object per kind, launched as users write it (k[grid, block](...)): one
        # call site sees one kind of array, as in a program.
        axpy, sixteen = simt.kernel(ours.axpy.fn), simt.kernel(ours.sixteen.fn)
        launched[kind] = (axpy, sixteen)
        variants[f"ours axpy ({kind})"] = (
            lambda axpy=axpy, x=x, y=y, out=out: axpy[1, 256](2.0, x, y, out))
        variants[f"ours 16 args ({kind})"] = sixteen_call(sixteen, arrays)
        if kind == "vg.Array":
            for count, sets in (("two", 2), ("three", 3)):
                chosen = [arrays] + others[:sets - 1]
                variants[f"ours axpy (vg.Array, {count} sets in turn)"] = in_turn(
                    [lambda axpy=axpy, a=a: axpy[1, 256](2.0, a[0], a[1], a[8]) for a in chosen])
                variants[f"ours 16 args (vg.Array, {count} sets in turn)"] = in_turn(
                    [sixteen_call(sixteen, a) for a in chosen])
    for name, launch in list(variants.items()):  # compile, check, install the launchers
        try:
            launch()
            launch()
        except Exception as exc:  # report the variant, measure the others
            print(f"{name}: FAILED {type(exc).__name__}: {exc}"[:300])
            del variants[name]
    vg.synchronize()
    try:
        variants.update(raw_variants(*launched["vg.Array"], kinds["vg.Array"]))
    except Exception as exc:
        print(f"raw floor: FAILED {type(exc).__name__}: {exc}"[:300])
    tx, ty, tout = kinds["torch"][0], kinds["torch"][1], kinds["torch"][8]
    variants["torch.add(out=)"] = lambda: torch.add(tx, ty, out=tout)
    if cupy is not None:
        kernel = cupy.RawKernel(CUPY["axpy"], "axpy")
        cx, cy, cout = kinds["cupy"][0], kinds["cupy"][1], kinds["cupy"][8]
        alpha, n = np.float32(2.0), np.int64(N)
        variants["CuPy RawKernel"] = lambda: kernel((1,), (256,), (alpha, cx, cy, cout, n))
    try:
        triton_kernels = _module(work, "tr_runtime_kernels", TRITON)
        tr = triton_kernels.axpy
        variants["Triton"] = lambda: tr[(1,)](tx, ty, tout, N, 2.0, BLOCK=256)
    except ImportError:
        pass
    for name, launch in list(variants.items()):
        try:
            launch()
        except Exception as exc:
            print(f"{name}: FAILED {type(exc).__name__}: {exc}"[:300])
            del variants[name]
    torch.cuda.synchronize()
    return variants


def sixteen_call(sixteen, arrays):
    """A launch of the 16-argument kernel written as a program writes it, every argument a
    name or a literal (unpacking a list into the call, `k[1, 256](*ins, ...)`, costs the
    caller ~0.2 µs more, which is not the launch's)."""
    a0, a1, a2, a3, a4, a5, a6, a7 = arrays[:8]
    out = arrays[8]

    def launch():
        sixteen[1, 256](a0, a1, a2, a3, a4, a5, a6, a7, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, out)
    return launch


def in_turn(launches):
    """A variant making each of `launches` once per call, in turn (`measure` counts per
    launch)."""
    def launch():
        for one in launches:
            one()
    launch.launches = len(launches)
    return launch


def raw_variants(axpy, sixteen, arrays) -> dict:
    """cuLaunchKernel of our compiled axpy and 16-argument kernel (kernel objects already
    launched on `arrays`) with their arguments packed once, up front: the floor (and the
    same through cuda-bindings' `_v2` API where that exists)."""
    from cuda.bindings import driver as drv

    from verdigris.runtime import faults

    def prepacked(kernel, values):
        spec = next(iter({**kernel._specializations, **kernel._recorded}.values()))
        compiled = next(iter(spec.compiled.values()))
        address = compiled.packer.pack(values + (faults.block_address(0),))
        return compiled.function, address, compiled.packer._local.buffers

    x, y, out = arrays[0], arrays[1], arrays[8]
    function, address, keep = prepacked(axpy, (2.0, x.ptr, N, y.ptr, N, out.ptr, N))
    function16, address16, keep16 = prepacked(
        sixteen, tuple(v for a in arrays[:8] for v in (a.ptr, N)) +
        (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, out.ptr, N))
    launch = drv.cuLaunchKernel

    # (the stream as None: cuda-bindings' quickest spelling of the default stream, ~60 ns
    # under 0, which makes a CUstream each call)
    def raw(keep=keep):
        launch(function, 1, 1, 1, 256, 1, 1, 0, None, address, 0)

    def raw16(keep=keep16):
        launch(function16, 1, 1, 1, 256, 1, 1, 0, None, address16, 0)

    variants = {"raw cuLaunchKernel (cuda-bindings)": raw,
                "raw cuLaunchKernel, 16-argument kernel": raw16}
    try:
        from cuda.bindings._v2 import driver as drv2

        launch2, handle = drv2.launch_kernel, int(function)

        def raw_v2(keep=keep):
            launch2(handle, 1, 1, 1, 256, 1, 1, 0, 0, address, 0)

        raw_v2()
        variants["raw cuda.bindings._v2.launch_kernel"] = raw_v2
    except Exception:  # absent, or another signature: only the public API is the floor
        pass
    return variants


def measure(variants: dict, rounds: int, sync=None) -> dict:
    """µs per launch of each variant: `rounds` rounds of BATCH launches each, the variants
    taking turns, synchronized between batches (`sync`, torch's by default); medians. (The
    suite's `benchsuite.timing.GpuTimer.host_us_per_call` does the same; this copy stays so
    that `bench/launch_ab.py` can time source trees older than it.)"""
    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    samples = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            launch = variants[name]
            t0 = time.perf_counter_ns()
            for _ in range(BATCH):
                launch()
            samples[name].append((time.perf_counter_ns() - t0) / BATCH / 1e3
                                 / getattr(launch, "launches", 1))
            sync()
    return {name: statistics.median(v) for name, v in samples.items()}


def profile_launch(work: str) -> dict:
    """Where our launch's host time goes: ns per piece (best of 5 x 100,000), for torch
    tensors, CuPy arrays and vg.Arrays: each accessor a launcher reads or could read
    (`runtime.fastpath._KINDS`), on a 1-D tensor, beside an empty statement's cost."""
    import timeit

    import torch

    import verdigris as vg

    ours = _module(work, "vg_runtime_kernels", OURS)
    x = torch.randn(N, device="cuda")
    v = vg.asarray(np.ones(N, np.float32))
    env = {"x": x, "v": v, "torch": torch, "k": ours.axpy, "stream": torch._C._cuda_getCurrentRawStream}
    pieces = {
        "an empty statement": "pass",
        "k[1, 256] lookup": "k[1, 256]",
        "torch x.data_ptr()": "x.data_ptr()", "torch x.shape": "x.shape",
        "torch x.dtype": "x.dtype", "torch x.get_device()": "x.get_device()",
        "torch x.is_cuda": "x.is_cuda", "torch x.ndim": "x.ndim", "torch len(x)": "len(x)",
        "torch x.is_contiguous()": "x.is_contiguous()", "torch x.stride()": "x.stride()",
        "torch x._version": "x._version", "torch current raw stream": "stream(0)",
        "vg.Array v.ptr": "v.ptr", "vg.Array v.shape": "v.shape",
    }
    try:
        import cupy

        env["c"] = cupy.zeros(N, dtype=cupy.float32)
        pieces.update({"CuPy c.data.ptr": "c.data.ptr", "CuPy c.shape": "c.shape",
                       "CuPy c.strides": "c.strides", "CuPy c.dtype": "c.dtype",
                       "CuPy c.data.device_id": "c.data.device_id",
                       "CuPy c._c_contiguous (private)": "c._c_contiguous",
                       "CuPy c.flags.c_contiguous": "c.flags.c_contiguous"})
    except ImportError:
        pass
    number = 100_000
    return {label: min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e9
            for label, stmt in pieces.items()}


def launcher_breakdown(work: str) -> dict:
    """ns of our generated axpy launcher, per array kind: whole, without the driver call
    (our Python's share), and what each check line (`if ...: return _vg_next(...)`), the
    stream line, the fault-flag read and the packing cost (the launcher timed again with
    that line turned into `pass`, or the stream into None). The source of each launcher
    is in the result too."""
    import timeit

    import torch

    import verdigris as vg

    ours = _module(work, "vg_runtime_kernels", OURS)
    rng = np.random.default_rng()
    host = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
    kinds = {"torch": [torch.from_numpy(h).cuda() for h in host],
             "vg.Array": [vg.asarray(h) for h in host]}
    out = {}
    for kind, arrays in kinds.items():
        ours.axpy[1, 256](2.0, *arrays)
        launcher = ours.axpy[1, 256]
        while getattr(launcher, "kinds", None) and launcher.kinds[4][1][0] is not type(arrays[0]):
            launcher = launcher.fallback
        if getattr(launcher, "kinds", None) is None:
            continue
        if not hasattr(launcher, "__globals__"):  # a compiled launcher (`runtime.clauncher`):
            launcher = launcher.fallback  # this breaks down the Python one behind it

        def timed(source):
            namespace = {}
            exec(compile(source, "<timed launcher>", "exec"),
                 dict(launcher.__globals__, _noop=lambda *a: (0,)), namespace)
            f = namespace["launch"]
            return min(timeit.repeat(lambda: f(2.0, *arrays), number=20_000, repeat=5)) / 20_000 * 1e9

        source = launcher.source
        base = source.replace("_cu_launch(_F", "_noop(_F")
        row = {"whole launch": timed(source), "without the driver call": timed(base)}
        lines = base.splitlines()
        for i, line in enumerate(lines):
            text, indent = line.strip(), line[:len(line) - len(line.lstrip())]
            if text.startswith("_h = "):
                replacement = indent + "_h = None"
            elif (text.startswith("if ") and "return _vg_next" in text and "_vg_more or" not in text) \
                    or text.startswith(("if _record", "_pack_into")):
                replacement = indent + "pass"
            else:
                continue
            pruned = lines[:i] + [replacement] + lines[i + 1:]
            row[text.split(": return")[0][:70]] = \
                row["without the driver call"] - timed("\n".join(pruned) + "\n")
        row["source"] = source
        out[kind] = row
    torch.cuda.synchronize()
    return out


# ------------------------------------------------------------------------------- first calls

# The inputs are made first, then the clock starts and the kernels are defined (their
# module imported) and called once: on both sides, nothing of the first call happens while
# the program makes its inputs (our background warm-up starts when a kernel is defined).
FIRST_CALL = {
    "ours": '''
import sys, time
sys.path[:0] = [{src!r}, {work!r}]
import numpy as np
import verdigris as vg
rng = np.random.default_rng()
which = {which!r}
if which == "vector_add":
    a, b, out = (vg.asarray(rng.standard_normal(1 << 20).astype(np.float32)) for _ in range(3))
elif which == "softmax":
    x, out = (vg.asarray(rng.standard_normal((4096, 4096)).astype(np.float32)) for _ in range(2))
else:
    import ml_dtypes
    a, b, c = (vg.asarray(rng.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)) for _ in range(3))
vg.synchronize()
t = time.perf_counter()
from vg_runtime_kernels import vector_add, softmax, gemm
if which == "vector_add":
    vector_add[vg.cdiv(1 << 20, 256), 256](a, b, out)
elif which == "softmax":
    softmax[4096](x, out, COLS=4096)
else:
    gemm[8, 8](a, b, c, BM=128, BN=128, BK=64)
vg.synchronize()
print((time.perf_counter() - t) * 1e3)
''',
    "ours (torch tensors)": '''
import sys, time
sys.path[:0] = [{src!r}, {work!r}]
import torch
import verdigris as vg
a, b, out = (torch.rand(1 << 20, device="cuda") for _ in range(3))
torch.cuda.synchronize()
t = time.perf_counter()
from vg_runtime_kernels import vector_add
vector_add[vg.cdiv(1 << 20, 256), 256](a, b, out)
torch.cuda.synchronize()
print((time.perf_counter() - t) * 1e3)
''',
    "triton": '''
import sys, time
sys.path[:0] = [{work!r}]
import torch, triton
which = {which!r}
if which == "vector_add":
    a, b, out = (torch.rand(1 << 20, device="cuda") for _ in range(3))
elif which == "softmax":
    x, out = (torch.rand(4096, 4096, device="cuda") for _ in range(2))
else:
    a, b, c = (torch.rand(1024, 1024, device="cuda", dtype=torch.bfloat16) for _ in range(3))
torch.cuda.synchronize()
t = time.perf_counter()
from tr_runtime_kernels import vector_add, softmax, gemm
if which == "vector_add":
    vector_add[(triton.cdiv(1 << 20, 1024),)](a, b, out, 1 << 20, BLOCK=1024)
elif which == "softmax":
    softmax[(4096,)](x, out, 4096, 4096, BLOCK=4096)
else:
    gemm[(8, 8)](a, b, c, 1024, 1024, 1024, BM=128, BN=128, BK=64)
torch.cuda.synchronize()
print((time.perf_counter() - t) * 1e3)
''',
    "cupy": '''
import sys, time
sys.path[:0] = [{work!r}]
import cupy, numpy as np
from bench_cupy_sources import CUPY
which = {which!r}
if which == "vector_add":
    a, b, out = (cupy.random.rand(1 << 20, dtype=cupy.float32) for _ in range(3))
    launch = lambda: cupy.RawKernel(CUPY[which], which)(((1 << 20) // 256,), (256,), (a, b, out, np.int64(1 << 20)))
else:
    x, out = (cupy.random.rand(4096 * 4096, dtype=cupy.float32) for _ in range(2))
    launch = lambda: cupy.RawKernel(CUPY[which], which)((4096,), (256,), (x, out, np.int32(4096)))
cupy.cuda.Device().synchronize()
t = time.perf_counter()
launch()
cupy.cuda.Device().synchronize()
print((time.perf_counter() - t) * 1e3)
''',
    "ours (disk-cache hit)": '''
import sys, time
sys.path[:0] = [{src!r}, {work!r}]
import numpy as np
import verdigris as vg
from vg_runtime_kernels import vector_add, softmax
a, b, out = (vg.asarray(np.ones(1 << 20, np.float32)) for _ in range(3))
vector_add[vg.cdiv(1 << 20, 256), 256](a, b, out)  # the runtime warm: imports, driver, module
x, y = (vg.asarray(np.ones((4096, 4096), np.float32)) for _ in range(2))
vg.synchronize()
t = time.perf_counter()
softmax[4096](x, y, COLS=4096)  # compiled by an earlier process: a disk-cache hit
vg.synchronize()
print((time.perf_counter() - t) * 1e3)
''',
}


def first_call(who: str, which: str, work: str, cache: str, *, src: str = SRC,
               warmup: bool = True) -> tuple:
    """(ms, our stage log) of the first call in a fresh process, verdigris imported from
    `src`, with our background warm-up or without it (VERDIGRIS_WARMUP=0); (None, why) on
    failure."""
    script = FIRST_CALL[who].format(src=src, work=work, which=which)
    env = dict(os.environ, VERDIGRIS_CACHE_DIR=cache, TRITON_CACHE_DIR=cache,
               CUPY_CACHE_DIR=cache, VERDIGRIS_LOG="compile",
               VERDIGRIS_WARMUP="1" if warmup else "0")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    if done.returncode:
        return None, done.stderr.strip().splitlines()[-1][:200] if done.stderr.strip() else "failed"
    stages = [line for line in done.stdout.splitlines() if line.startswith("verdigris:")]
    return float(done.stdout.strip().splitlines()[-1]), stages


def import_time() -> dict:
    script = ("import time, sys; t = time.perf_counter(); import verdigris; "
              "print((time.perf_counter() - t) * 1e3, *(m in sys.modules for m in "
              "('llvmlite', 'cuda.bindings.driver', 'z3', 'torch')))")
    runs = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=SRC))
        runs.append(done.stdout.split())
    best = min(runs, key=lambda r: float(r[0]))
    return {"ms": float(best[0]), "llvmlite loaded": best[1] == "True",
            "cuda.bindings loaded": best[2] == "True", "z3 loaded": best[3] == "True"}


def compile_times(work: str, peers: bool = True) -> dict:
    with open(os.path.join(work, "bench_cupy_sources.py"), "w") as f:
        f.write(f"CUPY = {CUPY!r}\n")
    rows = {}
    plan = [("ours", k) for k in ("vector_add", "softmax", "gemm")] + \
           [("ours (torch tensors)", "vector_add")] + \
           ([("triton", k) for k in ("vector_add", "softmax", "gemm")] +
            [("cupy", k) for k in ("vector_add", "softmax")] if peers else [])
    caches = {}
    for who, which in plan:
        cache = caches.setdefault(who.split()[0], tempfile.mkdtemp(prefix=f"vg-rt-{who[:4]}-"))
        if who == "ours (torch tensors)":
            cache = tempfile.mkdtemp(prefix="vg-rt-torch-")
        cold = first_call(who, which, work, cache)
        warm = first_call(who, which, work, cache)
        rows[(who, which)] = {"cold": cold, "warm": warm}
    rows[("ours (disk-cache hit)", "softmax")] = {
        "warm": first_call("ours (disk-cache hit)", "softmax", work, caches["ours"])}
    return rows


# ------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--quick", action="store_true",
                        help="our first calls only (no Triton or CuPy compiles)")
    args = parser.parse_args()
    sys.path.insert(0, SRC)
    # Fresh processes import with the bytecode caches a user has: write them, once.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(SRC, "verdigris")])
    import torch

    work = tempfile.mkdtemp(prefix="vg-runtime-bench-")
    card = torch.cuda.get_device_name()
    print(f"runtime overhead, {card}, {time.strftime('%Y-%m-%d')}, python "
          f"{sys.version.split()[0]}, torch {torch.__version__}", flush=True)
    result = {"card": card}
    imports = result["import"] = import_time()
    print(f"\nimport verdigris: {imports['ms']:.1f} ms (llvmlite loaded: "
          f"{imports['llvmlite loaded']}, cuda-bindings: {imports['cuda.bindings loaded']}, "
          f"z3: {imports['z3 loaded']})", flush=True)

    launch = result["launch_us"] = measure(launch_variants(work), args.rounds)
    floors = (launch.get("raw cuLaunchKernel (cuda-bindings)", float("nan")),
              launch.get("raw cuLaunchKernel, 16-argument kernel", float("nan")))
    print(f"\n{'launch overhead (host, per call)':<44}{'us':>8}{'vs raw':>8}  (16-argument "
          "rows: vs the raw launch of that kernel)")
    for name, us in launch.items():
        print(f"{name:<44}{us:8.2f}{us / floors['16' in name]:8.2f}", flush=True)
    try:
        pieces = result["pieces_ns"] = profile_launch(work)
        lines = result["launcher_ns"] = launcher_breakdown(work)
    except Exception as exc:
        print(f"profile: FAILED {type(exc).__name__}: {exc}"[:300])
        pieces, lines = {}, {}
    print(f"\n{'pieces of a launch':<44}{'ns':>8}")
    for name, ns in pieces.items():
        print(f"{name:<44}{ns:8.0f}")
    for kind, row in lines.items():
        print(f"\n{'our axpy launcher, ' + kind:<72}{'ns':>8}")
        for name, ns in row.items():
            if name != "source":
                print(f"  {name:<70}{ns:8.0f}", flush=True)
    _save(args.json, result)

    compiles = compile_times(work, peers=not args.quick)
    result["first_call"] = {f"{w} {k}": r for (w, k), r in compiles.items()}
    _save(args.json, result)
    print(f"\n{'first call in a fresh process':<44}{'cold ms':>10}{'warm ms':>10}")
    for (who, which), r in compiles.items():
        print(f"{who + ' ' + which:<44}{_ms(r.get('cold')):>10}{_ms(r.get('warm')):>10}")
    print("\nour stages (VERDIGRIS_LOG=compile; cold run, then warm):")
    for (who, which), r in compiles.items():
        for run in (r.get("cold"), r.get("warm")):
            if run and run[0] is None:
                print(f"  {who} {which}: {run[1]}")
            elif run and who.startswith("ours"):
                for line in run[1]:
                    print(f"  {line}")


def _ms(run) -> str:
    if run is None:
        return ""
    return "failed" if run[0] is None else f"{run[0]:.1f}"


def _save(path, result) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1, default=str)

if __name__ == "__main__":
    main()
