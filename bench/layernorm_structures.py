"""LayerNorm 16384x8192 bfloat16, one row per block of 256 threads, in hand-written CUDA C
(compiled by CuPy's NVRTC) beside Triton's kernel and ours, timed in a balanced rotation.

What it measures: whether moving the row by the copy engine (`cp.async.bulk` global ->
shared on an mbarrier, then each thread reading its 16-byte vectors from shared memory)
beats 256 threads' own vector loads, and how it interacts with loading the weight and
bias all at once before the arithmetic (what our lowering's `prefetch` does) rather than
vector by vector beside the stores. The CUDA C variants:

| name | x | w and b |
|---|---|---|
| vectors | each thread's 4 vector loads | vector by vector, beside the stores |
| vectors, w/b first | each thread's 4 vector loads | all 8 vectors before the arithmetic |
| bulk | one bulk copy of the row | vector by vector, beside the stores |
| bulk, w/b first | one bulk copy of the row | all 8 vectors before the arithmetic |

Every kernel is checked against a float64 reference first. Method: `triton.testing.do_bench`
medians (L2 flushed before each call), ROUNDS rounds, each starting one implementation
further on and every other round reversed, so no implementation always follows the same
one; per implementation the median over rounds of its time relative to Triton's in the
same round. Needs torch, Triton and CuPy on an sm_90 GPU.

Run: `PYTHONPATH=src python3 bench/layernorm_structures.py`.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from verdigris.benchsuite import load_script
from verdigris.examples.tile_layernorm import layernorm
from verdigris.runtime.dispatch import KernelFunction

ROWS, COLS, EPS, ROUNDS = 16384, 8192, 1e-5, 12
THREADS = 256

SOURCE = r"""
constexpr int T = 256, V = 8192 / 8 / T;  // threads; 16-byte vectors per thread
__device__ __forceinline__ float lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ unsigned pack(float l, float h) {
    unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(h), "f"(l)); return r;
}
__device__ __forceinline__ unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ float block_sum(float s, float* partials) {
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = s;
    __syncthreads();
    float total = 0.f;
    #pragma unroll
    for (int k = 0; k < T / 32; k++) total += partials[k];
    return total;
}
__device__ __forceinline__ float sum4(uint4 v, float mean, bool squares) {
    float a[8] = {lo(v.x), hi(v.x), lo(v.y), hi(v.y), lo(v.z), hi(v.z), lo(v.w), hi(v.w)}, s = 0.f;
    #pragma unroll
    for (int j = 0; j < 8; j++) s = squares ? fmaf(a[j] - mean, a[j] - mean, s) : s + a[j];
    return s;
}
__device__ __forceinline__ uint4 normalized(uint4 v, uint4 w, uint4 b, float mean, float rstd) {
    uint4 o;
    o.x = pack(fmaf((lo(v.x) - mean) * rstd, lo(w.x), lo(b.x)), fmaf((hi(v.x) - mean) * rstd, hi(w.x), hi(b.x)));
    o.y = pack(fmaf((lo(v.y) - mean) * rstd, lo(w.y), lo(b.y)), fmaf((hi(v.y) - mean) * rstd, hi(w.y), hi(b.y)));
    o.z = pack(fmaf((lo(v.z) - mean) * rstd, lo(w.z), lo(b.z)), fmaf((hi(v.z) - mean) * rstd, hi(w.z), hi(b.z)));
    o.w = pack(fmaf((lo(v.w) - mean) * rstd, lo(w.w), lo(b.w)), fmaf((hi(v.w) - mean) * rstd, hi(w.w), hi(b.w)));
    return o;
}
template <bool BULK, bool WB_FIRST>
__device__ void layernorm(const uint4* __restrict__ x, const uint4* __restrict__ w,
                          const uint4* __restrict__ b, uint4* __restrict__ out, float eps) {
    __shared__ alignas(128) uint4 row[T * V];
    __shared__ unsigned long long arrived;
    __shared__ float partials[2][T / 32];
    const int t = threadIdx.x;
    const size_t base = (size_t)blockIdx.x * T * V;
    uint4 v[V];
    if (BULK) {
        if (t == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(shared_address(&arrived)));
            asm volatile("fence.proxy.async.shared::cta;");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         :: "r"(shared_address(&arrived)), "r"(T * V * 16));
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(shared_address(row)), "l"(x + base), "r"(T * V * 16), "r"(shared_address(&arrived))
                         : "memory");
        }
        __syncthreads();  // the mbarrier is initialized before anyone waits on it
        asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra W; }"
                     :: "r"(shared_address(&arrived)) : "memory");
        #pragma unroll
        for (int i = 0; i < V; i++) v[i] = row[i * T + t];
    } else {
        #pragma unroll
        for (int i = 0; i < V; i++) v[i] = __ldg(x + base + i * T + t);
    }
    float s = 0.f;
    #pragma unroll
    for (int i = 0; i < V; i++) s += sum4(v[i], 0.f, false);
    const float mean = block_sum(s, partials[0]) / 8192;
    float q = 0.f;
    #pragma unroll
    for (int i = 0; i < V; i++) q += sum4(v[i], mean, true);
    const float rstd = rsqrtf(block_sum(q, partials[1]) / 8192 + eps);
    uint4 wv[V], bv[V];
    if (WB_FIRST) {
        #pragma unroll
        for (int i = 0; i < V; i++) { wv[i] = __ldg(w + i * T + t); bv[i] = __ldg(b + i * T + t); }
    }
    #pragma unroll
    for (int i = 0; i < V; i++) {
        const int c = i * T + t;
        out[base + c] = normalized(v[i], WB_FIRST ? wv[i] : __ldg(w + c), WB_FIRST ? bv[i] : __ldg(b + c), mean, rstd);
    }
}
#define KERNEL(NAME, BULK, WB_FIRST) extern "C" __global__ void __launch_bounds__(T) \
    NAME(const uint4* x, const uint4* w, const uint4* b, uint4* out, float eps) { layernorm<BULK, WB_FIRST>(x, w, b, out, eps); }
