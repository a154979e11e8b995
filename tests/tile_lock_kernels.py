"""Tile kernels that take locks (`with tile.lock(...)`) or use `tile.atomic_cas` /
`tile.atomic_xchg`, shared by the cpu, host-JIT, ptxas and GPU tests (issue #26 item 6).

The LayerNorm backward of Triton's tutorial 05 (`_layer_norm_bwd_dx_fused` and
`_layer_norm_bwd_dwdb`), ported: each row's block computes dx and adds its row's dw and db
into the partial-sum row `row % GROUP` under the lock of that row (the first block of a
group stores, marking `count`; later ones add), then a second kernel sums the partial rows.
Beside it, its racy twins (the line the checker must point at ends with `# race`): no lock,
a lock per row rather than per group, and a spin lock written by hand. `layer_norm_setup`
makes inputs and `layer_norm_reference` the float64 result.
"""
from __future__ import annotations

import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def layer_norm_bwd_dx_fused(dx, dy, dw_partial, db_partial, x, w, mean, rstd, locks, count,
                            N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    inside = tile.arange(N) < x.shape[1]
    xr = tile.load(x, index=(row, 0), shape=(1, N))
    dyr = tile.load(dy, index=(row, 0), shape=(1, N))
    wr = tile.load(w, index=(0,), shape=(N,))
    xhat = tile.where(inside, (xr - tile.load(mean, index=(row,), shape=())) *
                      tile.load(rstd, index=(row,), shape=()), 0.0)
    wdy = wr * dyr
    c1 = tile.sum(xhat * wdy) / x.shape[1]
    c2 = tile.sum(wdy) / x.shape[1]
    tile.store(dx, index=(row, 0), tile=(wdy - (xhat * c1 + c2)) * tile.load(rstd, index=(row,), shape=()))
    dw = dyr * xhat
    db = dyr
    g = row % GROUP
    with tile.lock(locks, g):
        if count[g] == 0:
            count[g] = 1
        else:
            dw += tile.load(dw_partial, index=(g, 0), shape=(1, N))
            db += tile.load(db_partial, index=(g, 0), shape=(1, N))
        tile.store(dw_partial, index=(g, 0), tile=dw)
        tile.store(db_partial, index=(g, 0), tile=db)


@tile.kernel
def layer_norm_bwd_dwdb(dw_partial, db_partial, dw_final, db_final, GROUP: vg.constexpr,
                        BN: vg.constexpr):
    j = tile.bid(0)
    dw = tile.sum(tile.load(dw_partial, index=(0, j), shape=(GROUP, BN)), axis=0)
    db = tile.sum(tile.load(db_partial, index=(0, j), shape=(GROUP, BN)), axis=0)
    tile.store(dw_final, index=(j,), tile=dw)
    tile.store(db_final, index=(j,), tile=db)


@tile.kernel
def accumulate_unlocked(dy, dw_partial, count, N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    dw = tile.load(dy, index=(row, 0), shape=(1, N))
    g = row % GROUP
    if count[g] == 0:
        count[g] = 1
    else:
        dw += tile.load(dw_partial, index=(g, 0), shape=(1, N))
    tile.store(dw_partial, index=(g, 0), tile=dw)  # race


@tile.kernel
def accumulate_locked(dy, dw_partial, count, locks, N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    dw = tile.load(dy, index=(row, 0), shape=(1, N))
    g = row % GROUP
    with tile.lock(locks, g):
        if count[g] == 0:
            count[g] = 1
        else:
            dw += tile.load(dw_partial, index=(g, 0), shape=(1, N))
        tile.store(dw_partial, index=(g, 0), tile=dw)


@tile.kernel
def accumulate_lock_per_row(dy, dw_partial, count, locks, N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    dw = tile.load(dy, index=(row, 0), shape=(1, N))
    g = row % GROUP
    with tile.lock(locks, row):  # the lock of the row, not of the partial row it updates
        if count[g] == 0:
            count[g] = 1
        else:
            dw += tile.load(dw_partial, index=(g, 0), shape=(1, N))
        tile.store(dw_partial, index=(g, 0), tile=dw)  # race


@tile.kernel
def accumulate_two_lock_arrays(dy, dw_partial, locks, other_locks, N: vg.constexpr,
                               GROUP: vg.constexpr):
    row = tile.bid(0)
    g = row % GROUP
    if row < GROUP:
        with tile.lock(locks, g):
            tile.store(dw_partial, index=(g, 0), tile=tile.load(dy, index=(row, 0), shape=(1, N)))  # race
    else:
        with tile.lock(other_locks, g):  # the same partial row under another array's lock
            acc = tile.load(dw_partial, index=(g, 0), shape=(1, N))
            tile.store(dw_partial, index=(g, 0), tile=acc + tile.load(dy, index=(row, 0), shape=(1, N)))


@tile.kernel
def accumulate_read_outside(dy, dw_partial, seen, locks, N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    g = row % GROUP
    with tile.lock(locks, g):
        acc = tile.load(dw_partial, index=(g, 0), shape=(1, N))
        tile.store(dw_partial, index=(g, 0), tile=acc + tile.load(dy, index=(row, 0), shape=(1, N)))
    tile.store(seen, index=(row, 0), tile=tile.load(dw_partial, index=(g, 0), shape=(1, N)))  # race


@tile.kernel
def accumulate_spin_by_hand(dy, dw_partial, locks, N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    g = row % GROUP
    while tile.atomic_cas(locks, g, 0, 1) != 0:
        pass
    acc = tile.load(dw_partial, index=(g, 0), shape=(1, N))
    tile.store(dw_partial, index=(g, 0), tile=acc + tile.load(dy, index=(row, 0), shape=(1, N)))  # race
    tile.atomic_xchg(locks, g, 0)


@tile.kernel
def accumulate_persistent(dy, dw_partial, locks, N: vg.constexpr, GROUP: vg.constexpr):
    for row in range(tile.bid(0), dy.shape[0], tile.num_blocks(0)):
        g = row % GROUP
        with tile.lock(locks, g):
            acc = tile.load(dw_partial, index=(g, 0), shape=(1, N))
            tile.store(dw_partial, index=(g, 0), tile=acc + tile.load(dy, index=(row, 0), shape=(1, N)))


@tile.kernel
def accumulate_as_triton_does(dy, dw_partial, locks, counts, N: vg.constexpr, GROUP: vg.constexpr):
    """Triton's tutorial word for word: the count read plainly and set with atomic_xchg, in
    the lock (`counts` may be a view of the lock buffer's second half, as Triton's Count)."""
    row = tile.bid(0)
    dw = tile.load(dy, index=(row, 0), shape=(1, N))
    g = row % GROUP
    with tile.lock(locks, g):
        count = counts[g]
        if count == 0:
            tile.atomic_xchg(counts, g, 1)
        else:
            dw += tile.load(dw_partial, index=(g, 0), shape=(1, N))
        tile.store(dw_partial, index=(g, 0), tile=dw)


@tile.kernel
def count_read_outside_the_lock(dy, dw_partial, locks, counts, N: vg.constexpr, GROUP: vg.constexpr):
    row = tile.bid(0)
    dw = tile.load(dy, index=(row, 0), shape=(1, N))
    g = row % GROUP
    count = counts[g]  # race
    with tile.lock(locks, g):
        if count == 0:
            tile.atomic_xchg(counts, g, 1)
        else:
            dw += tile.load(dw_partial, index=(g, 0), shape=(1, N))
        tile.store(dw_partial, index=(g, 0), tile=dw)


@tile.kernel
def first_claim(slot, claims):
    """Every block tries to claim `slot[0]` (from -1 to its id): one wins, the others see
    the winner's id."""
    i = tile.bid(0)
    claims[i] = tile.atomic_cas(slot, 0, -1, i)


@tile.kernel
def exchange_chain(cell, old, DT: vg.constexpr):
    """Every block swaps its id into `cell[i % 2]` and keeps what it found there."""
    i = tile.bid(0)
    old[i] = tile.atomic_xchg(cell, (i % 2,), DT(i))


def layer_norm_setup(rng, rows: int, cols: int):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    mean = x.astype(np.float64).mean(axis=1)
    rstd = 1 / np.sqrt(x.astype(np.float64).var(axis=1) + 1e-5)
    return x, w, dy, mean.astype(np.float32), rstd.astype(np.float32)


def layer_norm_reference(x, w, dy, mean, rstd):
    """dx, dw, db in float64 (Triton's tutorial's formulas)."""
    x, w, dy, mean, rstd = (a.astype(np.float64) for a in (x, w, dy, mean, rstd))
    xhat = (x - mean[:, None]) * rstd[:, None]
    wdy = w * dy
    n = x.shape[1]
    c1 = (xhat * wdy).sum(axis=1, keepdims=True) / n
    c2 = wdy.sum(axis=1, keepdims=True) / n
    dx = (wdy - (xhat * c1 + c2)) * rstd[:, None]
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


@tile.kernel
def swap_then_read(cells, before, after):
    """A block's own element: exchanged, then read plainly (in program order: the new value)."""
    i = tile.bid(0)
    before[i] = tile.atomic_xchg(cells, i, vg.float32(i) * 2.0)
    after[i] = cells[i] + 1.0


# ----------------------------------------------------------------------------- what the lock covers
# Each adds tiles of `dy` into rows of `p` under `locks`; `groups` (int64) names a row per block.


@tile.kernel
def half_locked(dy, p, locks, N: vg.constexpr, G: vg.constexpr):
    i = tile.bid(0)
    g = i % G
    t = tile.load(dy, index=(i, 0), shape=(1, N))
    if i % 2 == 0:
        with tile.lock(locks, g):
            tile.store(p, index=(g, 0), tile=tile.load(p, index=(g, 0), shape=(1, N)) + t)
    else:  # odd blocks take no lock
        tile.store(p, index=(g, 0), tile=tile.load(p, index=(g, 0), shape=(1, N)) + t)

@tile.kernel
def loaded_group(dy, groups, p, locks, N: vg.constexpr):
    i = tile.bid(0)
    g = tile.load(groups, index=(i,), shape=())
    t = tile.load(dy, index=(i, 0), shape=(1, N))
    with tile.lock(locks, g):
        tile.store(p, index=(g, 0), tile=tile.load(p, index=(g, 0), shape=(1, N)) + t)

@tile.kernel
def reloaded_group(dy, groups, p, locks, N: vg.constexpr):
    i = tile.bid(0)
    g = tile.load(groups, index=(i,), shape=())
    t = tile.load(dy, index=(i, 0), shape=(1, N))
    with tile.lock(locks, g):
        h = tile.load(groups, index=(i + 1,), shape=())  # another row than the lock's
        tile.store(p, index=(h, 0), tile=tile.load(p, index=(h, 0), shape=(1, N)) + t)

@tile.kernel
def neighbour_row(dy, p, locks, N: vg.constexpr, G: vg.constexpr):
    i = tile.bid(0)
    g = i % G
    t = tile.load(dy, index=(i, 0), shape=(1, N))
    with tile.lock(locks, g):
        tile.store(p, index=(g, 0), tile=tile.load(p, index=(g, 0), shape=(1, N)) + t)
        tile.store(p, index=((g + 1) % G, 0), tile=tile.load(p, index=((g + 1) % G, 0), shape=(1, N)) + t)

@tile.kernel
def grid_2d(dy, p, locks, N: vg.constexpr, G: vg.constexpr):
    i = tile.bid(0)
    j = tile.bid(1)
    g = i % G
    with tile.lock(locks, g):
        tile.store(p, index=(g, j), tile=tile.load(p, index=(g, j), shape=(1, N)) + tile.load(dy, index=(i, j), shape=(1, N)))


@tile.kernel
def split_k_locked(a, b, c, locks, BM: vg.constexpr, BN: vg.constexpr, BK: vg.constexpr):
    """Split-K: block (i, j, s) multiplies every `tile.num_blocks(2)`-th panel of K and adds
    its product into c's tile (i, j) under that tile's lock."""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(s, tile.num_tiles(a, 1, (BM, BK)), tile.num_blocks(2)):
        acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                       tile.load(b, index=(k, j), shape=(BK, BN)), acc)
    with tile.lock(locks, i * tile.num_blocks(1) + j):
        tile.store(c, index=(i, j), tile=tile.load(c, index=(i, j), shape=(BM, BN)) + acc)


@tile.kernel
def gemm_stored_under_a_lock(a, b, c, locks, BM: vg.constexpr, BN: vg.constexpr, BK: vg.constexpr):
    """The example gemm with its store under a lock: no warp specialization (the lock is the
    whole block's), so no copy-engine store still in flight when the lock is given back."""
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(tile.num_tiles(a, 1, (BM, BK))):
        acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                       tile.load(b, index=(k, j), shape=(BK, BN)), acc)
    with tile.lock(locks, 0):
        tile.store(c, index=(i, j), tile=acc.astype(c.dtype))
