"""A racy kernel and its fix: shifting an array left in place reads the element the next
thread writes (VG203); writing the shift into a second array is race-free."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def shift_in_place(x):
    i = simt.global_id(0)
    if i + 1 < x.shape[0]:
        x[i] = x[i + 1]  # thread i+1 may already have overwritten x[i+1]


@simt.kernel
def shift(x, out):
    i = simt.global_id(0)
    if i + 1 < x.shape[0]:
        out[i] = x[i + 1]


def check(rng, n=10_000):
    from verdigris.examples import Result

    x = rng.standard_normal(n).astype(np.float32)
    out = vg.asarray(np.full(n - 1, np.nan, np.float32))
    shift[vg.cdiv(n, 256), 256](vg.asarray(x), out)
    return [Result(f"shift of {n:,} float32 into a second array", np.asarray(out), x[1:], 0.0)]


def refused() -> vg.SafetyError:
    """The error the racy kernel gets; it never runs."""
    x = vg.asarray(np.arange(1000, dtype=np.float32))
    try:
        shift_in_place[4, 256](x)
    except vg.SafetyError as err:
        return err
    raise AssertionError("the racy shift was accepted")


if __name__ == "__main__":
    from verdigris.examples import report

    print(refused(), "\n")
    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
