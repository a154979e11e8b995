"""Grouped GEMM for mixture-of-experts (issue #29, `examples/tile_grouped_gemm.py`) on the cpu
backend and in PTX: ragged groups (empty ones, groups smaller than a tile so that one tile
spans many, groups spanning many tiles, none a multiple of the tile) in both layouts of b,
16-bit and fp8, against float64 NumPy with the output poisoned (NaN): tiles inside one group
stored whole, tiles across groups scattered group by group; offsets that are not cumulative
run without a fault; the racy twin (per-group tiles stored at rows read from the offsets)
refused before it runs; on sm_90a, at the bench's tiles, both operands of the K loop stream
by TMA into wgmma from a producer warp group that runs the loop over the groups again, on a
persistent grid, whole tiles leave by TMA, and nothing spills; sm_80 assembles. The GPU twin
is tests/gpu/test_matmul_shapes_gpu.py."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, safety, tile
from verdigris import types as T
from verdigris.examples import tile_grouped_gemm as gg
from verdigris.examples.tile_gemm import _narrow, available
from verdigris.ir import nodes
from verdigris.ir.nodes import ArrayType
from verdigris.tile import matmul

from tests.test_linear_backward import needs_ptxas
from tests.test_norm_backward import relative_error
from tests.test_tile_mma import _ptxas_report

TILES = dict(BM=32, BN=32, BK=16)
N, K = 40, 56


def _grouped(rng, sizes, name="bfloat16", order="F", out_dtype=np.float32):
    offsets = gg.group_offsets(sizes)
    a, _ = _narrow(rng, (int(offsets[-1]), K), name)
    b, _ = _narrow(rng, (len(sizes), N, K) if order == "F" else (len(sizes), K, N), name)
    c = np.full((a.shape[0], N), np.nan, out_dtype)
    gg.launch_grouped_gemm(a, b, offsets, c, order, TILES)
    return c, gg.reference(a, b, offsets, order)


@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("sizes", [
    (5, 0, 70, 33, 0, 1),        # ragged, empty groups inside and between tiles
    (0, 0, 100),                 # empty groups first: one group over 4 tiles (the last partial)
    (3, 1, 0, 2, 7, 1, 1, 4),    # all in one tile: one tile spans 7 groups
    (64, 32),                    # whole tiles: no tile spans two groups
    (1,),                        # one row, one group
])
def test_grouped_gemm_matches_float64(rng, order, sizes):
    c, want = _grouped(rng, sizes, order=order)
    assert relative_error(c, want) < 1e-5


@pytest.mark.skipif(not available("float8_e4m3fn"), reason="needs ml_dtypes")
def test_fp8_grouped_gemm_reads_the_weights_k_major(rng):
    c, want = _grouped(rng, (9, 0, 40), "float8_e4m3fn")
    assert relative_error(c, want) < 1e-5


def test_the_output_is_rounded_once_to_its_dtype(rng):
    c, want = _grouped(rng, (17, 30, 2), out_dtype=T.from_name("bfloat16").np)
    assert relative_error(c, want) < 1.6e-2


def test_offsets_that_are_not_cumulative_never_fault(rng):
    """A decreasing offset, and one past the rows of a: wrong numbers, no fault, every
    output row written."""
    a, _ = _narrow(rng, (50, K), "bfloat16")
    b, _ = _narrow(rng, (3, N, K), "bfloat16")
    c = np.full((50, N), np.nan, np.float32)
    gg.launch_grouped_gemm(a, b, np.array([0, 40, 10, 90], np.int32), c, tiles=TILES)
    assert np.isfinite(c).all()


@tile.kernel
def grouped_by_group_tiles(a, b, offsets, c, BM: vg.constexpr = 32, BN: vg.constexpr = 32,
                           BK: vg.constexpr = 16):
    """Racy twin of grouped_gemm: block (g, i, j) stores tile i of group g at a tile index
    read from the offsets; nothing shows that two groups' tiles are apart."""
    g, i, j = tile.bid(0), tile.bid(1), tile.bid(2)
    first = tile.load(offsets, index=(g,), shape=()) // BM
    acc = gg.group_product(a, b, first + i, g, j, BM, BN, BK, "F")
    tile.store(c, index=(first + i, j), tile=acc.astype(c.dtype))


def test_racy_twin_is_refused_before_it_runs(rng):
    a, _ = _narrow(rng, (64, K), "bfloat16")
    b, _ = _narrow(rng, (2, N, K), "bfloat16")
    c = np.full((64, N), np.nan, np.float32)
    with pytest.raises(vg.SafetyError) as refused:
        grouped_by_group_tiles[2, 1, 2](a, b, np.array([0, 32, 64], np.int32), c)
    assert refused.value.code == "VG205" and np.isnan(c).all()


