"""64-bit integer arithmetic on the GPU wraps as the race model says it does (issue #25):
`uint64(t - 5)` of a small t is near 2**64, `g << 62` is negative for g = 2, `i * s * 4`
of s = 2**62 is 0, on the GPU as in the model (and in NumPy's uint64/int64)."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt

pytestmark = pytest.mark.gpu


@simt.kernel
def wrapped_values(flags, shifted, scaled, s):
    g = simt.global_id(0)
    if g < flags.shape[0]:
        flags[g] = 1 if vg.uint64(g - 5) > vg.uint64(100) else 0
        shifted[g] = g << 62
        scaled[g] = g * s * 4


def test_64_bit_arithmetic_wraps_on_the_gpu():
    n = 64
    flags, shifted, scaled = (vg.asarray(np.full(n, -7, np.int64)) for _ in range(3))
    wrapped_values[1, n](flags, shifted, scaled, np.int64(2**62))
    g = np.arange(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(flags.numpy(), (g.astype(np.uint64) - np.uint64(5) > 100).astype(np.int64))
        np.testing.assert_array_equal(shifted.numpy(), g << 62)
        np.testing.assert_array_equal(scaled.numpy(), g * np.int64(2**62) * 4)
    assert (flags.numpy()[:5] == 1).all() and (scaled.numpy() == 0).all()
