"""Tile kernels on the GPU against the cpu backend on the same inputs: bit for bit for
elementwise integer and float arithmetic, loads and stores; float32 reductions within
1e-6 relative; libdevice math (exp, rsqrt, sigmoid) within a few ulp. Shapes that are not
multiples of the tile (edge tiles), strided views, non-power-of-two tiles, several warps."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris.runtime import backend
from test_tile_codegen import (add, block_2d, center_rows, cumsum_2d, elementwise, histogram, layernorm,
                               loop_max, masked_histogram, outer, permute_gather, positions,
                               rand_tile, reverse_scatter, rmsnorm, row_stats, row_sum,
                               scatter_rows, softmax, split_sum, transpose)

pytestmark = pytest.mark.gpu


def run_both(kernel, grid, args: dict, outputs: tuple, **options):
    """Outputs (poisoned first) of one launch on the GPU and one on the cpu backend."""
    results = []
    for where in ("cuda", "cpu"):
        backend.set_backend(where)
        values = {}
        for name, v in args.items():
            if isinstance(v, np.ndarray):
                v = _poisoned(v) if name in outputs else v
                values[name] = vg.asarray(v) if where == "cuda" else v.copy()
            else:
                values[name] = v
        kernel[grid](**values, **options)
        results.append({n: values[n].numpy() if where == "cuda" else values[n] for n in outputs})
    return results


def _poisoned(v: np.ndarray) -> np.ndarray:
    """-7 where the dtype holds it, else (unsigned integers) bytes of 0xAB."""
    if v.dtype.kind == "u":
        out = np.empty_like(v)
        out.view(np.uint8)[...] = 0xAB
        return out
    return np.full_like(v, -7)


def same_bits(got, want):
    """Bit for bit, except that a NaN need only be a NaN: its bits are the hardware's (a GPU
    conversion or operation yields 0x7fff... where x86 yields 0x7fc0...)."""
    got, want = np.array(got, order="C"), np.array(want, order="C")  # a view of bytes needs rows
    nan = np.isnan(want.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan)
    got[nan], want[nan] = 0, 0
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def close(got, want, rtol):
    got, want = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.nanmax(np.abs(want)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int8, np.float64])
@pytest.mark.parametrize("n,block", [(1 << 20, 4096), (100_003, 1024), (77, 128), (1000, 64)])
def test_vector_add_is_bitwise(rng, dtype, n, block):
    a, b = ((rng.standard_normal(n) * 100).astype(dtype) for _ in range(2))
    gpu, cpu = run_both(add, vg.cdiv(n, block), dict(a=a, b=b, out=a.copy(), BLOCK=block), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


def test_vector_add_bfloat16_and_num_warps(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    n = 3 * 4096 + 5
    a, b = (rng.standard_normal(n).astype(ml_dtypes.bfloat16) for _ in range(2))
    for warps in (None, 1, 4):
        options = {} if warps is None else {"num_warps": warps}
        gpu, cpu = run_both(add, vg.cdiv(n, 4096), dict(a=a, b=b, out=a.copy(), BLOCK=4096),
                            ("out",), **options)
        np.testing.assert_array_equal(gpu["out"].view(np.uint16), cpu["out"].view(np.uint16))


def test_elementwise_ops_and_integer_semantics(rng):
    n = 5000
    x, y = (rng.standard_normal(n).astype(np.float32) * 4 for _ in range(2))
    args = dict(x=x, y=y, out=x.copy(), flags=np.zeros(n, np.int32), scale=np.float32(0.5), BLOCK=300)
    gpu, cpu = run_both(elementwise, vg.cdiv(n, 300), args, ("out", "flags"))
    np.testing.assert_array_equal(gpu["flags"], cpu["flags"])
    close(gpu["out"], cpu["out"], 1e-6)  # sigmoid through libdevice's expf


def test_strided_view_with_edge_tiles(rng):
    big = rng.standard_normal((70, 300)).astype(np.float16)
    x = big[::2, 1:]
    out = np.zeros((35, 299), np.float16)
    gpu, cpu = run_both(block_2d, (vg.cdiv(35, 8), vg.cdiv(299, 64)), dict(x=x, out=out, R=8, C=64),
                        ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


@pytest.mark.parametrize("rows,width", [(48, 64), (48, 72), (33, 64)])
def test_views_on_and_off_the_grid(rng, rows, width):
    """2-D tiles of 16 x 64 over views whose extents are multiples of 16 or not and whose
    row stride is (64) or is not (72): the launch specializes on that (`on_grid`), and
    every variant moves exactly the elements inside."""
    big = rng.standard_normal((rows, width)).astype(np.float16)
    x = big[:, :48]
    out = np.zeros((rows, 48), np.float16)
    gpu, cpu = run_both(block_2d, (vg.cdiv(rows, 16), 1), dict(x=x, out=out, R=16, C=64), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


@pytest.mark.parametrize("rows,cols,tile_cols", [(64, 4096, 4096), (33, 1000, 1000), (5, 50, 64)])
def test_softmax(rng, rows, cols, tile_cols):
    x = (3 * rng.standard_normal((rows, cols))).astype(np.float32)
    gpu, cpu = run_both(softmax, rows, dict(x=x, out=x.copy(), COLS=tile_cols), ("out",))
    close(gpu["out"], cpu["out"], 2e-6)


@pytest.mark.parametrize("cols,tile_cols", [(8192, 8192), (1000, 1000), (700, 1024), (992, 1024)])
def test_layernorm_and_rmsnorm_bfloat16(rng, cols, tile_cols):
    """992 and 8192 are multiples of 16: their masks compare once per run of elements; at
    8192 the tiles are proven inside the rows (no masks at all), at 1000 too but the layout
    pads the tile to 1024 (its padding keeps its test); 700 and 992 run the masked code."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    rows = 16
    x = (rng.standard_normal((rows, cols)) + 0.5).astype(bf)
    w, b = (rng.standard_normal(cols).astype(bf) for _ in range(2))
    args = dict(x=x, w=w, b=b, out=x.copy(), eps=np.float32(1e-5), COLS=tile_cols)
    gpu, cpu = run_both(layernorm, rows, args, ("out",))
    close(gpu["out"], cpu["out"], 1e-2)  # one bfloat16 rounding apart at most
    args.pop("b")
    gpu, cpu = run_both(rmsnorm, rows, args, ("out",))
    close(gpu["out"], cpu["out"], 1e-2)


