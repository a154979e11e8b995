"""`verdigris bench` cases for the SIMT track's cooperating kernels, beside torch and CuPy.

Registers (issue 6's cases, over a range of sizes; `--quick` measures the issue's size):
sum of float32 (2^22..2^28), histogram of uint8 into 256 bins, inclusive scan of float32,
transpose of float32 (N x N), and SGEMM float32 on the CUDA cores (N^3, against cuBLAS
with TF32 off, and the fp32 CUDA-core peak as its roofline); and a CSR sparse matrix
times a vector (2^20 rows of 8, 32 or 128 entries on average, against cuSPARSE; its bytes
count x's gathered elements, most of which come from L2, so it can pass the copy
roofline). Ours are the examples' kernels (`verdigris.examples.reduce_sum`, `histogram`,
`scan`, `transpose`, `sgemm`, `spmv`) in the
configurations `bench/simt_coop.py` tries (they are written inside its case functions,
so they are repeated here); the peers are torch's and CuPy's library calls, and for the
histogram a shared-memory one in CUDA C through cupy.RawKernel (cupy.bincount is a plain
atomic kernel); nothing is borrowed from that script (its float4 read-only CuPy kernel, a
ceiling there, is left to it: the suite's memory roofline is the device copy). Every
implementation is checked before it is timed: against float64 (the sums, the scan, SGEMM)
or exactly (histogram, transpose). Throughput counts bytes read + written per call (the
histogram: bytes read). Ours add into their output (the sum, the histogram): zeroing it is
part of each timed call, as it is of the peers', which return a new array.

Needs torch (the cases are skipped without it); CuPy is optional.
"""
from __future__ import annotations

from verdigris.benchsuite import case, checked, has, returning

LONG = [1 << k for k in (22, 24, 26, 28)]
SQUARES = [(s, s) for s in (4096, 8192, 16384)]
SCAN_RTOL = 1e-4  # float32 running sums of up to 2^28 terms, each tile's prefix rounded


def _sms() -> int:
    import torch

    return torch.cuda.get_device_properties(0).multi_processor_count


def _cupy_view(tensor):
    """The same GPU memory as a CuPy array (no copy), or None without CuPy."""
    if not has("cupy"):
        return None
    import cupy

    return cupy.asarray(tensor)


@case("sum (SIMT) f32", kind="memory", sizes=LONG, quick=[1 << 28], work=lambda n: 4 * n,
      requires=["torch"])
def bench_sum(n):
    import torch

    from verdigris.examples import reduce_sum

    x = torch.rand(n, device="cuda")
    out = torch.zeros(1, device="cuda")
    want = x.double().sum()
    sms = _sms()

    def ours(block, per_thread, waves):
        grid = reduce_sum.grid_for(n, block, per_thread, max_blocks=sms * waves)
        # block_sum adds into out: zeroing it is part of each call, as in use (the peers
        # return a new array, which they fill themselves)
        return lambda: (out.zero_(), reduce_sum.block_sum[grid, block](
            x, out, BLOCK=block, PER_THREAD=per_thread))

    impls = {"verdigris": {
                 f"block {block}, {per_thread} per thread, <= {waves} blocks per SM":
                 checked(ours(block, per_thread, waves), out, want, 1e-5)
                 for block, per_thread, waves in ((256, 8, 16), (512, 16, 4), (1024, 8, 2))},
             "torch": returning(lambda: x.sum(), want, 1e-5)}
    cx = _cupy_view(x)
    if cx is not None:
        impls["cupy"] = returning(lambda: cx.sum(keepdims=True), want, 1e-5)
    return impls


