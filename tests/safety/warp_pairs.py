"""Racy kernels beside their fixed twins for the warp operations CUDA users reach for first:
`match_any` (warp-aggregated atomics), `reduce_*` (`__reduce_*_sync`), and
`threadfence()` (the CUDA sample threadFenceReduction: the last block to finish adds up
the others' partial sums).

`WARP_PAIRS` are threads of one block working together (they join `SHARED_PAIRS`, whose
conventions they follow); `FENCE_PAIRS` are blocks handing values to one another (they
join `pairs.PAIRS`): a fence orders one thread's own accesses, never another block's, so a
plain store that another block reads races with or without it, and the fix is to hand the
value over atomically (`block_ticket` tells the last block it is last). `Pair` and its
conventions are `pairs.py`'s; the line the static checker must point at carries the
comment `# refused here`.
"""
from __future__ import annotations

import numpy as np

import verdigris as vg
from verdigris import simt

from .pairs import Pair

B = 64  # threads per block: two warps
N = 3 * B - 5  # ragged: the last block is partly idle
KEYS = 8


# ----------------------------------------------------------------------------- match_any


@simt.kernel
def aggregated_counts_in_bounds_only(keys, counts):  # lanes past the end skip the match
    i = simt.global_id(0)
    if i < keys.shape[0]:
        k = keys[i]
        peers = simt.match_any(k)  # refused here
        if simt.lane_id() == vg.math.ffs(peers) - 1:  # one atomic per key and warp
            simt.atomic_add(counts, k, vg.math.popc(peers))


@simt.kernel
def aggregated_counts(keys, counts):
    i = simt.global_id(0)
    k = keys[i] if i < keys.shape[0] else -1  # lanes past the end: a key of their own
    peers = simt.match_any(k)
    if i < keys.shape[0] and simt.lane_id() == vg.math.ffs(peers) - 1:
        simt.atomic_add(counts, k, vg.math.popc(peers))


def counts_setup(rng):
    keys = rng.integers(0, KEYS, N).astype(np.int32)
    return (vg.cdiv(N, B),), (B,), (keys, np.zeros(KEYS, np.int32)), {}


def counts_reference(args):
    return {1: np.bincount(args[0], minlength=KEYS).astype(np.int32)}


# ----------------------------------------------------------------------------- reduce


@simt.kernel
def positive_sums_under_the_test(x, out):  # lanes holding a negative value skip the sum
    i = simt.global_id(0)
    v = x[i] if i < x.shape[0] else vg.float32(0)
    s = vg.float32(0)
    if v > 0.0:
        s = simt.reduce_add(v)  # refused here
    if simt.lane_id() == 0:
        out[i // 32] = s


@simt.kernel
def positive_sums(x, out):
    i = simt.global_id(0)
    v = x[i] if i < x.shape[0] else vg.float32(0)
    s = simt.reduce_add(v if v > 0.0 else vg.float32(0))
    if simt.lane_id() == 0:
        out[i // 32] = s


def sums_setup(rng):
    x = rng.standard_normal(N).astype(np.float32)
    return (vg.cdiv(N, B),), (B,), (x, np.full(vg.cdiv(N, 32), -7, np.float32)), {}


def sums_reference(args):
    x = np.concatenate([args[0], np.zeros(-N % 32, np.float32)]).astype(np.float64)
    return {1: np.maximum(x, 0).reshape(-1, 32).sum(axis=1)}


WARP_PAIRS = [
    Pair("match_any under a bounds guard", aggregated_counts_in_bounds_only, aggregated_counts,
         "VG214", counts_setup, counts_reference),
    Pair("reduce_add under a data test", positive_sums_under_the_test, positive_sums, "VG214",
         sums_setup, sums_reference),
]


# ----------------------------------------------------------------------------- threadfence


@vg.func
def block_sum(v):
    """The sum of `v` over a block of B threads, on every thread."""
    warp_sums = simt.shared.array(B // 32, vg.float64)
    v = simt.reduce_add(v)
    if simt.lane_id() == 0:
        warp_sums[simt.thread_id(0) // 32] = v
    simt.barrier()
    total = vg.float64(0)
    for w in range(B // 32):
        total += warp_sums[w]
    return total


@simt.kernel
def last_block_reads_plain_sums(x, partial, out, tickets):  # the fence orders no other block
    t = simt.thread_id(0)
    i = simt.global_id(0)
    s = block_sum(x[i] if i < x.shape[0] else vg.float64(0))
    if t == 0:
        partial[simt.block_id(0)] = s
    simt.threadfence()
    if int(simt.block_ticket(tickets)) == simt.grid_dim(0) - 1:
        simt.threadfence()
        simt.barrier()
        acc = vg.float64(0)
        for b in range(t, simt.grid_dim(0), B):
            acc += partial[b]  # refused here
        total = block_sum(acc)
        if t == 0:
            out[0] = total


@simt.kernel
def last_block_reads_atomic_sums(x, partial, out, tickets):
    t = simt.thread_id(0)
    i = simt.global_id(0)
    s = block_sum(x[i] if i < x.shape[0] else vg.float64(0))
    if t == 0:
        simt.atomic_exch(partial, simt.block_id(0), s)  # handed over atomically
    simt.threadfence()  # the sum is seen before this block's ticket is
    if int(simt.block_ticket(tickets)) == simt.grid_dim(0) - 1:  # every other block is done
        simt.threadfence()  # thread 0 took the ticket: what it saw, the block sees after
        simt.barrier()  # the fence and this barrier
        acc = vg.float64(0)
        for b in range(t, simt.grid_dim(0), B):
            acc += simt.atomic_add(partial, b, vg.float64(0))  # an atomic read
        total = block_sum(acc)
        if t == 0:
            out[0] = total


def fence_setup(rng):
    n = 40 * B - 5
    blocks = vg.cdiv(n, B)
    x = rng.standard_normal(n)
    return (blocks,), (B,), (x, np.full(blocks, -7, np.float64), np.full(1, -7, np.float64),
                              np.zeros(1, np.int32)), {}


def fence_reference(args):
    return {2: np.array([args[0].sum()])}


FENCE_PAIRS = [
    Pair("last block reads plain partial sums after threadfence", last_block_reads_plain_sums,
         last_block_reads_atomic_sums, "VG203", fence_setup, fence_reference),
]
