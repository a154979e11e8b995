"""`verdigris bench` cases for the tile track's memory-bound kernels, beside torch and Triton.

Registers (issue 4's cases, over a range of sizes; `--quick` measures the issue's size):
vector add float32 and bfloat16 (2^20..2^28), softmax float32 (N x 4096) and bfloat16 (N x
16384), LayerNorm and RMSNorm forward bfloat16 (N x 8192), row sum float32 (N x 16384) and
transpose float32 (N x N). Ours are the examples' kernels (`verdigris.examples.tile_*`) in
the configurations `bench/tile_bench.py` tries (the suite chooses the best and re-times it);
Triton's kernels, and the LayerNorm variant with the weights loaded first, are
`bench/tile_bench.py`'s own (loaded only where Triton is installed: that script imports it);
cuTile Python's are `bench/tile_cutile.py`'s (only where cuda.tile is installed); torch's
are its library calls. Every implementation is checked against a float64 reference (for the
transposes, the exact one) before it is timed; the LayerNorm and RMSNorm rows each sit
around an offset of their own, so that a kernel that forgets the mean fails. Throughput
counts bytes read + written per call.

Needs torch (the cases are skipped without it); Triton and cuTile Python are optional.
"""
from __future__ import annotations

from pathlib import Path

from verdigris.benchsuite import case, checked, has, load_script, returning

TILE_BENCH = Path(__file__).with_name("tile_bench.py")
TILE_CUTILE = Path(__file__).with_name("tile_cutile.py")
EPS = 1e-5
VECTOR_SIZES = [1 << k for k in (20, 22, 24, 26, 28)]


def _tile_bench():
    """bench/tile_bench.py's module (Triton kernels and a LayerNorm variant), or None
    without Triton."""
    return load_script(TILE_BENCH) if has("triton") else None


def _cutile():
    """bench/tile_cutile.py's module (cuTile Python kernels), or None without cuda.tile."""
    return load_script(TILE_CUTILE) if has("cutile") else None


def _fused(kernel):
    """The same kernel with `fma=True` (multiply-adds contracted on the GPU)."""
    from verdigris.runtime.dispatch import KernelFunction

    return KernelFunction(kernel.fn, kernel.track, fma=True)


def _add_case(dtype_name: str):
    def setup(n):
        import torch

        import verdigris as vg
        from verdigris.examples.tile_vector_add import add

        dtype = getattr(torch, dtype_name)
        a, b = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
        out = torch.empty_like(a)
        want = a.double() + b.double()
        rtol = 1e-7 if dtype == torch.float32 else 4e-3  # the sum's own rounding

        def ours(block, warps):
            options = {"num_warps": warps} if warps else {}
            return lambda: add[vg.cdiv(n, block)](a, b, out, BLOCK=block, **options)

        impls = {
            "verdigris": {f"BLOCK={block}" + (f", {warps} warps" if warps else ""):
                          checked(ours(block, warps), out, want, rtol)
                          for block, warps in ((1024, None), (2048, None), (4096, None),
                                               (8192, None), (4096, 4))},
            "torch": checked(lambda: torch.add(a, b, out=out), out, want, rtol),
        }
        tb = _tile_bench()
        if tb:
            impls["triton"] = {f"BLOCK={block}, {warps} warps": checked(
                lambda block=block, warps=warps: tb.tr_add[(vg.cdiv(n, block),)](
                    a, b, out, n, BLOCK=block, num_warps=warps), out, want, rtol)
                for block, warps in ((1024, 4), (4096, 8))}
        cutile = _cutile()
        if cutile:
            impls["cutile"] = {f"TILE={tile}": checked(cutile.launch_add(a, b, out, tile), out,
                                                       want, rtol) for tile in (1024, 4096)}
        return impls

    return setup


for _dtype, _label, _size in (("float32", "f32", 4), ("bfloat16", "bf16", 2)):
    case(f"vector add (tile) {_label}", kind="memory", sizes=VECTOR_SIZES, quick=[1 << 28],
         work=lambda n, size=_size: 3 * size * n, requires=["torch"])(_add_case(_dtype))


