"""Warp operations beyond shuffles and votes on the cpu backend: shuffles within segments
(`width=`), `reduce_*`, `match_any`/`match_all`, `activemask()` and the fences.

Each kernel runs on the cpu backend (IR straight from the frontend, through `run_simt`, as
tests/test_simt_coop.py does) against a NumPy reference of the semantics `ir.nodes.WarpOp`
gives, per warp, for whole and partial last warps (blocks of 48 threads: a warp of 16) and
two-dimensional blocks. Reductions are compared bit for bit with the IR's tree order (lane i
takes in lane i + d for d = 16, 8, 4, 2, 1), which the GPU code follows too. Then what a
user gets wrong, refused by the frontend at the line.
"""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.errors import DivergenceError

from located import assert_points_at
from test_simt_coop import build, run

BLOCKS = [64, 48, (8, 6)]  # whole warps, a partial last warp, a 2-d block with one


def linear_ids(block, blocks: int) -> tuple:
    """(each thread's index in the output, its warp's first index, its lane) for `blocks`
    blocks of `block` threads, numbered as the kernels below number them."""
    threads = int(np.prod(block))
    index = np.arange(threads * blocks)
    lane = index % threads % 32
    return index, index - lane, lane


def grid_of(block, blocks: int):
    return blocks if isinstance(block, int) else (blocks, 1)


def warps_of(values: np.ndarray, block, blocks: int) -> list:
    """The index arrays of each warp's lanes, in lane order."""
    threads = int(np.prod(block))
    index = np.arange(threads * blocks)
    warp = index // threads * 100 + index % threads // 32
    return [np.flatnonzero(warp == w) for w in np.unique(warp)]


# ----------------------------------------------------------------------------- segments


@simt.kernel
def segment_shuffles(x, arg, out, W: vg.constexpr):
    i = simt.global_id(0)
    v = x[i]
    a = arg[i]
    out[0, i] = simt.shfl_down(v, a, width=W)
    out[1, i] = simt.shfl_up(v, a, width=W)
    out[2, i] = simt.shfl_xor(v, a, width=W)
    out[3, i] = simt.shfl_idx(v, a, width=W)
    out[4, i] = simt.shfl_down(v, 3, W)  # the width positionally, as CUDA's
    out[5, i] = simt.shfl_up(v, 1, width=W)
    out[6, i] = simt.shfl_xor(v, 1, width=W)
    out[7, i] = simt.shfl_idx(v, W - 1, width=W)


