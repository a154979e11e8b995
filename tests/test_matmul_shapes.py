"""Products over the LLM shape space (issue #29, `examples/tile_matmul_shapes.py`) on the cpu
backend and in PTX: every kind of plan (one kernel, split-K, swapped operands, both) for
16-bit and fp8 operands with per-row and per-128-block scales, on shapes no tile divides,
against float64 with outputs and workspaces poisoned (NaN); the heuristic's plans for
Llama-3's projections at small and large M; the candidates it hands the tuner (the
heuristic's first, distinct, each one the kernels take); `linear` choosing by a timer once
per shape and running the winner; split-K the same bits from run to run; the racy twin of
the scaled kernel's split (every part into one tile) refused; on sm_90a the swapped and fp8
kernels stream both operands by TMA into wgmma and assemble without spills. The GPU twin
is tests/gpu/test_matmul_shapes_gpu.py."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples import tile_gemm
from verdigris.examples import tile_matmul_shapes as ms
from verdigris.examples.tile_gemm import _narrow, available, output_tile
from verdigris.examples.tile_matmul_shapes import Plan
from verdigris.ir.nodes import ArrayType
from verdigris.tile import matmul

from tests.test_linear_backward import needs_ptxas
from tests.test_norm_backward import relative_error
from tests.test_tile_mma import _ptxas_report

needs_fp8 = pytest.mark.skipif(not available("float8_e4m3fn"), reason="needs ml_dtypes")
H100 = 132


def test_every_plan_kind_matches_float64(rng):
    results = ms.check(rng)
    assert len(results) == 8 + 16 * available("float8_e4m3fn")
    assert all(r.ok for r in results), [f"{r.name}: {r.error:.2e}" for r in results if not r.ok]


@pytest.mark.parametrize("m, n, k, dtype, sms, plan", [
    (1, 4096, 4096, "bfloat16", H100, Plan(128, 16, 64, parts=8, swapped=True)),    # decode: 32 tiles
    (16, 4096, 14336, "bfloat16", H100, Plan(128, 16, 64, parts=9, swapped=True)),  # 8B down
    (64, 28672, 4096, "bfloat16", H100, Plan(128, 64, 64, parts=2, swapped=True)),  # 224 tiles
    (256, 6144, 4096, "bfloat16", H100, Plan(128, 128, 64, parts=3)),               # 96 tiles
    (4096, 28672, 4096, "bfloat16", H100, Plan(128, 256, 64)),                      # many waves
    (16384, 8192, 28672, "bfloat16", H100, Plan(128, 256, 64)),                     # 70B down
    (1, 8192, 28672, "float8_e4m3fn", H100, Plan(128, 16, 128, parts=5, swapped=True)),
    (1, 4096, 4096, "bfloat16", 0, Plan(128, 16, 64, swapped=True)),                # cpu: no split
])
def test_heuristic_plans_for_llama_projections(m, n, k, dtype, sms, plan):
    assert ms.heuristic(m, n, k, dtype, sms) == plan


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (64, 6144, 4096), (100, 4096, 14336),
                                     (256, 8192, 8192), (4096, 57344, 8192)])
@pytest.mark.parametrize("dtype, recipe", [("bfloat16", None), ("float8_e4m3fn", "row"),
                                           ("float8_e4m3fn", "block")])
def test_candidates_start_with_the_heuristic_and_fit_the_kernels(m, n, k, dtype, recipe):
    plans = ms.candidates(m, n, k, dtype, H100, recipe)
    first = ms.heuristic(m, n, k, dtype, H100)
    assert plans[0] == first or (recipe == "block" and not first.swapped and plans[0].BN == 128)
    assert len(set(plans)) == len(plans) and 2 <= len(plans) <= 6
    assert all(p.parts <= vg.cdiv(k, p.BK) for p in plans)
    if recipe == "block":
        assert all(ms.takes_block_scales(p) for p in plans)


def test_linear_times_the_candidates_once_per_shape_and_runs_the_winner(rng, monkeypatch, tmp_path):
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ms, "_CHOSEN", {})
    monkeypatch.setattr(ms, "_multiprocessors", lambda: 4)
    m, n, k = 40, 72, 300
    plans = ms.candidates(m, n, k, "bfloat16", 4)
    slowest_first = iter(range(len(plans), 0, -1))
    timed = []

    def timer(run):
        run()
        timed.append(1)
        return next(slowest_first)  # the last candidate is the fastest

    (x, x64), (w, w64) = _narrow(rng, (m, k), "bfloat16"), _narrow(rng, (n, k), "bfloat16")
    for _ in range(2):
        y = np.full((m, n), np.nan, np.float32)
        ms.linear(x, w, y, timer=timer)
        assert relative_error(y, x64 @ w64.T) < 1e-5
    assert len(timed) == len(plans) and ms.choose(x, w, y) == plans[-1]
    monkeypatch.setattr(ms, "_CHOSEN", {})  # a new process: the choice comes from disk
    assert ms.choose(x, w, y, timer=timer) == plans[-1] and len(timed) == len(plans)


def test_linear_on_the_cpu_backend_runs_the_heuristics_plan(rng):
    (x, x64), (w, w64) = _narrow(rng, (3, 200), "bfloat16"), _narrow(rng, (50, 200), "bfloat16")
    y = np.full((3, 50), np.nan, np.float32)
    ms.linear(x, w, y)
    assert ms.choose(x, w, y) == ms.heuristic(3, 50, 200, "bfloat16", 0)
    assert relative_error(y, x64 @ w64.T) < 1e-5


@needs_fp8
def test_split_k_is_the_same_bits_from_run_to_run(rng):
    x, w, scales, want = ms.fp8_operands(rng, 9, 40, 700, "block")
    plan = Plan(32, 16, 128, parts=3, swapped=True)
    first, second = (ms.run_plan(x, w, plan, scales) for _ in range(2))
    assert np.array_equal(first, second) and relative_error(first, want) < 1e-5


@needs_fp8
def test_block_scales_refuse_a_tile_across_scale_blocks(rng):
    x, w, scales, _ = ms.fp8_operands(rng, 9, 40, 300, "block")
    with pytest.raises(ValueError, match="BK = 128"):
        ms.run_plan(x, w, Plan(32, 16, 64, swapped=True), scales)


@tile.kernel
def rowwise_parts_into_one_tile(p, q, p_scale, q_scale, out, BM: vg.constexpr = 32,
                                BN: vg.constexpr = 32, BK: vg.constexpr = 32):
    """Racy twin of gemm_rowwise: every part of K stores its scaled sum into tile (i, j)."""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = output_tile(p, q, i, j, BM, BN, BK, "C", "F", s, tile.num_blocks(2))
    acc = acc * tile.load(p_scale, index=(i, 0), shape=(BM, 1)) \
        * tile.load(q_scale, index=(0, j), shape=(1, BN))
    tile.store(out, index=(i, j), tile=acc)


@pytest.mark.parametrize("racy", [True, False])
def test_racy_twin_of_the_scaled_split_is_refused(rng, racy):
    (x, _), (w, _) = _narrow(rng, (40, 96), "float16"), _narrow(rng, (24, 96), "float16")
    scales = [np.ones(s, np.float32) for s in ((40, 1), (1, 24))]
    out = np.full(tile_gemm.workspace_shape(40, 24, 3, dict(BM=32)), np.nan, np.float32)
    kernel = rowwise_parts_into_one_tile if racy else ms.gemm_rowwise
    launch = lambda: kernel[2, 1, 3](x, w, *scales, out, BM=32, BN=32, BK=32)  # noqa: E731
    if racy:
        with pytest.raises(vg.SafetyError) as refused:
            launch()
        assert refused.value.code == "VG202" and np.isnan(out).all()
    else:
        launch()
        assert np.isfinite(out[:40]).all()


def _array(dtype):
    return ArrayType(dtype, 2, "global", True, True)


FP8 = T.from_name("float8_e4m3fn")
SCALED = dict(p=_array(FP8), q=_array(FP8), p_scale=_array(T.float32), q_scale=_array(T.float32),
              out=_array(T.bfloat16), BM=128, BK=128)


@needs_ptxas
@pytest.mark.parametrize("kernel, specs, accumulating", [
    (tile_gemm.gemm, dict(a=_array(T.bfloat16), b=_array(T.bfloat16), c=_array(T.bfloat16),
                          BM=128, BN=16, BK=64, B_ORDER="F", C_ORDER="F"), True),
    (ms.gemm_rowwise, dict(SCALED, BN=16, C_ORDER="F"), True),
    (ms.gemm_blockwise, dict(SCALED, BN=128), False),
    (ms.gemm_blockwise, dict(SCALED, BN=16, SWAPPED=True, C_ORDER="F"), False),
])
def test_sm90a_streams_both_operands_into_wgmma(kernel, specs, accumulating):
    """The swapped product (16 rows of x as wgmma's N) and the fp8 kernels: both operands
    by TMA (fp8 K-major), no spills; the block-scaled loop is not accumulating (each
    128-deep step is scaled before it is added)."""
    specialized = kernel.specialize_types(specs)
    (pipe,) = matmul.plan(specialized, "sm_90a").pipelines.values()
    assert sorted(op.which for op in pipe.operands) == [0, 1] and all(op.k_major for op in pipe.operands)
    assert pipe.accumulating == accumulating
    ptx = codegen.compile_to_ptx(specialized, "sm_90a").ptx
    assert "wgmma.mma_async" in ptx and "0 bytes spill stores" in _ptxas_report(ptx)
