"""`verdigris bench` cases for the tile track's matrix products and flash attention.

Registers (issue 5's cases, over a range of sizes; `--quick` measures the issue's sizes):
GEMM bfloat16 (N^3, quick 4096^3 and 8192^3), float16 (quick 4096^3), fp8 e4m3 with B
K-major (quick 8192^3; compared with the dense fp8 peak), GEMM + bias + GELU bfloat16
(quick 8192^3), and flash attention forward, bfloat16, batch 4 x 32 heads x SEQ x head dim
128, causal and not (quick SEQ 4096). Ours are the examples' kernels
(`verdigris.examples.tile_gemm`, `tile_attention`) as `bench/matmul.py`'s `ours` launches
them: each configuration of its tables, and the kernel under `vg.autotune` over them (the
tuner times them on its first call at each size, inside the check); the suite keeps the
best, re-timed. The peers are torch (cuBLAS; `_scaled_mm` with fast accumulation and with float32
accumulation, the best kept: ours accumulates in the tensor cores' own precision, as fast
accumulation does; SDPA's flash, cuDNN and efficient backends, the best kept; matmul then
the epilogue) and `bench/matmul.py`'s Triton kernels (`triton_matmul` in its two
configurations, `triton_attention`: a one-configuration cut of the fused-attention
tutorial's loop, without its autotuning or Hopper path: issue #29 asks for the real one). Every implementation is checked before it is timed: relative Frobenius error
at most 1e-2 against a float64 product (float32 for attention, one batch at a time, as
the script does). TFLOP/s count 2 M N K per GEMM and 4 B H S^2 D per attention (half of it
causal).

Attention backward (issue #28), bfloat16, the same shapes, causal and not: ours is
`tile_attention.attention_backward` (delta, then dK and dV, then dQ) in each configuration
of BACKWARD_CONFIGS, after one forward that saved the log-sum-exp; the peers are the backward
of torch's SDPA under each backend (flash, cuDNN, efficient; the best kept), and, causal
only, the Triton fused-attention tutorial's real `_attn_bwd` when VERDIGRIS_TRITON_ATTENTION
names a copy of the tutorial's script (python/tutorials/06-fused-attention.py, called as
`attention(q, k, v, causal, scale)`; its backward masks the diagonal whatever `causal` says,
so it has no non-causal row). Each is checked on dQ, dK and dV (relative Frobenius error at
most 1e-2 against float32 SDPA gradients, one batch at a time) before it is timed; TFLOP/s
count 2.5 times the forward's work (five products where the forward has two).

Needs torch and Triton: `bench/matmul.py`, which holds the tables and Triton's kernels,
imports both.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from verdigris.benchsuite import Impl, case, checked, load_script, relative_error, returning

MATMUL = Path(__file__).with_name("matmul.py")
RTOL = 1e-2  # bench/matmul.py's criterion; a bf16 output's own rounding is ~2e-3
BATCH, HEADS, HEAD_DIM = 4, 32, 128
# the dK/dV kernel's launch, the dQ kernel's (tiles, warps): `attention_backward`'s defaults first
BACKWARD_CONFIGS = [(dict(BM=64, BN=128, num_warps=8), dict(BM=128, BN=128, num_warps=8)),
                    (dict(BM=64, BN=128), dict(BM=128, BN=64)),
                    (dict(BM=32, BN=128, num_warps=8), dict(BM=128, BN=64)), (dict(BM=64, BN=64), dict(BM=64, BN=64))]


def _matmul():
    return load_script(MATMUL)


def _cube(n) -> str:
    return f"{n}^3"


def _ours(kernel, configs, grid, args, key, out, want, **fixed) -> dict:
    """bench/matmul.py's candidates for our kernel (each configuration, then the autotuned
    kernel), each checked against `want` through `out`."""
    return {label.removeprefix("ours "): checked(run, out, want, RTOL)
            for label, run in _matmul().ours(kernel, configs, grid, args, key, **fixed)}


def _square_grid(n):
    """The grid of a GEMM of n x n outputs, for a configuration's BM and BN."""
    import verdigris as vg

    return lambda config: (vg.cdiv(n, config["BM"]), vg.cdiv(n, config["BN"]))


