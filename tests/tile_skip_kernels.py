"""Tile kernels whose scatters and gathers skip the lanes whose index lies outside the array
(`skip_out_of_bounds=True`, issue #26 item 7: MoE padding with index -1 or `n`).
`tests/test_tile_skip_out_of_bounds.py` checks and runs them on the cpu backend,
`tests/gpu/test_tile_skip_gpu.py` on the GPU; the racy ones beside their fixed twins are in
the tile safety suite (`tests/safety/tile_pairs.py`, "skipping scatter ...")."""
import numpy as np

import verdigris as vg
from verdigris import tile


def slots_with_padding(rng, tokens: int, slots: int) -> np.ndarray:
    """MoE's dispatch: each of `slots` slots taken by one token; the other tokens' slot is
    -1 or `slots` (outside an array of `slots` either way), at random."""
    chosen = rng.choice(np.array([-1, slots]), tokens)
    chosen[rng.choice(tokens, slots, replace=False)] = rng.permutation(slots)
    return chosen


@tile.kernel
def reverse_skipping(x, out, B: vg.constexpr):
    """out = x[::-1]; the last tile's lanes past the end of x index below 0 and are skipped
    (no mask=)."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    tile.scatter(out, x.shape[0] - 1 - offsets, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)


@tile.kernel
def reverse_faulting(x, out, B: vg.constexpr):
    """reverse_skipping without the option: a lane outside the array is a bounds fault."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    tile.scatter(out, x.shape[0] - 1 - offsets, tile.load(x, (i,), (B,)))


@tile.kernel
def copy_rows_skipping(x, out, R: vg.constexpr, C: vg.constexpr):
    """out = x (both of shape (n, m)) through a 2-d scatter of (R, C) tiles: rows past n and
    columns past m are outside out and skipped."""
    i = int(tile.bid(0))
    rows = (i * R + tile.arange(R)).reshape((R, 1))
    cols = tile.arange(C).reshape((1, C))
    tile.scatter(out, (rows, cols), tile.load(x, (i, 0), (R, C)), skip_out_of_bounds=True)


@tile.kernel
def count_and_max_per_slot(x, slots, counts, best, B: vg.constexpr):
    """counts[s] += 1 and best[s] = max(best[s], x[t]) for each token t of slot s = slots[t]
    (atomics: slots may repeat); tokens with a slot outside are skipped."""
    i = tile.bid(0)
    dest = tile.load(slots, (i,), (B,), padding=-1)
    tile.scatter_add(counts, dest, tile.full((B,), 1, vg.int32), skip_out_of_bounds=True)
    tile.scatter_max(best, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)


@tile.kernel
def gather_tokens(x, slots, out, B: vg.constexpr):
    """out[t] = x[slots[t]], or -1 where slots[t] is outside x (the gather's padding)."""
    i = tile.bid(0)
    src = tile.load(slots, (i,), (B,), padding=-1)
    tile.store(out, (i,), tile.gather(x, src, padding=-1.0, skip_out_of_bounds=True))
