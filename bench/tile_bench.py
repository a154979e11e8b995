"""Tile kernels on the GPU beside torch and Triton, in one run: achieved TB/s and ratios.

Cases (issue 4's): vector add 2^28 float32 and bfloat16; softmax 32768x4096 float32 and
16384x16384 bfloat16; LayerNorm and RMSNorm forward 16384x8192 bfloat16; row sum
16384x16384 float32 and transpose 16384x16384 float32 against the device-to-device copy
bandwidth (bytes read + written, measured here). Our kernels are the examples'
(`verdigris.examples.tile_*`), which the tests check on both backends; each case times
several configurations (BLOCK, num_warps, a variant), each checked against a float64
reference first, and shows the best with all of them after it. Triton gets the best of
its configurations too. Times: `triton.testing.do_bench` medians.
Run: `PYTHONPATH=src python3 bench/tile_bench.py [--json FILE] [--cases softmax,layernorm,...]`.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import verdigris as vg
from verdigris import tile
from verdigris.examples.tile_layernorm import layernorm
from verdigris.examples.tile_rmsnorm import rmsnorm
from verdigris.examples.tile_row_reduce import row_sum
from verdigris.examples.tile_softmax import softmax, softmax_online
from verdigris.examples.tile_transpose import transpose
from verdigris.examples.tile_vector_add import add

EPS = 1e-5


@tile.kernel
def layernorm_weights_first(x, w, b, out, eps, COLS: vg.constexpr):
    """The example's LayerNorm with the weight and bias loaded before the reductions."""
    r = tile.bid(0)
    n = x.shape[1]
    wt = tile.load(w, index=(0,), shape=(COLS,)).astype(vg.float32)
    bt = tile.load(b, index=(0,), shape=(COLS,)).astype(vg.float32)
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(vg.float32)
    mean = tile.sum(t) / n
    xc = tile.where(tile.arange(COLS) < n, t - mean, 0.0)
    rstd = tile.rsqrt(tile.sum(xc * xc) / n + eps)
    tile.store(out, index=(r, 0), tile=(xc * rstd * wt + bt).astype(out.dtype))


@triton.jit
def tr_add(a, b, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(a + offs, mask=mask) + tl.load(b + offs, mask=mask), mask=mask)


