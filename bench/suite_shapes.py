"""`verdigris bench` cases for matrix products over the LLM shape space (issue #29, part 2).

The sweep: y = x @ w.T for every (N, K) pair of Llama-3 8B's and 70B's linear layers (QKV,
O, gate_up, down) at M in 1, 16, 64, 256, 1024, 4096, 16384 (sizes are (M, N, K)), bf16
against torch.matmul (cuBLAS), and fp8 e4m3 with per-row scales and with per-128-block
scales (DeepSeek-V3's: x per row and 128 of K, w per 128 x 128) against torch._scaled_mm
(fast and float32 accumulation, the best kept; for block scales the layout torch's tests
pass: x's scales outer-dim-major). Ours is `examples/tile_matmul_shapes.py`: the
heuristic's plan, and `linear`, which times the candidates once per shape (inside the
check) and runs the winner. Each is checked against a float32 product (of the dequantized
operands for fp8): relative Frobenius error at most 1e-2. Quick sizes: a few shapes, small
and large M, so that the GPU run stays short.

Grouped GEMM for mixture-of-experts: tokens routed to G experts (ragged group sizes drawn
once from a fixed-seed router), each expert's weight (N, K); sizes are (rows, G, N, K): the
rows after top-k routing. Ours is `examples/tile_grouped_gemm.py` (one launch, in each of
GROUPED_CONFIGS' tiles); the peers
are torch._grouped_mm (where torch has it) and a Python loop of torch.matmul, one per
expert. TFLOP/s count 2 M N K (2 rows N K for the grouped case).

Needs torch.
"""
from __future__ import annotations

import math

from verdigris.benchsuite import Impl, case, checked, returning

RTOL = 1e-2
M_VALUES = (1, 16, 64, 256, 1024, 4096, 16384)
LLAMA = {  # (N, K) of QKV, O, gate_up, down
    "8B": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)],
    "70B": [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)],
}
QUICK = {"8B": [(1, 4096, 14336), (16, 6144, 4096), (4096, 28672, 4096)],
         "70B": [(256, 8192, 28672)]}
FP8_QUICK = {"row": [(4096, 4096, 14336)], "block": [(16, 8192, 8192)]}


def sweep(model: str) -> list:
    return [(m, n, k) for n, k in LLAMA[model] for m in M_VALUES]


def _label(size) -> str:
    return "x".join(map(str, size))


def _work(size) -> float:
    return 2 * math.prod(size)


def _ours(x, w, y, want, scales=None) -> dict:
    import torch

    from verdigris.examples.tile_matmul_shapes import (heuristic, launch_plan, linear,
                                                       plan_workspace)

    (m, k), n = x.shape, w.shape[0]
    plan = heuristic(m, n, k, str(x.dtype).rsplit(".", 1)[-1],
                     torch.cuda.get_device_properties(0).multi_processor_count)
    shape = plan_workspace(m, n, plan)
    workspace = None if shape is None else torch.empty(shape, device="cuda")
    return {f"heuristic {plan}": checked(lambda: launch_plan(x, w, y, plan, workspace, scales),
                                         y, want, RTOL),
            "tuned per shape": checked(lambda: linear(x, w, y, scales), y, want, RTOL)}


def _bf16_case(size):
    import torch

    m, n, k = size
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    want = x.float() @ w.float().T
    return {"verdigris": _ours(x, w, y, want),
            "torch": checked(lambda: torch.matmul(x, w.T, out=y), y, want, RTOL)}


