"""tile.mma / tile.dot: the cpu backend against float64 NumPy, the errors at the user's line,
the accumulator layouts and the shared-memory operand format, and the PTX of every
example on sm_80 (ldmatrix + mma.sync) and sm_90a (TMA + mbarrier + wgmma), assembled by
ptxas. `tests/gpu/test_tile_mma.py` runs the same kernels on the GPU."""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from itertools import product
from pathlib import Path

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.errors import CompileError
from verdigris.examples import report, tile_attention, tile_gemm
from verdigris.examples.tile_gemm import available, batched_gemm, gemm, gemm_bias_gelu, gemm_nt
from verdigris.ir import ArrayType
from verdigris.ir import tiles as X
from verdigris.tile import matmul, mma_layout, mma_plan, operand
from verdigris.tile.mma_layout import GroupGeometry, SyncGeometry
from verdigris.tile.ptx import WGMMA

from located import assert_points_at

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


@tile.kernel
def dot_any(a, b, c, TA: vg.constexpr, TB: vg.constexpr, TF32: vg.constexpr,
            M: vg.constexpr, N: vg.constexpr, K: vg.constexpr):
    """One block: c = a @ b with the operands stored transposed when TA / TB."""
    x = tile.load(a, index=(0, 0), shape=(K, M) if TA else (M, K))
    y = tile.load(b, index=(0, 0), shape=(N, K) if TB else (K, N))
    tile.store(c, index=(0, 0), tile=tile.dot(x.T if TA else x, y.T if TB else y, allow_tf32=TF32))


def _tf32(x: np.ndarray) -> np.ndarray:
    bits = (x.astype(np.float32).view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


# ----------------------------------------------------------------------------- cpu backend


def test_examples_on_the_cpu_backend(rng):
    assert report(tile_gemm.check(rng))
    assert report(tile_attention.check(rng))


@pytest.mark.parametrize("ta,tb", list(product([False, True], repeat=2)))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_dot_transposes_and_dtypes(rng, ta, tb, dtype):
    m, n, k = 24, 40, 56
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    c = np.full((m, n), np.nan, T.from_name(T.promote(T.from_name(dtype), T.float32).name).np)
    dot_any[1](a, b, c, TA=ta, TB=tb, TF32=False, M=m, N=n, K=k)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    tolerance = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(c, want, rtol=tolerance, atol=tolerance * np.abs(want).max())


def test_tf32_rounds_the_operands_to_nearest_ties_away(rng):
    m, n, k = 16, 16, 64
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c, exact = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
    dot_any[1](a, b, c, TA=False, TB=False, TF32=True, M=m, N=n, K=k)
    dot_any[1](a, b, exact, TA=False, TB=False, TF32=False, M=m, N=n, K=k)
    want = _tf32(a) @ _tf32(b)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert np.abs(c - exact).max() > 1e-4 * np.abs(want).max()  # tf32 is not float32


@pytest.mark.parametrize("sizes,tiles", [((200, 136, 272), (64, 64, 32)),
                                         ((33, 17, 5), (32, 16, 16)),
                                         ((64, 64, 64), (64, 64, 64)),
                                         ((100, 90, 70), (48, 40, 24))])
def test_gemm_edge_tiles_and_odd_tile_shapes(rng, sizes, tiles):
    m, n, k = sizes
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float32)
    bm, bn, bk = tiles
    gemm[vg.cdiv(m, bm), vg.cdiv(n, bn)](a, b, c, BM=bm, BN=bn, BK=bk)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.skipif(not available("float8_e5m2"), reason="fp8 arrays need ml_dtypes")
def test_fp8_mixes_its_two_formats(rng):
    m, n, k = 32, 48, 64
    a = rng.standard_normal((m, k)).astype(np.float32).astype(T.float8_e4m3fn.np)
    bt = rng.standard_normal((n, k)).astype(np.float32).astype(T.float8_e5m2.np)
    c = np.full((m, n), np.nan, np.float32)
    gemm_nt[vg.cdiv(m, 32), vg.cdiv(n, 16)](a, bt, c, 2.0, BM=32, BN=16, BK=32)
    want = 2.0 * a.astype(np.float64) @ bt.astype(np.float64).T
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# ----------------------------------------------------------------------------- errors


@tile.kernel
def k_mismatch(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 32))
    y = tile.load(b, index=(0, 0), shape=(16, 16))
    tile.store(c, index=(0, 0), tile=tile.dot(x, y))  # MARK-k


@tile.kernel
def mixed_dtypes(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16))
    y = tile.load(b, index=(0, 0), shape=(16, 16))
    tile.store(c, index=(0, 0), tile=tile.dot(x, y))  # MARK-mixed


