"""The tile-track safety suite: racy tile kernels, each beside its fixed twin.

The bugs of issue 4's list and a few more: two blocks storing one tile, split-K partial
sums stored plainly, a persistent loop stepping by 1 instead of `num_blocks`, an in-place
shift reading the neighbour's tile, scatters through loaded indices or offsets, a scatter
whose lanes meet, a 2-D grid whose store ignores one block axis, an in-place transpose, a
tail tile of another shape that overlaps the next block's tile, a read of the sum that
other blocks add to atomically (or take the maximum into), one scalar written by every
block, a scatter through a flipped arange whose lanes meet, a per-bin minimum scattered
plainly (fixed: `scatter_min`), a gather of another block's output, blocks of two tiles
each that overlap the next block's (fixed: tiles `2 * bid` and `2 * bid + 1` in int32,
which wraps only to negative indices), and the grouped tile orders of matrix products
(Triton's and cuTile's, alone or inside a persistent loop) with the wrong divisor in a
ragged last group, the column taken as a remainder, or the loop stepping by 1, and two
persistent loops over one array, the second starting a block ahead, and scatters that skip
the lanes outside the array (`skip_out_of_bounds=True`, MoE's padding with index -1 or n)
whose other lanes meet, within a block or across blocks, or come from memory, and an int
tile that a while loop carries (each position's segment start) stored by every block at 0. Tile shapes
are mostly not powers of two, and arrays are ragged (the last tile is masked) wherever the
kernel allows it.

`TilePair.make(rng)` gives `(grid, args, kwargs)` with NumPy arrays (outputs poisoned, or
holding the start values the kernel adds to); the same arguments serve both kernels.
`TilePair.reference(args)`, given the arguments as made (before any run), gives what the
FIXED kernel leaves in its output arguments, by position. `dynamic` says whether a cpu run
of the racy kernel with those arguments really makes the colliding accesses. In each racy
kernel, the line the static checker must point at ends with `# race`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import verdigris as vg
from verdigris import tile
from tile_skip_kernels import slots_with_padding


@dataclass
class TilePair:
    name: str
    racy: object  # KernelFunction (tile track)
    fixed: object
    code: str  # the code the racy one must get
    make: object  # make(rng) -> (grid, args: tuple, kwargs: dict)
    reference: object  # reference(args) -> dict[int, np.ndarray], outputs of the fixed one
    dynamic: bool = True  # a cpu run of the racy kernel with make()'s args shows the race
    # the refusal's example comes from the solver, not from the search of small launches
    # (`safety.witness`): a plain scatter's own lanes meeting (VG205 pairs: always the solver)
    by_solver: bool = False


B = 24  # a tile length that is not a power of two
N = 5 * B - 7  # ragged: the last tile is masked


def _f32(rng, *shape):
    return rng.standard_normal(shape or (N,)).astype(np.float32)


def _poison(*shape):
    return np.full(shape or (N,), -7.0, np.float32)


# ----------------------------------------------------------------------------- one tile a block


@tile.kernel
def all_store_tile_zero(x, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(0,), tile=tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def copy_tiles(x, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(B,)))


def copy_setup(rng):
    return vg.cdiv(N, B), (_f32(rng), _poison()), {"B": B}


def copy_reference(args):
    return {1: args[0].copy()}


M, BK, PARTS = 12, 16, 5  # split K: rows, columns per block, blocks


@tile.kernel
def split_k_plain(x, out, M: vg.constexpr, BK: vg.constexpr):
    partial = tile.sum(tile.load(x, index=(0, tile.bid(0)), shape=(M, BK)), 1)
    tile.store(out, index=(0,), tile=partial)  # race


@tile.kernel
def split_k_atomic(x, out, M: vg.constexpr, BK: vg.constexpr):
    partial = tile.sum(tile.load(x, index=(0, tile.bid(0)), shape=(M, BK)), 1)
    tile.atomic_add(out, (0,), partial)


def split_k_setup(rng):
    x = _f32(rng, M, PARTS * BK - 3)
    return PARTS, (x, np.zeros(M, np.float32)), {"M": M, "BK": BK}


def split_k_reference(args):
    return {1: args[0].astype(np.float64).sum(1)}


@tile.kernel
def persistent_step_one(x, out, B: vg.constexpr):
    tiles = (x.shape[0] + B - 1) // B
    for t in range(tile.bid(0), tiles, 1):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)) * 2.0)  # race


@tile.kernel
def persistent_step_blocks(x, out, B: vg.constexpr):
    tiles = (x.shape[0] + B - 1) // B
    for t in range(tile.bid(0), tiles, tile.num_blocks(0)):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)) * 2.0)


def persistent_setup(rng):
    n = 11 * B - 5  # 11 tiles over 3 blocks
    return 3, (_f32(rng, n), _poison(n)), {"B": B}


def doubled_reference(args):
    return {1: args[0] * np.float32(2)}


# ----------------------------------------------------------------------------- others' tiles


@tile.kernel
def shift_in_place(x, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(x, index=(i,), tile=tile.load(x, index=(i + 1,), shape=(B,)))  # race


@tile.kernel
def shift_into_out(x, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i + 1,), shape=(B,)))


def shift_reference(args):
    x = args[0]
    shifted = np.zeros_like(x)
    shifted[:N - B] = x[B:]
    return {1: shifted}


S = 8  # transpose tile


@tile.kernel
def transpose_in_place(x, out, S: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    tile.store(x, index=(j, i), tile=tile.load(x, index=(i, j), shape=(S, S)).T)  # race


@tile.kernel
def transpose_into_out(x, out, S: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    tile.store(out, index=(j, i), tile=tile.load(x, index=(i, j), shape=(S, S)).T)


def transpose_setup(rng):
    n = 3 * S - 2
    return (3, 3), (_f32(rng, n, n), _poison(n, n)), {"S": S}


def transpose_reference(args):
    return {1: args[0].T.copy()}


@tile.kernel
def gather_next_output(x, out, y, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(B,)) * 2.0)
    ahead = tile.gather(out, (i + 1) * B + tile.arange(B))  # race
    tile.store(y, index=(i,), tile=ahead)


@tile.kernel
def gather_next_input(x, out, y, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(B,)) * 2.0)
    ahead = tile.gather(x, (i + 1) * B + tile.arange(B)) * 2.0
    tile.store(y, index=(i,), tile=ahead)


def gather_setup(rng):
    return vg.cdiv(N, B), (_f32(rng), _poison(), _poison()), {"B": B}


def gather_reference(args):
    doubled = args[0] * np.float32(2)
    ahead = np.zeros_like(doubled)
    ahead[:N - B] = doubled[B:]
    return {1: doubled, 2: ahead}


P = 7  # blocks adding into one total


@tile.kernel
def reads_atomic_total(x, total, out, M: vg.constexpr):
    i = tile.bid(0)
    tile.atomic_add(total, (0,), tile.load(x, index=(i,), shape=(M,)))
    tile.store(out, index=(i,), tile=tile.load(total, index=(0,), shape=(M,)))  # race


@tile.kernel
def adds_to_total(x, total, out, M: vg.constexpr):
    i = tile.bid(0)
    tile.atomic_add(total, (0,), tile.load(x, index=(i,), shape=(M,)))
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(M,)))


def total_setup(rng):
    return P, (_f32(rng, P * M), np.zeros(M, np.float32), _poison(P * M)), {"M": M}


def total_reference(args):
    x = args[0]
    return {1: x.astype(np.float64).reshape(P, M).sum(0), 2: x.copy()}


@tile.kernel
def reads_atomic_maximum(x, best, out, M: vg.constexpr):
    i = tile.bid(0)
    tile.atomic_max(best, (0,), tile.load(x, index=(i,), shape=(M,)))
    tile.store(out, index=(i,), tile=tile.load(best, index=(0,), shape=(M,)))  # race


@tile.kernel
def keeps_atomic_maximum(x, best, out, M: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(M,))
    tile.atomic_max(best, (0,), t)
    tile.atomic_min(out, (i,), t * 2.0)


def maximum_setup(rng):
    best, out = np.full(M, -np.inf, np.float32), np.full(P * M, np.inf, np.float32)
    return P, (_f32(rng, P * M), best, out), {"M": M}


def maximum_reference(args):
    x = args[0]
    return {1: x.reshape(P, M).max(0), 2: 2 * x}


# ----------------------------------------------------------------------------- grids and shapes


BR, BC = 6, 5


@tile.kernel
def grid_2d_ignores_columns(x, out, BR: vg.constexpr, BC: vg.constexpr):
    r, c = tile.bid(0), tile.bid(1)
    tile.store(out, index=(r, 0), tile=tile.load(x, index=(r, c), shape=(BR, BC)))  # race


@tile.kernel
def grid_2d_copy(x, out, BR: vg.constexpr, BC: vg.constexpr):
    r, c = tile.bid(0), tile.bid(1)
    tile.store(out, index=(r, c), tile=tile.load(x, index=(r, c), shape=(BR, BC)))


def grid_2d_setup(rng):
    rows, cols = 4 * BR - 1, 3 * BC - 2
    return (4, 3), (_f32(rng, rows, cols), _poison(rows, cols)), {"BR": BR, "BC": BC}


HEAD, TAIL = 48, 16  # each block writes 48 elements, then rewrites its last 16


@tile.kernel
def tail_in_next_tile(x, out, HEAD: vg.constexpr, TAIL: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(HEAD,)) * 2.0)  # race
    t = 3 * i + 3  # one tile too far: the next block's first 16 elements
    tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(TAIL,)) * 3.0)


@tile.kernel
def tail_in_own_tile(x, out, HEAD: vg.constexpr, TAIL: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(HEAD,)) * 2.0)
    t = 3 * i + 2
    tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(TAIL,)) * 3.0)


def tail_setup(rng):
    n = 4 * HEAD - 9
    return vg.cdiv(n, HEAD), (_f32(rng, n), _poison(n)), {"HEAD": HEAD, "TAIL": TAIL}


def tail_reference(args):
    x = args[0]
    out = x * np.float32(2)
    tails = (np.arange(len(x)) % HEAD) >= HEAD - TAIL
    out[tails] = x[tails] * np.float32(3)
    return {1: out}


@tile.kernel
def every_block_one_scalar(x, out, B: vg.constexpr):
    out[0] = tile.sum(tile.load(x, index=(tile.bid(0),), shape=(B,)))  # race


@tile.kernel
def one_scalar_per_block(x, out, B: vg.constexpr):
    out[tile.bid(0)] = tile.sum(tile.load(x, index=(tile.bid(0),), shape=(B,)))


def sums_setup(rng):
    blocks = vg.cdiv(N, B)
    return blocks, (_f32(rng), _poison(blocks)), {"B": B}


def sums_reference(args):
    x = np.pad(args[0].astype(np.float64), (0, -N % B))
    return {1: x.reshape(-1, B).sum(1)}


# ----------------------------------------------------------------------------- scatters

BINS = 9


@tile.kernel
def scatter_loaded_indices(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    where = tile.load(idx, index=(i,), shape=(B,))
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def scatter_add_loaded_indices(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    where = tile.load(idx, index=(i,), shape=(B,))
    tile.scatter_add(out, where, tile.load(x, index=(i,), shape=(B,)))


def binned_setup(rng):
    n = 4 * B  # a scatter is not masked: whole tiles only
    idx = rng.integers(0, BINS, n)
    return 4, (_f32(rng, n), idx, np.zeros(BINS, np.float32)), {"B": B}


def binned_reference(args):
    x, idx, _ = args
    out = np.zeros(BINS, np.float64)
    np.add.at(out, idx, x)
    return {2: out}


@tile.kernel
def scatter_min_loaded_indices(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    where = tile.load(idx, index=(i,), shape=(B,))
    tile.scatter_min(out, where, tile.load(x, index=(i,), shape=(B,)))


def binned_minimum_reference(args):
    x, idx, out = args
    out = out.copy()
    np.minimum.at(out, idx, x)
    return {2: out}


@tile.kernel
def scatter_permutation(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    where = tile.load(idx, index=(i,), shape=(B,))
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def scatter_permutation_unsafe(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    where = tile.load(idx, index=(i,), shape=(B,))
    with vg.unsafe():  # the caller promises idx is a permutation
        tile.scatter(out, where, tile.load(x, index=(i,), shape=(B,)))


def permutation_setup(rng):
    n = 4 * B
    return 4, (_f32(rng, n), rng.permutation(n), _poison(n)), {"B": B}


def permutation_reference(args):
    x, idx, out = args
    result = out.copy()
    result[idx] = x
    return {2: result}


@tile.kernel
def scatter_at_loaded_offset(x, offsets, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.scatter(out, offsets[i] + tile.arange(B), tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def scatter_at_own_offset(x, offsets, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.scatter(out, i * B + tile.arange(B), tile.load(x, index=(i,), shape=(B,)))


def offsets_setup(rng):
    n = 4 * B
    offsets = np.zeros(4, np.int64)  # every block at 0: the racy kernel's blocks collide
    return 4, (_f32(rng, n), offsets, _poison(n)), {"B": B}


def offsets_reference(args):
    return {2: args[0].copy()}


@tile.kernel
def scatter_lanes_meet(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.scatter(out, i * B + tile.arange(B) // 2, tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def scatter_lanes_apart(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.scatter(out, i * B + tile.arange(B), tile.load(x, index=(i,), shape=(B,)))


@tile.kernel
def scatter_flipped_lanes_meet(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    where = i * B + tile.flip(tile.arange(B)) // 2
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def scatter_flipped_lanes(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.scatter(out, i * B + tile.flip(tile.arange(B)), tile.load(x, index=(i,), shape=(B,)))


def flipped_lanes_reference(args):
    return {1: np.flip(args[0].reshape(-1, B), 1).reshape(-1)}


def lanes_setup(rng):
    n = 4 * B
    return 4, (_f32(rng, n), _poison(n)), {"B": B}


def lanes_reference(args):
    return {1: args[0].copy()}


@tile.kernel
def scatter_transposed_rows_meet(x, out, S: vg.constexpr):
    i = int(tile.bid(0))
    rows = i * S + tile.arange(S).reshape((S, 1)) + tile.zeros((S, S), vg.int64)
    tile.scatter(out, (rows, rows), tile.load(x, index=(i, 0), shape=(S, S)))  # race


@tile.kernel
def scatter_transposed_rows(x, out, S: vg.constexpr):
    i = int(tile.bid(0))
    rows = i * S + tile.arange(S).reshape((S, 1)) + tile.zeros((S, S), vg.int64)
    tile.scatter(out, (rows, rows.T - i * S), tile.load(x, index=(i, 0), shape=(S, S)))


def rows_setup(rng):
    return 3, (_f32(rng, 3 * S, S), _poison(3 * S, S)), {"S": S}


def rows_reference(args):
    return {1: args[0].copy()}


# ------------------------------------------------- scatters that skip lanes outside the array


@tile.kernel
def skipping_lanes_meet(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    dest = tile.where(offsets % 2 == 0, offsets // 4, -1)  # lanes 0 and 2 both reach out[0]
    tile.scatter(out, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)  # race


@tile.kernel
def skipping_odd_lanes(x, out, B: vg.constexpr):
    """out[k] = x[2k]: the odd lanes take index -1 (MoE's padding) and write nothing."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    dest = tile.where(offsets % 2 == 0, offsets // 2, -1)
    tile.scatter(out, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)


def evens_setup(rng):
    return vg.cdiv(N, B), (_f32(rng), _poison((N + 1) // 2)), {"B": B}


def evens_reference(args):
    return {1: args[0][::2].copy()}


@tile.kernel
def skipping_into_first_tile(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    dest = tile.where(offsets < x.shape[0], offsets % B, out.shape[0])
    tile.scatter(out, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)  # race


@tile.kernel
def skipping_past_the_end(x, out, B: vg.constexpr):
    """out = x; the last tile's lanes past x index out.shape[0] (the other MoE padding)."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    dest = tile.where(offsets < x.shape[0], offsets, out.shape[0])
    tile.scatter(out, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)


@tile.kernel
def skipping_loaded_slots(x, slots, out, B: vg.constexpr):
    i = tile.bid(0)
    dest = tile.load(slots, (i,), (B,), padding=-1)
    tile.scatter(out, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)  # race


@tile.kernel
def skipping_loaded_slots_unsafe(x, slots, out, B: vg.constexpr):
    i = tile.bid(0)
    dest = tile.load(slots, (i,), (B,), padding=-1)
    with vg.unsafe():  # the caller promises the slots inside out are distinct
        tile.scatter(out, dest, tile.load(x, (i,), (B,)), skip_out_of_bounds=True)


def slots_setup(rng):
    """MoE's dispatch of N tokens to 3 * B slots."""
    return vg.cdiv(N, B), (_f32(rng), slots_with_padding(rng, N, 3 * B), _poison(3 * B)), {"B": B}


def slots_reference(args):
    x, slots, out = args
    taken = (slots >= 0) & (slots < len(out))
    result = out.copy()
    result[slots[taken]] = x[taken]
    return {2: result}


# ----------------------------------------------------------------------------- two tiles a block


@tile.kernel
def two_tiles_overlapping(x, out, B: vg.constexpr):
    i = tile.bid(0)  # block b stores tiles b and b + 1: its neighbour's first tile too
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(B,)) * 2.0)  # race
    tile.store(out, index=(i + 1,), tile=tile.load(x, index=(i + 1,), shape=(B,)) * 2.0)


@tile.kernel
def two_tiles_per_block(x, out, B: vg.constexpr):
    i = 2 * tile.bid(0)  # int32: past 2**31 it wraps to a negative index, which stores nothing
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(B,)) * 2.0)
    tile.store(out, index=(i + 1,), tile=tile.load(x, index=(i + 1,), shape=(B,)) * 2.0)