KERNEL(ln_vectors, false, false)
KERNEL(ln_vectors_wb_first, false, true)
KERNEL(ln_bulk, true, false)
KERNEL(ln_bulk_wb_first, true, true)
"""
VARIANTS = {"vectors": "ln_vectors", "vectors, w/b first": "ln_vectors_wb_first",
            "bulk": "ln_bulk", "bulk, w/b first": "ln_bulk_wb_first"}


def main() -> None:
    import cupy
    import torch
    import torch.nn.functional as F
    import triton

    tile_bench = load_script(Path(__file__).with_name("tile_bench.py"))
    x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    w, b = (torch.randn(COLS, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(x)
    want = F.layer_norm(x.double(), (COLS,), w.double(), b.double(), EPS)
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
    args = tuple(cupy.from_dlpack(t) for t in (x, w, b, out)) + (cupy.float32(EPS),)
    fused = KernelFunction(layernorm.fn, layernorm.track, fma=True)
    impls = {
        "Triton, 8 warps": lambda: tile_bench.tr_layernorm[(ROWS,)](x, w, b, out, COLS, COLS, EPS, BLOCK=COLS,
                                                                     num_warps=8),
        "ours, 8 warps": lambda: layernorm[ROWS](x, w, b, out, EPS, COLS=COLS, num_warps=8),
        "ours, 8 warps, fma": lambda: fused[ROWS](x, w, b, out, COLS, EPS, COLS=COLS, num_warps=8),
    }
    for label, name in VARIANTS.items():
        function = module.get_function(name)
        impls[f"CUDA C: {label}"] = lambda f=function: f((ROWS,), (THREADS,), args)
        print(f"CUDA C {label}: {function.num_regs} registers", flush=True)
    for name, launch in impls.items():
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        error = float((out.double() - want).norm() / want.norm())
        if not error < 1e-2:
            raise SystemExit(f"{name}: relative error {error:.2e} against float64")
    names = list(impls)
    times: dict = {n: [] for n in names}
    for r in range(ROUNDS):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order[::-1] if r % 2 else order:
            times[name].append(triton.testing.do_bench(impls[name], warmup=10, rep=40, return_mode="median"))
    nbytes = 2 * x.numel() * x.element_size()
    reference = times[names[0]]
    print(f"\n{'implementation':28} {'TB/s':>6}  speed vs Triton: median (min, max) over {ROUNDS} rounds")
    for name in names:
        ratios = sorted(t0 / t for t0, t in zip(reference, times[name]))
        print(f"{name:28} {nbytes / statistics.median(times[name]) / 1e9:6.3f}  "
              f"{statistics.median(ratios):.4f} ({ratios[0]:.4f}, {ratios[-1]:.4f})", flush=True)


if __name__ == "__main__":
    main()