def _gemm_case(dtype_name: str):
    def setup(n):
        import torch

        from verdigris.examples.tile_gemm import gemm

        mm = _matmul()
        dtype = getattr(torch, dtype_name)
        a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        want = a.double() @ b.double()
        return {
            "verdigris": _ours(gemm, mm.GEMM_CONFIGS, _square_grid(n), (a, b, c), ["a", "b"],
                               c, want),
            "torch": checked(lambda: torch.matmul(a, b, out=c), c, want, RTOL),
            "triton": {  # bench/matmul.py's two: its defaults, and the smaller tile
                "128x256x64, 3 stages, 8 warps": checked(lambda: mm.triton_matmul(a, b, c),
                                                         c, want, RTOL),
                "128x128x64, 4 stages, 4 warps": checked(
                    lambda: mm.triton_matmul(a, b, c, 128, 128, 64, 4, 4), c, want, RTOL)},
        }

    return setup


case("GEMM bf16", kind="compute", sizes=[1024, 2048, 4096, 8192], quick=[4096, 8192],
     work=lambda n: 2 * n**3, requires=["torch", "triton"], plot="gemm",
     size_label=_cube)(_gemm_case("bfloat16"))
case("GEMM fp16", kind="compute", sizes=[1024, 2048, 4096], quick=[4096],
     work=lambda n: 2 * n**3, requires=["torch", "triton"], plot="gemm",
     size_label=_cube)(_gemm_case("float16"))


@case("GEMM fp8 e4m3", kind="compute", sizes=[2048, 4096, 8192], quick=[8192],
      work=lambda n: 2 * n**3, requires=["torch", "triton"], plot="gemm",
      roofline="dense_fp8_tflops", size_label=_cube)
def bench_gemm_fp8(n):
    import torch

    from verdigris.examples.tile_gemm import gemm_nt

    mm = _matmul()
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    bt = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)  # (N, K): B K-major
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")
    want = a.float().double() @ bt.float().double().T
    return {"verdigris": _ours(gemm_nt, mm.FP8_CONFIGS, _square_grid(n), (a, bt, c, 1.0),
                               ["a", "bt"], c, want),
            # ours accumulates in the tensor cores' own precision, as cuBLAS does with
            # fast accumulation; without it cuBLAS adds into float32 as it goes (slower)
            "torch": {f"{how} accumulation": returning(
                lambda fast=fast: torch._scaled_mm(a, bt.T, one, one, out_dtype=torch.bfloat16,
                                                   use_fast_accum=fast), want, RTOL)
                for how, fast in (("fast", True), ("float32", False))}}


@case("GEMM+bias+GELU bf16", kind="compute", sizes=[2048, 4096, 8192], quick=[8192],
      work=lambda n: 2 * n**3, requires=["torch", "triton"], plot="gemm", size_label=_cube)
