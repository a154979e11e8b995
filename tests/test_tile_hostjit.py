"""The tile lowering's GPU code, run on the host CPU (`host_jit`: the same LLVM IR, each
thread of a block an OS thread where they cooperate), against the cpu backend on the same
inputs: vector and masked loads of every width and dtype (a statement's loads grouped
behind one branch, narrow elements packed in words), stores, edge tiles, strided views,
gathers, scatters and their bounds faults, atomic adds, Philox; and reductions, scans,
layout conversions and every example's kernels, with shuffles and barriers."""
from __future__ import annotations

import numpy as np
import pytest

import host_jit
import verdigris as vg
from verdigris import tile
from verdigris import types as T
from verdigris.codegen import checks
from verdigris.examples.tile_bias_gelu import bias_gelu
from verdigris.examples.tile_cumsum import cumsum_rows
from verdigris.examples.tile_dropout import dropout
from verdigris.examples.tile_layernorm import layernorm
from verdigris.examples.tile_rmsnorm import rmsnorm
from verdigris.examples.tile_row_reduce import row_max, row_sum
from verdigris.examples.tile_softmax import softmax, softmax_online
from verdigris.examples.tile_transpose import transpose
from verdigris.examples.tile_vector_add import add
from verdigris.runtime import backend
from test_tile_codegen import (block_2d, cumsum_2d, elementwise, histogram, loop_max, outer, permute_gather,
                               positions, rand_tile, row_stats, scatter_rows, split_sum)


@tile.kernel
def fused(a, b, c, out, BLOCK: vg.constexpr):
    """Three loads of one statement (grouped), two of them of a padded-or-not shape."""
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(a, index=(i,), shape=(BLOCK,)) * 2
               + tile.load(b, index=(i,), shape=(BLOCK,), padding=1).astype(out.dtype)
               - tile.load(c, index=(i,), shape=(BLOCK,)).astype(out.dtype))


@tile.kernel
def fold(x, out, BLOCK: vg.constexpr):
    """Blocks i and i + 4, ... add their tiles into tile i % 4 of `out`."""
    i = tile.bid(0)
    tile.atomic_add(out, (i % 4,), tile.load(x, index=(i,), shape=(BLOCK,)))


@tile.kernel
def shifted_rows(x, out, shift, R: vg.constexpr, C: vg.constexpr):
    """Block i copies x's row tile i - shift (padding where it lies outside) to out's tile i."""
    i = tile.bid(0)
    tile.store(out, index=(i, 0), tile=tile.load(x, index=(i - shift, 0), shape=(R, C), padding=7.0))


def on_cpu(kernel, grid, **arguments) -> dict:
    """The cpu backend's outputs for the same launch (arrays copied first)."""
    copies = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arguments.items()}
    backend.set_backend("cpu")
    kernel[grid](**copies)
    return copies


def both(kernel, grid, **arguments) -> tuple:
    want = on_cpu(kernel, grid, **arguments)
    assert host_jit.run(kernel, grid, **arguments) is None
    return arguments, want


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8, np.int64, np.float64, np.bool_])
@pytest.mark.parametrize("n,block", [(10_000, 1024), (77, 128), (1000, 64), (4096, 4096), (33, 8)])
def test_vector_add_bit_for_bit(rng, dtype, n, block):
    a, b = ((rng.standard_normal(n) * 50).astype(dtype) for _ in range(2))
    got, want = both(add, vg.cdiv(n, block), a=a, b=b, out=np.full(n, 3, dtype), BLOCK=block)
    np.testing.assert_array_equal(got["out"], want["out"])


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_pairs_stay_packed_and_round_once(rng):
    n = 3 * 4096 + 5
    a, b = (bfloat16_bits(rng.standard_normal(n)) for _ in range(2))
    out = np.zeros(n, np.uint16)
    widen = lambda bits: (bits.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
    host_jit.run(add, vg.cdiv(n, 4096), dtypes={k: T.bfloat16 for k in "a b out".split()}, a=a, b=b, out=out,
                 BLOCK=4096)
    np.testing.assert_array_equal(out, bfloat16_bits(widen(a) + widen(b)))


@pytest.mark.parametrize("n,block,warps", [(5000, 1024, None), (300, 256, 2), (4096, 512, 4)])
def test_a_statements_grouped_loads(rng, n, block, warps):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float16)
    c = rng.integers(-9, 9, n).astype(np.int8)
    args = dict(a=a, b=b, c=c, out=np.full(n, np.nan, np.float32), BLOCK=block)
    want = on_cpu(fused, vg.cdiv(n, block), **args)
    assert host_jit.run(fused, vg.cdiv(n, block), num_warps=warps, **args) is None
    np.testing.assert_array_equal(args["out"], want["out"])