def quantize(x, w, recipe: str):
    """fp8 e4m3 x and w with their scales in `recipe`'s layout (Scales), and the float32
    product of the dequantized operands."""
    import torch

    from verdigris.examples.tile_matmul_shapes import SCALE_BLOCK, Scales

    (m, k), n = x.shape, w.shape[0]
    if recipe == "row":
        xs, ws = x.abs().amax(1, keepdim=True) / 448, w.abs().amax(1, keepdim=True) / 448
        x_full, w_full = xs, ws
        scales = Scales("row", xs, ws.T.contiguous())
    else:
        kb = k // SCALE_BLOCK
        xs = x.view(m, kb, SCALE_BLOCK).abs().amax(2) / 448
        ws = w.view(n // SCALE_BLOCK, SCALE_BLOCK, kb, SCALE_BLOCK).abs().amax((1, 3)) / 448
        x_full = xs.repeat_interleave(SCALE_BLOCK, 1)
        w_full = ws.repeat_interleave(SCALE_BLOCK, 0).repeat_interleave(SCALE_BLOCK, 1)
        scales = Scales("block", xs.contiguous(), ws.contiguous())
    xq, wq = (x / x_full).to(torch.float8_e4m3fn), (w / w_full).to(torch.float8_e4m3fn)
    want = (xq.float() * x_full) @ (wq.float() * w_full).T
    return xq, wq, scales, want


def _scaled_mm(xq, wq, scales, want) -> dict:
    """torch._scaled_mm in each accumulation; for block scales, x's scales outer-dim-major
    and w's transposed, as torch's tests pass them. A recipe torch refuses is reported
    as the peer's failure."""
    import torch

    if scales.recipe == "row":
        scale_a, scale_b = scales.x, scales.w
    else:
        scale_a, scale_b = scales.x.t().contiguous().t(), scales.w.t()

    def run(fast):
        return lambda: torch._scaled_mm(xq, wq.T, scale_a, scale_b, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast)

    impls = {}
    for how, fast in (("fast", True), ("float32", False)):
        try:
            run(fast)()
        except RuntimeError as refused:  # this torch does not take the recipe
            message = str(refused).splitlines()[0][:200]
            impls[f"{how} accumulation"] = Impl(run(fast), lambda m=message: m)
        else:
            impls[f"{how} accumulation"] = returning(run(fast), want, RTOL)
    return impls


def _fp8_case(recipe: str):
    def setup(size):
        import torch

        m, n, k = size
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda")
        xq, wq, scales, want = quantize(x, w, recipe)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        return {"verdigris": _ours(xq, wq, y, want, scales), "torch": _scaled_mm(xq, wq, scales, want)}

    return setup


for _model in LLAMA:
    case(f"Llama-3 {_model} linear bf16", kind="compute", sizes=sweep(_model), quick=QUICK[_model],
         work=_work, requires=["torch"], plot="shapes", size_label=_label)(_bf16_case)
for _recipe, _what in (("row", "per-row"), ("block", "per-128-block")):
    case(f"Llama-3 linear fp8 {_what} scales", kind="compute",
         sizes=sweep("8B") + sweep("70B"), quick=FP8_QUICK[_recipe], work=_work,
         requires=["torch"], plot="shapes", roofline="dense_fp8_tflops",
         size_label=_label)(_fp8_case(_recipe))


# ----------------------------------------------------------------------------- grouped

MOE = [(8192, 8, 14336, 4096),     # Mixtral 8x7B, top-2 of 4096 tokens: w1 (and w3)
       (8192, 8, 4096, 14336),     # ... w2
       (32768, 256, 4096, 7168),   # DeepSeek-V3, top-8 of 4096 tokens: gate_up of 2048
       (32768, 256, 7168, 2048),   # ... down
       (512, 64, 2048, 2048)]      # few tokens per expert (decode-like)


# the default (GROUPED_TILES) first: 128 x 256, warp-specialized and persistent as the GEMM's
# best; BM 64: less waste at group ends; 64 x 128: more tiles where there are few rows
GROUPED_CONFIGS = [dict(BM=128, BN=256, BK=64), dict(BM=128, BN=128, BK=64),
                   dict(BM=64, BN=256, BK=64), dict(BM=64, BN=128, BK=64)]


def _tiles(t: dict) -> str:
    return f"{t['BM']}x{t['BN']}x{t['BK']}"


def router_sizes(rows: int, groups: int, seed: int = 0) -> list:
    """Rows per expert from a fixed-seed router: uneven (Dirichlet weights), some empty
    where experts outnumber tokens."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.multinomial(rows, rng.dirichlet(np.full(groups, 2.0))).tolist()


@case("grouped GEMM bf16 (MoE)", kind="compute", sizes=MOE, quick=MOE[:1],
      work=lambda s: 2 * s[0] * s[2] * s[3], requires=["torch"], plot="grouped",
      size_label=lambda s: f"{s[0]} rows, {s[1]} experts, {s[2]}x{s[3]}")
def bench_grouped(size):
    import torch

    from verdigris.examples.tile_grouped_gemm import launch_grouped_gemm

    rows, groups, n, k = size
    sizes = router_sizes(rows, groups)
    ends = [0]
    for s in sizes:
        ends.append(ends[-1] + s)
    offsets = torch.tensor(ends, device="cuda", dtype=torch.int32)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    want = torch.empty(rows, n, device="cuda")
    for g in range(groups):
        want[ends[g]:ends[g + 1]] = a[ends[g]:ends[g + 1]].float() @ b[g].float().T

    def loop():
        for g in range(groups):
            torch.matmul(a[ends[g]:ends[g + 1]], b[g].T, out=c[ends[g]:ends[g + 1]])

    torch_impls = {"loop of torch.matmul": checked(loop, c, want, RTOL)}
    if hasattr(torch, "_grouped_mm"):
        torch_impls["torch._grouped_mm"] = returning(
            lambda: torch._grouped_mm(a, b.transpose(1, 2), offs=offsets[1:], out_dtype=torch.bfloat16),
            want, RTOL)
    ours = {_tiles(t): checked(lambda t=t: launch_grouped_gemm(a, b, offsets, c, tiles=t), c, want,
                               RTOL) for t in GROUPED_CONFIGS}
    return {"verdigris": ours, "torch": torch_impls}
