"""Sums of gathered elements, an embedding bag's sum: out[i] = x[idx[i, 0]] + ... + x[idx[i, K - 1]].

The indices are data, so no proof covers the loads of x: each keeps its bounds check. An
index outside x is not read (it counts as 0), and the launch's first such index is raised
as `vg.BoundsError` at the next synchronization, naming the thread and the index. The
checks cost little: a thread's K loads issue together, with one branch to the fault record
after them (`bench/checked_loads.py`: 0.98-1.01 of the same gather in CUDA C without
checks; with K known at run time only, `gather_sum_any`, 0.97-1.00 of CUDA C's loop).
"""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def gather_sum(x, idx, out, K: vg.constexpr):
    """out[i] = the sum over k < K of x[idx[i, k]]; one thread per output."""
    i = simt.global_id(0)
    if i < out.shape[0]:
        total = 0.0
        for k in range(K):
            total += x[idx[i, k]]
        out[i] = total


@simt.kernel
def gather_sum_any(x, idx, out):
    """gather_sum with K = idx.shape[1] known at run time only: the loop stays a loop, and
    its checks carry the first fault to the loop's exit, where one branch records it."""
    i = simt.global_id(0)
    if i < out.shape[0]:
        total = 0.0
        for k in range(idx.shape[1]):
            total += x[idx[i, k]]
        out[i] = total


def check(rng, n=100_003, size=50_000, k=8):
    from verdigris.examples import Result

    x = rng.standard_normal(size).astype(np.float32)
    idx = rng.integers(0, size, (n, k))
    want = x.astype(np.float64)[idx].sum(1)
    x, idx = vg.asarray(x), vg.asarray(idx)
    outs = [vg.asarray(np.full(n, np.nan, np.float32)) for _ in range(2)]  # poisoned: all must be written
    gather_sum[vg.cdiv(n, 256), 256](x, idx, outs[0], K=k)
    gather_sum_any[vg.cdiv(n, 256), 256](x, idx, outs[1])
    return [Result(f"sums of {k} gathered float32, {n:,} outputs ({name})", np.asarray(out), want, 1e-5)
            for name, out in zip(("K constexpr", "K at run time"), outs)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
