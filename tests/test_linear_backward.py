"""GEMM backward and GEMM + bias + GELU backward (issue #28) on the cpu backend and in PTX:
`tile_gemm.gemm` with either operand read transposed (`A_ORDER` / `B_ORDER` "F": a view,
no copy) against float64 NumPy for float16, bfloat16 and float32, on shapes no tile
divides; the linear layer's forward and backward (`examples.tile_linear`) likewise, and its
residual epilogue (an in-place residual refused at the launch) and the GELU's backward in a
product's epilogue (one kernel and split-K); every
kernel proven by `verdigris check` (no `vg.unsafe`); the sm_90a PTX of each transposition
streams both operands through TMA into wgmma with the transpose flags set (no transpose in
registers), assembled by ptxas without spills. Outputs start as NaN. The torch ops are
tested in tests/test_torch_linear.py, the GPU in tests/gpu/test_linear_backward_gpu.py."""
import re
import sys

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen
from verdigris import types as T
from verdigris.examples import report, tile_column_sums, tile_gemm
from verdigris.examples import tile_linear as lin
from verdigris.ir import ArrayType
from verdigris.tile import matmul

from tests.test_norm_backward import relative_error, storage
from tests.test_tile_mma import _ptxas_report

# storage dtype -> tolerance relative to the reference's largest value (inputs are exact in
# the dtype; the error is the result's one rounding, or float32's sums for float32)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
TILES = dict(BM=32, BN=32, BK=16)
ROW_TILE = dict(BR=8, BC=32)


def random(rng, shape, name):
    return rng.standard_normal(shape).astype(storage(name))


@pytest.mark.parametrize("name", TOLERANCE)
def test_gemm_backward_reads_the_transposed_operand_as_stored(rng, name):
    """C = A @ B with A (M, K), B (K, N): dA = dC @ B.T and dB = A.T @ dC, B and A read as
    stored; and the fourth order, both transposed."""
    m, k, n = 70, 45, 52
    a, b, dc = random(rng, (m, k), name), random(rng, (k, n), name), random(rng, (m, n), name)
    da, db, both = np.full((m, k), np.nan, np.float32), np.full((k, n), np.nan, np.float32), \
        np.full((n, m), np.nan, np.float32)
    lin.launch_gemm(dc, b, da, B_ORDER="F", tiles=TILES)
    lin.launch_gemm(a, dc, db, A_ORDER="F", tiles=TILES)
    lin.launch_gemm(b, a, both, A_ORDER="F", B_ORDER="F", tiles=TILES)  # (A @ B).T = B.T @ A.T
    a64, b64, dc64 = (v.astype(np.float64) for v in (a, b, dc))
    assert relative_error(da, dc64 @ b64.T) < 1e-5
    assert relative_error(db, a64.T @ dc64) < 1e-5
    assert relative_error(both, (a64 @ b64).T) < 1e-5


@pytest.mark.parametrize("name", TOLERANCE)
def test_linear_forward_and_backward_match_float64(rng, name):
    """y = x @ w.T + bias (w stored (N, K)), dx, dw, dbias; and without the bias."""
    m, k, n = 45, 40, 37
    x, w, dy = random(rng, (m, k), name), random(rng, (n, k), name), random(rng, (m, n), name)
    bias = random(rng, (1, n), name)
    y, plain = np.full((m, n), np.nan, x.dtype), np.full((m, n), np.nan, x.dtype)
    lin.launch_linear_forward(x, w, y, bias, tiles=TILES)
    lin.launch_linear_forward(x, w, plain, tiles=TILES)
    dx, dw = np.full((m, k), np.nan, x.dtype), np.full((n, k), np.nan, w.dtype)
    db = np.full(n, np.nan, bias.dtype)
    per_block, shape = lin.partials(m, n, ROW_TILE)
    lin.launch_linear_backward(dy, x, w, dx, dw, db, np.full(shape, np.nan, np.float32), per_block,
                               tiles=TILES, row_tile=ROW_TILE)
    x64, w64, dy64 = (v.astype(np.float64) for v in (x, w, dy))
    tol = TOLERANCE[name]
    assert relative_error(plain, x64 @ w64.T) < tol
    assert relative_error(y, x64 @ w64.T + bias.astype(np.float64)) < tol
    for got, want in ((dx, dy64 @ w64), (dw, dy64.T @ x64), (db, dy64.sum(0))):
        assert relative_error(got, want) < tol


