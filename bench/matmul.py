"""Matrix products and flash attention on the GPU beside torch (cuBLAS / SDPA) and Triton.

Cases (issue 5's): bf16 GEMM 4096^3 and 8192^3, fp16 GEMM 4096^3, fp8 e4m3 GEMM 8192^3
(vs torch._scaled_mm), GEMM + bias + GELU 8192^3 bf16 (vs torch's matmul then its
epilogue), flash attention forward (batch 4, 32 heads, seq 4096, head dim 128, bf16,
causal and not; vs SDPA's flash backend and Triton's fused-attention tutorial kernel).
Ours are the kernels of `verdigris.examples.tile_gemm` / `tile_attention` under
`vg.autotune` over a small table of tile configurations (the tuner times each once per
shape class and keeps the winner on disk; its line on stderr lists every configuration's
time); every configuration is first checked against a float32 reference (relative
Frobenius error), then the tuned kernel is timed. Times: `triton.testing.do_bench`
medians. Run: `PYTHONPATH=src python3 bench/matmul.py [--quick] [--only CASES] [--json FILE]`.
"""
from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import verdigris as vg
from verdigris.examples.tile_attention import attention
from verdigris.examples.tile_gemm import gemm, gemm_bias_gelu, gemm_nt

# 128x64: 1024^3 has 64 tiles of 128x128 for 132 multiprocessors; 128 of 128x64 ran at 210
# TFLOP/s where 128x128 ran at 175 (cuBLAS 235) on the H200.
GEMM_CONFIGS = [dict(BM=128, BN=256, BK=64), dict(BM=256, BN=128, BK=64), dict(BM=128, BN=128, BK=64),
                dict(BM=128, BN=64, BK=64)]
FP8_CONFIGS = [dict(BM=128, BN=256, BK=128), dict(BM=128, BN=128, BK=128)]
ATTENTION_CONFIGS = [dict(BM=128, BN=64), dict(BM=128, BN=128)]


# ----------------------------------------------------------------------------- Triton


@triton.jit
def tr_matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              GROUP: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * tiles_n)
    first = group * GROUP
    size = min(tiles_m - first, GROUP)
    pm = first + (pid % (GROUP * tiles_n)) % size
    pn = (pid % (GROUP * tiles_n)) // size
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(a + rm[:, None] * K + (k * BK + rk)[None, :])
        y = tl.load(b + (k * BK + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty))


def triton_matmul(a, b, c, bm=128, bn=256, bk=64, warps=8, stages=3):
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    tr_matmul[grid](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=warps,
                    num_stages=stages)


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_base, v_base, start_m, qk_scale, offs_m, offs_n, offs_d,
                N_CTX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, STAGE: tl.constexpr):
    # The fused-attention tutorial's inner loop: STAGE 1 the blocks left of the diagonal,
    # 2 the diagonal block (masked), 3 every block (not causal).
    if STAGE == 1:
        lo, hi = 0, start_m * BM
    elif STAGE == 2:
        lo, hi = start_m * BM, (start_m + 1) * BM
    else:
        lo, hi = 0, N_CTX
    for start_n in range(lo, hi, BN):
        kt = tl.load(k_base + (start_n + offs_n)[None, :] * 128 + offs_d[:, None])
        qk = tl.dot(q, kt)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + (start_n + offs_n)[:, None] * 128 + offs_d[None, :])
        acc = tl.dot(p.to(tl.bfloat16), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def tr_attention(q, k, v, o, sm_scale, N_CTX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 STAGE: tl.constexpr):
    start_m, bh = tl.program_id(0), tl.program_id(1)
    base = bh.to(tl.int64) * N_CTX * 128
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, 128)
    m_i = tl.zeros((BM,), tl.float32) - float("inf")
    l_i = tl.zeros((BM,), tl.float32) + 1.0
    acc = tl.zeros((BM, 128), tl.float32)
    qk_scale = sm_scale * 1.44269504
    qt = tl.load(q + base + offs_m[:, None] * 128 + offs_d[None, :])
    if STAGE & 1:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, qt, k + base, v + base, start_m, qk_scale, offs_m,
                                    offs_n, offs_d, N_CTX, BM, BN, 4 - STAGE)
    if STAGE & 2:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, qt, k + base, v + base, start_m, qk_scale, offs_m,
                                    offs_n, offs_d, N_CTX, BM, BN, 2)
    acc = acc / l_i[:, None]
    tl.store(o + base + offs_m[:, None] * 128 + offs_d[None, :], acc.to(o.dtype.element_ty))