@tile.kernel
def int_operands(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16))
    tile.store(c, index=(0, 0), tile=tile.dot(x, x))  # MARK-int


@tile.kernel
def too_large(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(256, 16))
    y = tile.load(b, index=(0, 0), shape=(16, 256))
    tile.store(c, index=(0, 0), tile=tile.dot(x, y))  # MARK-large


@tile.kernel
def half_accumulator(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16))
    acc = tile.zeros((16, 16), vg.float16)
    tile.store(c, index=(0, 0), tile=tile.mma(x, x, acc))  # MARK-acc


@tile.kernel
def vector_operand(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16))
    v = tile.load(b, index=(0, 0), shape=(1, 16)).reshape((16,))
    tile.store(c, index=(0, 0), tile=tile.dot(x, v).reshape((16, 1)))  # MARK-rank


@tile.kernel
def bad_precision(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16))
    tile.store(c, index=(0, 0), tile=tile.dot(x, x, input_precision="tf64"))  # MARK-prec


def _f(d):
    return ArrayType(d, 2, "global", True, True)


@pytest.mark.parametrize("kernel,dtypes,marker,words", [
    (k_mismatch, (T.float16, T.float16), "MARK-k", "inner sizes 32 and 16 differ"),
    (mixed_dtypes, (T.float16, T.float32), "MARK-mixed", "both operands need one dtype"),
    (int_operands, (T.int32, T.int32), "MARK-int", "does not multiply int32"),
    (too_large, (T.float16, T.float16), "MARK-large", "more than a block holds in registers"),
    (half_accumulator, (T.float16, T.float16), "MARK-acc", "accumulates float16 products in float32"),
    (vector_operand, (T.float16, T.float16), "MARK-rank", "multiplies 2-d tiles"),
    (bad_precision, (T.float32, T.float32), "MARK-prec", "input_precision must be one of"),
])
def test_errors_point_at_the_product(kernel, dtypes, marker, words):
    with pytest.raises(CompileError) as err:
        kernel.specialize_types(dict(a=_f(dtypes[0]), b=_f(dtypes[1]), c=_f(T.float32)))
    assert words in str(err.value)
    assert_points_at(err.value, marker, __file__)


# ----------------------------------------------------------------------------- layouts, format


def _elements(layout) -> list:
    """(register, lane, warp) -> element coordinates, for every combination."""
    out = []
    for r, lane, warp in product(range(layout.num_regs), range(32), range(1 << len(layout.warps))):
        c = list(layout.register_coords(r))
        for bits, bases in ((lane, layout.lanes), (warp, layout.warps)):
            for i, basis in enumerate(bases):
                if bits >> i & 1:
                    c = [x + y for x, y in zip(c, basis)]
        out.append(tuple(c))
    return out


@pytest.mark.parametrize("geometry", [SyncGeometry(128, 128, 8), SyncGeometry(64, 256, 4),
                                      SyncGeometry(16, 64, 8), GroupGeometry(128, 256, 8),
                                      GroupGeometry(64, 128, 8), GroupGeometry(256, 128, 8),
                                      GroupGeometry(128, 512, 8)])
