"""A grid given as a function of the launch's arguments (docs/api.md, "Launch shapes"):
Triton's `k[lambda meta: ...]`, on both tracks, with the same checks as `k[grid]`."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile


@tile.kernel
def scaled(x, out, n, BLOCK: vg.constexpr, FACTOR: vg.constexpr = 3.0):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(BLOCK,)) * FACTOR)


@simt.kernel
def shifted(x, out, n):
    i = simt.global_id(0)
    if i < n:
        out[i] = x[i] + 1.0


def test_a_tile_grid_of_the_arguments_sees_every_parameter_by_name(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full_like(x, np.nan)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (vg.cdiv(meta["n"], meta["BLOCK"]),)

    scaled[grid](x, out, x.size, BLOCK=128)
    np.testing.assert_array_equal(out, x * np.float32(3.0))
    (meta,) = seen
    assert meta["n"] == 1000 and meta["BLOCK"] == 128 and meta["FACTOR"] == 3.0  # the default
    assert meta["x"] is x and meta["out"] is out


def test_a_simt_grid_of_the_arguments_with_its_block(rng):
    x = rng.standard_normal(300).astype(np.float32)
    out = np.full_like(x, np.nan)
    shifted[lambda meta: vg.cdiv(meta["n"], 64), 64](x, out, x.size)
    np.testing.assert_array_equal(out, x + np.float32(1.0))


def test_a_grid_function_too_small_leaves_the_rest_and_a_bad_one_is_refused(rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.full_like(x, -7.0)
    scaled[lambda meta: 1](x, out, x.size, BLOCK=128)  # one block: the first 128 only
    np.testing.assert_array_equal(out[:128], x[:128] * np.float32(3.0))
    assert (out[128:] == -7.0).all()
    with pytest.raises(vg.LaunchError, match="grid"):
        scaled[lambda meta: (1, 2, 3, 4)](x, out, x.size, BLOCK=128)
    with pytest.raises(vg.LaunchError):
        scaled[lambda meta: 2](x, out, BLOCK=128)  # n missing: the binding says so
