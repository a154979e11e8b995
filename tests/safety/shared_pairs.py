"""The safety suite for threads that work together: shared memory, barriers, warps.

Each racy kernel sits beside its fixed twin (the classic bugs of block-level code, as in
GPUVerify's and Faial's catalogues and the CUDA samples' reductions, scans, transposes and
tiled products). The line the static checker must point at carries the comment
`# refused here`. `Pair` and its conventions (make, reference, dynamic) are `pairs.py`'s:
`make(rng)` gives `(grid, block, args, kwargs)` with NumPy arrays, outputs poisoned;
`reference(args)`, given the arguments as made, gives what the FIXED kernel leaves in its
outputs, by position.
"""
from __future__ import annotations

import numpy as np

import verdigris as vg
from verdigris import simt

from .pairs import Pair
from .warp_pairs import WARP_PAIRS

B = 64  # threads per block of the 1-d pairs: two warps
N = 3 * B - 5  # ragged: the last block is partly idle
FULL = 3 * B  # for kernels without bounds guards


def _f32(rng, n):
    return rng.standard_normal(n).astype(np.float32)


def _poison(n, dtype=np.float32):
    return np.full(n, -7, dtype)


# ----------------------------------------------------------------------------- tree reduction


@simt.kernel
def tree_sum_no_loop_barrier(x, out):  # CUDA samples reduce0 without __syncthreads in the loop
    buf = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    s = 64
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]  # refused here
        s //= 2
    if t == 0:
        out[simt.block_id(0)] = buf[0]


@simt.kernel
def tree_sum(x, out):
    buf = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    s = 64
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        simt.barrier()
        s //= 2
    if t == 0:
        out[simt.block_id(0)] = buf[0]


def sums_setup(block: int):
    def setup(rng):
        n = 3 * block - 5
        return (vg.cdiv(n, block),), (block,), (_f32(rng, n), _poison(vg.cdiv(n, block))), {}
    return setup


def sums_reference(block: int):
    def reference(args):
        x = np.concatenate([args[0], np.zeros(-len(args[0]) % block, np.float32)])
        return {1: x.reshape(-1, block).astype(np.float64).sum(axis=1)}
    return reference


# ----------------------------------------------------------------------------- warp tail


@simt.kernel
def warp_tail_in_shared(x, out):  # the pre-Volta warp-synchronous tail, without syncwarp
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    if t < 32:
        buf[t] += buf[t + 32]
        if t < 16:
            buf[t] += buf[t + 16]  # refused here
        if t < 8:
            buf[t] += buf[t + 8]
        if t == 0:
            out[simt.block_id(0)] = buf[0] + buf[1] + buf[2] + buf[3] + buf[4] + buf[5] + buf[6] + buf[7]


