"""Tile locks, compare-and-swap and exchange on the GPU (issue #26 item 6): many blocks
contend for few locks, so a lock that does not exclude, or a release that does not publish
the holder's writes, loses partial sums; the results are checked against float64."""
import numpy as np
import pytest

import verdigris as vg
from tile_lock_kernels import (accumulate_as_triton_does, accumulate_locked, accumulate_persistent,
                               exchange_chain, first_claim, layer_norm_bwd_dwdb, layer_norm_bwd_dx_fused,
                               layer_norm_reference, layer_norm_setup, split_k_locked, swap_then_read)

pytestmark = pytest.mark.gpu


def on_gpu(*arrays):
    return [vg.asarray(a) for a in arrays]


@pytest.mark.parametrize("rows, cols, group", [(4096, 1000, 8), (3000, 64, 1), (777, 300, 32)])
def test_layer_norm_backward_on_the_gpu(rows, cols, group, rng):
    n = 1 << (cols - 1).bit_length()
    x, w, dy, mean, rstd = layer_norm_setup(rng, rows, cols)
    dx, dw_partial, db_partial = on_gpu(np.full_like(x, np.nan), *(np.full((group, n), np.nan, np.float32)
                                                                  for _ in range(2)))
    locks, count = on_gpu(np.zeros(group, np.int32), np.zeros(group, np.int32))
    args = on_gpu(dy) + [dw_partial, db_partial] + on_gpu(x, w, mean, rstd)
    layer_norm_bwd_dx_fused[rows](dx, *args, locks, count, N=n, GROUP=group)
    dw, db = on_gpu(np.full(cols, np.nan, np.float32), np.full(cols, np.nan, np.float32))
    layer_norm_bwd_dwdb[vg.cdiv(cols, 64)](dw_partial, db_partial, dw, db, GROUP=group, BN=64)
    want = layer_norm_reference(x, w, dy, mean, rstd)
    for got, ref in zip((dx, dw, db), want):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-3)
    assert not locks.numpy().any() and (count.numpy() == 1).all()


def test_contended_accumulation_loses_no_partial_sum(rng):
    rows, group, n = 20000, 3, 128
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    want = np.stack([dy[g::group].astype(np.float64).sum(axis=0) for g in range(group)])
    partial, count, locks = on_gpu(np.full((group, n), np.nan, np.float32), np.zeros(group, np.int32),
                                   np.zeros(group, np.int32))
    accumulate_locked[rows](vg.asarray(dy), partial, count, locks, N=n, GROUP=group)
    np.testing.assert_allclose(partial.numpy(), want, rtol=1e-3, atol=1e-2)
    partial = vg.asarray(np.zeros((group, n), np.float32))
    accumulate_persistent[264](vg.asarray(dy), partial, vg.asarray(np.zeros(group, np.int32)), N=n,
                               GROUP=group)
    np.testing.assert_allclose(partial.numpy(), want, rtol=1e-3, atol=1e-2)
    partial, buffer = on_gpu(np.full((group, n), np.nan, np.float32), np.zeros(2 * group, np.int32))
    accumulate_as_triton_does[rows](vg.asarray(dy), partial, buffer[:group], buffer[group:], N=n,
                                    GROUP=group)
    np.testing.assert_allclose(partial.numpy(), want, rtol=1e-3, atol=1e-2)
    assert buffer.numpy().tolist() == [0] * group + [1] * group


def test_an_exchange_is_in_the_block_s_program_order(rng):
    blocks = 10000
    start = rng.standard_normal(blocks).astype(np.float32)
    cells, before, after = on_gpu(start.copy(), *(np.full(blocks, np.nan, np.float32) for _ in range(2)))
    swap_then_read[blocks](cells, before, after)
    np.testing.assert_array_equal(before.numpy(), start)
    np.testing.assert_array_equal(after.numpy(), np.arange(blocks, dtype=np.float32) * 2 + 1)


def test_cas_has_one_winner_and_xchg_hands_each_value_on_once():
    blocks = 50000
    slot, claims = on_gpu(np.array([-1], np.int32), np.full(blocks, -5, np.int32))
    first_claim[blocks](slot, claims)
    winner, claims = int(slot.numpy()[0]), claims.numpy()
    assert 0 <= winner < blocks and claims[winner] == -1
    assert (np.delete(claims, winner) == winner).all()
    cell, old = on_gpu(np.array([-1, -2], np.int64), np.full(blocks, 7, np.int64))
    exchange_chain[blocks](cell, old, DT=vg.int64)
    cell, old = cell.numpy(), old.numpy()
    for parity, start in ((0, -1), (1, -2)):
        mine = np.arange(parity, blocks, 2)
        assert np.array_equal(np.sort(np.append(old[mine], cell[parity])), np.sort(np.append(mine, start)))


def test_split_k_under_locks_on_the_gpu(rng):
    m, k, n, split, block = 1000, 4096, 700, 8, 64
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    start = rng.standard_normal((m, n)).astype(np.float32)
    grid = (vg.cdiv(m, block), vg.cdiv(n, block), split)
    c, locks = on_gpu(start.copy(), np.zeros(grid[0] * grid[1], np.int32))
    split_k_locked[grid](vg.asarray(a), vg.asarray(b), c, locks, BM=block, BN=block, BK=32)
    want = start + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-3, atol=1e-2)
    assert not locks.numpy().any()