@pytest.mark.parametrize("grid", [4, 5, 8])
def test_a_grid_past_the_array_runs_the_masked_code(rng, grid):
    """The add's tiles are proven inside the arrays on launches whose grid fits them (4
    tiles of 1024 over 4096 elements: no masks); 5 or 8 tiles run the masked variant, which
    writes nothing past the array (the rest of a poisoned buffer stays as it was)."""
    n = 4096
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    backend.set_backend("cuda")
    buffer = vg.asarray(np.full(n + 2048, -7.0, np.float32))
    add[grid](vg.asarray(a), vg.asarray(b), buffer[:n], BLOCK=1024)
    got = buffer.numpy()
    np.testing.assert_array_equal(got[:n], a + b)
    assert (got[n:] == -7.0).all()


def test_row_reductions_with_keepdims_and_several_rows_per_tile(rng):
    x = rng.standard_normal((30, 100)).astype(np.float32)
    args = dict(x=x, sums=np.zeros(30, np.float32), maxes=x.copy(), R=4, C=100)
    gpu, cpu = run_both(row_stats, vg.cdiv(30, 4), args, ("sums", "maxes"))
    close(gpu["sums"], cpu["sums"], 1e-6)
    np.testing.assert_array_equal(gpu["maxes"], cpu["maxes"])


def test_loop_carried_row_sum(rng):
    x = rng.standard_normal((40, 10_000)).astype(np.float32)
    gpu, cpu = run_both(row_sum, 40, dict(x=x, out=np.zeros(40, np.float32), COLS=4096), ("out",))
    close(gpu["out"], cpu["out"], 1e-5)


