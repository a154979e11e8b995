"""Static/dynamic agreement on the cooperation suite (tests/safety/shared_pairs.py).

Each racy kernel runs on the cpu backend without the static checker (`run_on_cpu`): shadow
memory, barrier and warp tracking must raise the `SafetyError` the static checker gives it,
up to what one run can tell apart: a race in shared memory is VG211 or VG212 depending on
which two threads the run meets first (the checker prefers threads of two warps where
there are any), and the run reports a warp operation some lanes skip as the divergence
error VG210. Each fixed twin runs clean and matches the pair's reference.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import verdigris as vg

from .shared_pairs import SHARED_PAIRS
from .test_dynamic import run_on_cpu

# The static code -> the codes a run may observe for it.
OBSERVABLE = {"VG211": {"VG211", "VG212"}, "VG214": {"VG214", "VG210"}}


@pytest.mark.parametrize("pair", SHARED_PAIRS, ids=[p.name for p in SHARED_PAIRS])
def test_racy_kernel_is_caught_while_running(pair, rng):
    grid, block, args, kwargs = pair.make(rng)
    with pytest.raises(vg.SafetyError) as info:
        run_on_cpu(pair.racy, grid, block, args, kwargs)
    assert info.value.code in OBSERVABLE.get(pair.code, {pair.code}), str(info.value)
    assert "observed while running on the cpu backend" in info.value.message


@pytest.mark.parametrize("pair", SHARED_PAIRS, ids=[p.name for p in SHARED_PAIRS])
def test_fixed_twin_runs_clean_and_right(pair, rng):
    grid, block, args, kwargs = pair.make(rng)
    expected = pair.reference(copy.deepcopy(args))
    run_on_cpu(pair.fixed, grid, block, args, kwargs)
    for position, want in expected.items():
        np.testing.assert_allclose(np.asarray(args[position]), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{pair.name}: argument {position}")
