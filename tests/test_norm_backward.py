"""LayerNorm and RMSNorm backward on the cpu backend (issue #28): the forwards that save
mean/rstd and the backwards (dx, then per-block partial weight gradients summed by
`column_sums`) against float64 NumPy for float32, float16 and bfloat16 inputs (arithmetic
in float32) and float64 ones (arithmetic in float64), on shapes whose rows are not a
multiple of the rows per block and whose width is not the tile's. Every output starts as
NaN. Beside them the ways of reducing the weight gradient across blocks that race: every
block storing into one row of partials, and blocks whose rows overlap, each refused with
the two blocks named, while the kernels the ops use are accepted. The torch ops are tested
in tests/test_torch_norms.py, the GPU in tests/gpu/test_norm_backward_gpu.py."""
import re
import sys

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, tile
from verdigris.examples import tile_layernorm as ln
from verdigris.examples import tile_rmsnorm as rms
from verdigris.examples.tile_column_sums import launch_column_sums

ml_dtypes = pytest.importorskip("ml_dtypes")

# storage dtype -> (arithmetic dtype, tolerance relative to the reference's largest value)
DTYPES = {"float32": (np.float32, 2e-5), "float16": (np.float32, 2e-3),
          "bfloat16": (np.float32, 1.6e-2), "float64": (np.float64, 1e-12)}


def storage(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape and np.isfinite(got).all()
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def inputs(rng, rows, cols, dtype, shift=0.0):
    x = (rng.standard_normal((rows, cols)) * 2 + shift).astype(dtype)
    w, b = (rng.standard_normal(cols).astype(dtype) for _ in range(2))
    return x, w, b, rng.standard_normal((rows, cols)).astype(dtype)


def nans(shape, dtype):
    return np.full(shape, np.nan, dtype)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("rows, cols, per_block", [(37, 300, 4), (5, 64, 8), (64, 129, 16)])
def test_layernorm_forward_and_backward_match_float64(rng, name, rows, cols, per_block):
    acc, tol = DTYPES[name]
    eps = 1e-5
    x, w, b, dy = inputs(rng, rows, cols, storage(name), shift=0.5)
    out, dx = nans(x.shape, x.dtype), nans(x.shape, x.dtype)
    mean, rstd = nans(rows, acc), nans(rows, acc)
    ln.layernorm_forward[rows](x, w, b, out, mean, rstd, acc(eps), COLS=ln.tile_cols(cols))
    partials = [nans((vg.cdiv(rows, per_block), cols), acc) for _ in range(2)]
    dw, db = nans(cols, w.dtype), nans(cols, b.dtype)
    ln.launch_layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, *partials, ROWS=per_block)

    x64 = x.astype(np.float64)
    assert relative_error(out, ln.reference(x, w, b, eps)) < tol
    assert relative_error(mean, x64.mean(1)) < max(tol, 1e-6)
    assert relative_error(rstd, 1 / np.sqrt(x64.var(1) + eps)) < max(tol, 1e-6)
    for got, want in zip((dx, dw, db), ln.reference_backward(dy, x, w, eps)):
        assert relative_error(got, want) < tol


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("rows, cols, per_block", [(37, 300, 4), (5, 64, 8), (64, 129, 16)])
def test_rmsnorm_forward_and_backward_match_float64(rng, name, rows, cols, per_block):
    acc, tol = DTYPES[name]
    eps = 1e-6
    x, w, _, dy = inputs(rng, rows, cols, storage(name))
    out, dx = nans(x.shape, x.dtype), nans(x.shape, x.dtype)
    rstd = nans(rows, acc)
    rms.rmsnorm_forward[rows](x, w, out, rstd, acc(eps), COLS=ln.tile_cols(cols))
    partial = nans((vg.cdiv(rows, per_block), cols), acc)
    dw = nans(cols, w.dtype)
    rms.launch_rmsnorm_backward(dy, x, w, rstd, dx, dw, partial, ROWS=per_block)

    x64 = x.astype(np.float64)
    assert relative_error(out, rms.reference(x, w, eps)) < tol
    assert relative_error(rstd, 1 / np.sqrt((x64 * x64).mean(1) + eps)) < max(tol, 1e-6)
    for got, want in zip((dx, dw), rms.reference_backward(dy, x, w, eps)):
        assert relative_error(got, want) < tol


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("sums", [False, True], ids=["", "dx_sums"])
def test_layernorm_backward_adds_the_gradient_from_the_residual_stream(rng, name, sums):
    """dsum (x's gradient from its other use) added into dx in the backward's kernel,
    before dx's one rounding; dw and db as without it; with dx_sums, dx's column sums as
    stored (the previous layer's bias gradient) from the same kernel's partials."""
    acc, tol = DTYPES[name]
    rows, cols, per_block, eps = 37, 300, 4, 1e-5
    x, w, b, dy = inputs(rng, rows, cols, storage(name), shift=0.5)
    dsum = (rng.standard_normal((rows, cols)) * 3).astype(x.dtype)
    out, dx, mean, rstd = nans(x.shape, x.dtype), nans(x.shape, x.dtype), nans(rows, acc), nans(rows, acc)
    ln.layernorm_forward[rows](x, w, b, out, mean, rstd, acc(eps), COLS=ln.tile_cols(cols))
    partials = [nans((vg.cdiv(rows, per_block), cols), acc) for _ in range(3)]
    dw, db, dx_sums = nans(cols, w.dtype), nans(cols, b.dtype), nans(cols, x.dtype)
    ln.launch_layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, *partials[:2], ROWS=per_block, dsum=dsum,
                                 **(dict(dx_sums=dx_sums, dx_partial=partials[2]) if sums else {}))
    want_dx, want_dw, want_db = ln.reference_backward(dy, x, w, eps)
    assert relative_error(dx, want_dx + dsum.astype(np.float64)) < tol
    assert relative_error(dw, want_dw) < tol and relative_error(db, want_db) < tol
    if sums:  # the sums of dx as rounded: only the sums' own rounding differs
        assert relative_error(dx_sums, np.asarray(dx).astype(np.float64).sum(0)) < tol
    else:
        assert np.isnan(partials[2]).all() and np.isnan(dx_sums).all()  # untouched


