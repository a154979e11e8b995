"""axpy: out = alpha * x + y, one thread per element, guarded against the ragged end."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


def check(rng, n=100_003):
    from verdigris.examples import Result

    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = vg.asarray(np.full(n, np.nan, np.float32))  # poisoned: every element must be written
    axpy[vg.cdiv(n, 256), 256](2.5, vg.asarray(x), vg.asarray(y), out)
    want = 2.5 * x.astype(np.float64) + y
    return [Result(f"axpy on {n:,} float32", np.asarray(out), want, 1e-6)]


def aliased() -> vg.AliasError:
    """The error a launch gets that passes one array as both input and output; the kernel
    never runs. (To update an array in place, write a kernel that takes it once.)"""
    x = vg.asarray(np.arange(1024, dtype=np.float32))
    try:
        axpy[4, 256](2.0, x, x, x)
    except vg.AliasError as err:
        return err
    raise AssertionError("the aliased launch was accepted")


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