@pytest.mark.parametrize("name", TOLERANCE)
def test_the_residual_is_added_in_the_epilogue_and_rounded_once(rng, name):
    """y = residual + x @ w.T + bias (`gemm_bias_residual`), against float64: within one
    rounding of y, where adding a rounded product to the residual would round twice."""
    m, k, n = 45, 40, 37
    x, w = random(rng, (m, k), name), random(rng, (n, k), name)
    bias, residual = random(rng, (1, n), name), random(rng, (m, n), name) * 4
    y = np.full((m, n), np.nan, x.dtype)
    lin.launch_linear_forward(x, w, y, bias, tiles=TILES, residual=residual)
    want = residual.astype(np.float64) + x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    assert relative_error(y, want) < TOLERANCE[name]


def test_a_residual_that_is_the_output_itself_is_refused_at_the_launch(rng):
    """In place (y += x @ w.T + bias) the residual is the array the kernel writes: the
    launch refuses the overlap (the op always writes a new tensor)."""
    x, w, bias, y = (random(rng, s, "float32") for s in ((40, 24), (36, 24), (1, 36), (40, 36)))
    with pytest.raises(vg.AliasError, match="residual"):
        lin.launch_linear_forward(x, w, y, bias, tiles=TILES, residual=y)


@pytest.mark.parametrize("name", TOLERANCE)
def test_gemm_bias_gelu_forward_and_backward_match_float64(rng, name):
    m, k, n = 50, 33, 70
    x, w, dy = random(rng, (m, k), name), random(rng, (n, k), name), random(rng, (m, n), name)
    bias = random(rng, (1, n), name)
    y, z, dz = (np.full((m, n), np.nan, x.dtype) for _ in range(3))
    dx, dw, db = np.full((m, k), np.nan, x.dtype), np.full((n, k), np.nan, np.float32), \
        np.full(n, np.nan, np.float32)
    lin.launch_linear_forward(x, w, y, bias, z, tiles=TILES)
    per_block, shape = lin.partials(m, n, ROW_TILE)
    lin.launch_gemm_bias_gelu_backward(dy, x, w, z, dz, dx, dw, db, np.full(shape, np.nan, np.float32),
                                       per_block, tiles=TILES, row_tile=ROW_TILE)
    tol = TOLERANCE[name]
    want_z = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    assert relative_error(z, want_z) < tol
    want_dz = dy.astype(np.float64) * lin.reference_gelu_grad(z)  # from the saved z
    assert relative_error(dz, want_dz) < tol
    for got, want in zip((y, dx, dw, db), lin.reference(x, w, bias, dy)):
        assert relative_error(got, want) < 2 * tol  # z and dz rounded on the way


@pytest.mark.parametrize("name", TOLERANCE)
@pytest.mark.parametrize("parts", [1, 3], ids=["one", "split-K"])
def test_the_gelu_backward_in_the_products_epilogue(rng, name, parts):
    """dz = (dy @ w) * gelu'(z) rounded once (an MLP's GELU backward in its projection's
    dx product), in one kernel or split along K (the second pass takes the GELU)."""
    m, k, n = 70, 100, 45  # dy (m, k) from the layer after the GELU, its weight w (k, n)
    dy, w, z = random(rng, (m, k), name), random(rng, (k, n), name), random(rng, (m, n), name)
    dz = np.full((m, n), np.nan, dy.dtype)
    workspace = None if parts == 1 else \
        np.full(tile_gemm.workspace_shape(m, n, parts, TILES), np.nan, np.float32)
    lin.launch_gemm_gelu_backward(dy, w, z, dz, tiles=TILES, workspace=workspace)
    want = dy.astype(np.float64) @ w.astype(np.float64) * lin.reference_gelu_grad(z)
    assert relative_error(dz, want) < TOLERANCE[name]