def test_elementwise_ops_match(rng):
    n = 5000
    x, y = (rng.standard_normal(n).astype(np.float32) * 4 for _ in range(2))
    got, want = both(elementwise, vg.cdiv(n, 300), x=x, y=y, out=np.zeros(n, np.float32),
                     flags=np.zeros(n, np.int32), scale=np.float32(0.5), BLOCK=300)
    np.testing.assert_array_equal(got["flags"], want["flags"])
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)  # the C library's expf


def test_strided_views_with_edge_tiles(rng):
    big = rng.standard_normal((70, 300)).astype(np.float16)
    got, want = both(block_2d, (vg.cdiv(35, 8), vg.cdiv(299, 64)), x=big[::2, 1:],
                     out=np.zeros((35, 299), np.float16), R=8, C=64)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_bias_gelu_example(rng):
    x = rng.standard_normal((30, 700)).astype(np.float32)
    bias = rng.standard_normal(700).astype(np.float32)
    got, want = both(bias_gelu, (vg.cdiv(30, 8), vg.cdiv(700, 256)), x=x, bias=bias,
                     out=np.zeros((30, 700), np.float32), R=8, C=256)
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)


def test_dropout_masks_are_philox_bit_for_bit(rng):
    n = 20_000
    x = rng.standard_normal(n).astype(np.float32)
    got, want = both(dropout, vg.cdiv(n, 2048), x=x, out=np.zeros(n, np.float32), seed=12345,
                     p=np.float32(0.3), BLOCK=2048)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_gather_with_indices_outside_takes_padding(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    idx = rng.integers(-50, 1100, 3000).astype(np.int64)
    got, want = both(permute_gather, vg.cdiv(3000, 256), x=x, idx=idx, out=np.zeros(3000, np.float32),
                     BLOCK=256)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_scatter_add_of_a_padded_tile(rng):
    values = rng.integers(0, 37, 10_000).astype(np.int32)
    got, want = both(histogram, vg.cdiv(10_000, 300), x=values, counts=np.zeros(37, np.int32), BLOCK=300)
    np.testing.assert_array_equal(got["counts"], want["counts"])


def test_scatter_outside_the_array_records_a_fault_and_skips_the_element(rng):
    values = rng.integers(0, 37, 600).astype(np.int32)
    values[123] = 40
    counts = np.zeros(37, np.int32)
    record = host_jit.run(histogram, 2, x=values, counts=counts, BLOCK=300)
    assert record is not None
    assert record[checks.RECORD_INDEX] == 40 and record[checks.RECORD_EXTENT] == 37
    np.testing.assert_array_equal(counts, np.bincount(np.delete(values, 123), minlength=37))


def test_atomic_add_of_whole_tiles(rng):
    x = rng.standard_normal(16 * 256 - 7).astype(np.float32)
    got, want = both(fold, 16, x=x, out=np.zeros(4 * 256, np.float32), BLOCK=256)
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- cooperating threads


def close(got, want, rtol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.max(np.abs(want)))


def test_softmax_one_pass_and_online(rng):
    x = (3 * rng.standard_normal((5, 1000))).astype(np.float32)
    got, want = both(softmax, 5, x=x, out=np.zeros_like(x), COLS=1000)
    close(got["out"], want["out"], 1e-6)
    x = (3 * rng.standard_normal((2, 5000))).astype(np.float32)
    got, want = both(softmax_online, 2, x=x, out=np.zeros_like(x), BLOCK=1024)
    close(got["out"], want["out"], 1e-6)


@pytest.mark.parametrize("cols,tile_cols,warps", [(1000, 1024, None), (300, 512, 2)])
def test_layernorm_and_rmsnorm(rng, cols, tile_cols, warps):
    x = (rng.standard_normal((3, cols)) + 0.5).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    args = dict(x=x, w=w, b=b, out=np.zeros_like(x), eps=np.float32(1e-5), COLS=tile_cols)
    want = on_cpu(layernorm, 3, **args)
    host_jit.run(layernorm, 3, num_warps=warps, **args)
    close(args["out"], want["out"], 1e-6)
    args = dict(x=x, w=w, out=np.zeros_like(x), eps=np.float32(1e-5), COLS=tile_cols)
    want = on_cpu(rmsnorm, 3, **args)
    host_jit.run(rmsnorm, 3, num_warps=warps, **args)
    close(args["out"], want["out"], 1e-6)


def test_row_reductions_in_loops(rng):
    x = rng.standard_normal((3, 5000)).astype(np.float32)
    got, want = both(row_sum, 3, x=x, out=np.zeros(3, np.float32), COLS=1024)
    # two orders of 5000 float32 additions: they differ by up to ~eps * log2(n) * sum |x|
    bound = 16 * np.finfo(np.float32).eps * np.abs(x.astype(np.float64)).sum(axis=1)
    assert (np.abs(got["out"].astype(np.float64) - want["out"]) <= bound).all()
    exact = x.astype(np.float64).sum(axis=1)
    assert (np.abs(got["out"] - exact) <= bound).all()
    got, want = both(row_max, 3, x=x, out=np.zeros(3, np.float32), COLS=1024)
    np.testing.assert_array_equal(got["out"], want["out"])
    got, want = both(loop_max, 3, x=x, out=np.zeros(3, np.float32), COLS=512)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_keepdims_argmax_and_an_if_on_a_reduced_scalar(rng):
    x = rng.standard_normal((10, 100)).astype(np.float32)
    got, want = both(row_stats, 3, x=x, sums=np.zeros(10, np.float32), maxes=x.copy(), R=4, C=100)
    close(got["sums"], want["sums"], 1e-6)
    np.testing.assert_array_equal(got["maxes"], want["maxes"])
    x = rng.standard_normal((10, 48)).astype(np.float32)
    x[3, 7] = x[3, 9] = 50
    x[5, :] = -1
    x[6, 2] = np.nan
    got, want = both(positions, 3, x=x, amax=np.zeros(10, np.int32), amin=np.zeros(10, np.int32),
                     best=np.zeros(3, np.int32), R=4, C=48)
    for name in ("amax", "amin", "best"):
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("r,c,axis", [(4, 1024, 1), (64, 48, 0), (2, 300, 1), (16, 16, 0)])
def test_cumsum_along_either_axis_is_exact_on_integers(rng, r, c, axis):
    x = rng.integers(-1000, 1000, (2 * r, c)).astype(np.int32)
    got, want = both(cumsum_2d, 2, x=x, out=np.zeros_like(x), R=r, C=c, AXIS=axis)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_cumsum_example_carries_between_tiles(rng):
    x = rng.standard_normal((3, 3000)).astype(np.float32)
    got, want = both(cumsum_rows, 3, x=x, out=np.zeros_like(x), COLS=1024)
    close(got["out"], want["out"], 1e-5)


@pytest.mark.parametrize("b,warps", [(32, None), (64, 2)])
def test_transpose_through_shared_memory(rng, b, warps):
    x = rng.standard_normal((100, 70)).astype(np.float32)
    args = dict(x=x, out=np.zeros((70, 100), np.float32), B=b)
    host_jit.run(transpose, (vg.cdiv(100, b), vg.cdiv(70, b)), num_warps=warps, **args)
    np.testing.assert_array_equal(args["out"], x.T)


def test_reshape_broadcast_and_rand(rng):
    x, y = rng.standard_normal(40).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    got, want = both(outer, 3, x=x, y=y, out=np.zeros((40, 64), np.float32), M=16, N=64)
    np.testing.assert_array_equal(got["out"], want["out"])
    got, want = both(rand_tile, 3, out=np.zeros((20, 200), np.float32), seed=-3, R=8, C=128)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_scatter_of_rows_and_atomic_partial_sums(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    idx = rng.permutation(16).astype(np.int32)
    got, want = both(scatter_rows, 4, x=x, idx=idx, out=x.copy(), R=4, C=64)
    np.testing.assert_array_equal(got["out"], want["out"])
    x = rng.standard_normal((8, 1000)).astype(np.float32)
    got, want = both(split_sum, (2, 4), x=x, out=np.zeros(8, np.float32), R=4, C=256)
    close(got["out"], want["out"], 1e-5)


@pytest.mark.parametrize("shift", [0, 1, -1, -(2**27), 2**27, 2**40, -(2**40)])
def test_row_tiles_of_arrays_on_the_grid_past_either_end(rng, shift):
    """Arrays whose extents are multiples of 16 are on the grid: their accesses have no
    rolled path, and each vector's bounds test is 32-bit with the tile's start clamped.
    Tiles of 32 rows over 48 (the second half outside), and tiles far before the first row
    or past the last, where a 32-bit start would wrap: padding is read, nothing is written
    outside."""
    x = rng.standard_normal((48, 64)).astype(np.float32)
    got, want = both(shifted_rows, 3, x=x, out=np.zeros((48, 64), np.float32), shift=shift, R=32, C=64)
    np.testing.assert_array_equal(got["out"], want["out"])


@pytest.mark.parametrize("dtype,cols", [(np.float32, 512), (np.int8, 1024)])
def test_row_reductions_combined_in_two_stages(rng, dtype, cols):
    """16 rows over 2 warps, each warp a half of every row (512 float32 or 1024 int8
    columns): 16 outputs per thread, each joining both warps' partials (32 partials per
    thread, past `reduce.TWO_STAGE_AFTER`): the first warp combines them in a butterfly and
    writes the results back, a second barrier, then every thread reads them. Sums, maxima
    (int8 partials travel as i32), and argmax/argmin's (value, position) pairs."""
    from verdigris.tile import reduce

    assert 2 * 16 > reduce.TWO_STAGE_AFTER
    x = (rng.standard_normal((32, cols)) * 20).astype(dtype)
    args = dict(x=x, sums=np.zeros(32, dtype), maxes=np.zeros_like(x), R=16, C=cols)
    want = on_cpu(row_stats, 2, **args)
    assert host_jit.run(row_stats, 2, num_warps=2, **args) is None
    close(args["sums"], want["sums"], 1e-5) if dtype == np.float32 else \
        np.testing.assert_array_equal(args["sums"], want["sums"])
    np.testing.assert_array_equal(args["maxes"], want["maxes"])
    x[3, 7] = x[3, 300] = 100
    args = dict(x=x, amax=np.zeros(32, np.int32), amin=np.zeros(32, np.int32), best=np.zeros(2, np.int32),
                R=16, C=cols)
    want = on_cpu(positions, 2, **args)
    assert host_jit.run(positions, 2, num_warps=2, **args) is None
    for name in ("amax", "amin", "best"):
        np.testing.assert_array_equal(args[name], want[name])


# ------------------------------------------------- the variant that uses the bounds proofs


MARGIN = 64  # elements before and after a poisoned view, a multiple of 16 bytes for every dtype


def poisoned_view(shape, dtype, pitch: int, fill):
    """A 2-d view of `shape` with rows `pitch` elements apart, its first at a 16-byte
    boundary, the rest of its buffer (and a margin before and after it) filled with
    `fill`: (view, whole buffer, mask of the buffer outside the view)."""
    rows, cols = shape
    whole = np.full(pitch * rows + 2 * MARGIN, fill, dtype)
    view = whole[MARGIN:MARGIN + pitch * rows].reshape(rows, pitch)[:, :cols]
    outside = np.ones(whole.shape, bool)
    outside[MARGIN:MARGIN + pitch * rows].reshape(rows, pitch)[:, :cols] = False
    assert view.ctypes.data % 16 == 0
    return view, whole, outside


@pytest.mark.parametrize("pitch", [512, 514, 520])
def test_layernorm_proven_inside_rows_at_any_pitch(rng, pitch):
    """LayerNorm's tiles are proven inside its arrays on launches whose rows are at least
    COLS wide: that variant has no masks. Rows of views 514 floats apart start off 16-byte
    boundaries, where a vector access faults (`host_jit.Misaligned`): they take the
    element-by-element path; 520 apart (off the grid too) and 512 the vector path. The
    results are the cpu backend's, and nothing outside the arrays is touched."""
    x = poisoned_view((3, 512), np.float32, pitch, np.nan)[0]
    x[:] = rng.standard_normal((3, 512)) + 0.5
    out, whole, outside = poisoned_view((3, 512), np.float32, pitch, -7.0)
    w, b = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    args = dict(x=x, w=w, b=b, out=out, eps=np.float32(1e-5), COLS=512)
    want = on_cpu(layernorm, 3, **{**args, "out": np.zeros((3, 512), np.float32)})
    assert host_jit.run(layernorm, 3, proven=True, **args) is None
    close(out, want["out"], 1e-6)
    assert (whole[outside] == -7.0).all()


@tile.kernel
def strided_sum(x, out, step, n):
    """Tiles x[i], x[i + step], ... of one element while i < n, i a 64-bit int."""
    i = vg.int64(tile.bid(0))
    acc = tile.zeros((1,), vg.float32)
    while i < n:
        acc += tile.load(x, index=(i,), shape=(1,))
        i += step % 9223372036854775807
    tile.store(out, index=(tile.bid(0),), tile=acc)


def test_a_tile_index_stepped_past_int64_keeps_its_mask():
    """i + step past 2**63 - 1 wraps to a negative i, still below n: block 2 reads x[2], then
    x[-2**63] (at x[0]'s address once scaled by 4 bytes) and x[-2], which the mask turns
    into padding. Taken as exact (i >= 0, i < n <= x.shape[0]), the load was proven inside x
    and read the poison before it."""
    x, whole, _ = poisoned_view((1, 4), np.float32, 4, -700.0)
    x = x[0]
    x[:] = [1, 10, 100, 1000]
    args = dict(x=x, out=np.zeros(4, np.float32), step=np.int64(2**63 - 2), n=np.int64(4))
    want = on_cpu(strided_sum, 4, **args)
    np.testing.assert_array_equal(want["out"], [1, 10, 100, 1000])
    assert host_jit.run(strided_sum, 4, proven=True, **args) is None
    np.testing.assert_array_equal(args["out"], want["out"])


@tile.kernel
def at_tile_k(x, out, k, B: vg.constexpr):
    t = tile.load(x, index=(k,), shape=(B,), padding=-1.0)
    tile.store(out, index=(tile.bid(0),), tile=t)
    tile.store(out, index=(k + 1,), tile=t + 100)


@pytest.mark.parametrize("k", [2**62, -2**63, 2**61 + 1, 3])
def test_a_tile_index_whose_first_element_passes_int64_is_outside(k):
    """Tile k of 4 elements starts at element 4k: for k = 2**62 that is past int64, and
    wrapped around it was element 0, so the load read x[0:4] where it takes padding and
    the store at k + 1 wrote out[4:8] (a tile of another block's, as far as the race checker
    knew); as on the cpu backend, both are outside the arrays."""
    args = dict(x=np.arange(16, dtype=np.float32), out=np.zeros(16, np.float32), k=np.int64(k), B=4)
    want = on_cpu(at_tile_k, 1, **args)
    assert host_jit.run(at_tile_k, 1, **args) is None
    np.testing.assert_array_equal(args["out"], want["out"])


@tile.kernel
def walk_while_positive(x, out):
    k = vg.uint32(0)
    while tile.sum(tile.load(x, index=(k,), shape=(1,))) > 0.0 and k < 40:
        k += 1
    tile.store(out, index=(tile.bid(0),), tile=tile.full((1,), vg.float32(k)))


def test_a_tile_load_in_a_while_condition_reads_with_what_the_loop_leaves():
    """The condition's last check, the one that fails, reads x[40]: inside the loop k < 40
    narrows k to 0..39, but not where the load comes first. (The load was proven inside x
    under `40 <= x.shape[0]` and read past it, `host_jit.OutOfBounds`.) It keeps its mask,
    and its condition is not asked of launches."""
    from verdigris import safety

    x = poisoned_view((1, 40), np.float32, 40, -700.0)[0][0]
    x[:] = 1
    args = dict(x=x, out=np.zeros(1, np.float32))
    want = on_cpu(walk_while_positive, 1, **args)
    assert host_jit.run(walk_while_positive, 1, proven=True, **args) is None
    np.testing.assert_array_equal(args["out"], want["out"])
    kernel = walk_while_positive.specialize_types(dict(x=host_jit._spec(x), out=host_jit._spec(args["out"])))
    safety.check(kernel)
    assert [t for _, t in kernel.facts["bounds_preconditions"]] == ["grid_dim(0) <= out.shape[0]"]


@tile.kernel
def narrowed(x, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=t.astype(out.dtype))


def double_rounding_cases(rng, bits: int) -> np.ndarray:
    """Doubles just off a tie of a float with `bits` significant bits, closer than float32
    can tell: rounded to float32 first they land on the tie (and go to even), rounded once
    they go the other way; then random doubles, the edges and the specials."""
    ties = (rng.integers(2 ** (bits - 1), 2 ** bits, 300) * 2 + 1) * 2.0 ** -bits  # in [1, 2)
    nudge = 2.0 ** -40 * rng.choice([-1.0, 1.0], 300)
    scaled = (ties + nudge) * 2.0 ** rng.integers(-10, 10, 300) * rng.choice([-1.0, 1.0], 300)  # float16 range
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e300, 1e-300, 3.3961e38, 3.3895e38,
             65519.99, 65520.0, 2.0 ** -133, 2.0 ** -134 * 1.0000001, 2.0 ** -25 * 1.0000001]
    return np.concatenate([scaled, rng.standard_normal(300) * 50, edges]).astype(np.float64)


@pytest.mark.parametrize("target, bits", [(np.float16, 11), ("bfloat16", 8)])
def test_a_double_narrowed_to_16_bits_is_rounded_once(rng, target, bits):
    import ml_dtypes  # NumPy's own conversion, one rounding

    x = double_rounding_cases(rng, bits)
    with np.errstate(over="ignore"):  # the huge edges become infinities, as they should
        want = x.astype(ml_dtypes.bfloat16 if target == "bfloat16" else target).view(np.uint16)
        twice = x.astype(np.float32).astype(ml_dtypes.bfloat16 if target == "bfloat16" else target)
    assert (twice.view(np.uint16) != want).sum() > 100  # the cases tell one rounding from two
    out = np.zeros(x.size, np.uint16 if target == "bfloat16" else np.float16)
    host_jit.run(narrowed, vg.cdiv(x.size, 256), dtypes={"out": T.bfloat16} if target == "bfloat16" else None,
                 x=x, out=out, BLOCK=256)
    got = out.view(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(np.isnan(out.view(ml_dtypes.bfloat16 if target == "bfloat16" else np.float16)
                                           .astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_the_harness_takes_turns_between_barriers_and_names_threads_left_waiting():
    """The harness itself: threads run in `sequence` order up to each barrier, and a barrier
    some threads never reach is reported with the waiting threads (not a hang)."""
    order = []

    def body(skip_odd):
        tid = host_jit._current.tid
        order.append(("before", tid))
        if not (skip_odd and tid % 2):
            host_jit._current.block.barrier()
        order.append(("after", tid))

    for sequence in ([0, 1, 2], [2, 1, 0]):
        order.clear()
        host_jit._Block(sequence).run_threads(lambda: body(False))
        assert order == [("before", t) for t in sequence] + [("after", t) for t in sequence]
    with pytest.raises(RuntimeError, match=r"threads \[0, 2\] wait at a barrier"):
        host_jit._Block([0, 1, 2, 3]).run_threads(lambda: body(True))
