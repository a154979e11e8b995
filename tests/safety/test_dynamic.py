"""Static/dynamic agreement on the safety suite (tests/safety/pairs.py, warp_pairs.py).

Each racy kernel runs on the cpu backend *without* the static checker (its IR straight
from the frontend, through `cpu.run_simt`): shadow memory must raise a `SafetyError` with
the code the static checker gives it, wherever the pair says the run shows the race
(`pair.dynamic`); where the static verdict is VG205 (an index it could not prove disjoint),
the run shows which race it is: VG202, VG203 or VG204. Each fixed twin runs the same way:
no error, and its outputs match the pair's reference (computed from the inputs before the
run).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import verdigris as vg
from verdigris.cpu import run_simt

from .test_static import PAIRS

# The static code -> the codes a run may observe for it.
OBSERVABLE = {"VG205": {"VG202", "VG203", "VG204"}}

# Relative error allowed against the pair's reference, per output dtype.
RTOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-10,
        np.dtype(np.int32): 0}


def _dims(value) -> tuple:
    dims = value if isinstance(value, tuple) else (value,)
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def run_on_cpu(k, grid, block, args: tuple, kwargs: dict) -> None:
    """The kernel's IR for these arguments, run by the cpu backend; no static check."""
    values = k.bind(args, kwargs)
    block = _dims(block)
    kernel_ir = k.build(k.spec_key(values, k.describe_args(values), block))
    named = {p.name: v for p, v in zip(k.params, values) if not p.constexpr}
    run_simt(kernel_ir, _dims(grid), block, named)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_racy_kernel_is_caught_while_running(pair, rng):
    if not pair.dynamic:
        pytest.skip("the pair says this run cannot show the race (it needs other values or "
                    "another schedule)")
    grid, block, args, kwargs = pair.make(rng)
    with pytest.raises(vg.SafetyError) as info:
        try:
            run_on_cpu(pair.racy, grid, block, args, kwargs)
        except vg.BoundsError as fault:
            pytest.fail(f"{pair.name}: with make()'s arguments the racy kernel goes out of "
                        f"bounds before any race shows ({fault.message}); the pair should say "
                        "dynamic=False, or make() should keep the kernel in bounds")
    assert info.value.code in OBSERVABLE.get(pair.code, {pair.code}), str(info.value)
    assert "observed while running on the cpu backend" in info.value.message


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_fixed_twin_runs_clean_and_right(pair, rng):
    grid, block, args, kwargs = pair.make(rng)
    expected = pair.reference(copy.deepcopy(args))
    assert expected, f"{pair.name}: the reference checks no output"
    run_on_cpu(pair.fixed, grid, block, args, kwargs)
    for position, want in expected.items():
        got = np.asarray(args[position])
        rtol = RTOL.get(got.dtype)
        if rtol is None:
            np.testing.assert_array_equal(got, want, err_msg=f"{pair.name}: argument {position}")
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol,
                                       err_msg=f"{pair.name}: argument {position}")
