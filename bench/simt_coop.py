"""SIMT cooperation on the GPU beside torch and CuPy, in one run (issue 6's targets).

Cases, each with our example kernel (`verdigris.examples.*`, which the tests check on both
backends) in several configurations, each configuration checked against a reference
before it is timed, the best shown first:
- sum of 2^28 float32 (`reduce_sum.block_sum`) vs torch.sum and cupy.sum, and the read
  bandwidth of a float4 read-only CUDA kernel (CuPy RawKernel) as the ceiling;
- histogram of 2^28 uint8 into 256 bins (`histogram.histogram`) vs torch.bincount and
  cupy.bincount;
- inclusive scan of 2^28 float32 (`scan.scan`: `scan_tiles`, decoupled look-back, after
  `reset_tiles` sets its tile state, which is in its time) vs torch.cumsum and
  cupy.cumsum;
- transpose 16384 x 16384 float32 (`transpose.transpose`) vs the device copy (torch
  copy_) and torch's and CuPy's strided copies;
- SGEMM 4096^3 float32 on the CUDA cores (`sgemm.sgemm`) vs cuBLAS through torch with TF32
  off, and through CuPy.
Times: `triton.testing.do_bench` medians (ms). Bandwidths count bytes read + written.
Run: `PYTHONPATH=src python3 bench/simt_coop.py [--json FILE] [--cases sum,scan,...]`.
"""
from __future__ import annotations

import argparse
import json
import traceback

import cupy
import torch
from triton.testing import do_bench

from verdigris.examples import histogram, reduce_sum, scan, sgemm, transpose

SMS = torch.cuda.get_device_properties(0).multi_processor_count

READ_ONLY = cupy.RawKernel(r'''
extern "C" __global__ void read_all(const float4* __restrict__ x, long long n4, float* out) {
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        float4 v = __ldg(x + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == -1.0f) out[0] = acc;  // keeps the loads; never true for the inputs here
}
''', "read_all")