def test_accumulator_layouts_cover_every_element(geometry):
    layout = geometry.layout()
    held = _elements(layout)
    m, n = layout.shape
    assert set(held) == set(product(range(m), range(n)))
    copies = (1 << len(layout.warps)) * 32 * layout.num_regs // (m * n)
    assert all(held.count(e) == copies for e in [(0, 0), (m - 1, n - 1), (m // 2, 3)])


def test_wgmma_layout_is_the_fragment_of_the_instruction():
    """d[4j + 2h + e] of thread t of warp w: row 16w + 8h + t/4, column 8j + 2(t%4) + e."""
    layout = GroupGeometry(64, 32, 4).layout()
    for r, lane, warp in product(range(16), range(32), range(4)):
        j, h, e = r // 4, r >> 1 & 1, r & 1
        c = list(layout.register_coords(r))
        for bits, bases in ((lane, layout.lanes), (warp, layout.warps)):
            for i, basis in enumerate(bases):
                if bits >> i & 1:
                    c = [x + y for x, y in zip(c, basis)]
        assert tuple(c) == (16 * warp + 8 * h + lane // 4, 8 * j + 2 * (lane % 4) + e)


@pytest.mark.parametrize("rows,cols,size", [(64, 64, 2), (128, 32, 2), (64, 256, 2),
                                            (32, 128, 1), (16, 8, 4), (64, 16, 2)])
def test_swizzled_format_is_a_permutation_of_16_byte_chunks(rows, cols, size):
    stored = operand.Stored(rows, cols, size)
    offsets = [stored.offset(r, c) for r in range(rows) for c in range(cols)]
    assert sorted(offsets) == list(range(0, rows * cols * size, size))
    chunk = 16 // size
    for r, c in product(range(rows), range(0, cols, chunk)):  # a chunk stays contiguous
        assert [stored.offset(r, c + i) for i in range(min(chunk, cols))] == \
            list(range(stored.offset(r, c), stored.offset(r, c) + min(chunk, cols) * size, size))
    if stored.panel_bytes >= 32 and rows >= 8:  # 8 rows at one column: 8 bank groups
        groups = {stored.offset(r, 0) // 16 % 8 for r in range(8)}
        assert len(groups) == 8


# ----------------------------------------------------------------------------- PTX


def _a(dtype, ndim=2):
    return ArrayType(dtype, ndim, "global", True, True)


PTX_CASES = {
    "gemm_bf16": (gemm, dict(a=_a(T.bfloat16), b=_a(T.bfloat16), c=_a(T.bfloat16), BM=128, BN=256, BK=64)),
    "gemm_f16_small": (gemm, dict(a=_a(T.float16), b=_a(T.float16), c=_a(T.float32), BM=64, BN=64, BK=32)),
    "gemm_nt_fp8": (gemm_nt, dict(a=_a(T.float8_e4m3fn), bt=_a(T.float8_e4m3fn), c=_a(T.bfloat16),
                                  scale=T.float32, BM=128, BN=128, BK=128)),
    "gemm_fp8_b_row_major": (gemm, dict(a=_a(T.float8_e5m2), b=_a(T.float8_e4m3fn), c=_a(T.float32),
                                        BM=128, BN=128, BK=64)),
    "gemm_bias_gelu": (gemm_bias_gelu, dict(a=_a(T.bfloat16), b=_a(T.bfloat16), bias=_a(T.bfloat16),
                                            c=_a(T.bfloat16), BM=128, BN=128, BK=64)),
    "gemm_grouped": (tile_gemm.gemm_grouped, dict(a=_a(T.float16), b=_a(T.float16), c=_a(T.float32),
                                                  BM=128, BN=128, BK=64, GROUP=8)),
    "batched": (batched_gemm, dict(a=_a(T.float16, 3), b=_a(T.float16, 3), c=_a(T.float16, 3),
                                   BM=64, BN=64, BK=32)),
    "dot_tf32": (dot_any, dict(a=_a(T.float32), b=_a(T.float32), c=_a(T.float32), TA=False, TB=True,
                               TF32=True, M=64, N=64, K=32)),
    "dot_f32": (dot_any, dict(a=_a(T.float32), b=_a(T.float32), c=_a(T.float32), TA=True, TB=False,
                              TF32=False, M=32, N=32, K=16)),
    **{f"attention_d{d}_{'causal' if c else 'full'}": (tile_attention.attention, dict(
        q=_a(T.bfloat16, 4), k=_a(T.bfloat16, 4), v=_a(T.bfloat16, 4), o=_a(T.bfloat16, 4),
        lse=_a(T.float32, 3), scale=T.float32, CAUSAL=c, BM=128, BN=64, D=d)) for d in (64, 128) for c in (False, True)},
}


@needs_ptxas
@pytest.mark.parametrize("name", sorted(PTX_CASES))
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_every_product_assembles(name, target):
    kernel, specs = PTX_CASES[name]
    ptx = codegen.compile_to_ptx(kernel.specialize_types(specs), target).ptx
    codegen.assemble(ptx, target, optimize=False)


def _ptx(name, target):
    kernel, specs = PTX_CASES[name]
    return codegen.compile_to_ptx(kernel.specialize_types(specs), target).ptx


@needs_ptxas
def test_sm90a_fp8_products_name_each_operand_format():
    """e5m2 times e4m3: the instruction names A's format, then B's (it named A's twice)."""
    ptx = _ptx("gemm_fp8_b_row_major", "sm_90a")
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e5m2\.e4m3 ", ptx)
    assert ".e4m3.e4m3" not in ptx and ".e5m2.e5m2" not in ptx


@needs_ptxas
def test_sm90a_gemm_streams_through_tma_into_wgmma():
    ptx = _ptx("gemm_bf16", "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity" in ptx and "wgmma.wait_group.sync.aligned 1" in ptx
    assert ptx.count(".param .align 64 .b8") == 3  # A, B and C's tensor maps, by value
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx  # C by TMA
    # a producer warp group (registers to the consumers), and a persistent grid
    assert ".maxntid 384" in ptx and ".minnctapersm 1" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert "bar.sync 1, 256" not in ptx or "bar.sync \t0" in ptx
    codegen.assemble(ptx, "sm_90a", optimize=False)
    kernel = gemm.specialize_types(PTX_CASES["gemm_bf16"][1])
    plan = matmul.plan(kernel, "sm_90a")
    (pipe,) = plan.pipelines.values()
    assert pipe.stages == 4 and pipe.accumulating and plan.dynamic_shared <= matmul.MAX_DYNAMIC_SHARED
    assert plan.persistent and plan.block_threads == 384 and len(plan.stores) == 1
    assert [m.box for m in plan.tensor_maps] == [(128, 64), (64, 64), (64, 64)]


def _ptxas_report(ptx: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "k.ptx")
        source.write_text(ptx)
        done = subprocess.run([codegen.ptxas_path(), "-arch=sm_90a", "-v", str(source), "-o",
                               str(Path(tmp, "k.cubin"))], capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


@needs_ptxas
@pytest.mark.parametrize("name", ["gemm_bf16", "gemm_bias_gelu", "gemm_nt_fp8", "attention_d128_full",
                                  "attention_d64_causal"])
def test_sm90a_products_stay_asynchronous(name):
    """ptxas neither serializes the wgmmas (C7514: an instruction touching accumulators
    while one is in flight, e.g. on a path into the loop's final wait that skips the loop),
    nor injects waits (C7517), nor ignores setmaxnreg (C7508), nor spills."""
    report = _ptxas_report(_ptx(name, "sm_90a"))
    for code in ("C7514", "C7517", "C7508"):
        assert code not in report, report
    assert "0 bytes spill stores" in report


@tile.kernel
def scaled_product_stored_inline(a, b, h, out, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
                                 BK: vg.constexpr = 64):
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BM, BN), vg.float32)
    for kk in range((a.shape[1] + BK - 1) // BK):
        acc = tile.mma(tile.load(a, index=(i, kk), shape=(BM, BK)), tile.load(b, index=(kk, j), shape=(BK, BN)), acc)
    g = tile.load(h, index=(i, j), shape=(BM, BN)).astype(vg.float32)
    tile.store(out, index=(i, j), tile=(acc * g).astype(out.dtype))


@tile.kernel
def scaled_product_assigned(a, b, h, out, BM: vg.constexpr = 128, BN: vg.constexpr = 128, BK: vg.constexpr = 64):
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BM, BN), vg.float32)
    for kk in range((a.shape[1] + BK - 1) // BK):
        acc = tile.mma(tile.load(a, index=(i, kk), shape=(BM, BK)), tile.load(b, index=(kk, j), shape=(BK, BN)), acc)
    g = tile.load(h, index=(i, j), shape=(BM, BN)).astype(vg.float32)
    y = (acc * g).astype(out.dtype)
    tile.store(out, index=(i, j), tile=y)


@needs_ptxas
def test_a_stored_expression_reads_its_variables_where_the_product_is():
    """`tile.store(out, tile=acc * g)` places g as `y = acc * g` does: in the accumulator's
    layout, so no tile moves through shared memory (before, the inline twin moved 64 KiB and
    did not fit beside the products' buffers on sm_90a)."""
    bf = ArrayType(T.bfloat16, 2, "global", True, True)
    shared_stores = []
    for kernel in (scaled_product_stored_inline, scaled_product_assigned):
        spec = kernel.specialize_types(dict(a=bf, b=bf, h=bf, out=bf))
        layouts = mma_plan.accumulators(spec, matmul.plan(spec, "sm_90a"))
        assert layouts["g"] == layouts["acc"]
        ptx = codegen.compile_to_ptx(spec, "sm_90a").ptx
        shared_stores.append(len(re.findall(r"\bst\.shared", ptx)))
    assert shared_stores[0] == shared_stores[1]


@needs_ptxas
def test_sm90a_attention_streams_k_and_v_and_keeps_p_in_registers():
    kernel = tile_attention.attention.specialize_types(PTX_CASES["attention_d128_causal"][1])
    plan = matmul.plan(kernel, "sm_90a")
    (pipe,) = plan.pipelines.values()
    assert not pipe.accumulating and pipe.specialized and not plan.persistent
    assert sorted(op.load.array.name for op in pipe.operands) == ["k", "v"]
    assert [inv.node.name for inv in pipe.invariants] == ["qt"]  # staged once, before the loop
    assert [m.box for m in plan.tensor_maps] == [(1, 1, 64, 64), (1, 1, 64, 64)]  # (batch, heads, keys, a panel)
    (pv,) = [d for d in mma_plan.walk_nodes(kernel) if isinstance(d, X.TileDot) and id(d) in plan.register_a]
    assert isinstance(pv.b, X.TileVar) and pv.b.name == "vt"  # P @ V: P from registers
    assert pv.b.name == "vt" if isinstance(pv.b, X.TileVar) else True
    # the running max / sum and the mask's indices live where the scores are: no data moves
    layouts = mma_plan.accumulators(kernel, plan)
    scores = layouts["s"]
    assert layouts["m_i"] == layouts["l_i"] == layouts["alpha"] == layouts["rows"] == scores.sliced({1})
    assert layouts["cols"] == scores.sliced({0})
    ptx = _ptx("attention_d128_causal", "sm_90a")
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in ptx
    assert re.search(r"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 \{[^}]*\}, "
                     r"\{%r\d+,%r\d+,%r\d+,%r\d+\}, %rd\d+, p, 1, 1, 1;", ptx)  # V is N-major


def test_register_a_fragments_are_the_accumulator_pairs():
    product = GroupGeometry(128, 128, 8)
    layout = mma_layout.a_layout(product, 64)
    assert layout == GroupGeometry(128, 64, 8).layout()
    fragments = mma_layout.a_fragments(layout, product, 64)
    assert len(fragments) == 4  # one m block per warp group, 4 k steps of 16
    for ks, regs in enumerate(fragments):
        coords = [layout.register_coords(r) for r in regs]
        # a0..a3: (row, col) +(0,0), (8,0), (0,8), (8,8), each a pair of columns
        assert coords == [(8 * h, 16 * ks + 8 * half + e) for half in (0, 1) for h in (0, 1) for e in (0, 1)]
    assert mma_layout.a_fragments(GroupGeometry(64, 64, 8).layout(), GroupGeometry(64, 128, 8), 64) is None


@tile.kernel
def fp8_product_of_a_product(a, bt, ct, out):
    """out = fp8(a @ b / 8) @ c, b and c given transposed (K-major, as fp8 wgmma reads
    them): on sm_90a the second product takes its A from the first's registers."""
    p = tile.dot(tile.load(a, index=(0, 0), shape=(128, 64)),
                 tile.load(bt, index=(0, 0), shape=(128, 64)).T) * 0.125
    tile.store(out, index=(0, 0), tile=tile.dot(p.astype(a.dtype), tile.load(ct, index=(0, 0), shape=(64, 128)).T))


FP8_CHAINS = [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn")]  # (a, b; c)


def fp8_chain(rng, kinds) -> tuple:
    """(out, want) of `fp8_product_of_a_product` on the current backend (one warp group: its
    two 64-row blocks), want in float64 with P rounded to a's fp8 as the kernel rounds it
    (from P summed in float32)."""
    from verdigris.examples.tile_gemm import _narrow

    (a, a64), (bt, bt64) = (_narrow(rng, (128, 64), kinds[0]) for _ in range(2))
    ct, ct64 = _narrow(rng, (64, 128), kinds[1])
    out = tile_gemm.run(fp8_product_of_a_product, 1, a, bt, ct, np.full((128, 64), np.nan, np.float32),
                        num_warps=4)[3]
    p = ((a64 @ bt64.T) * 0.125).astype(np.float32).astype(a.dtype).astype(np.float64)
    return out, p @ ct64.T


@pytest.mark.parametrize("kinds", FP8_CHAINS, ids=["e4m3", "e5m2-e4m3"])
def test_fp8_product_of_a_product(rng, kinds):
    out, want = fp8_chain(rng, kinds)
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 1e-2  # P's ties: an fp8 ulp


@needs_ptxas
@pytest.mark.parametrize("kinds", FP8_CHAINS, ids=["e4m3", "e5m2-e4m3"])
def test_sm90a_fp8_a_from_registers(kinds):
    """The second product's A stays in the first's registers on sm_90a, as attention's P:
    rounded by `cvt.rn.satfinite`, gathered within quads, one warp group's two m blocks."""
    f8 = [getattr(T, kind) for kind in kinds]
    kernel = fp8_product_of_a_product.specialize_types(dict(a=_a(f8[0]), bt=_a(f8[0]), ct=_a(f8[1]),
                                                            out=_a(T.float32)), block=(128,))
    plan = matmul.plan(kernel, "sm_90a")
    (second,) = [d for d in mma_plan.walk_nodes(kernel) if isinstance(d, X.TileDot) and id(d) in plan.register_a]
    assert plan.dots[id(second)].geometry.m_blocks == 2  # one warp group: m blocks 0 and 1
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    names = [WGMMA[kind][1] for kind in kinds]
    assert len(re.findall(rf"wgmma.mma_async.sync.aligned.m64n64k32.f32.{names[0]}.{names[1]} \{{[^}}]*\}}, "
                          r"\{%r\d+,%r\d+,%r\d+,%r\d+\}, %rd\d+, p, 1, 1;", ptx)) == 8  # 2 m x 4 k
    assert f"cvt.rn.satfinite.{names[0]}x2.f32" in ptx and "cvt.rni" not in ptx
    codegen.assemble(ptx, "sm_90a", optimize=False)


@tile.kernel
def k_loop_in_if(a, b, c):
    acc = tile.zeros((128, 128), vg.float32)
    if tile.bid(0) >= 0:
        for k in range(a.shape[1] // 64):
            acc = tile.mma(tile.load(a, index=(tile.bid(0), k), shape=(128, 64)),
                           tile.load(b, index=(k, 0), shape=(64, 128)), acc)
    tile.store(c, index=(tile.bid(0), 0), tile=acc)


@tile.kernel
def load_after_use(a, b, c):
    acc = tile.zeros((128, 128), vg.float32)
    x = tile.load(a, index=(0, 0), shape=(128, 64))
    for k in range(a.shape[1] // 64):
        y = tile.load(b, index=(k, 0), shape=(64, 128))
        acc = tile.mma(x, y, acc)
        x = tile.load(a, index=(0, k + 1), shape=(128, 64))
    tile.store(c, index=(0, 0), tile=acc)


@tile.kernel
def k_loop_from_memory(a, b, c, counts):
    """The K loop's trip count read from memory: a producer reads it again."""
    steps = 0
    while steps * 64 < a.shape[1] and steps < tile.load(counts, index=(0,), shape=()):
        steps += 1
    acc = tile.zeros((128, 128), vg.float32)
    for k in range(steps):
        acc = tile.mma(tile.load(a, index=(tile.bid(0), k), shape=(128, 64)),
                       tile.load(b, index=(k, 0), shape=(64, 128)), acc)
    tile.store(c, index=(tile.bid(0), 0), tile=acc)


@tile.kernel
def k_loop_from_written_memory(a, b, c, counts):
    """The same, but the kernel writes `counts` too (another element): a producer's read
    could differ from the consumers', so no producer."""
    steps = tile.load(counts, index=(0,), shape=())
    acc = tile.zeros((128, 128), vg.float32)
    for k in range(steps):
        acc = tile.mma(tile.load(a, index=(tile.bid(0), k), shape=(128, 64)),
                       tile.load(b, index=(k, 0), shape=(64, 128)), acc)
    tile.store(c, index=(tile.bid(0), 0), tile=acc)
    tile.store(counts, index=(tile.bid(0) + 1,), tile=tile.full((1,), 0, counts.dtype))


def test_streaming_and_specialization_follow_the_kernel_structure():
    specs = dict(a=_a(T.bfloat16), b=_a(T.bfloat16), c=_a(T.float32))
    plan = matmul.plan(k_loop_in_if.specialize_types(specs), "sm_90a")
    (pipe,) = plan.pipelines.values()  # its loop inside an if of scalar code: the producer runs the if
    assert pipe.accumulating and plan.specialized is not None and plan.block_threads == 384
    counted = dict(specs, counts=ArrayType(T.int32, 1, "global", True, True))
    kernel = k_loop_from_memory.specialize_types(counted)
    assert matmul.plan(kernel, "sm_90a").specialized is not None  # scalar code, read-only memory
    if codegen.ptxas_available():
        codegen.assemble(codegen.compile_to_ptx(kernel, "sm_90a").ptx, "sm_90a", optimize=False)
    plan = matmul.plan(k_loop_from_written_memory.specialize_types(counted), "sm_90a")
    assert plan.specialized is None
    plan = matmul.plan(load_after_use.specialize_types(specs), "sm_90a")
    (pipe,) = plan.pipelines.values()  # x holds the previous pass's tile: only y streams
    assert [op.load.array.name for op in pipe.operands] == ["b"] and not pipe.accumulating


@needs_ptxas
def test_sm80_uses_ldmatrix_and_mma_sync():
    ptx = _ptx("gemm_bf16", "sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # B is N-major
    assert "wgmma" not in ptx and "cp.async.bulk" not in ptx
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in _ptx("dot_tf32", "sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in _ptx("gemm_nt_fp8", "sm_80")
    assert "fma.rn.f32" in _ptx("dot_f32", "sm_80")


def test_engines_follow_shapes_dtypes_and_target():
    def engines(name, target):
        kernel, specs = PTX_CASES[name]
        return sorted({d.engine for d in matmul.plan(kernel.specialize_types(specs), target).dots.values()})
    assert engines("gemm_bf16", "sm_90a") == ["wgmma"]
    assert engines("gemm_bf16", "sm_90") == ["mma.sync"]
    assert engines("dot_f32", "sm_90a") == ["fma"]
    assert engines("gemm_nt_fp8", "sm_90a") == ["wgmma"]
    assert engines("attention_d128_causal", "sm_90a") == ["wgmma"]


# ----------------------------------------------------------------------------- launches


FAKE_LAUNCH = """
import ctypes, json
import numpy as np
import verdigris as vg
from verdigris.runtime import tensormap
from verdigris.examples.tile_gemm import gemm
from tests.fakecuda import last_launch

encoded = []
real_encode = tensormap.encode

class FakeMap:
    def __init__(self):
        self.bytes = (ctypes.c_char * 128)()
    def getPtr(self):
        return ctypes.addressof(self.bytes)

def encode(spec, pointer, shape, strides):
    real_encode.__globals__["_describable"](spec, pointer, strides, len(shape))
    encoded.append([spec.param, list(spec.box), list(shape), list(strides)])
    return FakeMap()

tensormap.encode = encode
out = {}
for name, (m, n, k) in {"aligned": (1000, 776, 328), "odd_pitch": (130, 260, 72)}.items():
    a, b = (vg.asarray(np.zeros(s, np.float16)) for s in ((m, k), (k, n)))
    c = vg.asarray(np.zeros((m, n), np.float32))
    encoded.clear()
    gemm[vg.cdiv(m, 128), vg.cdiv(n, 256)](a, b, c, BM=128, BN=256, BK=64)
    launch = last_launch(19 if len(encoded) == 3 else 13)
    out[name] = dict(grid=list(launch.grid), block=list(launch.block), shared=launch.shared,
                     virtual=[v & 0xFFFFFFFF for v in launch.slots[13:16]], maps=list(encoded))
print(json.dumps(out))
"""


@needs_ptxas
def test_a_specialized_gemm_launches_persistent_with_its_producer_and_maps():
    """On the fake driver (launches recorded, not run): one block per multiprocessor (132)
    of 8 + 4 warps, the launch's grid passed as three int32s after the ABI's 13 values,
    and A, B, C's tensor maps; an array the copy engine cannot describe (a row of 260
    float16, 520 bytes) runs the variant without TMA on the grid and block as launched."""
    from tests import fakecuda

    if fakecuda.library_dir() is None:
        pytest.skip("needs a C compiler")
    done = fakecuda.run(FAKE_LAUNCH)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    aligned, odd = got["aligned"], got["odd_pitch"]
    assert aligned["grid"] == [min(132, 8 * 4), 1, 1] and aligned["block"] == [384, 1, 1]
    assert aligned["virtual"] == [8, 4, 1] and aligned["shared"] > 48 * 1024
    assert aligned["maps"] == [["a", [128, 64], [1000, 328], [328]], ["b", [64, 64], [328, 776], [776]],
                               ["c", [64, 32], [1000, 776], [776]]]
    assert odd["grid"] == [2, 2, 1] and odd["block"] == [256, 1, 1]


@needs_ptxas
def test_a_64x64_product_gets_the_warps_wgmma_takes():
    """The default warp count is at most 4 per 64x64 block of a product's result: a 64x64
    product gets one warpgroup, whose wgmma m64n64 streams through TMA behind a producer
    warpgroup (256 threads); on 8 warps its columns split into halves narrower than
    wgmma's 64-column panels, and it fell back to unpipelined mma.sync."""
    from verdigris.tile.lower import num_warps

    kernel = gemm.specialize_types(dict(a=_a(T.bfloat16), b=_a(T.bfloat16), c=_a(T.bfloat16), BM=64, BN=64, BK=64))
    assert num_warps(kernel) == 4
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx and ".maxntid 256" in ptx
    wide = gemm.specialize_types(dict(a=_a(T.bfloat16), b=_a(T.bfloat16), c=_a(T.bfloat16), BM=128, BN=128, BK=64))
    assert num_warps(wide) == 8


@tile.kernel
def product_parts_added(a, b, c, PARTS: vg.constexpr = 2, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
                        BK: vg.constexpr = 64):
    """Split-K by atomics: block (i, j, part) adds its part of the K steps' product into c."""
    i, j, part = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = tile.zeros((BM, BN), vg.float32)
    for kk in range(part, (a.shape[1] + BK - 1) // BK, PARTS):
        acc = tile.mma(tile.load(a, index=(i, kk), shape=(BM, BK)), tile.load(b, index=(kk, j), shape=(BK, BN)), acc)
    tile.atomic_add(c, index=(0, i, j), tile=acc.reshape((1, BM, BN)))


@tile.kernel
def product_parts_added_and_maxed(a, b, c, PARTS: vg.constexpr = 2, BM: vg.constexpr = 128,
                                  BN: vg.constexpr = 128, BK: vg.constexpr = 64):
    """The twin whose c also takes an atomic max: the adds must stay element by element."""
    i, j, part = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = tile.zeros((BM, BN), vg.float32)
    for kk in range(part, (a.shape[1] + BK - 1) // BK, PARTS):
        acc = tile.mma(tile.load(a, index=(i, kk), shape=(BM, BK)), tile.load(b, index=(kk, j), shape=(BK, BN)), acc)
    tile.atomic_add(c, index=(0, i, j), tile=acc.reshape((1, BM, BN)))
    tile.atomic_max(c, index=(1, i, j), tile=acc.reshape((1, BM, BN)))


def test_a_product_added_by_atomics_matches_float64(rng):
    a, b = (rng.standard_normal(shape).astype(np.float16) for shape in ((128, 256), (256, 256)))
    c = np.zeros((1, 128, 256), np.float32)
    product_parts_added[1, 2, 2](a, b, c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c[0], want, rtol=1e-3, atol=1e-3)


@needs_ptxas
def test_a_product_added_by_atomics_goes_out_as_bulk_reductions():
    """On sm_90a a product tile's atomic add into a float32 array the kernel only adds to is
    one `cp.reduce.async.bulk.tensor` per chunk (3-d: the batch axis of extent 1 in front),
    not an atomic per element; with an atomic max on the same array the adds stay element by
    element (reductions through the copy engine are ordered with nothing else), from the
    accumulator's registers: no exchange through shared memory, which would not fit."""
    specs = dict(a=_a(T.float16), b=_a(T.float16), c=_a(T.float32, 3))
    ptx = codegen.compile_to_ptx(product_parts_added.specialize_types(specs), "sm_90a").ptx
    assert "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group" in ptx
    assert not re.search(r"\b(red|atom)\.global", ptx)
    codegen.assemble(ptx, "sm_90a", optimize=False)
    twin = codegen.compile_to_ptx(product_parts_added_and_maxed.specialize_types(specs), "sm_90a").ptx
    assert "cp.reduce.async.bulk" not in twin and re.search(r"\b(red|atom)\.global(\.\w+)*\.add\.f32", twin)


@tile.kernel
def gram_blocks(a, c, BM: vg.constexpr = 128, BK: vg.constexpr = 64):
    """The diagonal blocks of a @ a.T: one loaded tile feeds both operands of the product."""
    i = tile.bid(0)
    acc = tile.zeros((BM, BM), vg.float32)
    for kk in range((a.shape[1] + BK - 1) // BK):
        x = tile.load(a, index=(i, kk), shape=(BM, BK))
        acc = tile.mma(x, x.T, acc)
    tile.store(c, index=(i, i), tile=acc)


def test_one_tile_as_both_operands_matches_float64(rng):
    a = rng.standard_normal((256, 192)).astype(np.float16)
    c = np.full((256, 256), np.nan, np.float32)
    gram_blocks[2](a, c)
    want = a.astype(np.float64) @ a.astype(np.float64).T
    for i in range(2):
        block = np.s_[128 * i:128 * (i + 1), 128 * i:128 * (i + 1)]
        np.testing.assert_allclose(c[block], want[block], rtol=1e-4, atol=1e-4)


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_one_tile_feeding_two_operands_is_copied_once(target):
    """x feeds A and (transposed) B of one product: the stream copies it once a stage (by
    TMA on sm_90a, by cp.async on sm_80), both operands read it, K-major, and the loop keeps
    its products in flight (accumulating)."""
    spec = gram_blocks.specialize_types(dict(a=_a(T.float16), c=_a(T.float32)))
    (pipe,) = matmul.plan(spec, target).pipelines.values()
    assert [(op.which, op.k_major, op.copied) for op in pipe.operands] == [(0, True, True), (1, True, False)]
    assert pipe.accumulating and pipe.stage_bytes == pipe.stage_bytes_used == 128 * 64 * 2
    codegen.assemble(codegen.compile_to_ptx(spec, target).ptx, target, optimize=False)
