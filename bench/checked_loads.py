"""What bounds checks cost when the checker cannot prove them: gathers through indices read
from memory (`verdigris.examples.gather_sum`, an embedding bag's sum), beside the same
gather in CUDA C without checks and torch's indexing.

Each output sums K float32 elements of x at indices from idx (n x K int32, random, in
bounds): the indices are data, so every load of x keeps its bounds check. Ours twice: K a
constexpr (`gather_sum`, the loop unrolled by us) and K = idx.shape[1] at run time
(`gather_sum_any`, a loop whose first fault is carried to its exit). Peers: CUDA C without
checks (CuPy RawKernel, the ceiling: the same loads, unchecked), with K a template
constant and a run-time argument, and torch (`x[idx].sum(1)`). Every implementation is checked against float64 first. Times:
`triton.testing.do_bench` medians; "GB/s" counts the bytes the gather must move (idx, out,
and one element of x per index; x's reads are random, so this is no roofline).
Run: `PYTHONPATH=src python3 bench/checked_loads.py [--n 16777216] [--k 8]`.
"""
from __future__ import annotations

import argparse

import verdigris as vg
from verdigris.benchsuite import time_each
from verdigris.examples.gather_sum import gather_sum, gather_sum_any

CUDA_C = r'''
template <int K>
__global__ void gather(const float* __restrict__ x, const int* __restrict__ idx,
                       float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++) acc += x[idx[i * K + k]];
    out[i] = acc;
}
extern "C" __global__ void gather_any(const float* __restrict__ x, const int* __restrict__ idx,
                                      float* __restrict__ out, long long n, int k_count) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < k_count; k++) acc += x[idx[i * k_count + k]];
    out[i] = acc;
}
'''


def main() -> None:
    import cupy
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1 << 24, help="outputs")
    parser.add_argument("--k", type=int, default=8, help="indices per output")
    args = parser.parse_args()
    n, k = args.n, args.k
    x = torch.randn(n, device="cuda")
    idx = torch.randint(0, n, (n, k), device="cuda", dtype=torch.int32)
    out = torch.empty(n, device="cuda")
    want = x.double()[idx.long()].sum(1)
    grid = vg.cdiv(n, 256)
    cx, cidx, cout = (cupy.from_dlpack(t) for t in (x, idx, out))
    module = cupy.RawModule(code=CUDA_C, name_expressions=[f"gather<{k}>"])
    unrolled, any_count = module.get_function(f"gather<{k}>"), module.get_function("gather_any")
    impls = {
        "CUDA C, no checks": lambda: unrolled((grid,), (256,), (cx, cidx, cout, cupy.int64(n))),
        "verdigris": lambda: gather_sum[grid, 256](x, idx, out, K=k),
        "CUDA C, run-time K": lambda: any_count((grid,), (256,), (cx, cidx, cout, cupy.int64(n), cupy.int32(k))),
        "verdigris, run-time K": lambda: gather_sum_any[grid, 256](x, idx, out),
        "torch": lambda: out.copy_(x[idx.long()].sum(1)),
    }
    rows = time_each(impls, out, want)
    unrolled_ms, any_ms = rows[0][1], rows[2][1]
    moved = n * k * 4 * 2 + n * 4
    print(f"gather of {k} float32 per output, {n:,} outputs, {torch.cuda.get_device_name()}")
    print(f"{'implementation':24} {'ms':>8} {'GB/s':>8} {'vs CUDA C':>10} {'vs run-time K':>14} {'rel. error':>11}")
    for name, ms, err in rows:
        print(f"{name:24} {ms:8.3f} {moved / ms / 1e6:8.1f} {unrolled_ms / ms:10.3f} {any_ms / ms:14.3f} "
              f"{err:11.2e}" + ("" if err < 1e-5 else "  WRONG"))


if __name__ == "__main__":
    main()
