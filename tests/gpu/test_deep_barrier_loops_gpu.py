"""Loops nested three and four deep with barriers on the GPU (issue #25): each kernel the
checker now proves (tests/safety/test_deep_barrier_loops.py) gives its float64 reference
for sizes with zeros, as on the cpu backend."""
import numpy as np
import pytest

import verdigris as vg
from safety.test_deep_barrier_loops import PAIRS, SIZES

pytestmark = pytest.mark.gpu

SAFE = {pair[0].__name__: pair[:2] for pair in PAIRS}


@pytest.mark.parametrize("name", sorted(SAFE))
def test_deep_barrier_loops_give_their_reference(rng, name):
    kernel, reference = SAFE[name]
    x = rng.standard_normal(64).astype(np.float32)
    gx = vg.asarray(x)
    for sizes in SIZES:
        gout = vg.asarray(np.full(64, np.nan, np.float32))
        kernel[1, 64](gx, gout, *sizes)
        np.testing.assert_allclose(np.asarray(gout), reference(x.astype(np.float64), *sizes),
                                   rtol=1e-5, atol=1e-5)