def triton_attention(q, k, v, o, causal: bool):
    b, h, n, d = q.shape
    tr_attention[(n // 128, b * h)](q, k, v, o, 1 / math.sqrt(d), N_CTX=n, BM=128, BN=64,
                                    STAGE=3 if causal else 1, num_warps=8, num_stages=3)


# ----------------------------------------------------------------------------- harness


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def rel_error(got, want) -> float:
    got, want = got.float(), want.float()
    return float(torch.linalg.norm(got - want) / torch.linalg.norm(want))


def run_case(rows, name, flops, reference, candidates):
    """candidates: (label, fn, output) with fn filling output; the reference in float32."""
    want = reference()
    entries = []
    for label, fn, out in candidates:
        try:
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = rel_error(out, want)
            ms = bench(fn) if err < 1e-2 else float("nan")
        except Exception as exc:  # noqa: BLE001 - a failing configuration is reported, not fatal
            err, ms = float("nan"), float("nan")
            label = f"{label} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        entries.append((label, ms, err))
        tflops = flops / ms / 1e9 if ms == ms else float("nan")
        print(f"  {name:28s} {label:44s} {ms:9.3f} ms {tflops:8.1f} TFLOP/s  err {err:.2e}", flush=True)
    rows.append({"case": name, "flops": flops, "entries": entries})


def _show(config: dict) -> str:
    return "x".join(str(v) for v in config.values())


def ours(kernel, configs, grid, args, key, **fixed):
    """Candidates: each configuration, then the kernel autotuned over them."""
    tuned = vg.autotune(configs=configs, key=key)(kernel)
    checks = [(f"ours {_show(c)}", lambda c=c: kernel[grid(c)](*args, **c, **fixed)) for c in configs]
    return checks + [(f"ours (autotuned over {len(configs)})", lambda: tuned[grid](*args, **fixed))]


def gemm_case(rows, dtype, n, configs):
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    ref = lambda: a.float() @ b.float()  # noqa: E731
    grid = lambda m: (vg.cdiv(n, m["BM"]), vg.cdiv(n, m["BN"]))  # noqa: E731
    cands = [(label, fn, c) for label, fn in ours(gemm, configs, grid, (a, b, c), ["a", "b"])]
    cands += [("torch (cuBLAS)", lambda: torch.matmul(a, b, out=c), c),
              ("Triton 128x256x64 s3 w8", lambda: triton_matmul(a, b, c), c),
              ("Triton 128x128x64 s4 w4", lambda: triton_matmul(a, b, c, 128, 128, 64, 4, 4), c)]
    run_case(rows, f"{str(dtype)[6:]} GEMM {n}^3", 2 * n ** 3, ref, cands)


def fp8_case(rows, n, configs):
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    bt = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)  # (N, K): K-major B
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")
    ref = lambda: a.float() @ bt.float().T  # noqa: E731
    grid = lambda m: (vg.cdiv(n, m["BM"]), vg.cdiv(n, m["BN"]))  # noqa: E731
    cands = [(label, fn, c) for label, fn in ours(gemm_nt, configs, grid, (a, bt, c, 1.0), ["a", "bt"])]
    for fast in (True, False):  # ours accumulates as cuBLAS's fast accumulation does
        cands.append((f"torch._scaled_mm{' fast accumulation' if fast else ''}", lambda fast=fast: c.copy_(
            torch._scaled_mm(a, bt.T, one, one, out_dtype=torch.bfloat16, use_fast_accum=fast)), c))
    run_case(rows, f"fp8 e4m3 GEMM {n}^3", 2 * n ** 3, ref, cands)


def bias_gelu_case(rows, n, configs):
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    ref = lambda: F.gelu(a.float() @ b.float() + bias.float())  # noqa: E731
    grid = lambda m: (vg.cdiv(n, m["BM"]), vg.cdiv(n, m["BN"]))  # noqa: E731
    cands = [(label, fn, c) for label, fn in ours(gemm_bias_gelu, configs, grid, (a, b, bias, c), ["a", "b"])]
    cands.append(("torch matmul + bias + gelu", lambda: c.copy_(F.gelu(torch.matmul(a, b) + bias)), c))
    run_case(rows, f"bf16 GEMM+bias+GELU {n}^3", 2 * n ** 3, ref, cands)


def attention_case(rows, causal: bool, configs, batch=4, heads=32, seq=4096, dim=128):
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(batch, heads, seq, device="cuda")  # the row log-sum-exp ours also writes
    scale = 1 / math.sqrt(dim)

    def ref():
        out = torch.empty(q.shape, device="cuda", dtype=torch.float32)
        for i in range(batch):  # the float32 scores of one batch at a time
            out[i] = F.scaled_dot_product_attention(q[i].float(), k[i].float(), v[i].float(),
                                                    is_causal=causal)
        return out

    grid = lambda m: (seq // m["BM"], heads, batch)  # noqa: E731
    cands = [(label, fn, o) for label, fn in ours(attention, configs, grid, (q, k, v, o, lse, scale), ["q", "k"],
                                                  CAUSAL=causal, D=dim)]

    def sdpa():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            o.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    cands += [("torch SDPA (flash)", sdpa, o),
              ("Triton fused-attention tutorial", lambda: triton_attention(q, k, v, o, causal), o)]
    flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1)
    run_case(rows, f"attention fwd {'causal' if causal else 'full'} d{dim}", flops, ref, cands)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one configuration per case")
    parser.add_argument("--only", default="", help="comma-separated case prefixes")
    parser.add_argument("--json")
    args = parser.parse_args()
    pick = (lambda c: c[:1]) if args.quick else (lambda c: c)
    print(f"torch {torch.__version__}, Triton {triton.__version__}, {torch.cuda.get_device_name()}")
    rows: list = []
    cases = {
        "bf16-4096": lambda: gemm_case(rows, torch.bfloat16, 4096, pick(GEMM_CONFIGS)),
        "bf16-8192": lambda: gemm_case(rows, torch.bfloat16, 8192, pick(GEMM_CONFIGS)),
        "fp16-4096": lambda: gemm_case(rows, torch.float16, 4096, pick(GEMM_CONFIGS)),
        "fp8-8192": lambda: fp8_case(rows, 8192, pick(FP8_CONFIGS)),
        "gelu-8192": lambda: bias_gelu_case(rows, 8192, pick(GEMM_CONFIGS)),
        "attn-full": lambda: attention_case(rows, False, pick(ATTENTION_CONFIGS)),
        "attn-causal": lambda: attention_case(rows, True, pick(ATTENTION_CONFIGS)),
    }
    only = [s for s in args.only.split(",") if s]
    for name, case in cases.items():
        if not only or any(name.startswith(s) for s in only):
            try:
                case()
            except Exception as exc:  # noqa: BLE001 - keep the other cases
                print(f"  {name}: FAILED {type(exc).__name__}: {exc}"[:300], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
