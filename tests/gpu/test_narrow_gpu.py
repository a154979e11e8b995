"""64-bit scalar arguments in and beyond int32's range on the GPU (`Param.narrow`): the
narrow and the wide variants compute the same 64-bit arithmetic (only the proofs differ),
launches alternating between them get the right one, and a width beyond int32's range
on the row kernel is refused before anything runs."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from tests.fakecuda.kernels import rows_by_width

pytestmark = pytest.mark.gpu


@simt.kernel
def scaled_ids(out, s):
    g = simt.global_id(0)
    if g < out.shape[0]:
        out[g] = g * s + s


def test_both_variants_compute_in_64_bits():
    n = 256
    g = np.arange(n, dtype=np.int64)
    for s in (3, 2**40, -2**31, np.int64(2**31), 3, np.int64(-2**40)):
        out = vg.asarray(np.full(n, -7, np.int64))
        scaled_ids[1, n](out, s)
        with np.errstate(over="ignore"):
            want = (g * np.int64(s) + np.int64(s))
        np.testing.assert_array_equal(out.numpy(), want)


def test_the_row_kernel_runs_narrow_and_refuses_a_huge_width(rng):
    x = vg.asarray(rng.standard_normal(4).astype(np.float32))
    for width in (8, 2**62, 8, np.int64(2**31), 8):
        out = vg.asarray(np.full(32, np.nan, np.float32))
        if width == 8:
            rows_by_width[(1, 4), (8, 1)](x, out, width)
            np.testing.assert_array_equal(out.numpy(), np.repeat(x.numpy(), 8))
        else:
            with pytest.raises(vg.SafetyError, match="wraps around"):
                rows_by_width[(1, 4), (8, 1)](x, out, width)
            assert np.isnan(out.numpy()).all()