def bench_gemm_bias_gelu(n):
    import torch
    import torch.nn.functional as F

    from verdigris.examples.tile_gemm import gemm_bias_gelu

    mm = _matmul()
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    bias = torch.randn(1, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    want = F.gelu(a.double() @ b.double() + bias.double())
    return {"verdigris": _ours(gemm_bias_gelu, mm.GEMM_CONFIGS, _square_grid(n),
                               (a, b, bias, c), ["a", "b"], c, want),
            "torch": returning(lambda: F.gelu(torch.matmul(a, b) + bias), want, RTOL)}


def _attention_case(causal: bool):
    def setup(seq):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from verdigris.examples.tile_attention import attention

        mm = _matmul()
        q, k, v = (torch.randn(BATCH, HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(BATCH, HEADS, seq, device="cuda")  # ours writes the row log-sum-exp too
        want = torch.empty(q.shape, device="cuda")
        for i in range(BATCH):  # the float32 scores of one batch at a time
            want[i] = F.scaled_dot_product_attention(q[i].float(), k[i].float(), v[i].float(),
                                                     is_causal=causal)
        def grid(config):
            return seq // config["BM"], HEADS, BATCH

        def sdpa(backend):  # one of torch's SDPA backends, pinned
            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return run

        return {"verdigris": _ours(attention, mm.ATTENTION_CONFIGS, grid,
                                   (q, k, v, o, lse, 1 / math.sqrt(HEAD_DIM)), ["q", "k"], o, want,
                                   CAUSAL=causal, D=HEAD_DIM),
                # every SDPA backend (cuDNN's is published at FlashAttention-3's level on
                # Hopper); the suite reports torch's best, each one that fails its own row
                "torch": {name: returning(sdpa(backend), want, RTOL) for name, backend in (
                    ("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                    ("efficient", SDPBackend.EFFICIENT_ATTENTION))},
                "triton": checked(lambda: mm.triton_attention(q, k, v, o, causal), o, want,
                                  RTOL)}

    return setup




def _show(dkdv: dict, dq: dict) -> str:
    def launch(c):
        return f"{c['BM']}x{c['BN']}" + (f" {c['num_warps']} warps" if "num_warps" in c else "")
    return f"dK/dV {launch(dkdv)}, dQ {launch(dq)}"


def _gradients(run, want) -> Impl:
    """`run`, which returns (dq, dk, dv), checked against `want` (the three gradients)."""
    def check():
        got = run()
        errors = [relative_error(g, w) for g, w in zip(got, want)]
        worst = max(errors)
        return None if worst <= RTOL else "relative errors of dq, dk, dv: " + ", ".join(
            f"{e:.2e}" for e in errors) + f" (at most {RTOL:.0e})"

    return Impl(run, check)


SDPA_BACKENDS = ("flash", "cuDNN", "efficient")


def sdpa_gradients(q, k, v, do, causal: bool) -> list:
    """dQ, dK and dV of torch's SDPA in float32 (one batch at a time): the reference."""
    import torch
    import torch.nn.functional as F

    want = [torch.empty(q.shape, device=q.device) for _ in range(3)]
    for i in range(q.shape[0]):
        params = [t[i].float().requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*params, is_causal=causal)
        for w, g in zip(want, torch.autograd.grad(out, params, do[i].float())):
            w[i] = g
    return want


def backward_of(forward, q, k, v, do):
    """Autograd's backward of `forward(q, k, v)` recorded once, timed alone: a launch
    giving (dq, dk, dv)."""
    import torch

    params = [t.clone().requires_grad_() for t in (q, k, v)]
    out = forward(*params)
    return lambda: torch.autograd.grad(out, params, do, retain_graph=True)


def sdpa_forward(backend: str, causal: bool):
    """torch's SDPA under one of SDPA_BACKENDS (its backward is that backend's)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

    def forward(*params):
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(*params, is_causal=causal)
    return forward


def _attention_backward_case(causal: bool):
    def setup(seq):
        import torch

        from verdigris.examples.tile_attention import attention, attention_backward

        shape = (BATCH, HEADS, seq, HEAD_DIM)
        q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        scale = 1 / math.sqrt(HEAD_DIM)
        want = sdpa_gradients(q, k, v, do, causal)
        o, lse = torch.empty_like(q), torch.empty(BATCH, HEADS, seq, device="cuda")
        attention[seq // 128, HEADS, BATCH](q, k, v, o, lse, scale, CAUSAL=causal, BM=128, BN=64, D=HEAD_DIM)
        grads = [torch.empty_like(o) for _ in range(3)]
        delta = torch.empty_like(lse)

        def ours(launches):
            def run():
                attention_backward(q, k, v, o, lse, do, *grads, delta, scale, causal, *launches)
                return grads
            return run

        impls = {"verdigris": {_show(dkdv, dq): _gradients(ours((dkdv, dq)), want)
                               for dkdv, dq in BACKWARD_CONFIGS},
                 "torch": {name: _gradients(backward_of(sdpa_forward(name, causal), q, k, v, do), want)
                           for name in SDPA_BACKENDS}}
        tutorial = os.environ.get("VERDIGRIS_TRITON_ATTENTION")
        if tutorial and causal:
            triton_attention = load_script(tutorial).attention
            impls["triton"] = _gradients(backward_of(
                lambda q, k, v: triton_attention(q, k, v, True, scale), q, k, v, do), want)
        return impls

    return setup


# (direction, setup, products of 2 B H S^2 D flops each: the forward's two, the backward's
# five); causal attention does half of each
for _direction, _setup, _products in (("fwd", _attention_case, 2), ("bwd", _attention_backward_case, 5)):
    for _causal in (False, True):
        case(f"attention {_direction}{' causal' if _causal else ''} bf16", kind="compute",
             sizes=[1024, 2048, 4096], quick=[4096], requires=["torch", "triton"], plot="attention",
             work=lambda s, c=_causal, n=_products: 2 * n * BATCH * HEADS * s * s * HEAD_DIM * (0.5 if c else 1),
             size_label=lambda s: f"{BATCH}x{HEADS}x{s}x{HEAD_DIM}")(_setup(_causal))