def ms(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def rel_error(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def best(rows: list) -> dict:
    """The fastest correct configuration (the fastest of all when none is correct)."""
    return min([r for r in rows if r.get("ok", True)] or rows, key=lambda r: r["ms"])


def case_sum(report):
    n = 1 << 28
    x = torch.rand(n, device="cuda")
    want = x.double().sum()
    out = torch.zeros(1, device="cuda")
    ours = []
    for block, per_thread, waves in ((256, 8, 16), (512, 16, 4), (1024, 8, 2)):
        grid = SMS * waves

        def run(block=block, per_thread=per_thread, grid=grid):
            reduce_sum.block_sum[grid, block](x, out, BLOCK=block, PER_THREAD=per_thread)

        out.zero_()
        run()
        error = abs(float(out[0]) - float(want)) / float(want)
        ours.append(dict(config=f"block {block}, {per_thread} per thread, {grid} blocks",
                         ok=error < 1e-5, error=error, ms=ms(run)))
    cx = cupy.asarray(x)
    scratch = cupy.zeros(1, cupy.float32)
    read_rows = [dict(config=f"{SMS * w} blocks of 256",
                      ms=ms(lambda w=w: READ_ONLY((SMS * w,), (256,), (cx, cupy.int64(n // 4), scratch))))
                 for w in (4, 8, 16)]
    peers = {"torch.sum": ms(lambda: x.sum()), "cupy.sum": ms(lambda: cx.sum())}
    gbs = lambda t: 4 * n / t / 1e6  # noqa: E731 (GB/s from ms)
    mine, ceiling = best(ours), best(read_rows)
    report("sum of 2^28 float32", mine, ours, peers, unit="GB/s", rate=gbs,
           extra={"read ceiling (float4 read-only kernel)": gbs(ceiling["ms"])},
           targets={"ours / read ceiling >= 0.9": ceiling["ms"] / mine["ms"],
                    "ours / torch.sum >= 1": peers["torch.sum"] / mine["ms"]})


def case_histogram(report):
    n = 1 << 28
    data = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    want = torch.bincount(data, minlength=256)
    bins = torch.zeros(256, dtype=torch.int64, device="cuda")
    ours = []
    for block, per_thread, waves in ((256, 8, 16), (256, 16, 8), (512, 16, 4)):
        grid = SMS * waves

        def run(block=block, per_thread=per_thread, grid=grid):
            histogram.histogram[grid, block](data, bins, PER_THREAD=per_thread)

        bins.zero_()
        run()
        ours.append(dict(config=f"block {block}, {per_thread} per thread, {grid} blocks",
                         ok=bool(torch.equal(bins, want)), ms=ms(run)))
    cdata = cupy.asarray(data)
    peers = {"torch.bincount": ms(lambda: torch.bincount(data, minlength=256)),
             "cupy.bincount": ms(lambda: cupy.bincount(cdata, minlength=256))}
    gbs = lambda t: n / t / 1e6  # noqa: E731
    mine = best(ours)
    report("histogram of 2^28 uint8, 256 bins", mine, ours, peers, unit="GB/s", rate=gbs,
           targets={"ours / torch.bincount >= 1": peers["torch.bincount"] / mine["ms"]})


def case_scan(report):
    n = 1 << 28
    x = torch.rand(n, device="cuda") * 2 - 1
    want = torch.cumsum(x.double(), 0)
    out = torch.empty_like(x)
    ours = []
    for warps, rows in ((8, 24), (12, 16), (8, 16), (4, 32)):
        tiles = scan.tiles_for(n, warps, rows)
        aggregate = torch.empty(tiles, dtype=torch.float64, device="cuda")
        inclusive = torch.empty_like(aggregate)
        tickets = torch.empty(1, dtype=torch.int32, device="cuda")

        def run(warps=warps, rows=rows, aggregate=aggregate, inclusive=inclusive, tickets=tickets):
            scan.scan(x, out, aggregate, inclusive, tickets, warps, rows)

        out.fill_(float("nan"))
        run()
        error = rel_error(out, want)
        ours.append(dict(config=f"{warps} warps x {rows} rows (tiles of {warps * rows * 32})",
                         ok=error < 1e-5, error=error, ms=ms(run)))
    cx = cupy.asarray(x)
    torch_error = rel_error(torch.cumsum(x, 0), want)
    peers = {"torch.cumsum": ms(lambda: torch.cumsum(x, 0)), "cupy.cumsum": ms(lambda: cupy.cumsum(cx))}
    gbs = lambda t: 8 * n / t / 1e6  # noqa: E731
    mine = best(ours)
    report("inclusive scan of 2^28 float32", mine, ours, peers, unit="GB/s", rate=gbs,
           extra={"torch.cumsum relative error": torch_error},
           targets={"ours / torch.cumsum >= 1": peers["torch.cumsum"] / mine["ms"]})


def case_transpose(report):
    side = 16384
    x = torch.rand(side, side, device="cuda")
    out = torch.empty_like(x)
    copy_out = torch.empty_like(x)
    ours = []
    for tile, rows in ((32, 8), (64, 8), (64, 16)):
        grid = (side // tile, side // tile)

        def run(tile=tile, rows=rows, grid=grid):
            transpose.transpose[grid, (tile, rows)](x, out, TILE=tile, ROWS=rows)

        out.fill_(float("nan"))
        run()
        ours.append(dict(config=f"tile {tile}, block ({tile}, {rows})",
                         ok=bool(torch.equal(out, x.t())), ms=ms(run)))
    cx = cupy.asarray(x)
    copy_ms = ms(lambda: copy_out.copy_(x))
    peers = {"torch copy_(x.t())": ms(lambda: copy_out.copy_(x.t())),
             "cupy ascontiguousarray(x.T)": ms(lambda: cupy.ascontiguousarray(cx.T))}
    gbs = lambda t: 8 * side * side / t / 1e6  # noqa: E731
    mine = best(ours)
    report("transpose 16384x16384 float32", mine, ours, peers, unit="GB/s", rate=gbs,
           extra={"copy ceiling (torch copy_)": gbs(copy_ms)},
           targets={"ours / copy >= 0.8": copy_ms / mine["ms"]})


def case_sgemm(report):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    size = 4096
    a, b = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
    c = torch.empty(size, size, device="cuda")
    want = a.double() @ b.double()
    ours = []
    for cfg in (dict(BM=128, BN=128, BK=8, TM=8, TN=8), dict(BM=128, BN=128, BK=8, TM=8, TN=4),
                dict(BM=128, BN=64, BK=8, TM=8, TN=4)):
        def run(cfg=cfg):
            sgemm.matmul(a, b, c, cfg)

        c.fill_(float("nan"))
        run()
        error = rel_error(c, want)
        ours.append(dict(config="{BM}x{BN}x{BK} tiles, {TM}x{TN} per thread".format(**cfg),
                         ok=error < 1e-5, error=error, ms=ms(run)))
    cublas = torch.mm(a, b)
    ca, cb = cupy.asarray(a), cupy.asarray(b)
    peers = {"cuBLAS (torch.mm, TF32 off)": ms(lambda: torch.mm(a, b, out=c)),
             "CuPy matmul (cuBLAS)": ms(lambda: cupy.matmul(ca, cb))}
    tflops = lambda t: 2 * size ** 3 / t / 1e9  # noqa: E731
    mine = best(ours)
    report("SGEMM 4096^3 float32 (CUDA cores)", mine, ours, peers, unit="TFLOP/s", rate=tflops,
           extra={"cuBLAS relative error": rel_error(cublas, want)},
           targets={"ours / cuBLAS >= 0.7": peers["cuBLAS (torch.mm, TF32 off)"] / mine["ms"]})


CASES = {"sum": case_sum, "histogram": case_histogram, "scan": case_scan,
         "transpose": case_transpose, "sgemm": case_sgemm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    results, lines = {}, []

    def report(title, mine, ours, peers, unit, rate, extra=None, targets=None):
        results[title] = dict(ours=ours, peers=peers, extra=extra or {}, targets=targets or {})
        lines.append(f"\n{title}  ({unit}; ms)")
        lines.append(f"  ours, {mine['config']:44s} {rate(mine['ms']):9.1f}  {mine['ms']:.3f}")
        for name, t in peers.items():
            lines.append(f"  {name:50s} {rate(t):9.1f}  {t:.3f}")
        for name, value in (extra or {}).items():
            lines.append(f"  {name:50s} {value:9.3g}")
        for name, value in (targets or {}).items():
            lines.append(f"  target {name:43s} {value:9.3f}  {'met' if value >= float(name.split()[-1]) else 'MISSED'}")
        for r in ours:
            flag = "" if r.get("ok", True) else "  WRONG" + (f" (error {r['error']:.1e})" if "error" in r else "")
            lines.append(f"    {r['config']:48s} {rate(r['ms']):9.1f}  {r['ms']:.3f}{flag}")
        print(f"done: {title}", flush=True)

    print(f"{torch.cuda.get_device_name(0)}, {SMS} SMs, torch {torch.__version__}, cupy {cupy.__version__}")
    for name in args.cases.split(","):
        try:
            CASES[name](report)
        except Exception:  # one broken case must not cost the others' figures
            traceback.print_exc()
            lines.append(f"\n{name}: FAILED (traceback above)")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
