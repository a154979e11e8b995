"""Warp operations on the GPU: segment shuffles, reductions, matches and activemask give
what the IR defines (the references of tests/test_simt_warp_ops.py, and reductions bit for
bit what the cpu backend gives: both follow one tree order), for whole and partial warps;
warp-aggregated atomics with match_any, and the last-block sum through threadfence() and
block tickets over a grid larger than the card holds at once."""
import numpy as np
import pytest

import verdigris as vg

import test_simt_warp_ops as ops
from tests.gpu.test_tile_gpu import same_bits
from safety import warp_pairs

pytestmark = pytest.mark.gpu


def on_gpu(*arrays):
    return [vg.asarray(a) for a in arrays]


@pytest.mark.parametrize("block,width", ops.SEGMENTS)
@pytest.mark.parametrize("dtype", ops.SEGMENT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_segment_shuffles(rng, block, width, dtype):
    x, arg, out = ops.segment_inputs(rng, block * 40, dtype)
    gx, garg, gout = on_gpu(x, arg, out)
    ops.segment_shuffles[40, block](gx, garg, gout, W=width)
    np.testing.assert_array_equal(np.asarray(gout), ops.segment_reference(x, arg, block, width))


@pytest.mark.parametrize("block", ops.BLOCKS, ids=str)
@pytest.mark.parametrize("dtype", ops.REDUCTION_DTYPES, ids=lambda d: np.dtype(d).name)
def test_reductions_match_the_cpu_backend_bit_for_bit(rng, block, dtype):
    blocks = 40
    n = int(np.prod(block)) * blocks
    x = ops.draw(rng, dtype, n)
    x[:32] = x[0]
    integer = np.dtype(dtype).kind in "iu"
    want = np.full((6, n), 7, dtype)
    ops.run(ops.reductions, ops.grid_of(block, blocks), block, x, want, INTS=integer)
    gx, gout = on_gpu(x, np.full((6, n), 7, dtype))
    ops.reductions[ops.grid_of(block, blocks), block](gx, gout, INTS=integer)
    same_bits(np.asarray(gout), want)  # a NaN (inf + -inf) only as a NaN: its bits are the GPU's


@pytest.mark.parametrize("block", ops.BLOCKS, ids=str)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float32, np.float64,
                                   np.float16], ids=lambda d: np.dtype(d).name)
def test_matches(rng, block, dtype):
    blocks = 40
    n = int(np.prod(block)) * blocks
    x = ops.match_draw(rng, dtype, n)
    x[:32] = x[0]
    gx, gout = on_gpu(x, np.full((2, n), 0xABABABAB, np.uint32))
    ops.matches[ops.grid_of(block, blocks), block](gx, gout)
    np.testing.assert_array_equal(np.asarray(gout), ops.match_reference(x, block, blocks))


@pytest.mark.parametrize("block", ops.BLOCKS, ids=str)
def test_activemask(block):
    """Where the warp is converged (the kernel's start) every lane it has; under a lane's own
    condition the caller and only lanes on its path (which of those the GPU counts is up to
    its scheduler, as CUDA's __activemask)."""
    blocks = 40
    n = int(np.prod(block)) * blocks
    (gout,) = on_gpu(np.full((2, n), 0xABABABAB, np.uint32))
    ops.active_lanes[ops.grid_of(block, blocks), block](gout)
    out = np.asarray(gout).astype(np.int64)
    for lanes in ops.warps_of(out[0], block, blocks):
        np.testing.assert_array_equal(out[0, lanes], (1 << len(lanes)) - 1)
        path = sum(1 << m for m in range(0, len(lanes), 3))
        for m, k in enumerate(lanes):
            if m % 3:
                assert out[1, k] == 0
            else:
                assert out[1, k] >> m & 1 and out[1, k] & ~path == 0, (m, hex(out[1, k]))


def test_warp_aggregated_counts(rng):
    keys = rng.integers(0, warp_pairs.KEYS, 1_000_003).astype(np.int32)
    gkeys, gcounts = on_gpu(keys, np.zeros(warp_pairs.KEYS, np.int32))
    warp_pairs.aggregated_counts[vg.cdiv(keys.size, 64), 64](gkeys, gcounts)
    np.testing.assert_array_equal(np.asarray(gcounts), np.bincount(keys, minlength=warp_pairs.KEYS))


@pytest.mark.parametrize("n", [64 * 3000 - 5, 64 * 20_000])
def test_the_last_block_adds_up_the_others(rng, n):
    """threadFenceReduction: every block publishes its sum atomically, fences, takes a
    ticket; the block with the last ticket reads all sums. Thousands of blocks: most of
    them finish while others have not started."""
    blocks = vg.cdiv(n, warp_pairs.B)
    x = rng.standard_normal(n)
    g = on_gpu(x, np.full(blocks, -7.0), np.full(1, -7.0), np.zeros(1, np.int32))
    warp_pairs.last_block_reads_atomic_sums[blocks, warp_pairs.B](*g)
    np.testing.assert_allclose(np.asarray(g[2])[0], x.sum(), rtol=1e-12, atol=1e-9)
    assert int(np.asarray(g[3])[0]) == blocks


def test_activemask_in_selects(rng):
    """Beside a load, the compiled code branches around both arms (the odd lanes' mask,
    some of them at least); beside a constant it computes the arm on every lane."""
    x = rng.integers(0, 100, 64 * 40).astype(np.uint32)
    gx, gout = on_gpu(x, np.zeros((2, x.size), np.uint32))
    ops.activemask_in_selects[40, 64](gx, gout)
    out = np.asarray(gout).astype(np.int64)
    lane = np.arange(x.size) % 32
    odd = lane % 2 == 1
    np.testing.assert_array_equal(out[0, ~odd], x[~odd])
    assert ((out[0, odd] >> lane[odd]) & 1).all() and not (out[0, odd] & 0x55555555).any()
    np.testing.assert_array_equal(out[1], np.where(odd, 0xFFFFFFFF, 7))