@triton.jit
def tr_softmax(x, out, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    t = tl.load(x + row * stride + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
    e = tl.exp(t - tl.max(t, 0))
    tl.store(out + row * stride + cols, (e / tl.sum(e, 0)).to(out.dtype.element_ty), mask=cols < n)


@triton.jit
def tr_layernorm(x, w, b, out, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    t = tl.load(x + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(t, 0) / n
    xc = tl.where(mask, t - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(xc * xc, 0) / n + eps)
    y = xc * rstd * tl.load(w + cols, mask=mask).to(tl.float32) + tl.load(b + cols, mask=mask).to(tl.float32)
    tl.store(out + row * stride + cols, y.to(out.dtype.element_ty), mask=mask)


@triton.jit
def tr_rmsnorm(x, w, out, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    t = tl.load(x + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1 / tl.sqrt(tl.sum(t * t, 0) / n + eps)
    y = t * rstd * tl.load(w + cols, mask=mask).to(tl.float32)
    tl.store(out + row * stride + cols, y.to(out.dtype.element_ty), mask=mask)


@triton.jit
def tr_row_sum(x, out, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(0, n, BLOCK):
        cols = c + tl.arange(0, BLOCK)
        acc += tl.load(x + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(out + row, tl.sum(acc, 0))


@triton.jit
def tr_transpose(x, out, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    t = tl.load(x + rm[:, None] * N + rn[None, :], mask=mask)
    tl.store(out + rn[:, None] * M + rm[None, :], tl.trans(t), mask=tl.trans(mask))


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def best_of(name, launches: dict, out, want, tol):
    """Time every configuration, each checked first. Returns (best seconds, {config: s})."""
    times = {}
    for config, launch in launches.items():
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        err = rel_err(out, want)
        if not err <= tol:
            print(f"  {name} {config}: WRONG (relative error {err:.2e})", flush=True)
            continue
        times[config] = bench(launch)
    return min(times.values()) if times else float("nan"), times


class Table:
    def __init__(self, copy_tbs: float):
        self.copy_tbs, self.rows = copy_tbs, []

    def add(self, case, nbytes, ours: tuple, torch_s, triton: tuple):
        (ours_s, ours_all), (triton_s, triton_all) = ours, triton
        tbs = lambda s: nbytes / s / 1e12  # noqa: E731
        row = dict(case=case, ours_tbs=tbs(ours_s), torch_tbs=tbs(torch_s), triton_tbs=tbs(triton_s),
                   vs_torch=torch_s / ours_s, vs_triton=triton_s / ours_s, vs_copy=tbs(ours_s) / self.copy_tbs,
                   configs={str(k): round(tbs(v), 3) for k, v in ours_all.items()},
                   triton_configs={str(k): round(tbs(v), 3) for k, v in triton_all.items()})
        self.rows.append(row)
        print(f"{case:30} ours {row['ours_tbs']:.2f} TB/s  torch {row['torch_tbs']:.2f}  triton "
              f"{row['triton_tbs']:.2f}  /triton {row['vs_triton']:.3f}  {row['configs']}", flush=True)


def case_vector_add(table, dev):
    n = 1 << 28
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(n, device=dev, dtype=dtype), torch.randn(n, device=dev, dtype=dtype)
        out = torch.empty_like(a)
        want = a + b
        configs = [(1024, None), (2048, None), (4096, None), (8192, None), (4096, 4)]
        launches = {(blk, nw): (lambda blk=blk, nw=nw: add[vg.cdiv(n, blk)](
            a, b, out, BLOCK=blk, **({"num_warps": nw} if nw else {}))) for blk, nw in configs}
        ours = best_of("add", launches, out, want, 0)
        theirs = best_of("triton add", {(blk, nw): (lambda blk=blk, nw=nw: tr_add[(triton.cdiv(n, blk),)](
            a, b, out, n, BLOCK=blk, num_warps=nw)) for blk, nw in ((1024, 4), (4096, 8))}, out, want, 0)
        table.add(f"vector add 2^28 {str(dtype)[6:]}", 3 * n * a.element_size(), ours,
                  bench(lambda: torch.add(a, b, out=out)), theirs)
        del a, b, out, want


def case_softmax(table, dev):
    for (m, k, dtype, warps) in ((32768, 4096, torch.float32, (4, 8, 16)),
                                 (16384, 16384, torch.bfloat16, (8, 16, 32))):
        x = torch.randn(m, k, device=dev, dtype=dtype)
        out = torch.empty_like(x)
        want = torch.softmax(x.double(), -1)
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        launches = {w: (lambda w=w: softmax[m](x, out, COLS=k, num_warps=w)) for w in warps}
        launches.update({("online", blk, w): (lambda blk=blk, w=w: softmax_online[m](x, out, BLOCK=blk, num_warps=w))
                         for blk, w in ((4096, 8),)})
        ours = best_of("softmax", launches, out, want, tol)
        theirs = best_of("triton softmax", {w: (lambda w=w: tr_softmax[(m,)](x, out, k, k, BLOCK=k, num_warps=w))
                                            for w in warps}, out, want, tol)
        table.add(f"softmax {m}x{k} {str(dtype)[6:]}", 2 * x.numel() * x.element_size(), ours,
                  bench(lambda: torch.softmax(x, -1)), theirs)
        del x, out, want


def case_norms(table, dev):
    m, k = 16384, 8192
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w, b = torch.randn(k, device=dev, dtype=torch.bfloat16), torch.randn(k, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    want = F.layer_norm(x.float(), (k,), w.float(), b.float(), EPS)
    launches = {nw: (lambda nw=nw: layernorm[m](x, w, b, out, EPS, COLS=k, num_warps=nw)) for nw in (2, 4, 8, 16)}
    launches.update({("weights first", nw): (lambda nw=nw: layernorm_weights_first[m](
        x, w, b, out, EPS, COLS=k, num_warps=nw)) for nw in (8, 16)})
    ours = best_of("layernorm", launches, out, want, 1e-2)
    theirs = best_of("triton layernorm", {nw: (lambda nw=nw: tr_layernorm[(m,)](
        x, w, b, out, k, k, EPS, BLOCK=k, num_warps=nw)) for nw in (2, 4, 8, 16)}, out, want, 1e-2)
    table.add("LayerNorm 16384x8192 bf16", 2 * x.numel() * 2, ours,
              bench(lambda: F.layer_norm(x, (k,), w, b, EPS)), theirs)
    want = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS) * w.float()
    launches = {nw: (lambda nw=nw: rmsnorm[m](x, w, out, EPS, COLS=k, num_warps=nw)) for nw in (2, 4, 8, 16)}
    ours = best_of("rmsnorm", launches, out, want, 1e-2)
    theirs = best_of("triton rmsnorm", {nw: (lambda nw=nw: tr_rmsnorm[(m,)](
        x, w, out, k, k, EPS, BLOCK=k, num_warps=nw)) for nw in (2, 4, 8, 16)}, out, want, 1e-2)
    table.add("RMSNorm 16384x8192 bf16", 2 * x.numel() * 2, ours,
              bench(lambda: F.rms_norm(x, (k,), w, EPS)), theirs)


def case_row_sum(table, dev):
    m = k = 16384
    x = torch.randn(m, k, device=dev)
    out = torch.empty(m, device=dev)
    want = x.double().sum(1)
    launches = {(cols, nw): (lambda cols=cols, nw=nw: row_sum[m](x, out, COLS=cols, num_warps=nw))
                for cols, nw in ((2048, 4), (4096, 4), (4096, 8), (8192, 8))}
    ours = best_of("row sum", launches, out, want, 1e-5)
    theirs = best_of("triton row sum", {(blk, nw): (lambda blk=blk, nw=nw: tr_row_sum[(m,)](
        x, out, k, k, BLOCK=blk, num_warps=nw)) for blk, nw in ((4096, 8), (2048, 4))}, out, want, 1e-5)
    table.add("row sum 16384x16384 f32", x.numel() * 4 + m * 4, ours, bench(lambda: torch.sum(x, 1, out=out)), theirs)


def case_transpose(table, dev):
    m = n = 16384
    x = torch.randn(m, n, device=dev)
    out = torch.empty(n, m, device=dev)
    want = x.t()
    launches = {(blk, nw): (lambda blk=blk, nw=nw: transpose[vg.cdiv(m, blk), vg.cdiv(n, blk)](
        x, out, B=blk, num_warps=nw)) for blk, nw in ((32, 4), (32, 8), (64, 4), (64, 8), (64, 16))}
    ours = best_of("transpose", launches, out, want, 0)
    theirs = best_of("triton transpose", {(blk, nw): (lambda blk=blk, nw=nw: tr_transpose[
        (triton.cdiv(m, blk), triton.cdiv(n, blk))](x, out, m, n, BM=blk, BN=blk, num_warps=nw))
        for blk, nw in ((64, 4), (64, 8), (32, 4))}, out, want, 0)
    table.add("transpose 16384x16384 f32", 2 * x.numel() * 4, ours, bench(lambda: out.copy_(x.t())), theirs)


CASES = {"add": case_vector_add, "softmax": case_softmax, "norms": case_norms, "row_sum": case_row_sum,
         "transpose": case_transpose}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    src = torch.rand(1 << 28, device=dev)
    dst = torch.empty_like(src)
    copy_tbs = 2 * src.numel() * 4 / bench(lambda: dst.copy_(src)) / 1e12
    del src, dst
    table = Table(copy_tbs)
    for name in args.cases.split(","):
        CASES[name](table, dev)
        torch.cuda.empty_cache()

    print(f"\ndevice copy: {copy_tbs:.2f} TB/s (read + write); torch {torch.__version__}, "
          f"triton {triton.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'case':30} {'ours':>7} {'torch':>7} {'triton':>7} {'/torch':>7} {'/triton':>8} {'/copy':>6}  configs (TB/s)")
    for r in table.rows:
        print(f"{r['case']:30} {r['ours_tbs']:7.2f} {r['torch_tbs']:7.2f} {r['triton_tbs']:7.2f} "
              f"{r['vs_torch']:7.3f} {r['vs_triton']:8.3f} {r['vs_copy']:6.3f}  {r['configs']}  triton {r['triton_configs']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_tbs": copy_tbs, "rows": table.rows}, f, indent=1)


if __name__ == "__main__":
    main()