def _softmax_case(dtype_name: str, warps: tuple):
    def setup(size):
        import torch

        from verdigris.examples.tile_softmax import softmax, softmax_online

        rows, cols = size
        x = torch.randn(rows, cols, device="cuda", dtype=getattr(torch, dtype_name))
        out = torch.empty_like(x)
        want = torch.softmax(x.double(), -1)
        rtol = 1e-5 if x.dtype == torch.float32 else 1e-2
        ours = {f"{w} warps": checked(lambda w=w: softmax[rows](x, out, COLS=cols, num_warps=w),
                                      out, want, rtol) for w in warps}
        ours["online, BLOCK=4096, 8 warps"] = checked(
            lambda: softmax_online[rows](x, out, BLOCK=4096, num_warps=8), out, want, rtol)
        impls = {"verdigris": ours,
                 "torch": returning(lambda: torch.softmax(x, -1), want, rtol)}
        tb = _tile_bench()
        if tb:
            impls["triton"] = {f"{w} warps": checked(
                lambda w=w: tb.tr_softmax[(rows,)](x, out, cols, cols, BLOCK=cols, num_warps=w),
                out, want, rtol) for w in warps}
        cutile = _cutile()
        if cutile:
            impls["cutile"] = {label: checked(launch, out, want, rtol)
                               for label, launch in cutile.softmax_variants(x, out).items()}
        return impls

    return setup


case("softmax f32", kind="memory", sizes=[(m, 4096) for m in (1024, 4096, 16384, 32768)],
     quick=[(32768, 4096)], work=lambda s: 2 * 4 * s[0] * s[1],
     requires=["torch"])(_softmax_case("float32", (4, 8, 16)))
case("softmax bf16", kind="memory", sizes=[(m, 16384) for m in (1024, 4096, 16384)],
     quick=[(16384, 16384)], work=lambda s: 2 * 2 * s[0] * s[1],
     requires=["torch"])(_softmax_case("bfloat16", (8, 16, 32)))

NORM_SIZES = [(m, 8192) for m in (1024, 4096, 16384)]
# Rows of N(0, 1) around an offset of their own: with zero-mean rows a LayerNorm that
# forgets the mean, or an RMSNorm that subtracts it, is within 1e-2 of the reference; with
# these it is off by 0.3 or more. The float32 math of a right kernel, rounded to its
# bfloat16 output, is ~1.7e-3 off (tests/test_bench_suite.py checks both).
ROW_OFFSET = 4.0
NORM_RTOL = 5e-3


def norm_inputs(rows: int, cols: int, rng):
    """float32 NumPy x (rows x cols: N(0, 1) plus a row's offset, uniform in
    [-ROW_OFFSET, ROW_OFFSET]), weight and bias (cols, N(0, 1))."""
    import numpy as np

    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x += rng.uniform(-ROW_OFFSET, ROW_OFFSET, (rows, 1)).astype(np.float32)
    w, b = (rng.standard_normal(cols, dtype=np.float32) for _ in range(2))
    return x, w, b


def _norm_inputs(size):
    import numpy as np
    import torch

    rows, cols = size
    x, w, b = (torch.from_numpy(a).to("cuda", torch.bfloat16)
               for a in norm_inputs(rows, cols, np.random.default_rng()))
    return rows, cols, x, w, b, torch.empty_like(x)


@case("LayerNorm bf16", kind="memory", sizes=NORM_SIZES, quick=[(16384, 8192)],
      work=lambda s: 2 * 2 * s[0] * s[1], requires=["torch"])
def bench_layernorm(size):
    import torch.nn.functional as F

    from verdigris.examples.tile_layernorm import layernorm

    rows, cols, x, w, b, out = _norm_inputs(size)
    want = F.layer_norm(x.double(), (cols,), w.double(), b.double(), EPS)
    fused = _fused(layernorm)
    ours = {f"{nw} warps{', fma' if k is fused else ''}": checked(
        lambda nw=nw, k=k: k[rows](x, w, b, out, EPS, COLS=cols, num_warps=nw),
        out, want, NORM_RTOL) for nw in (2, 4, 8, 16) for k in (layernorm, fused)}
    impls = {"verdigris": ours,
             "torch": returning(lambda: F.layer_norm(x, (cols,), w, b, EPS), want, NORM_RTOL)}
    tb = _tile_bench()
    if tb:
        ours.update({f"weights first, {nw} warps": checked(
            lambda nw=nw: tb.layernorm_weights_first[rows](x, w, b, out, EPS, COLS=cols,
                                                           num_warps=nw), out, want, NORM_RTOL)
            for nw in (8, 16)})
        impls["triton"] = {f"{nw} warps": checked(
            lambda nw=nw: tb.tr_layernorm[(rows,)](x, w, b, out, cols, cols, EPS, BLOCK=cols,
                                                   num_warps=nw), out, want, NORM_RTOL)
            for nw in (2, 4, 8, 16)}
    cutile = _cutile()
    if cutile:
        impls["cutile"] = {label: checked(launch, out, want, NORM_RTOL) for label, launch in
                           cutile.layernorm_variants(x, w, b, out, EPS).items()}
    return impls