# CuPy's competent histogram (cupy.bincount is a plain atomic kernel): CUDA C, compiled by
# NVRTC through cupy.RawKernel.
HISTOGRAM_CUDA = r"""
// One 256-bin histogram per warp in shared memory (privatized: a warp's lanes contend only
// with each other), 16 bytes per load, the block's warps summed into the output at the end.
#define WARPS 8  // the block is WARPS * 32 threads
extern "C" __global__ void __launch_bounds__(WARPS * 32)
histogram_shared(const unsigned char* __restrict__ data, long long n,
                 unsigned long long* __restrict__ bins) {
    __shared__ unsigned int counts[WARPS][256];
    unsigned int* mine = counts[threadIdx.x / 32];
    for (int i = threadIdx.x; i < WARPS * 256; i += blockDim.x) (&counts[0][0])[i] = 0;
    __syncthreads();
    const uint4* words = reinterpret_cast<const uint4*>(data);
    long long nwords = n / 16, stride = (long long)gridDim.x * blockDim.x;
    for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < nwords; w += stride) {
        uint4 v = words[w];
        unsigned int parts[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            atomicAdd(&mine[parts[k] & 0xff], 1u);
            atomicAdd(&mine[(parts[k] >> 8) & 0xff], 1u);
            atomicAdd(&mine[(parts[k] >> 16) & 0xff], 1u);
            atomicAdd(&mine[parts[k] >> 24], 1u);
        }
    }
    if (blockIdx.x == 0)  // the bytes after the last whole word
        for (long long i = nwords * 16 + threadIdx.x; i < n; i += blockDim.x)
            atomicAdd(&mine[data[i]], 1u);
    __syncthreads();
    for (int bin = threadIdx.x; bin < 256; bin += blockDim.x) {
        unsigned int total = 0;
        for (int w = 0; w < WARPS; ++w) total += counts[w][bin];
        if (total) atomicAdd(&bins[bin], (unsigned long long)total);
    }
}
"""


@case("histogram (SIMT) u8, 256 bins", kind="memory", sizes=LONG, quick=[1 << 28],
      work=lambda n: n, requires=["torch"])
def bench_histogram(n):
    import torch

    from verdigris.examples import histogram

    data = torch.randint(0, histogram.BINS, (n,), dtype=torch.uint8, device="cuda")
    want = torch.bincount(data, minlength=histogram.BINS)
    bins = torch.zeros(histogram.BINS, dtype=torch.int64, device="cuda")
    sms = _sms()

    def ours(block, per_thread, waves):
        grid = histogram.grid_for(n, block, per_thread, max_blocks=sms * waves)
        # histogram adds into bins: zeroing them is part of each call, as in use
        return lambda: (bins.zero_(), histogram.histogram[grid, block](
            data, bins, PER_THREAD=per_thread))

    impls = {"verdigris": {
                 f"block {block}, {per_thread} per thread, <= {waves} blocks per SM":
                 checked(ours(block, per_thread, waves), bins, want, 0)
                 for block, per_thread, waves in ((256, 8, 16), (256, 16, 8), (512, 16, 4))},
             "torch": returning(lambda: torch.bincount(data, minlength=histogram.BINS),
                                want, 0)}
    cdata, cbins = _cupy_view(data), _cupy_view(bins)
    if cdata is not None:
        import cupy
        import numpy as np

        shared = cupy.RawKernel(HISTOGRAM_CUDA, "histogram_shared")

        def cuda_c(blocks_per_sm):
            return lambda: (cbins.fill(0), shared((sms * blocks_per_sm,), (256,),
                                                  (cdata, np.int64(n), cbins)))

        impls["cupy"] = {
            **{f"shared-memory CUDA C, {b} blocks per SM": checked(cuda_c(b), bins, want, 0)
               for b in (4, 8)},
            "cupy.bincount": returning(lambda: cupy.bincount(cdata, minlength=histogram.BINS),
                                       want, 0)}
    return impls


@case("scan (SIMT) f32", kind="memory", sizes=LONG, quick=[1 << 28], work=lambda n: 8 * n,
      requires=["torch"])
def bench_scan(n):
    import torch

    from verdigris.examples import scan

    x = torch.rand(n, device="cuda") * 2 - 1
    want = torch.cumsum(x.double(), 0)
    out = torch.empty_like(x)

    def ours(warps, rows):
        tiles = scan.tiles_for(n, warps, rows)
        aggregate = torch.empty(tiles, dtype=torch.float64, device="cuda")
        inclusive = torch.empty_like(aggregate)
        tickets = torch.empty(1, dtype=torch.int32, device="cuda")

        # the reset of the tile state is part of each call, as in use
        return lambda: scan.scan(x, out, aggregate, inclusive, tickets, warps, rows)

    impls = {"verdigris": {f"{warps} warps x {rows} rows": checked(ours(warps, rows), out,
                                                                   want, SCAN_RTOL)
                           for warps, rows in ((8, 24), (12, 16), (8, 16), (4, 32))},
             "torch": returning(lambda: torch.cumsum(x, 0), want, SCAN_RTOL)}
    cx = _cupy_view(x)
    if cx is not None:
        import cupy

        impls["cupy"] = returning(lambda: cupy.cumsum(cx), want, SCAN_RTOL)
    return impls


