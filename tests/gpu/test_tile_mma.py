"""tile.mma / tile.dot on the GPU against float64 NumPy: every example (GEMM in bfloat16,
float16 and fp8, batched, bias + GELU, flash attention causal and not, head dims 64 and
128), edge tiles, transposed operands (order="F" loads: a GEMM's backward), tf32 and
float32, on the device's own target (sm_90a on an H100/H200: TMA + wgmma, warp-specialized
and persistent; a row pitch TMA cannot describe takes the variant without it) and on sm_80
code (ldmatrix + mma.sync, the K loop streamed by cp.async; a row pitch that is not a
multiple of 16 bytes takes the synchronous copies)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import test_tile_mma
import verdigris as vg
from verdigris.examples import report, tile_attention, tile_gemm
from verdigris.examples.tile_gemm import _narrow, gemm, gemm_nt, run
from verdigris.runtime import launch_cuda

pytestmark = pytest.mark.gpu


@pytest.fixture(params=["native", "sm_80"])
def target(request, monkeypatch):
    """The device's own target, or sm_80 code. A kernel keeps its compiled forms per device,
    not per target, so the sm_80 runs start every kernel uncompiled (and leave the native
    forms as they were): else an earlier native run's code would serve them."""
    if request.param == "sm_80":
        monkeypatch.setattr(launch_cuda, "ptx_target", lambda cc: "sm_80")
        request.getfixturevalue("uncompiled")
    return request.param


