"""A grid-stride loop: a fixed, small grid covers an array of any length."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def softplus(x, out):
    n = out.shape[0]
    stride = simt.grid_dim(0) * simt.block_dim(0)
    for i in range(simt.global_id(0), n, stride):
        v = x[i]
        # log(1 + e^v), computed without overflow for large v
        out[i] = max(v, 0.0) + vg.math.log1p(vg.math.exp(-abs(v)))


def check(rng, n=250_001):
    from verdigris.examples import Result

    x = (rng.standard_normal(n) * 30).astype(np.float32)
    out = vg.asarray(np.full(n, np.nan, np.float32))
    softplus[64, 128](vg.asarray(x), out)
    x64 = x.astype(np.float64)
    want = np.maximum(x64, 0) + np.log1p(np.exp(-np.abs(x64)))
    return [Result(f"softplus over {n:,} float32 with a 64x128 grid", np.asarray(out), want, 1e-6)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