@case("RMSNorm bf16", kind="memory", sizes=NORM_SIZES, quick=[(16384, 8192)],
      work=lambda s: 2 * 2 * s[0] * s[1], requires=["torch"])
def bench_rmsnorm(size):
    import torch
    import torch.nn.functional as F

    from verdigris.examples.tile_rmsnorm import rmsnorm

    rows, cols, x, w, _, out = _norm_inputs(size)
    x64 = x.double()
    want = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    fused = _fused(rmsnorm)
    impls = {"verdigris": {f"{nw} warps{', fma' if k is fused else ''}": checked(
                 lambda nw=nw, k=k: k[rows](x, w, out, EPS, COLS=cols, num_warps=nw),
                 out, want, NORM_RTOL) for nw in (2, 4, 8, 16) for k in (rmsnorm, fused)},
             "torch": returning(lambda: F.rms_norm(x, (cols,), w, EPS), want, NORM_RTOL)}
    tb = _tile_bench()
    if tb:
        impls["triton"] = {f"{nw} warps": checked(
            lambda nw=nw: tb.tr_rmsnorm[(rows,)](x, w, out, cols, cols, EPS, BLOCK=cols,
                                                 num_warps=nw), out, want, NORM_RTOL)
            for nw in (2, 4, 8, 16)}
    cutile = _cutile()
    if cutile:
        impls["cutile"] = {label: checked(launch, out, want, NORM_RTOL) for label, launch in
                           cutile.rmsnorm_variants(x, w, out, EPS).items()}
    return impls


@case("row sum f32", kind="memory", sizes=[(m, 16384) for m in (1024, 4096, 16384)],
      quick=[(16384, 16384)], work=lambda s: 4 * s[0] * s[1] + 4 * s[0], requires=["torch"])
def bench_row_sum(size):
    import torch

    from verdigris.examples.tile_row_reduce import row_sum

    rows, cols = size
    x = torch.randn(rows, cols, device="cuda")
    out = torch.empty(rows, device="cuda")
    want = x.double().sum(1)
    impls = {"verdigris": {f"COLS={chunk}, {nw} warps": checked(
                 lambda chunk=chunk, nw=nw: row_sum[rows](x, out, COLS=chunk, num_warps=nw),
                 out, want, 1e-5) for chunk, nw in ((2048, 4), (4096, 4), (4096, 8), (8192, 8))},
             "torch": checked(lambda: torch.sum(x, 1, out=out), out, want, 1e-5)}
    tb = _tile_bench()
    if tb:
        impls["triton"] = {f"BLOCK={block}, {nw} warps": checked(
            lambda block=block, nw=nw: tb.tr_row_sum[(rows,)](x, out, cols, cols, BLOCK=block,
                                                              num_warps=nw), out, want, 1e-5)
            for block, nw in ((4096, 8), (2048, 4))}
    cutile = _cutile()
    if cutile:
        impls["cutile"] = {f"BLOCK={block}": checked(cutile.launch_row_sum(x, out, block), out,
                                                     want, 1e-5) for block in (1024, 4096)}
    return impls


@case("transpose (tile) f32", kind="memory", sizes=[(s, s) for s in (4096, 8192, 16384)],
      quick=[(16384, 16384)], work=lambda s: 2 * 4 * s[0] * s[1], requires=["torch"])
def bench_transpose(size):
    import torch

    import verdigris as vg
    from verdigris.examples.tile_transpose import transpose

    rows, cols = size
    x = torch.randn(rows, cols, device="cuda")
    out = torch.empty(cols, rows, device="cuda")
    want = x.t()
    impls = {"verdigris": {f"B={blk}, {nw} warps": checked(
                 lambda blk=blk, nw=nw: transpose[vg.cdiv(rows, blk), vg.cdiv(cols, blk)](
                     x, out, B=blk, num_warps=nw), out, want, 0)
                 for blk, nw in ((32, 4), (32, 8), (64, 4), (64, 8), (64, 16))},
             "torch": checked(lambda: out.copy_(x.t()), out, want, 0)}
    tb = _tile_bench()
    if tb:
        impls["triton"] = {f"{blk}x{blk}, {nw} warps": checked(
            lambda blk=blk, nw=nw: tb.tr_transpose[(vg.cdiv(rows, blk), vg.cdiv(cols, blk))](
                x, out, rows, cols, BM=blk, BN=blk, num_warps=nw), out, want, 0)
            for blk, nw in ((64, 4), (64, 8), (32, 4))}
    cutile = _cutile()
    if cutile:
        impls["cutile"] = {f"{blk}x{blk}": checked(cutile.launch_transpose(x, out, blk), out,
                                                   want, 0) for blk in (32, 64)}
    return impls