def test_float64_computes_in_float64(rng):
    m, k, n = 20, 24, 18
    x, w, dy, bias = (rng.standard_normal(s) for s in ((m, k), (n, k), (m, n), (1, n)))
    y, z, dz, dx, dw = (np.full(s, np.nan) for s in ((m, n), (m, n), (m, n), (m, k), (n, k)))
    db = np.full(n, np.nan)
    lin.launch_linear_forward(x, w, y, bias, z, tiles=TILES)
    per_block, shape = lin.partials(m, n, ROW_TILE)
    lin.launch_gemm_bias_gelu_backward(dy, x, w, z, dz, dx, dw, db, np.full(shape, np.nan), per_block,
                                       tiles=TILES, row_tile=ROW_TILE)
    for got, want in zip((y, dx, dw, db), lin.reference(x, w, bias, dy)):
        assert relative_error(got, want) < 1e-12


def test_the_example_checks_itself(rng):
    assert report(lin.check(rng))


def test_bias_gradients_are_the_same_bit_for_bit(rng):
    m, n = 300, 40
    dy = random(rng, (m, n), "float32")
    per_block, shape = lin.partials(m, n, ROW_TILE)
    runs = []
    for _ in range(2):
        db = np.full(n, np.nan, np.float32)
        tile_column_sums.launch_two_pass_column_sums(dy, db, np.full(shape, np.nan, np.float32),
                                                     per_block, **ROW_TILE)
        runs.append(db)
    assert per_block % ROW_TILE["BR"] == 0 and shape[0] > 1
    assert np.array_equal(runs[0], runs[1]) and relative_error(runs[0], dy.astype(np.float64).sum(0)) < 1e-5


def test_the_kernels_are_proven():
    """`verdigris check` proves every kernel of the GEMM, the linear layer and the column
    sums, whose array parameters the GEMMs use only through the K-loop helper; split-K's
    too: each block stores its own tile of its own slice, no atomic, no `vg.unsafe`."""
    from verdigris.safety.scan import check_paths

    files = [sys.modules[m.__name__].__file__ for m in (tile_gemm, lin, tile_column_sums)]
    result = check_paths(files)
    assert result.status == 0, result.format()
    verdicts = dict(re.findall(r"kernel '(\w+)': (\w+)", result.format()))
    assert {verdicts[k] for k in ("gemm", "gemm_bias", "gemm_bias_gelu_forward", "gelu_backward",
                                  "row_block_sums", "column_sums", "gemm_split", "split_sum",
                                  "split_sum_bias", "split_sum_bias_gelu", "gemm_bias_residual",
                                  "split_sum_bias_residual", "gemm_gelu_backward",
                                  "split_sum_gelu_backward")} == {"proven"}


# ----------------------------------------------------------------------------- PTX

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def _a(dtype=T.bfloat16):
    return ArrayType(dtype, 2, "global", True, True)


def _ptx(kernel, specs, target="sm_90a") -> str:
    return codegen.compile_to_ptx(kernel.specialize_types(specs), target).ptx


@needs_ptxas
@pytest.mark.parametrize("a_order,b_order,flags", [("C", "C", "0, 1"), ("C", "F", "0, 0"),
                                                    ("F", "C", "1, 1"), ("F", "F", "1, 0")])
