"""Split-K GEMM (issue #29; deterministic, issue #28) on the cpu backend and in PTX:
`tile_gemm.gemm_split` (each block sums its part of K into its own slice of a float32
workspace) then `split_sum` (the slices added in a fixed order), through the launchers of
`examples.tile_linear` given a workspace, against float64 NumPy: every operand order, on
shapes no tile divides, K not a multiple of parts * BK, more parts than K tiles (the empty
parts' slices must be zeros: the workspace starts as NaN); the forward's bias, GELU and
residual epilogues and the backward; the same bits from run to run; `k_parts`, the chooser; the
torch op taking the split path where the chooser says so; sm_90a PTX still TMA-fed,
warp-specialized wgmma with TMA stores of the workspace, no spills, and sm_80 assembling.
The checker's proofs of the kernels are in tests/test_linear_backward.py's
test_the_kernels_are_proven, its racy twins' refusals here; the GPU twin is tests/gpu/test_linear_backward_gpu.py."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples import tile_gemm
from verdigris.examples.tile_gemm import output_tile
from verdigris.examples import tile_linear as lin
from verdigris.tile import matmul

from tests.test_linear_backward import TOLERANCE, _a, _ptx, needs_ptxas, random
from tests.test_norm_backward import relative_error
from tests.test_tile_mma import _ptxas_report

TILES = dict(BM=32, BN=32, BK=16)
M, K, N = 70, 150, 52  # 10 K tiles of 16, the last one partial


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


def workspace(m, n, parts):
    return poisoned(tile_gemm.workspace_shape(m, n, parts, TILES))


@pytest.mark.parametrize("name", TOLERANCE)
@pytest.mark.parametrize("parts", [2, 3, 13])  # 13: more parts than K tiles, 3 empty
def test_split_k_matches_float64_in_every_order(rng, name, parts):
    """dA = dC @ B.T, dB = A.T @ dC and C = A @ B, split along K: float32 results within
    float32's rounding of the float64 reference (inputs exact in their dtype)."""
    a, b, dc = random(rng, (M, K), name), random(rng, (K, N), name), random(rng, (M, N), name)
    c, da, db = poisoned((M, N)), poisoned((M, K)), poisoned((K, N))
    lin.launch_gemm(a, b, c, tiles=TILES, workspace=workspace(M, N, parts))
    lin.launch_gemm(dc, b, da, B_ORDER="F", tiles=TILES, workspace=workspace(M, K, parts))
    lin.launch_gemm(a, dc, db, A_ORDER="F", tiles=TILES, workspace=workspace(K, N, parts))
    a64, b64, dc64 = (v.astype(np.float64) for v in (a, b, dc))
    for got, want in ((c, a64 @ b64), (da, dc64 @ b64.T), (db, a64.T @ dc64)):
        assert relative_error(got, want) < 1e-5


@tile.kernel
def split_into_one_slice(a, b, workspace, BM: vg.constexpr = 32, BN: vg.constexpr = 32,
                         BK: vg.constexpr = 16):
    """Racy twin of gemm_split: every part stores into the same tile (i, j)."""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    tile.store(workspace, index=(i, j), tile=output_tile(a, b, i, j, BM, BN, BK, "C", "C", s, tile.num_blocks(2)))


@tile.kernel
def split_with_int32_slices(a, b, workspace, BM: vg.constexpr = 32, BN: vg.constexpr = 32,
                            BK: vg.constexpr = 16):
    """Racy twin of gemm_split: the slice's first tile s * tiles in int32, which wraps on a
    large enough grid, so two blocks' tiles meet."""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    tile.store(workspace, index=(s * tile.num_blocks(0) + i, j),
               tile=output_tile(a, b, i, j, BM, BN, BK, "C", "C", s, tile.num_blocks(2)))


@pytest.mark.parametrize("racy", [split_into_one_slice, split_with_int32_slices])
def test_racy_twins_are_refused_before_they_run(rng, racy):
    a, b = random(rng, (M, K), "float32"), random(rng, (K, N), "float32")
    ws = workspace(M, N, 3)
    with pytest.raises(vg.SafetyError) as refused:
        racy[3, 2, 3](a, b, ws)
    assert refused.value.code == "VG202" and np.isnan(ws).all()  # nothing ran


def test_split_k_is_the_same_bit_for_bit_from_run_to_run(rng):
    a, dc = random(rng, (300, 40), "float32"), random(rng, (300, 24), "float32")
    runs = []
    for _ in range(2):
        db = poisoned((40, 24))
        lin.launch_gemm(a, dc, db, A_ORDER="F", tiles=TILES, workspace=workspace(40, 24, 4))
        runs.append(db)
    assert np.array_equal(runs[0], runs[1])
    assert relative_error(runs[0], a.astype(np.float64).T @ dc.astype(np.float64)) < 1e-5


