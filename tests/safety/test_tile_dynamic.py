"""Static/dynamic agreement on the tile safety suite (tests/safety/tile_pairs.py).

Each racy tile kernel runs on the cpu backend *without* the static checker (its IR straight
from the frontend, through `cpu.run_tile`): the block-level shadow memory must raise a
`SafetyError` with the code the static checker gives it, wherever the pair says the run
shows the race (`pair.dynamic`); where the static verdict is VG205 (an index it could not
see), the run shows which race it is: VG202, VG203 or VG204. Each fixed twin runs the same
way: no error, and its outputs match the pair's reference.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import verdigris as vg
from verdigris.cpu import run_tile

from .test_dynamic import OBSERVABLE, RTOL, _dims
from .tile_pairs import PAIRS


def run_on_cpu(k, grid, args: tuple, kwargs: dict) -> None:
    """The kernel's IR for these arguments and this grid, run by the cpu backend; no
    static check."""
    values = k.bind(args, kwargs)
    kernel_ir = k.build(k.spec_key(values, k.describe_args(values), None, _dims(grid)))
    named = {p.name: v for p, v in zip(k.params, values) if not p.constexpr}
    run_tile(kernel_ir, _dims(grid), named)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_racy_tile_kernel_is_caught_while_running(pair, rng):
    if not pair.dynamic:
        pytest.skip("the pair says this run cannot show the race (it needs other values)")
    grid, args, kwargs = pair.make(rng)
    with pytest.raises(vg.SafetyError) as info:
        try:
            run_on_cpu(pair.racy, grid, args, kwargs)
        except vg.BoundsError as fault:
            pytest.fail(f"{pair.name}: the racy kernel goes out of bounds before any race "
                        f"shows ({fault.message})")
    assert info.value.code in OBSERVABLE.get(pair.code, {pair.code}), str(info.value)
    assert "observed while running on the cpu backend" in info.value.message


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_fixed_tile_twin_runs_clean_and_right(pair, rng):
    grid, args, kwargs = pair.make(rng)
    expected = pair.reference(copy.deepcopy(args))
    assert expected, f"{pair.name}: the reference checks no output"
    run_on_cpu(pair.fixed, grid, args, kwargs)
    for position, want in expected.items():
        got = np.asarray(args[position])
        rtol = RTOL[got.dtype]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol,
                                   err_msg=f"{pair.name}: argument {position}")
