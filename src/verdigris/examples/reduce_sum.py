"""Sum of a large array: a grid-stride loop per thread, warp shuffles, one shared-memory
step across the block's warps, and one atomic add per block into the result."""
import numpy as np

import verdigris as vg
from verdigris import simt


# Two blocks per multiprocessor at least: at 1024 threads the driver's ptxas would take 36
# registers and fit one block (half the threads in flight); held to 32, two fit.
@simt.kernel(min_blocks_per_sm=2)
def block_sum(x, out, BLOCK: vg.constexpr = 256, PER_THREAD: vg.constexpr = 8):
    """out[0] += x.sum(): launch with blocks of BLOCK threads (a multiple of 32) and any grid."""
    warp_sums = simt.shared.array(BLOCK // simt.warp_size, vg.float32)
    t = simt.thread_id(0)
    n = x.shape[0]
    # Each pass covers BLOCK * PER_THREAD consecutive elements per block; a thread's
    # elements are BLOCK apart, so every load of a warp is coalesced and PER_THREAD loads
    # are in flight at once.
    first = int(simt.block_id(0)) * (BLOCK * PER_THREAD) + t
    stride = int(simt.grid_dim(0)) * (BLOCK * PER_THREAD)
    acc = vg.float32(0)
    for base in range(first, n, stride):
        if base + (PER_THREAD - 1) * BLOCK < n:  # a whole pass: loads with no guard
            for k in range(PER_THREAD):
                acc += x[base + k * BLOCK]
        else:
            for k in range(PER_THREAD):
                i = base + k * BLOCK
                if i < n:
                    acc += x[i]
    for k in range(5):  # the warp's 32 partial sums, down to lane 0
        acc += simt.shfl_down(acc, 16 >> k)
    lane = simt.lane_id()
    warp = t // simt.warp_size
    if lane == 0:
        warp_sums[warp] = acc
    simt.barrier()
    if warp == 0:  # the first warp adds the warps' sums
        total = warp_sums[lane] if lane < BLOCK // simt.warp_size else vg.float32(0)
        for k in range(5):
            total += simt.shfl_down(total, 16 >> k)
        if lane == 0:
            simt.atomic_add(out, 0, total)


def grid_for(n: int, block: int, per_thread: int, max_blocks: int = 1024) -> int:
    """Enough blocks to cover `n` once, at most `max_blocks` (then the loop strides)."""
    return max(1, min(max_blocks, vg.cdiv(n, block * per_thread)))


def total(x, block: int = 256, per_thread: int = 8):
    """x.sum() of a 1-d float32 array on the current backend, as a 1-element array."""
    out = vg.zeros(1, vg.float32)
    n = x.shape[0]
    block_sum[grid_for(n, block, per_thread), block](x, out, BLOCK=block, PER_THREAD=per_thread)
    return out


def check(rng, n=300_001):
    from verdigris.examples import Result

    results = []
    for block, per_thread, max_blocks in ((256, 8, 1024), (128, 4, 7)):
        x = rng.random(n, dtype=np.float32)  # positive: a relative error means something
        out = vg.zeros(1, vg.float32)
        grid = grid_for(n, block, per_thread, max_blocks)
        block_sum[grid, block](vg.asarray(x), out, BLOCK=block, PER_THREAD=per_thread)
        results.append(Result(f"sum of {n} float32, {grid} blocks of {block}, {per_thread} per "
                              "thread", np.asarray(out), np.array([x.astype(np.float64).sum()]),
                              1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