def test_linear_forward_and_backward_split_along_k(rng):
    """The forward's epilogues (bias; bias + GELU saving z; bias + residual) after the slices' sum, and the
    GELU layer's backward with dx and dw both split."""
    name = "bfloat16"
    x, w, dy = random(rng, (M, K), name), random(rng, (N, K), name), random(rng, (M, N), name)
    bias = random(rng, (1, N), name)
    residual = random(rng, (M, N), name)
    plain, y, gelu_y, z, summed = (poisoned((M, N), x.dtype) for _ in range(5))
    lin.launch_linear_forward(x, w, plain, bias, tiles=TILES, workspace=workspace(M, N, 3))
    lin.launch_linear_forward(x, w, gelu_y, bias, z, tiles=TILES, workspace=workspace(M, N, 2))
    lin.launch_linear_forward(x, w, summed, bias, tiles=TILES, workspace=workspace(M, N, 3), residual=residual)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    tol = TOLERANCE[name]
    assert relative_error(plain, x64 @ w64.T + bias.astype(np.float64)) < tol
    assert relative_error(summed, residual.astype(np.float64) + x64 @ w64.T + bias.astype(np.float64)) < tol
    assert relative_error(z, x64 @ w64.T + bias.astype(np.float64)) < tol
    dz, dx, dw, db = poisoned((M, N), x.dtype), poisoned((M, K)), poisoned((N, K)), poisoned(N)
    per_block, shape = lin.partials(M, N, dict(BR=8, BC=32))
    lin.launch_gemm_bias_gelu_backward(dy, x, w, z, dz, dx, dw, db, poisoned(shape), per_block,
                                       tiles=TILES, row_tile=dict(BR=8, BC=32),
                                       workspaces=(workspace(M, K, 2), workspace(N, K, 5)))
    for got, want in zip((gelu_y, dx, dw, db), lin.reference(x, w, bias, dy)):
        assert relative_error(got, want) < 2 * tol  # z and dz rounded on the way


@pytest.mark.parametrize("m, n, k, multiprocessors, parts", [
    (768, 3072, 8192, 132, 2),    # GPT-2's MLP weight gradient on an H100: 144 tiles
    (768, 768, 8192, 132, 8),     # 36 tiles: 8 parts give 288, two waves
    (768, 768, 2048, 132, 4),     # ... but no part shorter than MIN_PART_K
    (8192, 3072, 768, 132, 1),    # the forward: 1536 tiles, many waves
    (8192, 768, 3072, 132, 1),    # dx: 384 tiles, two waves and more
    (128, 3072, 768, 132, 1),     # a few rows, but K too short to split
    (768, 3072, 8192, 0, 1),      # no GPU (the cpu backend)
    (0, 3072, 8192, 132, 1),      # an empty output
])
def test_k_parts_splits_only_products_of_few_tiles(m, n, k, multiprocessors, parts):
    assert lin.k_parts(m, n, k, lin.GEMM_TILES, multiprocessors) == parts
    shape = lin.split_workspace(m, n, k, lin.GEMM_TILES, multiprocessors)
    assert shape == (None if parts == 1 else (parts * -(-m // 128) * 128, n))


def test_the_torch_op_splits_where_the_chooser_says(rng, monkeypatch):
    """With 4 multiprocessors the weight gradient of 1100 rows (one 48 x 64 output tile)
    is split in 2: the op allocates the workspace and the gradients still match torch."""
    torch = pytest.importorskip("torch")
    from verdigris.ops import linear as op

    monkeypatch.setattr(op, "_multiprocessors", lambda t: 4)
    split = []
    real = lin.launch_gemm

    def watched(*args, **kwargs):
        split.append(kwargs.get("workspace") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(lin, "launch_gemm", watched)
    x, w, b = (torch.from_numpy(rng.standard_normal(s)).requires_grad_() for s in ((1100, 64), (48, 64), (48,)))
    dy = torch.from_numpy(rng.standard_normal((1100, 48)))
    got = torch.autograd.grad(op.linear(x, w, b), (x, w, b), dy)
    want = torch.autograd.grad(torch.nn.functional.linear(x, w, b), (x, w, b), dy)
    assert split == [False, True]  # dx over 48 features: one kernel; dw over 1100 rows: split
    for g, expected in zip(got, want):
        assert float((g - expected).abs().max() / expected.abs().max()) < 1e-12


# ----------------------------------------------------------------------------- PTX

@needs_ptxas
@pytest.mark.parametrize("a_order,b_order", [("F", "C"), ("C", "F")])
def test_sm90a_split_k_keeps_the_fast_path(a_order, b_order):
    """The split kernel's K loop streams both operands by TMA into wgmma, warp-specialized
    and persistent; its float32 tiles leave by TMA stores; no spills, no serialized wgmma."""
    specs = dict(a=_a(), b=_a(), workspace=_a(T.float32), BM=128, BN=128, BK=64,
                 A_ORDER=a_order, B_ORDER=b_order)
    ptx = _ptx(tile_gemm.gemm_split, specs)
    plan = matmul.plan(tile_gemm.gemm_split.specialize_types(specs), "sm_90a")
    (pipe,) = plan.pipelines.values()
    assert pipe.accumulating and sorted(op.which for op in pipe.operands) == [0, 1] and plan.persistent
    assert [m.param for m in plan.tensor_maps] == ["a", "b", "workspace"] and plan.stores
    assert "wgmma.mma_async" in ptx and ".maxntid 384" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx  # the workspace's TMA stores
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report and "C75" not in report  # C7514, C7517, C7508


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_split_k_kernels_assemble(target):
    bf, f32 = _a(), _a(T.float32)
    cases = [(tile_gemm.split_sum, dict(workspace=f32, c=bf, parts=T.int64)),
             (lin.split_sum_bias, dict(workspace=f32, parts=T.int64, bias=bf, c=bf)),
             (lin.split_sum_bias_gelu, dict(workspace=f32, parts=T.int64, bias=bf, c=bf, z=bf)),
             (lin.split_sum_bias_residual, dict(workspace=f32, parts=T.int64, bias=bf, residual=bf, c=bf))]
    if target == "sm_80":
        cases.append((tile_gemm.gemm_split, dict(a=bf, b=bf, workspace=f32, A_ORDER="F")))
    for kernel, specs in cases:
        ptx = _ptx(kernel, specs, target)
        if kernel is tile_gemm.gemm_split:
            assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx and "cp.async.cg" in ptx
        codegen.assemble(ptx, target, optimize=False)
