"""Tile kernels on the GPU beside torch and Triton, in one run: achieved TB/s and ratios.

Cases (issue 4's): vector add 2^28 float32 and bfloat16, softmax 32768x4096 float32,
LayerNorm and RMSNorm forward 16384x8192 bfloat16, row sum 16384x16384 float32; and the
device-to-device copy bandwidth (bytes read + written) as the ceiling. Our kernels are the
ones `tests/test_tile_codegen.py` defines (and the GPU tests check); for each case the
table shows our best configuration (BLOCK or num_warps, all listed after it), each
checked against torch first. Times: `triton.testing.do_bench` medians.
Run: `PYTHONPATH=src python3 bench/tile_bench.py [--json FILE]`.

The same cases, over a range of sizes, are registered with `verdigris bench` (see the end
of this file and verdigris.benchsuite).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import verdigris as vg  # noqa: E402
from verdigris.benchsuite import Impl, case, checked, relative_error  # noqa: E402
from test_tile_codegen import add, layernorm, rmsnorm, row_sum, softmax  # noqa: E402

EPS = 1e-5


@triton.jit
def tr_add(a, b, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(a + offs, mask=mask) + tl.load(b + offs, mask=mask), mask=mask)


@triton.jit
def tr_softmax(x, out, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    t = tl.load(x + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(t - tl.max(t, 0))
    tl.store(out + row * stride + cols, e / tl.sum(e, 0), mask=cols < n)


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
    tl.store(out + row * stride + cols, (t * rstd * tl.load(w + cols, mask=mask).to(tl.float32)).to(out.dtype.element_ty), mask=mask)


@triton.jit
def tr_row_sum(x, out, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(0, n, BLOCK):
        cols = c + tl.arange(0, BLOCK)
        acc += tl.load(x + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(out + row, tl.sum(acc, 0))


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e-3


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def ours_best(name, launches: dict, out, want, tol):
    """Time every configuration; check each first. Returns (best seconds, {config: s})."""
    times = {}
    for config, launch in launches.items():
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        err = rel_err(out, want)
        if not err <= tol:
            print(f"  {name} {config}: WRONG (relative error {err:.2e})")
            continue
        times[config] = bench(launch)
    return min(times.values()) if times else float("nan"), times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    rows = []

    src = torch.rand(1 << 28, device=dev)
    dst = torch.empty_like(src)
    copy_s = bench(lambda: dst.copy_(src))
    copy_tbs = 2 * src.numel() * 4 / copy_s / 1e12
    del src, dst

    def row(case, nbytes, ours, ours_all, torch_s, triton_s):
        rows.append(dict(case=case, ours_tbs=nbytes / ours / 1e12, torch_tbs=nbytes / torch_s / 1e12,
                         triton_tbs=nbytes / triton_s / 1e12, vs_torch=torch_s / ours,
                         vs_triton=triton_s / ours, vs_copy=nbytes / ours / 1e12 / copy_tbs,
                         configs={str(k): round(nbytes / v / 1e12, 3) for k, v in ours_all.items()}))

    n = 1 << 28
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(n, device=dev, dtype=dtype), torch.randn(n, device=dev, dtype=dtype)
        out = torch.empty_like(a)
        want = a + b
        launches = {blk: (lambda blk=blk: add[vg.cdiv(n, blk)](a, b, out, BLOCK=blk))
                    for blk in (1024, 2048, 4096, 8192)}
        best, all_ = ours_best("add", launches, out, want, 0)
        t_torch = bench(lambda: torch.add(a, b, out=out))
        t_triton = bench(lambda: tr_add[(triton.cdiv(n, 4096),)](a, b, out, n, BLOCK=4096, num_warps=8))
        row(f"vector add 2^28 {str(dtype)[6:]}", 3 * n * a.element_size(), best, all_, t_torch, t_triton)
        del a, b, out, want

    m, k = 32768, 4096
    x = torch.randn(m, k, device=dev)
    out = torch.empty_like(x)
    want = torch.softmax(x.double(), -1)
    launches = {w: (lambda w=w: softmax[m](x, out, COLS=k, num_warps=w)) for w in (4, 8, 16)}
    best, all_ = ours_best("softmax", launches, out, want, 1e-5)
    row("softmax 32768x4096 f32", 2 * x.numel() * 4, best, all_, bench(lambda: torch.softmax(x, -1)),
        bench(lambda: tr_softmax[(m,)](x, out, k, k, BLOCK=k, num_warps=8)))
    del x, out, want

    m, k = 16384, 8192
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w, b = torch.randn(k, device=dev, dtype=torch.bfloat16), torch.randn(k, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    want = F.layer_norm(x.float(), (k,), w.float(), b.float(), EPS)
    launches = {nw: (lambda nw=nw: layernorm[m](x, w, b, out, k, EPS, COLS=k, num_warps=nw)) for nw in (4, 8, 16)}
    best, all_ = ours_best("layernorm", launches, out, want, 1e-2)
    row("LayerNorm 16384x8192 bf16", 2 * x.numel() * 2, best, all_,
        bench(lambda: F.layer_norm(x, (k,), w, b, EPS)),
        bench(lambda: tr_layernorm[(m,)](x, w, b, out, k, k, EPS, BLOCK=k, num_warps=8)))
    want = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS) * w.float()
    launches = {nw: (lambda nw=nw: rmsnorm[m](x, w, out, k, EPS, COLS=k, num_warps=nw)) for nw in (4, 8, 16)}
    best, all_ = ours_best("rmsnorm", launches, out, want, 1e-2)
    row("RMSNorm 16384x8192 bf16", 2 * x.numel() * 2, best, all_,
        bench(lambda: F.rms_norm(x, (k,), w, EPS)),
        bench(lambda: tr_rmsnorm[(m,)](x, w, out, k, k, EPS, BLOCK=k, num_warps=8)))
    del x, w, b, out, want

    m = k = 16384
    x = torch.randn(m, k, device=dev)
    out = torch.empty(m, device=dev)
    want = x.double().sum(1)
    launches = {(cols, nw): (lambda cols=cols, nw=nw: row_sum[m](x, out, COLS=cols, num_warps=nw))
                for cols in (2048, 4096) for nw in (4, 8)}
    best, all_ = ours_best("row sum", launches, out, want, 1e-5)
    row("row sum 16384x16384 f32", x.numel() * 4 + m * 4, best, all_, bench(lambda: torch.sum(x, 1, out=out)),
        bench(lambda: tr_row_sum[(m,)](x, out, k, k, BLOCK=4096, num_warps=8)))

    print(f"\ndevice copy: {copy_tbs:.2f} TB/s (read + write); torch {torch.__version__}, "
          f"triton {triton.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'case':28} {'ours':>7} {'torch':>7} {'triton':>7} {'/torch':>7} {'/triton':>8} {'/copy':>6}  configs (TB/s)")
    for r in rows:
        print(f"{r['case']:28} {r['ours_tbs']:7.2f} {r['torch_tbs']:7.2f} {r['triton_tbs']:7.2f} "
              f"{r['vs_torch']:7.3f} {r['vs_triton']:8.3f} {r['vs_copy']:6.3f}  {r['configs']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_tbs": copy_tbs, "rows": rows}, f, indent=1)


# ----------------------------------------------------------------- `verdigris bench` cases
# Ours in each configuration main() tries (the suite keeps the best), torch and Triton.


def _rows_x_cols(size) -> str:
    return f"{size[0]}x{size[1]}"


def _returns(fn, want, rtol) -> Impl:
    """A peer that returns its result (torch.softmax, F.layer_norm): timed as it is."""
    def check():
        err = relative_error(fn(), want)
        return None if err <= rtol else f"relative error {err:.2e} > {rtol:.0e}"

    return Impl(fn, check)


def _add_case(dtype):
    def setup(n):
        a, b = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
        out = torch.empty_like(a)
        want = a + b
        return {
            "verdigris": {f"BLOCK={blk}": checked(
                lambda blk=blk: add[vg.cdiv(n, blk)](a, b, out, BLOCK=blk), out, want, 1e-6)
                for blk in (1024, 4096)},
            "torch": checked(lambda: torch.add(a, b, out=out), out, want, 1e-6),
            "triton": checked(lambda: tr_add[(triton.cdiv(n, 4096),)](
                a, b, out, n, BLOCK=4096, num_warps=8), out, want, 1e-6)}

    return setup


for _dtype, _name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
    case(f"vector add (tile) {_name}", kind="memory", sizes=[1 << k for k in (20, 22, 24, 26, 28)],
         quick=[1 << 26], work=lambda n, d=_dtype: 3 * n * d.itemsize)(_add_case(_dtype))


@case("softmax f32", kind="memory", sizes=[(m, 4096) for m in (1024, 4096, 16384, 32768)],
      quick=[(32768, 4096)], work=lambda s: 2 * 4 * s[0] * s[1], size_label=_rows_x_cols)
def bench_softmax(size):
    m, k = size
    x = torch.randn(m, k, device="cuda")
    out = torch.empty_like(x)
    want = torch.softmax(x.double(), -1)
    return {"verdigris": {f"{w} warps": checked(
                lambda w=w: softmax[m](x, out, COLS=k, num_warps=w), out, want, 1e-5)
                for w in (4, 8)},
            "torch": _returns(lambda: torch.softmax(x, -1), want, 1e-5),
            "triton": checked(lambda: tr_softmax[(m,)](x, out, k, k, BLOCK=k, num_warps=8),
                              out, want, 1e-5)}


def _norm_inputs(size):
    m, k = size
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w, b = (torch.randn(k, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return m, k, x, w, b, torch.empty_like(x)


@case("LayerNorm bf16", kind="memory", sizes=[(m, 8192) for m in (2048, 8192, 16384)],
      quick=[(16384, 8192)], work=lambda s: 2 * 2 * s[0] * s[1], size_label=_rows_x_cols)
def bench_layernorm(size):
    m, k, x, w, b, out = _norm_inputs(size)
    want = F.layer_norm(x.float(), (k,), w.float(), b.float(), EPS)
    return {"verdigris": {f"{nw} warps": checked(
                lambda nw=nw: layernorm[m](x, w, b, out, k, EPS, COLS=k, num_warps=nw),
                out, want, 1e-2) for nw in (4, 8)},
            "torch": _returns(lambda: F.layer_norm(x, (k,), w, b, EPS), want, 1e-2),
            "triton": checked(lambda: tr_layernorm[(m,)](x, w, b, out, k, k, EPS, BLOCK=k,
                                                         num_warps=8), out, want, 1e-2)}


@case("RMSNorm bf16", kind="memory", sizes=[(m, 8192) for m in (2048, 8192, 16384)],
      quick=[(16384, 8192)], work=lambda s: 2 * 2 * s[0] * s[1], size_label=_rows_x_cols)
def bench_rmsnorm(size):
    m, k, x, w, _, out = _norm_inputs(size)
    want = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS) * w.float()
    return {"verdigris": {f"{nw} warps": checked(
                lambda nw=nw: rmsnorm[m](x, w, out, k, EPS, COLS=k, num_warps=nw),
                out, want, 1e-2) for nw in (4, 8)},
            "torch": _returns(lambda: F.rms_norm(x, (k,), w, EPS), want, 1e-2),
            "triton": checked(lambda: tr_rmsnorm[(m,)](x, w, out, k, k, EPS, BLOCK=k,
                                                       num_warps=8), out, want, 1e-2)}


@case("row sum f32", kind="memory", sizes=[(m, 16384) for m in (2048, 8192, 16384)],
      quick=[(16384, 16384)], work=lambda s: 4 * s[0] * s[1] + 4 * s[0],
      size_label=_rows_x_cols)
def bench_row_sum(size):
    m, k = size
    x = torch.randn(m, k, device="cuda")
    out = torch.empty(m, device="cuda")
    want = x.double().sum(1)
    return {"verdigris": {f"COLS=4096, {nw} warps": checked(
                lambda nw=nw: row_sum[m](x, out, COLS=4096, num_warps=nw), out, want, 1e-5)
                for nw in (4, 8)},
            "torch": checked(lambda: torch.sum(x, 1, out=out), out, want, 1e-5),
            "triton": checked(lambda: tr_row_sum[(m,)](x, out, k, k, BLOCK=4096, num_warps=8),
                              out, want, 1e-5)}


if __name__ == "__main__":
    main()