def test_a_float32_weight_beside_bfloat16_activations(rng):
    """Mixed precision as trained: bf16 x and dy, float32 weight and weight gradient."""
    rows, cols = 24, 200
    x, _, _, dy = inputs(rng, rows, cols, storage("bfloat16"))
    w = rng.standard_normal(cols).astype(np.float32)
    out, dx, rstd = nans(x.shape, x.dtype), nans(x.shape, x.dtype), nans(rows, np.float32)
    rms.rmsnorm_forward[rows](x, w, out, rstd, np.float32(1e-6), COLS=256)
    dw = nans(cols, np.float32)
    rms.launch_rmsnorm_backward(dy, x, w, rstd, dx, dw, nans((3, cols), np.float32), ROWS=8)
    want_dx, want_dw = rms.reference_backward(dy, x, w, 1e-6)
    assert relative_error(dx, want_dx) < 1.6e-2 and relative_error(dw, want_dw) < 1e-5


def test_column_sums_add_every_row_in_order(rng):
    partial = rng.standard_normal((45, 70))  # float64: the sum in row order, exactly NumPy's
    out = nans(70, np.float64)
    launch_column_sums(partial, out, BR=8, BC=32)
    assert relative_error(out, partial.sum(0)) < 1e-14


def test_rows_per_block_keeps_the_grid_near_256_blocks_or_512_for_narrow_rows():
    assert [ln.rows_per_block(n, 8192) for n in (1, 256, 257, 16384, 100_000)] == [1, 1, 2, 64, 512]
    assert [ln.rows_per_block(n, 768) for n in (1, 512, 513, 8192, 100_000)] == [1, 1, 2, 16, 256]
    assert ln.rows_per_block(8192, 1024) == 16 and ln.rows_per_block(8192, 1025) == 32
    assert [ln.tile_cols(n) for n in (1, 64, 65, 8192)] == [1, 64, 128, 8192]


# The weight gradient's reduction across blocks done wrong: the class of races a port of a
# CUDA or Triton norm backward can fall into, each beside the kernels above (accepted).

@tile.kernel
def dw_into_one_row(dy, x, rstd, dw_partial, ROWS: vg.constexpr, COLS: vg.constexpr):
    blk = tile.bid(0)
    dw = tile.zeros((1, COLS), vg.float32)
    for i in range(ROWS):
        r = int(blk) * ROWS + i
        dw += tile.load(dy, index=(r, 0), shape=(1, COLS)) * tile.load(x, index=(r, 0), shape=(1, COLS)) \
            * tile.load(rstd, index=(r,), shape=())
    tile.store(dw_partial, index=(0, 0), tile=dw)  # every block: row 0


