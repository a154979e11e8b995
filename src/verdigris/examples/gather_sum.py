"""Sums of gathered elements, an embedding bag's sum: out[i] = x[idx[i, 0]] + ... + x[idx[i, K - 1]].

The indices are data, so no proof covers the loads of x: each keeps its bounds check. An
index outside x is not read (it counts as 0), and the launch's first such index is raised
as `vg.BoundsError` at the next synchronization, naming the thread and the index. The
checks cost little: a thread's K loads issue together, with one branch to the fault record
after them (`bench/checked_loads.py`: 0.98-0.99 of the same gather in CUDA C without checks).
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


def check(rng, n=100_003, size=50_000, k=8):
    from verdigris.examples import Result

    x = rng.standard_normal(size).astype(np.float32)
    idx = rng.integers(0, size, (n, k))
    out = vg.asarray(np.full(n, np.nan, np.float32))  # poisoned: every element must be written
    gather_sum[vg.cdiv(n, 256), 256](vg.asarray(x), vg.asarray(idx), out, K=k)
    want = x.astype(np.float64)[idx].sum(1)
    return [Result(f"sums of {k} gathered float32, {n:,} outputs", np.asarray(out), want, 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
