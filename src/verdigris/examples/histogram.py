"""Histogram of bytes: each block counts into its own bins in shared memory with shared
atomics, then adds its nonzero bins to the global histogram with one atomic each."""
import numpy as np

import verdigris as vg
from verdigris import simt

BINS = 256


@simt.kernel
def histogram(data, bins, PER_THREAD: vg.constexpr = 8):
    """bins[v] += how many elements of `data` (uint8) equal v; launch with any grid and block."""
    counts = simt.shared.array(BINS, vg.int32)
    t = simt.thread_id(0)
    threads = simt.block_dim(0)
    for b in range(t, BINS, threads):
        counts[b] = 0
    simt.barrier()
    n = data.shape[0]
    first = int(simt.block_id(0)) * (threads * PER_THREAD) + t
    stride = int(simt.grid_dim(0)) * (threads * PER_THREAD)
    value = simt.local.array(PER_THREAD, vg.uint8)
    for base in range(first, n, stride):
        if base + (PER_THREAD - 1) * threads < n:  # a whole pass: no guards
            for k in range(PER_THREAD):  # PER_THREAD coalesced loads in flight, then the adds
                value[k] = data[base + k * threads]
            for k in range(PER_THREAD):
                simt.atomic_add(counts, int(value[k]), 1)
        else:
            for k in range(PER_THREAD):
                i = base + k * threads
                if i < n:
                    simt.atomic_add(counts, int(data[i]), 1)
    simt.barrier()
    for b in range(t, BINS, threads):
        c = counts[b]
        if c != 0:
            simt.atomic_add(bins, b, c)


def grid_for(n: int, block: int, per_thread: int, max_blocks: int = 1024) -> int:
    return max(1, min(max_blocks, vg.cdiv(n, block * per_thread)))


def check(rng, n=200_003):
    from verdigris.examples import Result

    results = []
    for block, per_thread, max_blocks in ((256, 8, 1024), (96, 2, 5)):
        # Skewed, so that some bins collide often and some stay empty.
        data = np.minimum(rng.exponential(40.0, n), 255).astype(np.uint8)
        bins = vg.zeros(BINS, vg.int64)
        grid = grid_for(n, block, per_thread, max_blocks)
        histogram[grid, block](vg.asarray(data), bins, PER_THREAD=per_thread)
        results.append(Result(f"histogram of {n} bytes into {BINS} bins, {grid} blocks of "
                              f"{block}", np.asarray(bins), np.bincount(data, minlength=BINS),
                              0.0, absolute=True))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