@tile.kernel
def dx_rows_overlap(dy, x, rstd, dx, dw_partial, ROWS: vg.constexpr, COLS: vg.constexpr):
    blk = tile.bid(0)
    dw = tile.zeros((1, COLS), vg.float32)
    for i in range(ROWS):
        r = int(blk) + i  # block b takes rows b ... b + ROWS - 1: its neighbours' too
        g = tile.load(dy, index=(r, 0), shape=(1, COLS))
        xhat = tile.load(x, index=(r, 0), shape=(1, COLS)) * tile.load(rstd, index=(r,), shape=())
        tile.store(dx, index=(r, 0), tile=g * xhat)  # overlapping rows
        dw += g * xhat
    tile.store(dw_partial, index=(blk, 0), tile=dw)


def two_blocks(err) -> list:
    return [int(b) for b in re.findall(r"block (\d+)", str(err))]


def test_every_block_storing_one_row_of_partials_is_refused(rng):
    x, _, _, dy = inputs(rng, 16, 64, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        dw_into_one_row[4](dy, x, nans(16, np.float32), nans((4, 64), np.float32), ROWS=4, COLS=64)
    assert info.value.code == "VG202" and "dw_partial" in str(info.value)
    blocks = two_blocks(info.value)
    assert len(blocks) >= 2 and blocks[0] != blocks[1], str(info.value)
    located.assert_points_at(info.value, "# every block: row 0", __file__)


def test_blocks_whose_rows_overlap_are_refused(rng):
    x, _, _, dy = inputs(rng, 16, 64, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        dx_rows_overlap[4](dy, x, nans(16, np.float32), nans(x.shape, np.float32),
                           nans((4, 64), np.float32), ROWS=4, COLS=64)
    assert info.value.code == "VG202" and "dx" in str(info.value)
    blocks = two_blocks(info.value)
    assert len(blocks) >= 2 and blocks[0] != blocks[1], str(info.value)
    located.assert_points_at(info.value, "# overlapping rows", __file__)


def test_the_training_kernels_are_proven():
    """The fixed twins: one row of partials per block, disjoint rows per block, and the
    column sums; `verdigris check` proves every kernel of the three files."""
    from verdigris.safety.scan import check_paths

    files = [ln.__file__, rms.__file__, sys.modules[launch_column_sums.__module__].__file__]
    report = check_paths(files)
    assert report.status == 0, report.format()
    verdicts = re.findall(r"kernel '(\w+)': (\w+)", report.format())
    assert {"layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward",
            "column_sums"} <= {name for name, verdict in verdicts if verdict == "proven"}


def _narrow_backward(kernel, **constexprs):
    from verdigris import types as T
    from verdigris.ir import ArrayType

    def array(dtype, ndim):
        return ArrayType(dtype, ndim, "global", True, True)

    bf, f32 = T.bfloat16, T.float32
    arrays = dict(dy=array(bf, 2), x=array(bf, 2), w=array(bf, 1), rstd=array(f32, 1), dx=array(bf, 2),
                  dw_partial=array(f32, 2))
    if kernel is ln.layernorm_backward:
        arrays.update(mean=array(f32, 1), db_partial=array(f32, 2), dsum=array(bf, 2), dx_partial=array(f32, 2))
    return kernel.specialize_types({**arrays, **constexprs})


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("kernel, extra", [(ln.layernorm_backward, {}), (rms.rmsnorm_backward, {}),
                                           (ln.layernorm_backward, dict(PLUS_DSUM=True, SUM_DX=True))],
                         ids=["layernorm", "rmsnorm", "layernorm-residual"])
def test_a_loop_over_row_tiles_is_not_copied_out_into_spills(kernel, extra):
    """GPT-2's rows (768 wide, tiles of 1024, 32 rows a block, the lowering's 4 warps): the
    loop over a block's rows keeps checked loads (rows past the end), which once made the
    lowering copy its 32 iterations out as straight-line code, 255 registers and 840 bytes
    of spills a thread; a tile kernel's loop stays a loop (also as the residual op runs it,
    adding the stream's gradient and summing dx's columns)."""
    from test_tile_mma import _ptxas_report

    report = _ptxas_report(codegen.compile_to_ptx(_narrow_backward(kernel, ROWS=32, COLS=1024, **extra),
                                                  "sm_90").ptx)
    assert "0 bytes spill stores" in report, report