def segment_reference(x, arg, block: int, width: int) -> np.ndarray:
    """What each row of `segment_shuffles` holds: the value at the source position of the
    lane's segment, or the lane's own where the position is outside 0..width-1."""
    index, first, lane = linear_ids(block, len(x) // block)
    position = lane % width
    start = first + lane - position

    def read(wanted):
        inside = (wanted >= 0) & (wanted < width)
        return x[np.where(inside, start + wanted, index)]

    a = arg.astype(np.int64)
    return np.stack([read(position + a), read(position - a), read(position ^ a), read(a),
                     read(position + 3), read(position - 1), read(position ^ 1),
                     read(np.full_like(a, width - 1))])


SEGMENTS = [(64, w) for w in (1, 2, 4, 8, 16, 32)] + [(48, w) for w in (4, 16)]  # (block, width)
SEGMENT_DTYPES = [np.int32, np.float64, np.int8]


def segment_inputs(rng, n: int, dtype) -> tuple:
    """(x, arg, poisoned out) for `segment_shuffles`: arguments inside and outside every
    segment, negative and past 32 included."""
    x = rng.integers(-100, 100, n).astype(dtype)
    arg = rng.choice([0, 1, 2, 3, 5, 7, 8, 15, 16, 31, 32, -1, -9, 2**31 - 1, -2**31], n)
    return x, arg.astype(np.int32), np.full((8, n), 77, dtype)


@pytest.mark.parametrize("block,width", SEGMENTS)
@pytest.mark.parametrize("dtype", SEGMENT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_shuffles_stay_in_their_segment(rng, block, width, dtype):
    x, arg, out = segment_inputs(rng, block * 3, dtype)
    run(segment_shuffles, 3, block, x, arg, out, W=width)
    np.testing.assert_array_equal(out, segment_reference(x, arg, block, width))


# ----------------------------------------------------------------------------- reductions


@simt.kernel
def reductions(x, out, INTS: vg.constexpr):
    threads = simt.block_dim(0) * simt.block_dim(1)
    i = int(simt.block_id(0)) * threads + simt.thread_id(1) * simt.block_dim(0) + simt.thread_id(0)
    v = x[i]
    out[0, i] = simt.reduce_add(v)
    out[1, i] = simt.reduce_min(v)
    out[2, i] = simt.reduce_max(v)
    if INTS:
        out[3, i] = simt.reduce_and(v)
        out[4, i] = simt.reduce_or(v)
        out[5, i] = simt.reduce_xor(v)


def _combines(dtype) -> list:
    integer = np.dtype(dtype).kind in "iu"
    return [np.add, np.minimum if integer else np.fmin, np.maximum if integer else np.fmax] + \
        ([np.bitwise_and, np.bitwise_or, np.bitwise_xor] if integer else [])


def tree(values: np.ndarray, combine):
    """`values` (one warp's lanes) combined in the IR's order: lane i takes in lane i + d,
    where the warp has it, for d = 16, 8, 4, 2, 1; lane 0's result."""
    slots = list(values)
    d = 16
    with np.errstate(all="ignore"):
        while d:
            for i in range(min(d, len(slots) - d)):
                slots[i] = combine(slots[i], slots[i + d])
            d //= 2
    return slots[0]


def draw(rng, dtype, n: int) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "f":
        x = (rng.standard_normal(n) * 100).astype(dtype)  # 32 of them stay within float16
        x[rng.random(n) < 0.05] = -0.0
        x[32:64:7] = np.nan  # in the second warp: min and max ignore a NaN, add spreads it
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


REDUCTION_DTYPES = [np.int32, np.uint32, np.int8, np.uint16, np.int64, np.uint64, np.float32,
                    np.float64, np.float16]


@pytest.mark.parametrize("block", BLOCKS, ids=str)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES, ids=lambda d: np.dtype(d).name)
def test_reductions_combine_every_lane_of_the_warp_in_tree_order(rng, block, dtype):
    blocks = 3
    n = int(np.prod(block)) * blocks
    x = draw(rng, dtype, n)
    x[:32] = x[0]  # a warp of one value: and, or, min and max of it are it
    integer = np.dtype(dtype).kind in "iu"
    out = np.full((6, n), 7, dtype)
    run(reductions, grid_of(block, blocks), block, x, out, INTS=integer)
    for lanes in warps_of(x, block, blocks):
        for row, combine in enumerate(_combines(dtype)):
            want = tree(x[lanes], combine)
            np.testing.assert_array_equal(out[row, lanes], np.full(len(lanes), want, dtype),
                                          err_msg=f"{combine.__name__} over lanes {lanes[0]}..")
    if not integer:  # the tree's sum is a sum: near float64's, where no NaN took part
        for lanes in warps_of(x, block, blocks):
            exact = x[lanes].astype(np.float64)
            if not np.isnan(exact).any():  # five roundings, each within eps of the partial sum
                bound = 5 * np.finfo(dtype).eps * np.abs(exact).sum()
                assert abs(float(out[0, lanes[0]]) - exact.sum()) <= bound


# ----------------------------------------------------------------------------- matches


@simt.kernel
def matches(x, out):
    threads = simt.block_dim(0) * simt.block_dim(1)
    i = int(simt.block_id(0)) * threads + simt.thread_id(1) * simt.block_dim(0) + simt.thread_id(0)
    v = x[i]
    out[0, i] = simt.match_any(v)
    out[1, i] = simt.match_all(v)


def match_draw(rng, dtype, n: int) -> np.ndarray:
    """Few distinct values, so lanes match: for floats -0.0 and 0.0 and a NaN among them,
    for 64-bit integers values that differ only in their high word."""
    if dtype is np.bool_:
        return rng.random(n) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.choice(np.array([0.0, -0.0, 1.5, np.nan, 3.0], dtype), n)
    choices = [1, 3, 1 << 40, (1 << 40) + 1] if np.dtype(dtype).itemsize == 8 else [0, 1, 3, 100]
    return np.array(choices, dtype)[rng.integers(0, 4, n)]


def match_reference(x: np.ndarray, block, blocks: int) -> np.ndarray:
    bits = x.view(f"u{x.dtype.itemsize}")
    want = np.zeros((2, len(x)), np.uint32)
    for lanes in warps_of(x, block, blocks):
        for j, k in enumerate(lanes):
            want[0, k] = sum(1 << m for m, other in enumerate(lanes) if bits[other] == bits[k])
        want[1, lanes] = (1 << len(lanes)) - 1 if (bits[lanes] == bits[lanes[0]]).all() else 0
    return want


@pytest.mark.parametrize("block", BLOCKS, ids=str)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float32, np.float64,
                                   np.float16], ids=lambda d: np.dtype(d).name)
def test_matches_compare_the_bits_of_each_lanes_value(rng, block, dtype):
    blocks = 3
    n = int(np.prod(block)) * blocks
    x = match_draw(rng, dtype, n)
    x[:32] = x[0]  # a warp whose lanes all match
    out = np.full((2, n), 0xABABABAB, np.uint32)
    run(matches, grid_of(block, blocks), block, x, out)
    np.testing.assert_array_equal(out, match_reference(x, block, blocks))


# ----------------------------------------------------------------------------- activemask