@simt.kernel
def warp_tail_shuffles(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    if t < 32:  # the whole first warp: shuffles need every lane
        v = buf[t] + buf[t + 32]
        for k in range(5):
            v += simt.shfl_down(v, 16 >> k)
        if t == 0:
            out[simt.block_id(0)] = v


# ----------------------------------------------------------------------------- reversal


@simt.kernel
def reverse_no_barrier(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    tile[t] = x[i]
    out[i] = tile[63 - t]  # refused here


@simt.kernel
def reverse(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    tile[t] = x[i]
    simt.barrier()
    out[i] = tile[63 - t]


def full_setup(rng):
    return (FULL // B,), (B,), (_f32(rng, FULL), _poison(FULL)), {}


def reverse_reference(args):
    return {1: args[0].reshape(-1, B)[:, ::-1].reshape(-1).copy()}


# ----------------------------------------------------------------------------- shared flag


@simt.kernel
def flag_by_every_thread(x, out):
    flag = simt.shared.array(1, vg.int32)
    i = simt.global_id(0)
    flag[0] = simt.block_id(0) * 10  # refused here
    simt.barrier()
    out[i] = x[i] + flag[0]


@simt.kernel
def flag_by_thread_zero(x, out):
    flag = simt.shared.array(1, vg.int32)
    i = simt.global_id(0)
    if simt.thread_id(0) == 0:
        flag[0] = simt.block_id(0) * 10
    simt.barrier()
    out[i] = x[i] + flag[0]


def flag_setup(rng):
    return (FULL // B,), (B,), (rng.integers(-99, 99, FULL).astype(np.int32), _poison(FULL, np.int32)), {}


def flag_reference(args):
    return {1: args[0] + np.repeat(np.arange(FULL // B, dtype=np.int32) * 10, B)}


# ----------------------------------------------------------------------------- tiled matmul


@simt.kernel
def matmul_one_barrier(a, b, c):  # the next step's loads overwrite tiles still being read
    As = simt.shared.array((8, 8), vg.float32)
    Bs = simt.shared.array((8, 8), vg.float32)
    tx = simt.thread_id(0)
    ty = simt.thread_id(1)
    row = simt.block_id(1) * 8 + ty
    col = simt.block_id(0) * 8 + tx
    acc = vg.float32(0)
    for k0 in range(0, a.shape[1], 8):
        As[ty, tx] = a[row, k0 + tx]
        Bs[ty, tx] = b[k0 + ty, col]
        simt.barrier()
        for k in range(8):
            acc += As[ty, k] * Bs[k, tx]  # refused here
    c[row, col] = acc


@simt.kernel
def matmul(a, b, c):
    As = simt.shared.array((8, 8), vg.float32)
    Bs = simt.shared.array((8, 8), vg.float32)
    tx = simt.thread_id(0)
    ty = simt.thread_id(1)
    row = simt.block_id(1) * 8 + ty
    col = simt.block_id(0) * 8 + tx
    acc = vg.float32(0)
    for k0 in range(0, a.shape[1], 8):
        As[ty, tx] = a[row, k0 + tx]
        Bs[ty, tx] = b[k0 + ty, col]
        simt.barrier()
        for k in range(8):
            acc += As[ty, k] * Bs[k, tx]
        simt.barrier()
    c[row, col] = acc


def matmul_setup(rng):
    m, k, n = 16, 24, 16
    a, b = _f32(rng, m * k).reshape(m, k), _f32(rng, k * n).reshape(k, n)
    return (n // 8, m // 8), (8, 8), (a, b, _poison(m * n).reshape(m, n)), {}


def matmul_reference(args):
    return {2: args[0].astype(np.float64) @ args[1].astype(np.float64)}


# ----------------------------------------------------------------------------- transpose


@simt.kernel
def transpose_no_barrier(x, out):
    tile = simt.shared.array((16, 17), vg.float32)  # a padding column: no bank conflicts
    tx = simt.thread_id(0)
    ty = simt.thread_id(1)
    c0 = simt.block_id(0) * 16
    r0 = simt.block_id(1) * 16
    if r0 + ty < x.shape[0] and c0 + tx < x.shape[1]:
        tile[ty, tx] = x[r0 + ty, c0 + tx]
    if c0 + ty < x.shape[1] and r0 + tx < x.shape[0]:
        out[c0 + ty, r0 + tx] = tile[tx, ty]  # refused here


@simt.kernel
def transpose(x, out):
    tile = simt.shared.array((16, 17), vg.float32)
    tx = simt.thread_id(0)
    ty = simt.thread_id(1)
    c0 = simt.block_id(0) * 16
    r0 = simt.block_id(1) * 16
    if r0 + ty < x.shape[0] and c0 + tx < x.shape[1]:
        tile[ty, tx] = x[r0 + ty, c0 + tx]
    simt.barrier()
    if c0 + ty < x.shape[1] and r0 + tx < x.shape[0]:
        out[c0 + ty, r0 + tx] = tile[tx, ty]


def transpose_setup(rng):
    h, w = 21, 35
    return (vg.cdiv(w, 16), vg.cdiv(h, 16)), (16, 16), (_f32(rng, h * w).reshape(h, w), _poison(h * w).reshape(w, h)), {}


def transpose_reference(args):
    return {1: args[0].T.copy()}


# ----------------------------------------------------------------------------- Hillis-Steele scan


@simt.kernel
def scan_in_place(x, out):  # reads a neighbour's slot while the neighbour updates it
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    simt.barrier()
    offset = 1
    while offset < 64:
        if t >= offset:
            buf[t] += buf[t - offset]  # refused here
        simt.barrier()
        offset *= 2
    out[i] = buf[t]


@simt.kernel
def scan_through_registers(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    simt.barrier()
    offset = 1
    while offset < 64:
        v = buf[t - offset] if t >= offset else vg.float32(0)
        simt.barrier()
        buf[t] += v
        simt.barrier()
        offset *= 2
    out[i] = buf[t]


def scan_reference(args):
    return {1: np.cumsum(args[0].reshape(-1, B).astype(np.float64), axis=1).reshape(-1)}


# ----------------------------------------------------------------------------- Blelloch scan
# GPU Gems 3, chapter 39, Example 39-2: the work-efficient exclusive scan of a block's 2*B
# elements in place. Its indices stay below 2*B and apart only because `offset * d` is B
# throughout: the checker needs both loops' trip counts (their bounds are constants).


@simt.kernel
def blelloch_scan_no_down_barrier(x, out):  # the down-sweep's steps are not ordered
    temp = simt.shared.array(2 * B, vg.float32)
    t = simt.thread_id(0)
    base = int(simt.block_id(0)) * (2 * B)
    temp[2 * t] = x[base + 2 * t]
    temp[2 * t + 1] = x[base + 2 * t + 1]
    offset = 1
    d = B
    while d > 0:
        simt.barrier()
        if t < d:
            ai = offset * (2 * t + 1) - 1
            bi = offset * (2 * t + 2) - 1
            temp[bi] += temp[ai]  # refused here: thread 0's last step meets the down-sweep's
        offset *= 2
        d >>= 1
    if t == 0:
        temp[2 * B - 1] = 0.0
    d = 1
    while d < 2 * B:
        offset >>= 1
        if t < d:
            ai = offset * (2 * t + 1) - 1
            bi = offset * (2 * t + 2) - 1
            v = temp[ai]
            temp[ai] = temp[bi]
            temp[bi] += v
        d *= 2
    simt.barrier()
    out[base + 2 * t] = temp[2 * t]
    out[base + 2 * t + 1] = temp[2 * t + 1]


@simt.kernel
def blelloch_scan(x, out):
    temp = simt.shared.array(2 * B, vg.float32)
    t = simt.thread_id(0)
    base = int(simt.block_id(0)) * (2 * B)
    temp[2 * t] = x[base + 2 * t]
    temp[2 * t + 1] = x[base + 2 * t + 1]
    offset = 1
    d = B
    while d > 0:  # up-sweep: partial sums up the tree
        simt.barrier()
        if t < d:
            ai = offset * (2 * t + 1) - 1
            bi = offset * (2 * t + 2) - 1
            temp[bi] += temp[ai]
        offset *= 2
        d >>= 1
    if t == 0:  # no barrier: thread 0 alone took the up-sweep's last step
        temp[2 * B - 1] = 0.0
    d = 1
    while d < 2 * B:  # down-sweep: the scan down the tree
        offset >>= 1
        simt.barrier()
        if t < d:
            ai = offset * (2 * t + 1) - 1
            bi = offset * (2 * t + 2) - 1
            v = temp[ai]
            temp[ai] = temp[bi]
            temp[bi] += v
        d *= 2
    simt.barrier()
    out[base + 2 * t] = temp[2 * t]
    out[base + 2 * t + 1] = temp[2 * t + 1]


def pairs_setup(rng):
    return (3,), (B,), (_f32(rng, 6 * B), _poison(6 * B)), {}


def exclusive_scan_reference(args):
    inclusive = np.cumsum(args[0].reshape(-1, 2 * B).astype(np.float64), axis=1)
    return {1: (inclusive - args[0].reshape(-1, 2 * B)).reshape(-1)}


# ----------------------------------------------------------------------------- reused buffer


@simt.kernel
def rotate_chunks_one_barrier(x, out):  # the next chunk's store overwrites what is still read
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    for base in range(simt.block_id(0) * 64, x.shape[0], simt.grid_dim(0) * 64):
        buf[t] = x[base + t]
        simt.barrier()
        out[base + t] = buf[(t + 1) % 64]  # refused here


@simt.kernel
def rotate_chunks(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    for base in range(simt.block_id(0) * 64, x.shape[0], simt.grid_dim(0) * 64):
        buf[t] = x[base + t]
        simt.barrier()
        out[base + t] = buf[(t + 1) % 64]
        simt.barrier()


def chunks_setup(rng):
    n = 7 * B
    return (2,), (B,), (_f32(rng, n), _poison(n)), {}


def rotate_reference(args):
    return {1: np.roll(args[0].reshape(-1, B), -1, axis=1).reshape(-1)}


# ----------------------------------------------------------------------------- halo stencil


@simt.kernel
def smooth_no_barrier(x, out):
    tile = simt.shared.array(66, vg.float32)  # the block's elements and one halo each side
    t = simt.thread_id(0)
    i = simt.global_id(0)
    n = x.shape[0]
    tile[t + 1] = x[i] if i < n else vg.float32(0)
    if t == 0:
        tile[0] = x[i - 1] if 1 <= i and i <= n else vg.float32(0)
    if t == 63:
        tile[65] = x[i + 1] if i + 1 < n else vg.float32(0)
    if i < n:
        out[i] = (tile[t] + tile[t + 1] + tile[t + 2]) / 3  # refused here


@simt.kernel
def smooth(x, out):
    tile = simt.shared.array(66, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    n = x.shape[0]
    tile[t + 1] = x[i] if i < n else vg.float32(0)
    if t == 0:
        tile[0] = x[i - 1] if 1 <= i and i <= n else vg.float32(0)
    if t == 63:
        tile[65] = x[i + 1] if i + 1 < n else vg.float32(0)
    simt.barrier()
    if i < n:
        out[i] = (tile[t] + tile[t + 1] + tile[t + 2]) / 3


def stencil_setup(rng):
    return (vg.cdiv(N, B),), (B,), (_f32(rng, N), _poison(N)), {}


def smooth_reference(args):
    x = np.concatenate([[0], args[0].astype(np.float64), [0]])
    return {1: (x[:-2] + x[1:-1] + x[2:]) / 3}


# ----------------------------------------------------------------------------- bitonic sort


@simt.kernel
def bitonic_sort_unguarded(x, out):  # both threads of a pair compare: one writes what the other reads
    keys = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    keys[t] = x[i]
    simt.barrier()
    for kk in range(1, 7):
        k = 1 << kk
        for jj in range(kk - 1, -1, -1):
            partner = t ^ (1 << jj)
            a = keys[t]  # refused here
            b = keys[partner]
            if (t & k) == 0:
                if a > b:
                    keys[t] = b
                    keys[partner] = a
            else:
                if a < b:
                    keys[t] = b
                    keys[partner] = a
            simt.barrier()
    out[i] = keys[t]


@simt.kernel
def bitonic_sort(x, out):  # the CUDA samples' sortingNetworks, one block's keys in shared memory
    keys = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    keys[t] = x[i]
    simt.barrier()
    for kk in range(1, 7):
        k = 1 << kk
        for jj in range(kk - 1, -1, -1):
            partner = t ^ (1 << jj)
            if partner > t:  # the lower thread of each pair exchanges the two keys
                a = keys[t]
                b = keys[partner]
                if (t & k) == 0:
                    if a > b:
                        keys[t] = b
                        keys[partner] = a
                else:
                    if a < b:
                        keys[t] = b
                        keys[partner] = a
            simt.barrier()
    out[i] = keys[t]


@simt.kernel
def bitonic_sort_halving_one_barrier_per_stage(x, out):  # a stage's steps are not ordered
    keys = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    keys[t] = x[i]
    k = 2
    while k <= B:
        simt.barrier()
        j = k // 2
        while j > 0:
            partner = t ^ j
            if partner > t:
                a = keys[t]  # refused here
                b = keys[partner]
                if (a > b) == ((t & k) == 0):
                    keys[t] = b
                    keys[partner] = a
            j //= 2
        k *= 2
    simt.barrier()
    out[i] = keys[t]


@simt.kernel
def bitonic_sort_halving(x, out):  # the textbook form: k doubles and j halves in while loops
    keys = simt.shared.array(B, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    keys[t] = x[i]
    simt.barrier()
    k = 2
    while k <= B:
        j = k // 2
        while j > 0:  # j is a power of two here: the partner t ^ j is t + j or t - j
            partner = t ^ j
            if partner > t:
                a = keys[t]
                b = keys[partner]
                if (a > b) == ((t & k) == 0):
                    keys[t] = b
                    keys[partner] = a
            simt.barrier()
            j //= 2
        k *= 2
    out[i] = keys[t]


def sorted_blocks_reference(args):
    return {1: np.sort(args[0].reshape(-1, B), axis=1).reshape(-1)}


@simt.kernel
def bitonic_sort_by_position_one_barrier_per_stage(x, out):  # strides meet: no barrier between
    keys = simt.shared.array(2 * B, vg.float32)
    t = simt.thread_id(0)
    base = simt.block_id(0) * (2 * B)
    keys[t] = x[base + t]
    keys[t + B] = x[base + t + B]
    for kk in range(1, 8):
        ascending = (t & (1 << (kk - 1))) == 0
        simt.barrier()
        for ls in range(kk - 1, -1, -1):
            stride = 1 << ls
            pos = 2 * t - (t & (stride - 1))
            a = keys[pos]  # refused here
            b = keys[pos + stride]
            if (a > b) == ascending:
                keys[pos] = b
                keys[pos + stride] = a
    simt.barrier()
    out[base + t] = keys[t]
    out[base + t + B] = keys[t + B]


@simt.kernel
def bitonic_sort_by_position(x, out):  # the CUDA samples' bitonicSortShared: 2 keys a thread
    keys = simt.shared.array(2 * B, vg.float32)
    t = simt.thread_id(0)
    base = simt.block_id(0) * (2 * B)
    keys[t] = x[base + t]
    keys[t + B] = x[base + t + B]
    for kk in range(1, 8):
        ascending = (t & (1 << (kk - 1))) == 0
        for ls in range(kk - 1, -1, -1):
            stride = 1 << ls
            simt.barrier()
            pos = 2 * t - (t & (stride - 1))  # t's pair: s[pos] and s[pos + stride]
            a = keys[pos]
            b = keys[pos + stride]
            if (a > b) == ascending:
                keys[pos] = b
                keys[pos + stride] = a
    simt.barrier()
    out[base + t] = keys[t]
    out[base + t + B] = keys[t + B]


def two_keys_setup(rng):
    return (2,), (B,), (_f32(rng, 4 * B), _poison(4 * B)), {}


def sorted_pairs_of_blocks_reference(args):
    return {1: np.sort(args[0].reshape(-1, 2 * B), axis=1).reshape(-1)}


# ----------------------------------------------------------------------------- divergent barriers


@simt.kernel
def barrier_in_bounds_guard(x, out):  # threads past the end never reach the barrier
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if i < x.shape[0]:
        buf[t] = x[i]
        simt.barrier()  # refused here
        out[i] = buf[t] + buf[t ^ 1]


@simt.kernel
def barrier_for_all(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    if i < x.shape[0]:
        out[i] = buf[t] + buf[t ^ 1]


def neighbours_reference(args):
    x = np.concatenate([args[0], np.zeros(-len(args[0]) % B, np.float32)]).astype(np.float64)
    pairs = x + x.reshape(-1, 2)[:, ::-1].reshape(-1)
    return {1: pairs[:len(args[0])]}


@simt.kernel
def rounds_per_thread(x, rounds, out):  # each thread's own trip count around barriers
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for r in range(rounds[i]):
        buf[t] = v
        simt.barrier()  # refused here
        v = (buf[t] + buf[(t + 1) % 64]) / 2
        simt.barrier()
    out[i] = v


@simt.kernel
def rounds_per_block(x, rounds, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    v = x[i]
    for r in range(rounds[simt.block_id(0)]):  # one value for the whole block
        buf[t] = v
        simt.barrier()
        v = (buf[t] + buf[(t + 1) % 64]) / 2
        simt.barrier()
    out[i] = v


def rounds_setup(rng):
    return (FULL // B,), (B,), (_f32(rng, FULL), rng.integers(1, 4, FULL).astype(np.int32),
                                _poison(FULL)), {}


def rounds_reference(args):
    x, rounds = args[0].reshape(-1, B).astype(np.float64), args[1]
    out = x.copy()
    for b in range(len(x)):
        for _ in range(rounds[b]):
            out[b] = (out[b] + np.roll(out[b], -1)) / 2
    return {2: out.reshape(-1)}


# ----------------------------------------------------------------------------- warps


@simt.kernel
def rotate_warp_no_syncwarp(x, out):  # lanes of a warp are not in lock step
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    out[i] = buf[(t // 32) * 32 + (simt.lane_id() + 1) % 32]  # refused here


@simt.kernel
def rotate_warp(x, out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    simt.syncwarp()
    out[i] = buf[(t // 32) * 32 + (simt.lane_id() + 1) % 32]


def rotate_warp_reference(args):
    return {1: np.roll(args[0].reshape(-1, 32), -1, axis=1).reshape(-1)}


@simt.kernel
def warp_sums_in_bounds_only(x, out):  # lanes past the end skip the shuffles
    i = simt.global_id(0)
    v = x[i] if i < x.shape[0] else vg.float32(0)
    if i < x.shape[0]:
        for k in range(5):
            v += simt.shfl_down(v, 16 >> k)  # refused here
    if simt.lane_id() == 0:
        out[i // 32] = v


@simt.kernel
def warp_sums(x, out):
    i = simt.global_id(0)
    v = x[i] if i < x.shape[0] else vg.float32(0)
    for k in range(5):
        v += simt.shfl_down(v, 16 >> k)
    if simt.lane_id() == 0:
        out[i // 32] = v


def warp_sums_setup(rng):
    return (vg.cdiv(N, B),), (B,), (_f32(rng, N), _poison(vg.cdiv(N, 32))), {}


def warp_sums_reference(args):
    x = np.concatenate([args[0], np.zeros(-len(args[0]) % 32, np.float32)])
    return {1: x.reshape(-1, 32).astype(np.float64).sum(axis=1)}


# ----------------------------------------------------------------------------- atomics, first reads


@simt.kernel
def count_while_zeroing(x, out):  # the plain zeroing meets the atomics: no barrier between
    counts = simt.shared.array(16, vg.int32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t < 16:
        counts[t] = 0  # refused here
    if i < x.shape[0]:
        simt.atomic_add(counts, i % 16, 1)
    simt.barrier()
    if t < 16:
        simt.atomic_add(out, t, counts[t])


@simt.kernel
def count_after_zeroing(x, out):
    counts = simt.shared.array(16, vg.int32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t < 16:
        counts[t] = 0
    simt.barrier()
    if i < x.shape[0]:
        simt.atomic_add(counts, i % 16, 1)
    simt.barrier()
    if t < 16:
        simt.atomic_add(out, t, counts[t])


def counts_setup(rng):
    return (vg.cdiv(N, B),), (B,), (_f32(rng, N), np.zeros(16, np.int32)), {}


def counts_reference(args):
    return {1: np.bincount(np.arange(len(args[0])) % 16, minlength=16).astype(np.int32)}


@simt.kernel
def half_tile_written(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if t < 32:
        tile[t] = x[i]
    simt.barrier()
    out[i] = tile[t]  # refused here


@simt.kernel
def whole_tile_written(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    tile[t] = x[i]
    simt.barrier()
    out[i] = tile[t]


def copy_reference(args):
    return {1: args[0].copy()}


SHARED_PAIRS = [
    Pair("tree reduction without the loop barrier", tree_sum_no_loop_barrier, tree_sum, "VG211",
         sums_setup(128), sums_reference(128)),
    Pair("warp tail in shared memory vs shuffles", warp_tail_in_shared, warp_tail_shuffles, "VG212",
         sums_setup(B), sums_reference(B)),
    Pair("block reversal without the barrier", reverse_no_barrier, reverse, "VG211", full_setup,
         reverse_reference),
    Pair("shared flag written by every thread", flag_by_every_thread, flag_by_thread_zero, "VG211",
         flag_setup, flag_reference),
    Pair("tiled matmul with one barrier per step", matmul_one_barrier, matmul, "VG211",
         matmul_setup, matmul_reference),
    Pair("padded transpose without the barrier", transpose_no_barrier, transpose, "VG211",
         transpose_setup, transpose_reference),
    Pair("Hillis-Steele scan in one buffer", scan_in_place, scan_through_registers, "VG211",
         full_setup, scan_reference),
    Pair("Blelloch scan without the down-sweep barrier", blelloch_scan_no_down_barrier,
         blelloch_scan, "VG211", pairs_setup, exclusive_scan_reference),
    Pair("loop reusing shared memory with one barrier", rotate_chunks_one_barrier, rotate_chunks,
         "VG211", chunks_setup, rotate_reference),
    Pair("halo stencil without the barrier", smooth_no_barrier, smooth, "VG211", stencil_setup,
         smooth_reference),
    Pair("bitonic sort without the partner guard", bitonic_sort_unguarded, bitonic_sort, "VG211",
         full_setup, sorted_blocks_reference),
    Pair("bitonic sort in while loops with one barrier per stage",
         bitonic_sort_halving_one_barrier_per_stage, bitonic_sort_halving, "VG211", full_setup,
         sorted_blocks_reference),
    Pair("bitonic sort by position with one barrier per stage",
         bitonic_sort_by_position_one_barrier_per_stage, bitonic_sort_by_position, "VG211",
         two_keys_setup, sorted_pairs_of_blocks_reference),
    Pair("barrier under a bounds guard", barrier_in_bounds_guard, barrier_for_all, "VG210",
         stencil_setup, neighbours_reference),
    Pair("barrier in a loop of data-dependent length", rounds_per_thread, rounds_per_block, "VG210",
         rounds_setup, rounds_reference),
    Pair("warp rotation without syncwarp", rotate_warp_no_syncwarp, rotate_warp, "VG212", full_setup,
         rotate_warp_reference),
    Pair("shuffles under a bounds guard", warp_sums_in_bounds_only, warp_sums, "VG214",
         warp_sums_setup, warp_sums_reference),
    Pair("shared atomics meet the zeroing", count_while_zeroing, count_after_zeroing, "VG204",
         counts_setup, counts_reference),
    Pair("half a tile read before it is written", half_tile_written, whole_tile_written, "VG213",
         full_setup, copy_reference),
    *WARP_PAIRS,
]
