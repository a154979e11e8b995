"""Products over the LLM shape space and the grouped GEMM on the GPU (issue #29), against
torch: `tile_matmul_shapes.linear` (tuned per shape: swapped operands and split-K at small
M) at Llama-3 8B's projections for M from 1 to 4096, bf16 against float32 torch.matmul and
fp8 with per-row and per-128-block scales against the float32 product of the dequantized
operands (and torch._scaled_mm where it takes the recipe); every plan of the candidates,
outputs poisoned (NaN); split-K the same bits from run to run; the grouped GEMM (warp-
specialized and persistent on sm_90a) with ragged groups (empty ones, none a multiple of
the tile) in both layouts of b and in each of the bench's tiles, with groups of whole tiles
only, and with many groups to a tile, against a loop of float32 torch products, and
against torch._grouped_mm where torch has it."""
import pytest

torch = pytest.importorskip("torch")

from tests.gpu.test_norm_backward_gpu import BF16_TOL, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu

FP8_TOL = 2e-2  # the output's bf16 rounding, plus wgmma's fp8 accumulator (`tile.matmul`)
LLAMA_8B = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed + sum(shape))
    return torch.randn(*shape, device="cuda", generator=g).to(dtype)


def poisoned(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("n, k", LLAMA_8B)
@pytest.mark.parametrize("m", [1, 16, 64, 256, 4096])
def test_linear_bf16_against_torch(m, n, k):
    from verdigris.examples.tile_matmul_shapes import linear

    x, w = randn(m, k, seed=1), randn(n, k, seed=2)
    y = poisoned(m, n)
    linear(x, w, y)
    assert rel_err(y, x.float() @ w.float().T) < BF16_TOL


def _fp8(m, n, k, recipe):
    """fp8 operands quantized as the bench does, their Scales, and the float32 product of
    the dequantized operands."""
    from pathlib import Path

    from verdigris.benchsuite import load_script

    suite = load_script(Path(__file__).parents[2] / "bench" / "suite_shapes.py")
    return suite.quantize(randn(m, k, seed=3, dtype=torch.float32),
                          randn(n, k, seed=4, dtype=torch.float32), recipe)


@pytest.mark.parametrize("recipe", ["row", "block"])
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (16, 4096, 14336), (256, 6144, 4096),
                                     (4096, 4096, 4096)])
def test_linear_fp8_every_candidate_against_the_dequantized_product(m, n, k, recipe):
    from verdigris.examples.tile_matmul_shapes import (candidates, launch_plan, linear,
                                                       plan_workspace)

    x, w, scales, want = _fp8(m, n, k, recipe)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for plan in candidates(m, n, k, "float8_e4m3fn", sms, recipe):
        y = poisoned(m, n)
        shape = plan_workspace(m, n, plan)
        ws = None if shape is None else torch.full(shape, float("nan"), device="cuda")
        launch_plan(x, w, y, plan, ws, scales)
        assert rel_err(y, want) < FP8_TOL, plan
    y = poisoned(m, n)
    linear(x, w, y, scales)
    assert rel_err(y, want) < FP8_TOL


def test_fp8_row_scales_match_scaled_mm():
    from verdigris.examples.tile_matmul_shapes import linear

    x, w, scales, _ = _fp8(64, 6144, 4096, "row")
    y = poisoned(64, 6144)
    linear(x, w, y, scales)
    theirs = torch._scaled_mm(x, w.T, scales.x, scales.w, out_dtype=torch.bfloat16)
    assert rel_err(y, theirs.float()) < FP8_TOL


def test_split_k_is_the_same_bits_from_run_to_run():
    from verdigris.examples.tile_matmul_shapes import Plan, launch_plan, plan_workspace

    x, w = randn(16, 14336, seed=5), randn(4096, 14336, seed=6)
    plan = Plan(128, 16, 64, parts=8, swapped=True)
    runs = []
    for _ in range(2):
        y = poisoned(16, 4096)
        launch_plan(x, w, y, plan, torch.full(plan_workspace(16, 4096, plan), float("nan"),
                                              device="cuda"))
        runs.append(y)
    assert torch.equal(*runs) and rel_err(runs[0], x.float() @ w.float().T) < BF16_TOL


SIZES = [0, 130, 7, 1000, 0, 257, 64, 1]  # ragged, empty groups, none a multiple of 128
ALIGNED = [256, 0, 128, 512, 128]  # whole 128-row tiles: every tile inside one group (TMA stores)
SMALL = [5, 9, 0, 3, 17, 2, 30, 11] * 4  # many groups to a tile: 13 in each of the first two


def _grouped_against_torch(sizes, order, tiles, n=2048, k=1024):
    from verdigris.examples.tile_grouped_gemm import launch_grouped_gemm

    g = len(sizes)
    offsets = torch.tensor([0] + sizes, device="cuda").cumsum(0).to(torch.int32)
    a = randn(int(offsets[-1]), k, seed=7)
    b = randn(g, n, k, seed=8) if order == "F" else randn(g, k, n, seed=8)
    c = poisoned(a.shape[0], n)
    launch_grouped_gemm(a, b, offsets, c, B_ORDER=order, tiles=tiles)
    for i in range(g):
        rows = slice(int(offsets[i]), int(offsets[i + 1]))
        wi = b[i].float().T if order == "F" else b[i].float()
        if rows.stop > rows.start:
            assert rel_err(c[rows], a[rows].float() @ wi) < BF16_TOL


@pytest.mark.parametrize("order", ["F", "C"])
def test_grouped_gemm_against_a_loop_of_torch_products(order):
    _grouped_against_torch(SIZES, order, None)  # the default tiles, 128 x 256


@pytest.mark.parametrize("tiles", ["128x128x64", "64x256x64", "64x128x64"])
def test_grouped_gemm_in_each_bench_tile(tiles):
    bm, bn, bk = map(int, tiles.split("x"))
    _grouped_against_torch(SIZES, "F", dict(BM=bm, BN=bn, BK=bk))


@pytest.mark.parametrize("sizes", [ALIGNED, SMALL], ids=["aligned", "small"])
def test_grouped_gemm_with_tiles_inside_groups_and_across_many(sizes):
    """Only whole-tile stores (no scatter), then tiles that each span many groups (one
    product and one scatter per group, the producer copying every group's K tiles)."""
    _grouped_against_torch(sizes, "F", None, n=1024)


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch has no _grouped_mm")
def test_grouped_gemm_matches_torch_grouped_mm():
    from verdigris.examples.tile_grouped_gemm import launch_grouped_gemm

    n, k = 1024, 2048
    offsets = torch.tensor([0] + SIZES, device="cuda").cumsum(0).to(torch.int32)
    a, b = randn(int(offsets[-1]), k, seed=9), randn(len(SIZES), n, k, seed=10)
    c = poisoned(a.shape[0], n)
    launch_grouped_gemm(a, b, offsets, c)
    theirs = torch._grouped_mm(a, b.transpose(1, 2), offs=offsets[1:], out_dtype=torch.bfloat16)
    assert rel_err(c, theirs.float()) < BF16_TOL


@pytest.mark.parametrize("name", ["tile_matmul_shapes", "tile_grouped_gemm"])
def test_the_examples_checks_pass_on_the_gpu(name):
    """Each module's `check`: every plan kind, fp8 in both recipes, ragged groups, with
    small tiles on shapes no tile divides."""
    import importlib

    import numpy as np

    results = importlib.import_module(f"verdigris.examples.{name}").check(np.random.default_rng())
    assert all(r.ok for r in results), [f"{r.name}: {r.error:.2e}" for r in results if not r.ok]
