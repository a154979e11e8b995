"""A constexpr-unrolled dot product: each thread multiplies one row of A by x, with the
row length K a compile-time constant (one specialization per K), partial sums kept in a
per-thread local array of ACC lanes."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def matvec(a, x, out, K: vg.constexpr, ACC: vg.constexpr):
    row = simt.global_id(0)
    if row >= out.shape[0]:
        return
    partial = simt.local.array(ACC, vg.float32)
    for j in range(ACC):
        partial[j] = 0.0
    for k in range(0, K, ACC):
        for j in range(ACC):
            if k + j < K:
                partial[j] += a[row, k + j] * x[k + j]
    total = 0.0
    for j in range(ACC):
        total += partial[j]
    out[row] = total


def check(rng, rows=2_000):
    from verdigris.examples import Result

    results = []
    for k in (16, 37):
        a = rng.standard_normal((rows, k)).astype(np.float32)
        x = rng.standard_normal(k).astype(np.float32)
        out = vg.asarray(np.full(rows, np.nan, np.float32))
        matvec[vg.cdiv(rows, 128), 128](vg.asarray(a), vg.asarray(x), out, K=k, ACC=4)
        want = a.astype(np.float64) @ x.astype(np.float64)
        results.append(Result(f"{rows}x{k} matrix-vector product, K={k} unrolled",
                              np.asarray(out), want, 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