def test_examples(rng, target):
    assert report(tile_gemm.check(rng))
    assert report(tile_attention.check(rng, dims=(64, 128), seq=300, tiles=(128, 64),
                                       backward=(None, None)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
# (2048, 3072, 520): more tiles than multiprocessors (a persistent block runs several, its
# stages' phases and epilogue buffers carried across them), K not a multiple of BK.
@pytest.mark.parametrize("sizes", [(1024, 1024, 1024), (1000, 776, 328), (130, 260, 72), (2048, 3072, 520)])
@pytest.mark.parametrize("tiles", [(128, 256, 64), (128, 128, 64), (64, 64, 32)])
def test_gemm(rng, target, dtype, sizes, tiles):
    m, n, k = sizes
    bm, bn, bk = tiles
    a, a64 = _narrow(rng, (m, k), dtype)
    b, b64 = _narrow(rng, (k, n), dtype)
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm, (vg.cdiv(m, bm), vg.cdiv(n, bn)), a, b, c, BM=bm, BN=bn, BK=bk)[2]
    want = a64 @ b64
    assert np.abs(c - want).max() <= 1e-5 * np.abs(want).max() * math.sqrt(k / 64)


@pytest.mark.parametrize("orders", ["CF", "FC", "FF"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sizes", [(1000, 776, 328), (2048, 3072, 520)])
@pytest.mark.parametrize("tiles", [(128, 256, 64), (128, 128, 64), (64, 64, 32)])
def test_gemm_with_transposed_operands(rng, target, orders, dtype, sizes, tiles):
    """A GEMM's backward (dA = dC @ B.T: "CF", dB = A.T @ dC: "FC"), the operand read as
    stored through `order="F"`: on sm_90a TMA copies it as it lies and wgmma reads it
    with its transpose flag (an M-major A, a K-major B); on sm_80 ldmatrix.trans."""
    (m, n, k), (bm, bn, bk) = sizes, tiles
    a_order, b_order = orders
    a, a64 = _narrow(rng, (m, k) if a_order == "C" else (k, m), dtype)
    b, b64 = _narrow(rng, (k, n) if b_order == "C" else (n, k), dtype)
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm, (vg.cdiv(m, bm), vg.cdiv(n, bn)), a, b, c, BM=bm, BN=bn, BK=bk,
            A_ORDER=a_order, B_ORDER=b_order)[2]
    want = (a64 if a_order == "C" else a64.T) @ (b64 if b_order == "C" else b64.T)
    assert np.abs(c - want).max() <= 1e-5 * np.abs(want).max() * math.sqrt(k / 64)


@pytest.mark.parametrize("blocks", [1, 7, 132])
@pytest.mark.parametrize("group", [1, 3, 8])
def test_gemm_in_grouped_order_on_a_persistent_grid(rng, target, blocks, group):
    """`tile_gemm.gemm_grouped`: each block walks every `blocks`-th output tile in grouped
    order (the race checker proves it, no `vg.unsafe`); 1000 rows of 128 make 8 block rows,
    so groups of 3 end with a group of 2."""
    m, n, k = 1000, 776, 328
    a, a64 = _narrow(rng, (m, k), "float16")
    b, b64 = _narrow(rng, (k, n), "float16")
    c = np.full((m, n), np.nan, np.float32)
    c = run(tile_gemm.gemm_grouped, blocks, a, b, c, BM=128, BN=128, BK=64, GROUP=group)[2]
    want = a64 @ b64
    assert np.abs(c - want).max() <= 1e-5 * np.abs(want).max() * math.sqrt(k / 64)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemm_on_views_ending_inside_a_16_byte_chunk(rng, target, dtype):
    """Rows 16-byte aligned, K and N not multiples of 8: a row's last 16-byte chunk lies
    partly outside the view (sm_80 code copies only the part inside, cp.async's src-size);
    the columns past the views hold NaN, so reading one would show."""
    m, n, k = 200, 250, 100
    a_full, _ = _narrow(rng, (m, 104), dtype)
    b_full, _ = _narrow(rng, (k, 256), dtype)
    a_full[:, k:] = np.nan
    b_full[:, n:] = np.nan
    a64, b64 = a_full[:, :k].astype(np.float64), b_full[:, :n].astype(np.float64)
    a, b = vg.asarray(a_full)[:, :k], vg.asarray(b_full)[:, :n]
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm, (vg.cdiv(m, 64), vg.cdiv(n, 64)), a, b, c, BM=64, BN=64, BK=32)[2]
    want = a64 @ b64
    assert np.abs(c - want).max() <= 1e-5 * np.abs(want).max() * math.sqrt(k / 64)


@pytest.mark.parametrize("formats", [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e4m3fn", "float8_e5m2")])
@pytest.mark.parametrize("tiles", [(128, 256, 128), (128, 128, 128)])
def test_gemm_fp8(rng, target, tiles, formats):
    m, n, k = 512, 768, 1024
    bm, bn, bk = tiles
    a, a64 = _narrow(rng, (m, k), formats[0])
    bt, bt64 = _narrow(rng, (n, k), formats[1])
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm_nt, (vg.cdiv(m, bm), vg.cdiv(n, bn)), a, bt, c, 0.25, BM=bm, BN=bn, BK=bk)[2]
    want = 0.25 * a64 @ bt64.T
    # wgmma adds fp8 products in the tensor cores' own narrower accumulator (about 2e-3
    # relative at K = 1024, as measured); mma.sync (sm_80 code) adds them in float32.
    error = np.linalg.norm(c - want) / np.linalg.norm(want)
    assert error <= (5e-3 if target == "native" else 1e-6), error


@pytest.mark.parametrize("kinds", test_tile_mma.FP8_CHAINS, ids=["e4m3", "e5m2-e4m3"])
def test_fp8_product_of_a_product(rng, target, kinds):
    """A product's fp8 A from the registers of the product before (sm_90a: rounded pairs
    exchanged within quads into wgmma's k32 fragments, one warp group's two 64-row
    blocks). A key misplaced would miss by about the whole; P summed in the tensor cores'
    narrower fp8 accumulator may round a few elements to the next fp8 value."""
    out, want = test_tile_mma.fp8_chain(rng, kinds)
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 3e-2


@pytest.mark.parametrize("formats", [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn")])
def test_gemm_fp8_with_b_row_major(rng, target, formats):
    """B stored (K, N): wgmma reads fp8 only K-major, so B passes through registers into
    shared memory transposed (it had no fp8 element type there: a KeyError)."""
    m, n, k = 300, 200, 256
    a, a64 = _narrow(rng, (m, k), formats[0])
    b, b64 = _narrow(rng, (k, n), formats[1])
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm, (vg.cdiv(m, 128), vg.cdiv(n, 128)), a, b, c, BM=128, BN=128, BK=64)[2]
    want = a64 @ b64
    error = np.linalg.norm(c - want) / np.linalg.norm(want)
    assert error <= (5e-3 if target == "native" else 1e-6), error


@pytest.mark.parametrize("kernel", [test_tile_mma.product_parts_added, test_tile_mma.product_parts_added_and_maxed])
def test_products_added_by_atomics(rng, target, kernel):
    """Split-K by atomic adds into a float32 (batch, M, N) array: on sm_90a the copy
    engine's bulk reductions (one kernel), or element by element (its twin, which also
    takes an atomic max); the sums match float64 whatever order the parts land in."""
    m, n, k, parts = 256, 384, 1024, 4
    a, b = (rng.standard_normal(shape).astype(np.float16) for shape in ((m, k), (k, n)))
    c = np.zeros((2, m, n), np.float32)
    c[1] = -np.inf
    got = vg.asarray(c)
    kernel[m // 128, n // 128, parts](vg.asarray(a), vg.asarray(b), got, PARTS=parts)
    got = got.numpy()
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got[0], want, rtol=2e-3, atol=2e-3 * math.sqrt(k))
    if kernel is test_tile_mma.product_parts_added_and_maxed:
        assert np.all(got[1] >= got[0] / parts - 1)  # the largest part's sum: at least the mean


def test_one_tile_as_both_operands(rng, target):
    """The stream's one copy of a tile that feeds A and B (test_tile_mma.gram_blocks)."""
    a = rng.standard_normal((512, 1000)).astype(np.float16)
    got = vg.asarray(np.full((512, 512), np.nan, np.float32))
    test_tile_mma.gram_blocks[4](vg.asarray(a), got)
    got, want = got.numpy(), a.astype(np.float64) @ a.astype(np.float64).T
    for i in range(4):
        block = np.s_[128 * i:128 * (i + 1), 128 * i:128 * (i + 1)]
        np.testing.assert_allclose(got[block], want[block], rtol=1e-3, atol=1e-3 * math.sqrt(1000))