def test_reductions_in_a_loop_reuse_shared_memory(rng):
    x = rng.standard_normal((9, 5000)).astype(np.float32)
    gpu, cpu = run_both(loop_max, 9, dict(x=x, out=np.zeros(9, np.float32), COLS=512), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
    np.testing.assert_array_equal(cpu["out"], x.max(1))


def test_argmax_argmin_and_an_if_on_a_reduced_scalar(rng):
    x = rng.standard_normal((22, 48)).astype(np.float32)
    x[3, 7] = x[3, 9] = 50  # ties: the first wins
    x[5, :] = -1  # all equal, max <= 0
    x[6, 2] = np.nan
    args = dict(x=x, amax=np.zeros(22, np.int32), amin=np.zeros(22, np.int32),
                best=np.zeros(6, np.int32), R=4, C=48)
    gpu, cpu = run_both(positions, vg.cdiv(22, 4), args, ("amax", "amin", "best"))
    for name in ("amax", "amin", "best"):
        np.testing.assert_array_equal(gpu[name], cpu[name])


def test_broadcast_through_shared_memory_and_transpose(rng):
    x, y = rng.standard_normal(40).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    gpu, cpu = run_both(outer, vg.cdiv(40, 16), dict(x=x, y=y, out=np.zeros((40, 64), np.float32),
                                                     M=16, N=64), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
    x = rng.standard_normal((100, 70)).astype(np.float32)
    gpu, cpu = run_both(transpose, (vg.cdiv(100, 32), vg.cdiv(70, 32)),
                        dict(x=x, out=np.zeros((70, 100), np.float32), B=32), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


@pytest.mark.parametrize("rows,cols,r,c,axis", [(8, 4096, 4, 1024, 1), (100, 48, 64, 48, 0),
                                                (7, 300, 2, 300, 1), (40, 40, 16, 16, 0)])
def test_cumsum_integers_bit_for_bit(rng, rows, cols, r, c, axis):
    x = rng.integers(-1000, 1000, (rows, cols)).astype(np.int32)
    gpu, cpu = run_both(cumsum_2d, vg.cdiv(rows, r), dict(x=x, out=x.copy(), R=r, C=c, AXIS=axis), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


@pytest.mark.parametrize("r,c,axis", [(4, 1024, 1), (64, 32, 0), (1, 4096, 1)])
def test_cumsum_float32(rng, r, c, axis):
    x = rng.standard_normal((2 * r, c)).astype(np.float32)
    gpu, cpu = run_both(cumsum_2d, 2, dict(x=x, out=x.copy(), R=r, C=c, AXIS=axis), ("out",))
    scale = np.cumsum(np.abs(x.astype(np.float64)).reshape(2, r, c), axis + 1).reshape(x.shape)
    assert np.all(np.abs(gpu["out"] - np.cumsum(x.astype(np.float64).reshape(2, r, c), axis + 1)
                         .reshape(x.shape)) <= 2e-6 * scale)


def test_cumsum_bfloat16_rounds_once(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = rng.standard_normal((6, 300)).astype(ml_dtypes.bfloat16)
    gpu, cpu = run_both(cumsum_2d, 3, dict(x=x, out=x.copy(), R=2, C=300, AXIS=1), ("out",))
    close(gpu["out"], cpu["out"], 1e-2)


def test_rand_is_identical_on_both_backends():
    out = np.zeros((50, 200), np.float32)
    for seed in (0, 7, -3, 2**40 + 5):
        gpu, cpu = run_both(rand_tile, vg.cdiv(50, 8), dict(out=out, seed=seed, R=8, C=128), ("out",))
        np.testing.assert_array_equal(gpu["out"].view(np.uint32), cpu["out"].view(np.uint32))


def test_gather_with_indices_outside_takes_padding(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    idx = rng.integers(-50, 1100, 3000).astype(np.int64)
    gpu, cpu = run_both(permute_gather, vg.cdiv(3000, 256),
                        dict(x=x, idx=idx, out=np.zeros(3000, np.float32), BLOCK=256), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


def test_scatter_of_permuted_rows_and_scatter_add(rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    idx = rng.permutation(64).astype(np.int32)
    gpu, cpu = run_both(scatter_rows, 16, dict(x=x, idx=idx, out=x.copy(), R=4, C=64), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
    values = rng.integers(0, 37, 10_000).astype(np.int32)
    gpu, cpu = run_both(histogram, vg.cdiv(10_000, 300),
                        dict(x=values, counts=np.zeros(37, np.int32), BLOCK=300), ("counts",))
    np.testing.assert_array_equal(gpu["counts"], cpu["counts"])


def test_masked_scatters_skip_the_masked_elements(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    gpu, cpu = run_both(reverse_scatter, vg.cdiv(1000, 128),
                        dict(x=x, out=np.full(1000, np.nan, np.float32), B=128), ("out",))
    np.testing.assert_array_equal(gpu["out"], x[::-1])
    np.testing.assert_array_equal(cpu["out"], x[::-1])
    values = rng.integers(-5, 60, 1000).astype(np.int32)
    gpu, cpu = run_both(masked_histogram, vg.cdiv(1000, 300),
                        dict(x=values, counts=np.zeros(37, np.int32), limit=37, BLOCK=300), ("counts",))
    want = np.bincount(values[(values >= 0) & (values < 37)], minlength=37) - 7  # from the poison
    np.testing.assert_array_equal(gpu["counts"], want)
    np.testing.assert_array_equal(cpu["counts"], want)


def test_scatter_outside_the_array_is_a_bounds_error(rng):
    values = rng.integers(0, 37, 600).astype(np.int32)
    values[123] = 40
    backend.set_backend("cuda")
    counts = vg.asarray(np.zeros(37, np.int32))
    histogram[2](vg.asarray(values), counts, BLOCK=300)
    with pytest.raises(vg.BoundsError, match=r"counts\[40\] with shape \(37,\) in kernel histogram"):
        vg.synchronize()
    expected = np.bincount(np.delete(values, 123), minlength=37)  # the faulting element is skipped
    np.testing.assert_array_equal(counts.numpy(), expected)


def test_atomic_add_of_partial_sums(rng):
    x = rng.standard_normal((12, 1000)).astype(np.float32)
    gpu, cpu = run_both(split_sum, (3, vg.cdiv(1000, 256)),
                        dict(x=x, out=np.zeros(12, np.float32), R=4, C=256), ("out",))
    close(gpu["out"], cpu["out"], 1e-5)


@pytest.mark.parametrize("n", [-2**40, -16, -1, 0, 8, 16, 992, 1000, 1024, 2**31 - 1, 2**40])
def test_masks_against_multiples_of_16_and_others(rng, n):
    """`arange(BLOCK) < n` with n a multiple of 16 (compared once per run) or not, near and
    past every clamp, on 4 and 8 warps."""
    from tests.fakecuda.kernels import keep_prefix

    x = rng.standard_normal(4096).astype(np.float32)
    want = np.where(np.arange(4096) % 1024 < n, x, 0.0)
    for warps in (4, 8):
        out = vg.asarray(np.full_like(x, np.nan))
        keep_prefix[4](vg.asarray(x), out, n, BLOCK=1024, num_warps=warps)
        np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("rows,cols,tile_cols,r,warps", [(8, 8192, 8192, 2, 16), (12, 1000, 1024, 4, 8),
                                                         (6, 96, 128, 2, 4)])
def test_row_statistics_kept_in_variables(rng, rows, cols, tile_cols, r, warps):
    """A (r, 1) row mean in a variable (laid out where the reduction makes it) broadcast
    back against its rows, several rows per block."""
    x = rng.standard_normal((rows, cols)).astype(np.float32) + 3
    args = dict(x=x, out=x.copy(), n=cols, R=r, C=tile_cols)
    gpu, cpu = run_both(center_rows, rows // r, args, ("out",), num_warps=warps)
    close(gpu["out"], cpu["out"], 1e-5)


def test_triton_idioms_match_the_cpu_backend(rng):
    """New axes by subscript, t.to, t.mean, tile.broadcast_to and tile.clamp: frontend
    spellings of nodes the other kernels here cover, on edge tiles."""
    from test_tile_codegen import center_and_clamp, pairwise

    x, y = rng.standard_normal(50).astype(np.float32), rng.standard_normal(70).astype(np.float32)
    gpu, cpu = run_both(pairwise, (vg.cdiv(50, 16), vg.cdiv(70, 32)),
                        dict(x=x, y=y, out=np.zeros((50, 70), np.float32), M=16, N=32), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
    x = (2 * rng.standard_normal((10, 64))).astype(np.float16)
    args = dict(x=x, means=np.zeros(10, np.float32), out=np.zeros_like(x), R=4, C=64)
    gpu, cpu = run_both(center_and_clamp, vg.cdiv(10, 4), args, ("means", "out"))
    close(gpu["means"], cpu["means"], 1e-6)
    close(gpu["out"], cpu["out"], 2 ** -10)  # sums in another order may move a float16 ulp
