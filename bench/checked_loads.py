"""What bounds checks cost when the checker cannot prove them: gathers through indices read
from memory (`verdigris.examples.gather_sum`, an embedding bag's sum), beside the same
gather in CUDA C without checks and torch's indexing.

Each output sums K = 8 float32 elements of x at indices from idx (n x K int32, random, in
bounds): the indices are data, so every load of x keeps its bounds check. Peers: CUDA C
without checks (CuPy RawKernel, the ceiling: the same loads, unchecked) and torch
(`x[idx].sum(1)`). Every implementation is checked against float64 first. Times:
`triton.testing.do_bench` medians; "GB/s" counts the bytes the gather must move (idx, out,
and one element of x per index; x's reads are random, so this is no roofline).
Run: `PYTHONPATH=src python3 bench/checked_loads.py [--n 16777216]`.
"""
from __future__ import annotations

import argparse

import verdigris as vg
from verdigris.examples.gather_sum import gather_sum

K = 8
CUDA_C = r'''
extern "C" __global__ void gather(const float* __restrict__ x, const int* __restrict__ idx,
                                  float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < 8; k++) acc += x[idx[i * 8 + k]];
    out[i] = acc;
}
'''


def main() -> None:
    import cupy
    import torch
    from triton.testing import do_bench

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1 << 24, help="outputs")
    n = parser.parse_args().n
    x = torch.randn(n, device="cuda")
    idx = torch.randint(0, n, (n, K), device="cuda", dtype=torch.int32)
    out = torch.empty(n, device="cuda")
    want = x.double()[idx.long()].sum(1)
    grid = vg.cdiv(n, 256)
    cx, cidx, cout = (cupy.from_dlpack(t) for t in (x, idx, out))
    cuda_c = cupy.RawKernel(CUDA_C, "gather")
    impls = {
        "verdigris": lambda: gather_sum[grid, 256](x, idx, out, K=K),
        "CUDA C, no checks": lambda: cuda_c((grid,), (256,), (cx, cidx, cout, cupy.int64(n))),
        "torch": lambda: out.copy_(x[idx.long()].sum(1)),
    }
    rows = []
    for name, run in impls.items():
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = float((out.double() - want).norm() / want.norm())
        ms = do_bench(run, warmup=25, rep=100, return_mode="median")
        rows.append((name, ms, err))
    ceiling = rows[1][1]
    moved = n * K * 4 * 2 + n * 4
    print(f"gather of {K} float32 per output, {n:,} outputs, {torch.cuda.get_device_name()}")
    print(f"{'implementation':24} {'ms':>8} {'GB/s':>8} {'vs CUDA C':>10} {'rel. error':>11}")
    for name, ms, err in rows:
        print(f"{name:24} {ms:8.3f} {moved / ms / 1e6:8.1f} {ceiling / ms:10.3f} {err:11.2e}"
              + ("" if err < 1e-5 else "  WRONG"))


if __name__ == "__main__":
    main()