@case("transpose (SIMT) f32", kind="memory", sizes=SQUARES, quick=[(16384, 16384)],
      work=lambda s: 2 * 4 * s[0] * s[1], requires=["torch"])
def bench_transpose(size):
    import torch

    import verdigris as vg
    from verdigris.examples import transpose

    rows, cols = size
    x = torch.rand(rows, cols, device="cuda")
    out = torch.empty(cols, rows, device="cuda")
    want = x.t()

    def ours(tile, block_rows):
        grid = (vg.cdiv(cols, tile), vg.cdiv(rows, tile))
        return lambda: transpose.transpose[grid, (tile, block_rows)](x, out, TILE=tile,
                                                                     ROWS=block_rows)

    impls = {"verdigris": {f"tile {tile}, block ({tile}, {block_rows})": checked(
                 ours(tile, block_rows), out, want, 0)
                 for tile, block_rows in ((32, 8), (64, 8), (64, 16))},
             "torch": checked(lambda: out.copy_(x.t()), out, want, 0)}
    cx = _cupy_view(x)
    if cx is not None:
        import cupy

        impls["cupy"] = returning(lambda: cupy.ascontiguousarray(cx.T), want, 0)
    return impls


@case("SGEMM (SIMT) f32", kind="compute", sizes=[1024, 2048, 4096], quick=[4096],
      work=lambda n: 2 * n**3, requires=["torch"], plot="gemm", roofline="fp32_tflops",
      size_label=lambda n: f"{n}^3")
def bench_sgemm(n):
    import torch

    from verdigris.examples import sgemm

    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS on the CUDA cores, as ours
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    want = a.double() @ b.double()
    configs = (dict(BM=128, BN=128, BK=8, TM=8, TN=8), dict(BM=128, BN=128, BK=8, TM=8, TN=4),
               dict(BM=128, BN=64, BK=8, TM=8, TN=4))
    impls = {"verdigris": {"{BM}x{BN}x{BK} tiles, {TM}x{TN} per thread".format(**cfg): checked(
                 lambda cfg=cfg: sgemm.matmul(a, b, c, cfg), c, want, 1e-5) for cfg in configs},
             "torch": checked(lambda: torch.mm(a, b, out=c), c, want, 1e-5)}
    ca, cb = _cupy_view(a), _cupy_view(b)
    if ca is not None:
        import cupy

        impls["cupy"] = returning(lambda: cupy.matmul(ca, cb), want, 1e-5)
    return impls


SPMV_ROWS = 1 << 20


def _spmv_bytes(size) -> int:
    """indptr, y, and per entry its column, its value and the element of x (the mean count)."""
    rows, mean = size
    return 8 * rows + 12 * rows * mean


@case("SpMV CSR (SIMT) f32", kind="memory", sizes=[(SPMV_ROWS, m) for m in (8, 32, 128)],
      quick=[(SPMV_ROWS, 32)], work=_spmv_bytes, requires=["torch"],
      size_label=lambda s: f"{s[0]:,} rows x {s[1]}")
def bench_spmv(size):
    import numpy as np
    import torch

    from verdigris.examples import spmv

    rows, mean = size
    rng = np.random.default_rng(0)
    host = spmv.random_csr(rng, rows, rows, mean)
    x_host = rng.standard_normal(rows).astype(np.float32)
    want = torch.from_numpy(spmv.reference(*host, x_host)).cuda()
    indptr, indices, data, x = (torch.from_numpy(a).cuda() for a in (*host, x_host))
    y = torch.empty(rows, device="cuda")
    matrix = torch.sparse_csr_tensor(indptr, indices, data, (rows, rows), check_invariants=False)
    chosen = spmv.lanes_for(mean)
    impls = {"verdigris": {f"{lanes} lanes per row" + (" (the default)" if lanes == chosen else ""): checked(
                 lambda lanes=lanes: spmv.multiply(indptr, indices, data, x, y, lanes=lanes), y, want, 1e-5)
                 for lanes in sorted({chosen, max(2, chosen // 2), min(32, chosen * 2)})},
             "torch": returning(lambda: torch.mv(matrix, x), want, 1e-5)}
    if has("cupy"):
        import cupyx.scipy.sparse

        cupy_matrix = cupyx.scipy.sparse.csr_matrix(
            tuple(_cupy_view(t) for t in (data, indices, indptr)), shape=(rows, rows))
        cx = _cupy_view(x)
        impls["cupy"] = returning(lambda: cupy_matrix @ cx, want, 1e-5)
    return impls