@simt.kernel
def active_lanes(out):
    threads = simt.block_dim(0) * simt.block_dim(1)
    i = int(simt.block_id(0)) * threads + simt.thread_id(1) * simt.block_dim(0) + simt.thread_id(0)
    out[0, i] = simt.activemask()
    m = vg.uint32(0)
    if simt.lane_id() % 3 == 0:  # not a collective: fine under a lane's own condition
        m = simt.activemask()
    out[1, i] = m


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_activemask_names_the_lanes_on_the_callers_path(block):
    blocks = 2
    n = int(np.prod(block)) * blocks
    out = np.full((2, n), 0xABABABAB, np.uint32)
    run(active_lanes, grid_of(block, blocks), block, out)
    for lanes in warps_of(out[0], block, blocks):
        np.testing.assert_array_equal(out[0, lanes], (1 << len(lanes)) - 1)
        every_third = sum(1 << m for m in range(0, len(lanes), 3))
        np.testing.assert_array_equal(out[1, lanes], [every_third if m % 3 == 0 else 0
                                                      for m in range(len(lanes))])


@simt.kernel
def activemask_in_selects(x, out):
    i = simt.global_id(0)
    odd = simt.lane_id() % 2 == 1
    out[0, i] = simt.activemask() if odd else x[i]  # the load: the GPU branches around both
    out[1, i] = simt.activemask() if odd else vg.uint32(7)  # cheap: computed on every lane


def test_activemask_in_a_select_sees_the_lanes_the_gpu_code_runs_it_on(rng):
    x = rng.integers(0, 100, 64).astype(np.uint32)
    out = np.zeros((2, 64), np.uint32)
    run(activemask_in_selects, 1, 64, x, out)
    odd = np.arange(64) % 2 == 1
    np.testing.assert_array_equal(out[0], np.where(odd, 0xAAAAAAAA, x))
    np.testing.assert_array_equal(out[1], np.where(odd, 0xFFFFFFFF, 7))


@simt.kernel
def shuffle_beside_a_load(x, out):
    i = simt.global_id(0)
    v = vg.float32(i)
    out[i] = simt.shfl_down(v, 1) if simt.lane_id() % 2 == 1 else x[i]  # a cheap arm beside a load


def test_a_collective_in_a_select_the_gpu_branches_around_is_divergent(rng):
    x = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(DivergenceError, match=r"shfl_down\(\)"):
        run(shuffle_beside_a_load, 1, 64, x, np.zeros(64, np.float32))


# ----------------------------------------------------------------------------- fences


@simt.kernel
def fenced_copy(x, out):
    i = simt.global_id(0)
    out[i] = x[i]
    simt.threadfence_block()
    simt.threadfence()
    simt.threadfence_system()
    out[i] += vg.float32(1)


def test_fences_change_no_value(rng):
    x = rng.standard_normal(96).astype(np.float32)
    out = np.full(96, np.nan, np.float32)
    fenced_copy[3, 32](x, out)  # through the checker: fences are no race
    np.testing.assert_array_equal(out, x + np.float32(1))


# ----------------------------------------------------------------------------- frontend errors


def _k_reduce_float_bits(x, out):
    out[0] = simt.reduce_and(x[0])


def _k_reduce_bool(x, out):
    out[0] = simt.reduce_add(x[0] > 0.0)


def _k_width_three(x, out):
    out[0] = simt.shfl_down(x[0], 1, width=3)


def _k_width_too_wide(x, out):
    out[0] = simt.shfl_xor(x[0], 1, 64)


def _k_width_at_run_time(x, out, n):
    out[0] = simt.shfl_idx(x[0], 0, width=n)


def _k_width_unknown_keyword(x, out):
    out[0] = simt.shfl_up(x[0], 1, mask=3)


def _k_match_array(x, out):
    out[0] = simt.match_any(x)


def _k_activemask_argument(x, out):
    out[0] = simt.activemask(1)


def _k_fence_argument(x, out):
    simt.threadfence(1)


@pytest.mark.parametrize("fn,marker,message", [
    (_k_reduce_float_bits, "simt.reduce_and(x[0])", r"reduce_and\(\) takes an integer, not float32"),
    (_k_reduce_bool, "simt.reduce_add(x[0] > 0.0)", r"reduce_add\(\) takes a number, not bool"),
    (_k_width_three, "width=3)", "power of two from 1 to 32, not 3"),
    (_k_width_too_wide, "simt.shfl_xor(x[0], 1, 64)", "power of two from 1 to 32, not 64"),
    (_k_width_at_run_time, "width=n)", "must be a constant power of two"),
    (_k_width_unknown_keyword, "mask=3", "optionally, a width"),
    (_k_match_array, "simt.match_any(x)", "not an array"),
    (_k_activemask_argument, "simt.activemask(1)", "takes no arguments"),
    (_k_fence_argument, "simt.threadfence(1)", "takes no arguments"),
], ids=lambda v: getattr(v, "__name__", None))
def test_misuse_is_a_compile_error_at_the_line(fn, marker, message):
    k = simt.kernel(fn)
    args = [np.zeros(4, np.float32), np.zeros(4, np.float32)] + ([5] if len(k.params) > 2 else [])
    with pytest.raises(vg.CompileError, match=message) as info:
        build(k, 32, *args)
    assert_points_at(info.value, marker, __file__)