def test_sm90a_transposed_operands_are_wgmma_transpose_flags(a_order, b_order, flags):
    """wgmma's last two immediates are imm-trans-a and imm-trans-b: 1 where the operand in
    shared memory is M-major (A) or N-major (B), as a row-major B is. Both operands stream
    through TMA (no staging from registers), the block is warp-specialized and persistent,
    and ptxas assembles it without spills."""
    specs = dict(a=_a(), b=_a(), c=_a(), BM=128, BN=128, BK=64, A_ORDER=a_order, B_ORDER=b_order)
    ptx = _ptx(tile_gemm.gemm, specs)
    products = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 [^;]*, p, 1, 1, (\d, \d);", ptx)
    assert products and set(products) == {flags}
    (pipe,) = matmul.plan(tile_gemm.gemm.specialize_types(specs), "sm_90a").pipelines.values()
    assert pipe.accumulating and sorted(op.which for op in pipe.operands) == [0, 1]  # both by TMA
    assert [op.k_major for op in sorted(pipe.operands, key=lambda op: op.which)] == \
        [a_order == "C", b_order == "F"]
    assert ".maxntid 384" in ptx and "wgmma.wait_group.sync.aligned 1" in ptx
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report and "C7514" not in report


@needs_ptxas
def test_sm90a_residual_epilogue_keeps_the_streamed_persistent_product():
    """Reading the residual in the epilogue leaves the product as gemm_bias's: TMA-fed,
    warp-specialized wgmma whose tiles leave by TMA stores, without spills."""
    bf = _a()
    ptx = _ptx(lin.gemm_bias_residual, dict(a=bf, b=bf, bias=bf, residual=bf, c=bf, B_ORDER="F"))
    assert ".maxntid 384" in ptx and "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report and "C75" not in report


@needs_ptxas
def test_sm90a_gelu_backward_epilogue_keeps_the_streamed_persistent_product():
    """The GELU's backward in the product's epilogue: z read into the accumulator's
    registers (no exchange through shared memory), the product TMA-fed and
    warp-specialized, without spills."""
    bf = _a()
    ptx = _ptx(lin.gemm_gelu_backward, dict(a=bf, b=bf, z=bf, dz=bf))
    assert ".maxntid 384" in ptx and "wgmma.mma_async" in ptx
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report and "C75" not in report


@needs_ptxas
def test_sm80_reads_transposed_operands_with_ldmatrix_trans():
    ptx = _ptx(tile_gemm.gemm, dict(a=_a(), b=_a(), c=_a(), BM=128, BN=128, BK=64,
                                    A_ORDER="F", B_ORDER="C"), "sm_80")
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx and "wgmma" not in ptx
    codegen.assemble(ptx, "sm_80", optimize=False)


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_linear_kernels_assemble(target):
    bf = _a()
    cases = [(lin.gemm_bias, dict(a=bf, b=bf, bias=bf, c=bf, B_ORDER="F")),
             (lin.gemm_bias_gelu_forward, dict(a=bf, b=bf, bias=bf, c=bf, z=bf, B_ORDER="F")),
             (lin.gemm_bias_residual, dict(a=bf, b=bf, bias=bf, residual=bf, c=bf, B_ORDER="F")),
             (lin.gemm_gelu_backward, dict(a=bf, b=bf, z=bf, dz=bf)),
             (lin.gelu_backward, dict(dy=bf, z=bf, dz=bf, partial=_a(T.float32), ROWS=256, BR=16, BC=256))]
    for dtype in (np.float64, np.float32, storage("bfloat16")):  # the launchers' default tiles
        wide = _a(T.from_name(np.dtype(dtype).name))
        cases.append((tile_gemm.gemm, dict(a=wide, b=wide, c=wide, A_ORDER="F",
                                           **lin.gemm_tiles(np.zeros(1, dtype)))))
    for kernel, specs in cases:
        ptx = _ptx(kernel, specs, target)
        if target == "sm_90a" and kernel is not lin.gelu_backward and specs["a"].dtype == T.bfloat16:
            assert ".maxntid 384" in ptx and "wgmma" in ptx  # warp-specialized, TMA-fed
        codegen.assemble(ptx, target, optimize=False)