def two_tiles_setup(rng):
    return vg.cdiv(N, 2 * B), (_f32(rng), _poison()), {"B": B}


# ------------------------------------------------------------- tiles in grouped order (Triton's GEMM)


@vg.func
def _grouped(c, BM, BN, GROUP_M, group_columns: bool):
    """The tile (pid_m, pid_n) of block tile.bid(0) in the grouped order of Triton's matmul
    tutorial: GROUP_M block rows at a time, column by column. `group_columns`: the bug of
    dividing by GROUP_M where the last group has fewer rows."""
    pid = tile.bid(0)
    num_pid_m = (c.shape[0] + BM - 1) // BM
    num_pid_n = (c.shape[1] + BN - 1) // BN
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // (GROUP_M if group_columns else group_size_m)
    return pid_m, pid_n


@tile.kernel
def grouped_order_wrong_divisor(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    pid_m, pid_n = _grouped(out, BM, BN, GROUP_M, True)
    tile.store(out, index=(pid_m, pid_n),  # race
               tile=tile.load(x, index=(pid_m, pid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def grouped_order(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    pid_m, pid_n = _grouped(out, BM, BN, GROUP_M, False)
    tile.store(out, index=(pid_m, pid_n), tile=tile.load(x, index=(pid_m, pid_n), shape=(BM, BN)) * 2.0)


def grouped_setup(rng):
    rows, cols = 5 * 8 - 3, 3 * 8  # five block rows (the last group has one), three columns
    return 15, (_f32(rng, rows, cols), _poison(rows, cols)), {"BM": 8, "BN": 8, "GROUP_M": 2}


@vg.func
def _grouped_cutile(c, t, BM, BN, GROUP_M, column_bug: bool):
    """The tile (bid_m, bid_n) of linear tile index `t` in the grouped order of cuTile's
    matmul samples (the row from `t % group_size_m` itself). `column_bug`: the column as a
    remainder too, `(t % num_bid_in_group) % group_size_m`, which sends two blocks of a
    group to one tile."""
    num_bid_m = (c.shape[0] + BM - 1) // BM
    num_bid_n = (c.shape[1] + BN - 1) // BN
    num_bid_in_group = GROUP_M * num_bid_n
    first_bid_m = (t // num_bid_in_group) * GROUP_M
    group_size_m = min(num_bid_m - first_bid_m, GROUP_M)
    bid_m = first_bid_m + t % group_size_m
    if column_bug:
        bid_n = (t % num_bid_in_group) % group_size_m
    else:
        bid_n = (t % num_bid_in_group) // group_size_m
    return bid_m, bid_n


@tile.kernel
def cutile_order_column_remainder(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    bid_m, bid_n = _grouped_cutile(out, tile.bid(0), BM, BN, GROUP_M, True)
    tile.store(out, index=(bid_m, bid_n),  # race
               tile=tile.load(x, index=(bid_m, bid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def cutile_order(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    bid_m, bid_n = _grouped_cutile(out, tile.bid(0), BM, BN, GROUP_M, False)
    tile.store(out, index=(bid_m, bid_n), tile=tile.load(x, index=(bid_m, bid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def persistent_grouped_step_one(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    tiles = ((out.shape[0] + BM - 1) // BM) * ((out.shape[1] + BN - 1) // BN)
    for t in range(tile.bid(0), tiles, 1):
        pid_m, pid_n = _grouped_cutile(out, t, BM, BN, GROUP_M, False)
        tile.store(out, index=(pid_m, pid_n),  # race
                   tile=tile.load(x, index=(pid_m, pid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def persistent_grouped(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    tiles = ((out.shape[0] + BM - 1) // BM) * ((out.shape[1] + BN - 1) // BN)
    for t in range(tile.bid(0), tiles, tile.num_blocks(0)):
        pid_m, pid_n = _grouped_cutile(out, t, BM, BN, GROUP_M, False)
        tile.store(out, index=(pid_m, pid_n), tile=tile.load(x, index=(pid_m, pid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def persistent_triton_order_wrong_divisor(x, out, BM: vg.constexpr, BN: vg.constexpr,
                                          GROUP_M: vg.constexpr):
    num_pid_m = (out.shape[0] + BM - 1) // BM
    num_pid_n = (out.shape[1] + BN - 1) // BN
    num_pid_in_group = GROUP_M * num_pid_n
    for pid in range(tile.bid(0), num_pid_m * num_pid_n, tile.num_blocks(0)):
        first_pid_m = (pid // num_pid_in_group) * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
        pid_n = (pid % num_pid_in_group) // GROUP_M
        tile.store(out, index=(pid_m, pid_n),  # race
                   tile=tile.load(x, index=(pid_m, pid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def persistent_triton_order(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP_M: vg.constexpr):
    num_pid_m = (out.shape[0] + BM - 1) // BM
    num_pid_n = (out.shape[1] + BN - 1) // BN
    num_pid_in_group = GROUP_M * num_pid_n
    for pid in range(tile.bid(0), num_pid_m * num_pid_n, tile.num_blocks(0)):
        first_pid_m = (pid // num_pid_in_group) * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
        pid_n = (pid % num_pid_in_group) // group_size_m
        tile.store(out, index=(pid_m, pid_n), tile=tile.load(x, index=(pid_m, pid_n), shape=(BM, BN)) * 2.0)


@tile.kernel
def two_persistent_loops_shifted(x, out, B: vg.constexpr):
    tiles = (x.shape[0] + B - 1) // B
    for t in range(tile.bid(0), tiles, tile.num_blocks(0)):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)))  # race
    for t in range(tile.bid(0) + 1, tiles, tile.num_blocks(0)):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)) * 2.0)


@tile.kernel
def two_persistent_loops(x, out, B: vg.constexpr):
    tiles = (x.shape[0] + B - 1) // B
    for t in range(tile.bid(0), tiles, tile.num_blocks(0)):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)))
    for t in range(tile.bid(0), tiles, tile.num_blocks(0)):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)) * 2.0)


def persistent_grouped_setup(rng):
    rows, cols = 5 * 8 - 3, 3 * 8  # 15 tiles in three groups (the last of one row) over 4 blocks
    return 4, (_f32(rng, rows, cols), _poison(rows, cols)), {"BM": 8, "BN": 8, "GROUP_M": 2}



def _segment_starts(starts, B: vg.constexpr):
    """Each position's segment start (the largest of the sorted `starts` at or below it),
    found by a while loop that carries an int tile (varlen attention's rows)."""
    pos = tile.bid(0) * B + tile.arange(B)
    found = tile.zeros((B,), vg.int32)
    s = 0
    while s < starts.shape[0]:
        start = tile.load(starts, index=(s,), shape=())
        found = tile.where(pos >= start, start, found)
        s += 1
    return found


@tile.kernel
def segment_starts_one_tile(starts, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=_segment_starts(starts, B))  # race


@tile.kernel
def segment_starts(starts, out, B: vg.constexpr):
    tile.store(out, index=(tile.bid(0),), tile=_segment_starts(starts, B))


def segments_setup(rng):
    starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, N), 6, replace=False))])
    return vg.cdiv(N, B), (starts.astype(np.int32), np.full(N, -1, np.int32)), {"B": B}


def segments_reference(args):
    starts = args[0]
    return {1: starts[np.searchsorted(starts, np.arange(N), side="right") - 1]}

PAIRS = [
    TilePair("two blocks storing one tile", all_store_tile_zero, copy_tiles, "VG202",
             copy_setup, copy_reference),
    TilePair("split-K partial sums stored plainly", split_k_plain, split_k_atomic, "VG202",
             split_k_setup, split_k_reference),
    TilePair("persistent loop stepping by 1", persistent_step_one, persistent_step_blocks,
             "VG202", persistent_setup, doubled_reference),
    TilePair("in-place shift reading the neighbour's tile", shift_in_place, shift_into_out,
             "VG203", copy_setup, shift_reference),
    TilePair("in-place transpose", transpose_in_place, transpose_into_out, "VG203",
             transpose_setup, transpose_reference),
    TilePair("gather of the next block's output", gather_next_output, gather_next_input,
             "VG203", gather_setup, gather_reference),
    TilePair("plain read of an atomically summed total", reads_atomic_total, adds_to_total,
             "VG204", total_setup, total_reference),
    TilePair("plain read of an atomic maximum (fixed: atomics only)", reads_atomic_maximum,
             keeps_atomic_maximum, "VG204", maximum_setup, maximum_reference),
    TilePair("2-D grid, store ignores the column block", grid_2d_ignores_columns,
             grid_2d_copy, "VG202", grid_2d_setup, copy_reference),
    TilePair("tail tile of another shape in the next block's tile", tail_in_next_tile,
             tail_in_own_tile, "VG202", tail_setup, tail_reference),
    TilePair("every block writes one scalar", every_block_one_scalar, one_scalar_per_block,
             "VG202", sums_setup, sums_reference),
    TilePair("scatter through loaded indices (fixed: scatter_add)", scatter_loaded_indices,
             scatter_add_loaded_indices, "VG205", binned_setup, binned_reference),
    TilePair("scatter of a loaded permutation (fixed: vg.unsafe)", scatter_permutation,
             scatter_permutation_unsafe, "VG205", permutation_setup, permutation_reference,
             dynamic=False),
    TilePair("scatter at a loaded offset (fixed: bid * B + arange)", scatter_at_loaded_offset,
             scatter_at_own_offset, "VG205", offsets_setup, offsets_reference),
    TilePair("scatter whose lanes meet", scatter_lanes_meet, scatter_lanes_apart, "VG202",
             lanes_setup, lanes_reference, by_solver=True),
    TilePair("scatter through a flipped arange whose lanes meet", scatter_flipped_lanes_meet,
             scatter_flipped_lanes, "VG202", lanes_setup, flipped_lanes_reference, by_solver=True),
    TilePair("per-bin minimum through loaded indices (fixed: scatter_min)", scatter_loaded_indices,
             scatter_min_loaded_indices, "VG205", binned_setup, binned_minimum_reference),
    TilePair("2-D scatter with the row index twice", scatter_transposed_rows_meet,
             scatter_transposed_rows, "VG202", rows_setup, rows_reference, by_solver=True),
    TilePair("skipping scatter whose lanes meet (fixed: index -1 for the odd lanes)",
             skipping_lanes_meet, skipping_odd_lanes, "VG202", evens_setup, evens_reference,
             by_solver=True),
    TilePair("skipping scatter of every block into the first tile (fixed: its own, past the end "
             "for padding)", skipping_into_first_tile, skipping_past_the_end, "VG202", copy_setup,
             copy_reference, by_solver=True),
    TilePair("skipping scatter through loaded slots (fixed: vg.unsafe)", skipping_loaded_slots,
             skipping_loaded_slots_unsafe, "VG205", slots_setup, slots_reference, dynamic=False),
    TilePair("two tiles a block, overlapping the neighbour's", two_tiles_overlapping,
             two_tiles_per_block, "VG202", two_tiles_setup, doubled_reference),
    TilePair("grouped tile order dividing by GROUP_M in the last group", grouped_order_wrong_divisor,
             grouped_order, "VG202", grouped_setup, doubled_reference),
    TilePair("cuTile's grouped tile order with the column as a remainder",
             cutile_order_column_remainder, cutile_order, "VG202", grouped_setup, doubled_reference),
    TilePair("persistent loop over a grouped tile order stepping by 1", persistent_grouped_step_one,
             persistent_grouped, "VG202", persistent_grouped_setup, doubled_reference),
    TilePair("two persistent loops, the second a block ahead", two_persistent_loops_shifted,
             two_persistent_loops, "VG202", persistent_setup, doubled_reference),
    TilePair("persistent grouped tile order dividing by GROUP_M in the last group",
             persistent_triton_order_wrong_divisor, persistent_triton_order, "VG202",
             persistent_grouped_setup, doubled_reference),
    TilePair("int tile carried by a while loop, every block storing tile 0", segment_starts_one_tile,
             segment_starts, "VG202", segments_setup, segments_reference),
]