def _specs(order, dtype=T.bfloat16, tiles=None):
    def array(ndim, element=dtype):
        return ArrayType(element, ndim, "global", True, True)
    return dict(a=array(2), b=array(3), offsets=array(1, T.int32), c=array(2), GROUPS=8,
                B_ORDER=order, **(tiles or dict(BM=128, BN=128, BK=64)))


@needs_ptxas
@pytest.mark.parametrize("order, tiles", [("F", "128x256x64"), ("C", "128x256x64"), ("F", "128x128x64"),
                                          ("F", "64x256x64")])
def test_sm90a_is_warp_specialized_and_persistent_without_spills(order, tiles):
    """The bench's tiles (bench/suite_shapes.py): both operands stream by TMA into wgmma
    from a producer warp group that runs the group search and the loop over the groups
    again, one block per multiprocessor walks the tiles, a tile inside one group leaves by
    a TMA store (after a global proxy fence: the scatters of a tile across groups come
    before it), and nothing spills."""
    bm, bn, bk = map(int, tiles.split("x"))
    kernel = gg.grouped_gemm.specialize_types(_specs(order, tiles=dict(BM=bm, BN=bn, BK=bk)))
    safety.check(kernel)  # as a launch does: the scatters and the store never race
    plan = matmul.plan(kernel, "sm_90a")
    (pipe,) = plan.pipelines.values()
    assert pipe.accumulating and sorted(op.which for op in pipe.operands) == [0, 1]
    assert [op.k_major for op in sorted(pipe.operands, key=lambda op: op.which)] == [True, order == "F"]
    assert pipe.specialized and plan.persistent and plan.block_threads == 384 and pipe.stages >= 4
    (chunks,) = plan.stores.values()
    assert chunks.after_stores
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor.3d" in ptx
    assert "fence.proxy.async.global;" in ptx and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report
    assert not any(code in report for code in ("C7514", "C7517", "C7508")), report


def test_the_producer_runs_the_loop_over_the_groups():
    """Its code: the search's scalar statements, then the loop over the groups, in it the
    test for an empty group holding the K loop; none of the tiles' statements."""
    plan = matmul.plan(gg.grouped_gemm.specialize_types(_specs("F")), "sm_90a")
    groups, = [s for s in plan.specialized.producer if isinstance(s, nodes.For)]
    assert groups.var == "g"
    streamed = plan.specialized.pipeline.loop
    nonempty, = [s for s in groups.body if isinstance(s, nodes.If) and s.then[-1] is streamed]
    assert "start" in {s.name for s in groups.body if isinstance(s, nodes.Assign)}
    assert not any(isinstance(s, nodes.Assign) and s.name in ("acc", "rows", "mine")
                   for s in plan.specialized.producer + tuple(groups.body) + tuple(nonempty.then))


@needs_ptxas
def test_sm80_assembles():
    ptx = codegen.compile_to_ptx(gg.grouped_gemm.specialize_types(_specs("F")), "sm_80").ptx
    assert "ldmatrix" in ptx and "cp.async" in ptx
    codegen.assemble(ptx, "sm_80", optimize=False)


def test_a_groups_constant_other_than_bs_groups_is_refused(rng):
    a, _ = _narrow(rng, (20, K), "bfloat16")
    b, _ = _narrow(rng, (3, N, K), "bfloat16")
    c = np.full((20, N), np.nan, np.float32)
    with pytest.raises(vg.AssumptionError) as refused:
        gg.grouped_gemm[1, 2](a, b, gg.group_offsets([4, 6, 10]), c, GROUPS=2, **TILES)
    assert refused.value.code == "VG304" and np.isnan(c).all()


@tile.kernel
def scatter_rows(x, c, STEP: vg.constexpr = 16, BM: vg.constexpr = 16, BN: vg.constexpr = 16):
    """The grouped kernel's scatter (rows kept or -1, skipped) of block r's rows r * STEP ...:
    disjoint between blocks with STEP = BM, shared with a smaller STEP (the racy twin)."""
    r, j = tile.bid(0), tile.bid(1)
    rows = (int(r) * STEP + tile.arange(BM)).reshape((BM, 1))
    values = tile.load(x, index=(r, j), shape=(BM, BN))
    tile.scatter(c, (tile.where(values > 0, rows, -1), (int(j) * BN + tile.arange(BN)).reshape((1, BN))),
                 values, skip_out_of_bounds=True)


@pytest.mark.parametrize("step", [16, 15, 8])
def test_a_skipping_scatter_is_proven_disjoint_only_where_it_is(rng, step):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    c = np.full((64, 32), np.nan, np.float32)
    if step == 16:
        scatter_rows[4, 2](x, c, STEP=step)
        assert np.array_equal(np.where(x > 0, x, np.nan), c, equal_nan=True)
        return
    with pytest.raises(vg.SafetyError) as refused:
        scatter_rows[4, 2](x, c, STEP=step)
    assert refused.value.code == "VG202" and np.isnan(c).all()
