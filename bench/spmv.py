"""Sparse matrix times vector (CSR, float32): `verdigris.examples.spmv` beside cuSPARSE
(through torch and CuPy) and the same kernel in CUDA C without bounds checks.

The matrix is random: `--rows` rows and as many columns, row lengths uniform in 0..2·mean,
columns uniform. The row bounds and the columns are data, so every load of ours keeps its
bounds check; the CUDA C kernel is the same loop without them (the ceiling of what the
checks may cost). Both run at each number of threads per row (LANES); "default" is ours
at `spmv.lanes_for`'s choice, what `spmv.multiply` launches. Every implementation is checked against float64 first. Times:
`triton.testing.do_bench` medians; "GB/s" counts indptr, indices, data and y once and one
element of x per entry (x's reads are gathers, so this is no roofline).
Run: `PYTHONPATH=src python3 bench/spmv.py [--rows 1048576] [--mean 32]`.
"""
from __future__ import annotations

import argparse

import numpy as np

from verdigris.benchsuite import time_each
from verdigris.examples import spmv

CUDA_C = r'''
template <int LANES>
__global__ void spmv(const int* __restrict__ indptr, const int* __restrict__ indices,
                     const float* __restrict__ data, const float* __restrict__ x,
                     float* __restrict__ y, long long rows) {
    long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / LANES;
    int part = threadIdx.x % LANES;
    float total = 0.0f;
    if (row < rows)
        for (int j = indptr[row] + part; j < indptr[row + 1]; j += LANES) total += data[j] * x[indices[j]];
    #pragma unroll
    for (int k = LANES / 2; k > 0; k /= 2) total += __shfl_xor_sync(0xffffffffu, total, k);
    if (row < rows && part == 0) y[row] = total;
}
template __global__ void spmv<2>(const int*, const int*, const float*, const float*, float*, long long);
template __global__ void spmv<4>(const int*, const int*, const float*, const float*, float*, long long);
template __global__ void spmv<8>(const int*, const int*, const float*, const float*, float*, long long);
template __global__ void spmv<16>(const int*, const int*, const float*, const float*, float*, long long);
template __global__ void spmv<32>(const int*, const int*, const float*, const float*, float*, long long);
'''
LANES = (2, 4, 8, 16, 32)


def main() -> None:
    import cupy
    import cupyx.scipy.sparse as cusparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1 << 20)
    parser.add_argument("--mean", type=int, default=32, help="mean entries per row")
    args = parser.parse_args()
    rows = args.rows
    indptr, indices, data = spmv.random_csr(np.random.default_rng(0), rows, rows, args.mean)
    x_host = np.random.default_rng(1).standard_normal(rows).astype(np.float32)
    want = torch.from_numpy(spmv.reference(indptr, indices, data, x_host)).cuda()
    indptr_t, indices_t, data_t, x = (torch.from_numpy(a).cuda() for a in (indptr, indices, data, x_host))
    y = torch.empty(rows, device="cuda")
    a_torch = torch.sparse_csr_tensor(indptr_t, indices_t, data_t, (rows, rows), check_invariants=False)
    c_indptr, c_indices, c_data, c_x, c_y = (cupy.from_dlpack(t) for t in (indptr_t, indices_t, data_t, x, y))
    a_cupy = cusparse.csr_matrix((c_data, c_indices, c_indptr), shape=(rows, rows))
    module = cupy.RawModule(code=CUDA_C, options=("-std=c++17",), name_expressions=[f"spmv<{n}>" for n in LANES])
    c_args = (c_indptr, c_indices, c_data, c_x, c_y, cupy.int64(rows))
    impls = {
        "torch (cuSPARSE)": lambda: y.copy_(torch.mv(a_torch, x)),
        "CuPy (cuSPARSE)": lambda: c_y.__setitem__(Ellipsis, a_cupy @ c_x),
        f"verdigris, default ({spmv.lanes_for(len(data) / rows)} lanes)": lambda: spmv.multiply(indptr_t, indices_t, data_t, x, y),
    }
    for lanes in LANES:
        kernel, grid = module.get_function(f"spmv<{lanes}>"), ((rows * lanes + 255) // 256,)
        impls[f"verdigris, {lanes} lanes"] = lambda n=lanes: spmv.multiply(indptr_t, indices_t, data_t, x, y, lanes=n)
        impls[f"CUDA C, {lanes} lanes, no checks"] = lambda f=kernel, g=grid: f(g, (256,), c_args)
    results = time_each(impls, y, want, rep_ms=200)
    best_peer = min(ms for name, ms, _ in results[:2])
    moved = indptr.nbytes + indices.nbytes * 2 + data.nbytes + rows * 4
    print(f"CSR SpMV float32, {rows:,} rows, {len(data):,} entries, {torch.cuda.get_device_name()}")
    print(f"{'implementation':32} {'ms':>8} {'GB/s':>8} {'vs cuSPARSE':>12} {'rel. error':>11}")
    for name, ms, err in results:
        print(f"{name:32} {ms:8.4f} {moved / ms / 1e6:8.1f} {best_peer / ms:12.3f} {err:11.2e}"
              + ("" if err < 1e-5 else "  WRONG"))


if __name__ == "__main__":
    main()
