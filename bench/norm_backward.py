"""LayerNorm and RMSNorm backward, 16384x8192 bfloat16 (issue #28 item 4): ours beside torch
and Triton (tutorial 05's backward), as bytes over time against the copy roofline.

Ours: `launch_layernorm_backward` / `launch_rmsnorm_backward` (verdigris.examples), the
backward kernel (dx and per-block partial weight gradients in float32) then the column sums,
over a few rows-per-block and num_warps choices; and the whole `verdigris::*_backward` op as
torch.autograd calls it (allocations included). torch: `aten.native_layer_norm_backward`
(and `aten._fused_rms_norm_backward` where torch has it, else the autograd backward of
F.rms_norm). Triton: tutorial 05's `_layer_norm_bwd_dx_fused` (row partials accumulated
under a spin lock per group of rows, in the activations' dtype) and `_layer_norm_bwd_dwdb`,
transcribed; for RMSNorm the same kernels less the mean and bias (the tutorial has no
RMSNorm). Each configuration is checked against a float32 torch reference first.

Bytes: x and dy read, dx written (3 x 16384 x 8192 x 2 B; the weight, statistics and
partials are under 2% of it and not counted), so TB/s is comparable across the three.
Times: `triton.testing.do_bench` medians.
Run (GPU): `PYTHONPATH=src python3 bench/norm_backward.py [--json FILE]`; `--smoke --rows 64
--cols 300` runs every implementation once on CPU tensors (a check of the script).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import verdigris as vg
from verdigris.examples.tile_layernorm import launch_layernorm_backward, tile_cols
from verdigris.examples.tile_rmsnorm import launch_rmsnorm_backward

ROWS, COLS, EPS = 16384, 8192, 1e-5

try:
    import triton
    import triton.language as tl
except ImportError:  # torch's timings and ours still print
    triton = None
if triton is not None and not torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET"):
    triton = None  # no GPU for it to run on


SMOKE = False  # --smoke: CPU tensors, one timed call (a check of the script, not a timing)


def bench(fn) -> float:
    if SMOKE:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    if triton is not None:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    times = []
    for _ in range(50):
        start.record(); fn(); end.record(); torch.cuda.synchronize()  # noqa: E702
        times.append(start.elapsed_time(end) * 1e-3)
    return sorted(times)[len(times) // 2]


def synchronize() -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


if triton is not None:
    @triton.jit
    def tr_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, HAS_MEAN: tl.constexpr,
                        GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_SIZE_N)
        mask = cols < N
        X += row * stride
        DY += row * stride
        DX += row * stride
        lock_id = row % GROUP_SIZE_M
        Lock += lock_id
        Count = Lock + GROUP_SIZE_M
        DW = DW + lock_id * N + cols
        DB = DB + lock_id * N + cols
        x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
        dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
        w = tl.load(W + cols, mask=mask).to(tl.float32)
        rstd = tl.load(Rstd + row)
        if HAS_MEAN:
            xhat = (x - tl.load(Mean + row)) * rstd
        else:
            xhat = x * rstd
        wdy = w * dy
        xhat = tl.where(mask, xhat, 0.)
        wdy = tl.where(mask, wdy, 0.)
        c1 = tl.sum(xhat * wdy, axis=0) / N
        if HAS_MEAN:
            c2 = tl.sum(wdy, axis=0) / N
            dx = (wdy - (xhat * c1 + c2)) * rstd
        else:
            dx = (wdy - xhat * c1) * rstd
        tl.store(DX + cols, dx, mask=mask)
        partial_dw = (dy * xhat).to(w.dtype)
        partial_db = (dy).to(w.dtype)
        while tl.atomic_cas(Lock, 0, 1) == 1:
            pass
        count = tl.load(Count)
        if count == 0:
            tl.atomic_xchg(Count, 1)
        else:
            partial_dw += tl.load(DW, mask=mask)
            partial_db += tl.load(DB, mask=mask)
        tl.store(DW, partial_dw, mask=mask)
        if HAS_MEAN:
            tl.store(DB, partial_db, mask=mask)
        tl.debug_barrier()
        tl.atomic_xchg(Lock, 0)

    @triton.jit
    def tr_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, HAS_MEAN: tl.constexpr,
                    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
        pid = tl.program_id(0)
        cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for i in range(0, M, BLOCK_SIZE_M):
            rows = i + tl.arange(0, BLOCK_SIZE_M)
            mask = (rows[:, None] < M) & (cols[None, :] < N)
            offs = rows[:, None] * N + cols[None, :]
            dw += tl.load(DW + offs, mask=mask, other=0.)
            if HAS_MEAN:
                db += tl.load(DB + offs, mask=mask, other=0.)
        tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
        if HAS_MEAN:
            tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


def triton_backward(dy, x, w, mean, rstd, dx, dw, db, num_warps):
    """Tutorial 05's host code: GROUP_SIZE_M by N, locks zeroed, partials in w's dtype."""
    m, n = x.shape
    group = 64 if n > 8192 else 96 if n > 4096 else 128 if n > 1024 else 256
    locks = torch.zeros(2 * group, dtype=torch.int32, device=x.device)
    partial_dw = torch.zeros((group, n), dtype=x.dtype, device=x.device)
    partial_db = torch.zeros((group, n), dtype=x.dtype, device=x.device)
    has_mean = mean is not None
    tr_bwd_dx_fused[(m,)](dx, dy, partial_dw, partial_db, x, w, mean if has_mean else rstd, rstd, locks,
                          x.stride(0), n, HAS_MEAN=has_mean, GROUP_SIZE_M=group,
                          BLOCK_SIZE_N=triton.next_power_of_2(n), num_warps=num_warps)
    tr_bwd_dwdb[(triton.cdiv(n, 128),)](partial_dw, partial_db, dw, db, min(group, m), n,
                                         HAS_MEAN=has_mean, BLOCK_SIZE_M=32, BLOCK_SIZE_N=128)


def best_of(name, launches: dict, outs, wants, tol):
    """Time every configuration, each checked first. Returns (best seconds, {config: s})."""
    times = {}
    for config, launch in launches.items():
        for out in outs:
            out.fill_(float("nan"))
        try:
            launch()
            synchronize()
        except Exception as err:  # e.g. a configuration the device cannot launch
            print(f"  {name} {config}: FAILED ({type(err).__name__}: {err})", flush=True)
            continue
        errs = [rel_err(o, w) for o, w in zip(outs, wants)]
        if not all(e <= tol for e in errs):
            print(f"  {name} {config}: WRONG (relative errors {['%.2e' % e for e in errs]})", flush=True)
            continue
        times[config] = bench(launch)
    return min(times.values()) if times else float("nan"), times


def torch_backward(layer: bool, dy, x, w, b):
    """torch's backward kernel as a call returning the gradients, fed the statistics its own
    forward saved (their dtype is torch's): aten's LayerNorm backward, the fused RMSNorm
    backward where this torch has one, else the autograd backward of F.rms_norm."""
    cols = x.shape[1]
    if layer:
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [cols], w, b, EPS)
        return lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [cols], mean, rstd, w, b, [True, True, True])
    if hasattr(torch.ops.aten, "_fused_rms_norm_backward"):
        _, rstd = torch.ops.aten._fused_rms_norm(x, [cols], w, EPS)
        return lambda: torch.ops.aten._fused_rms_norm_backward(dy, x, [cols], rstd, w, [True, True])
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = F.rms_norm(xr, (cols,), wr, EPS)
    return lambda: torch.autograd.grad(y, (xr, wr), dy, retain_graph=True)


def case(norm: str, rows: int, cols: int, dev: str) -> dict:
    x, dy = (torch.randn(rows, cols, device=dev, dtype=torch.bfloat16) for _ in range(2))
    w, b = (torch.randn(cols, device=dev, dtype=torch.bfloat16) for _ in range(2))
    layer = norm == "LayerNorm"
    xf, wf, bf = (t.float().requires_grad_() for t in (x, w, b))
    yf = F.layer_norm(xf, (cols,), wf, bf, EPS) if layer else F.rms_norm(xf, (cols,), wf, EPS)
    wants = torch.autograd.grad(yf, (xf, wf, bf) if layer else (xf, wf), dy.float())
    mean = x.float().mean(1) if layer else None
    var = x.float().var(1, unbiased=False) if layer else x.float().pow(2).mean(1)
    rstd = torch.rsqrt(var + EPS)
    dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
    outs = (dx, dw, db) if layer else (dx, dw)

    launches = {}
    # narrow rows (GPT-2's 768) take few bytes a row: more blocks of fewer rows keep more
    # rows in flight, at the cost of more partial rows to sum
    for per_block in ((2, 4, 8) if cols <= 1024 else ()) + (16, 32, 64, 128):
        blocks = vg.cdiv(rows, per_block)
        partials = [torch.empty(blocks, cols, device=dev) for _ in range(2)]
        for nw in (4, 8, 16, 32):  # 32: LayerNorm needs 72 registers there, over 64 (FAILED)
            if layer:
                launches[(per_block, nw)] = lambda p=partials, r=per_block, nw=nw: launch_layernorm_backward(
                    dy, x, w, mean, rstd, dx, dw, db, *p, ROWS=r, num_warps=nw)
            else:
                launches[(per_block, nw)] = lambda p=partials, r=per_block, nw=nw: launch_rmsnorm_backward(
                    dy, x, w, rstd, dx, dw, p[0], ROWS=r, num_warps=nw)
    ours = best_of(f"ours {norm}", launches, outs, wants, 1e-2)

    from verdigris.ops import norms
    if layer:
        op = lambda: torch.ops.verdigris.layer_norm_backward(dy, x, w, b, EPS, mean, rstd)  # noqa: E731
    else:
        op = lambda: torch.ops.verdigris.rms_norm_backward(dy, x, w, EPS, rstd)  # noqa: E731
    assert norms  # the import registers the ops
    op_s = bench(op)

    try:
        torch_bwd = torch_backward(layer, dy, x, w, b)
        errs = [rel_err(g, want) for g, want in zip(torch_bwd(), wants)]
        if not all(e <= 2e-2 for e in errs):
            raise RuntimeError(f"WRONG (relative errors {['%.2e' % e for e in errs]})")
        torch_s = bench(torch_bwd)
    except RuntimeError as err:  # an aten op this torch lacks on this device, or wrong
        print(f"  torch {norm} backward: {str(err).splitlines()[0]}", flush=True)
        torch_s = float("nan")

    theirs = (float("nan"), {})
    if triton is not None:
        theirs = best_of(f"triton {norm}", {nw: (lambda nw=nw: triton_backward(
            dy, x, w, mean, rstd, dx, dw, db, nw)) for nw in (8, 16)}, outs, wants, 2e-2)
    nbytes = 3 * rows * cols * x.element_size()
    return dict(case=f"{norm} backward {rows}x{cols} bf16", nbytes=nbytes, ours_s=ours[0],
                op_s=op_s, torch_s=torch_s, triton_s=theirs[0],
                configs={str(k): round(nbytes / v / 1e12, 3) for k, v in ours[1].items()},
                triton_configs={str(k): round(nbytes / v / 1e12, 3) for k, v in theirs[1].items()})


def copy_roofline(dev) -> float:
    """The device-to-device copy's TB/s (bytes read + written) of 1 GiB."""
    src = torch.rand(1 << (20 if SMOKE else 28), device=dev)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / bench(lambda: dst.copy_(src)) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--cols", type=int, default=COLS)
    parser.add_argument("--smoke", action="store_true",
                        help="run every implementation once on CPU tensors (the cpu backend; "
                             "Triton's only under TRITON_INTERPRET=1): checks the script")
    args = parser.parse_args()
    global SMOKE
    SMOKE = args.smoke
    torch.manual_seed(0)
    dev = "cpu" if SMOKE else "cuda"
    copy_tbs = copy_roofline(dev)
    rows = [case(norm, args.rows, args.cols, dev) for norm in ("LayerNorm", "RMSNorm")]

    tbs = lambda r, key: r["nbytes"] / r[key] / 1e12  # noqa: E731
    print(f"\ndevice copy: {copy_tbs:.2f} TB/s (read + write); torch {torch.__version__}, "
          f"triton {triton.__version__ if triton else 'absent'}, "
          f"{'CPU (smoke run)' if SMOKE else torch.cuda.get_device_name()}; "
          f"tile of {tile_cols(args.cols)}")
    print(f"{'case':38} {'ours':>6} {'op':>6} {'torch':>6} {'triton':>6} {'/torch':>7} {'/triton':>8} "
          f"{'/copy':>6}  TB/s; configs (rows per block, warps)")
    for r in rows:
        print(f"{r['case']:38} {tbs(r, 'ours_s'):6.2f} {tbs(r, 'op_s'):6.2f} {tbs(r, 'torch_s'):6.2f} "
              f"{tbs(r, 'triton_s'):6.2f} {r['torch_s'] / r['ours_s']:7.3f} {r['triton_s'] / r['ours_s']:8.3f} "
              f"{tbs(r, 'ours_s') / copy_tbs:6.3f}  {r['configs']}  triton {r['triton_configs']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_tbs=copy_tbs, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
