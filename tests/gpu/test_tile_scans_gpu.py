"""Scans from either end, flips and tile atomic max/min on the GPU (kernels and references of
`tests/tile_scan_kernels.py`): integer scans bit for bit with the cpu backend, float ones
within their rounding of float64; flips exactly as np.flip, through registers, shuffles and
shared memory; atomic and scattered max/min of every atomic dtype exactly as
np.maximum.at/np.minimum.at under contention (float32/float64 through compare-and-swap
loops). Outputs are poisoned first; tile shapes are mostly not powers of two."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from tile_scan_kernels import (EXTREME_DTYPES, SCAN_OUTPUTS, close_scans, extremes, extremes_args,
                               extremes_reference, flipped, inputs, poisoned, reversed_blocks, running,
                               running_reference, tile_axes)
from verdigris.runtime import backend

pytestmark = pytest.mark.gpu


def on(where: str, kernel, grid, arguments: dict) -> dict:
    """The arrays of `arguments` after one launch on `where` (copies: the inputs stay)."""
    backend.set_backend(where)
    values = {k: (vg.asarray(v) if where == "cuda" else v.copy()) if isinstance(v, np.ndarray) else v
              for k, v in arguments.items()}
    kernel[grid](**values)
    return {k: values[k].numpy() if where == "cuda" else values[k]
            for k, v in arguments.items() if isinstance(v, np.ndarray)}


SHAPES = [(4, 1024, 1), (64, 48, 0), (3, 300, 1), (1, 4096, 1), (100, 40, 0), (5, 33, 0)]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("r,c,axis", SHAPES)
def test_integer_scans_bit_for_bit(rng, r, c, axis, reverse):
    x = inputs(rng, np.int32, (3 * r - 1, c))
    args = dict(x=x, **poisoned(x, SCAN_OUTPUTS), pad=np.int32(1000), R=r, C=c, AXIS=axis, REVERSE=reverse)
    gpu, cpu = on("cuda", running, 3, args), on("cpu", running, 3, args)
    for name in SCAN_OUTPUTS:
        np.testing.assert_array_equal(gpu[name], cpu[name], err_msg=name)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("r,c,axis", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_float_scans_within_their_rounding(rng, dtype, r, c, axis, reverse):
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    x = inputs(rng, np.float32, (3 * r - 1, c)).astype(dtype)
    pad = 1.5
    args = dict(x=x, **poisoned(x, SCAN_OUTPUTS), pad=vg.bfloat16(pad) if dtype != "float32" else np.float32(pad),
                R=r, C=c, AXIS=axis, REVERSE=reverse)
    gpu = on("cuda", running, 3, args)
    want = running_reference(x.astype(np.float32), pad, r, axis, reverse)
    close_scans(gpu, want, (r, c)[axis], 2.0 ** -24 if dtype == "float32" else 2.0 ** -8)


@pytest.mark.parametrize("axes", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("r,c", [(4, 512), (64, 32), (64, 48), (3, 300), (1, 4096), (100, 40)])
@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.bool_])
def test_flips_match_numpy(rng, dtype, r, c, axes):
    padded = (1 << (r - 1).bit_length()) * ((1 << (c - 1).bit_length()) + 1) * np.dtype(dtype).itemsize
    if 2 * padded > 48 * 1024:  # two buffers of the tile, its rows padded by one element
        pytest.skip("a tile this large does not fit the shared memory of a flip across warps")
    x = (rng.standard_normal((3 * r, c)) > 0 if dtype is np.bool_ else rng.standard_normal((3 * r, c)) * 100).astype(dtype)
    args = dict(x=x, out=np.zeros_like(x) if dtype is np.bool_ else np.full_like(x, -7), R=r, C=c, AXES=axes)
    got = on("cuda", flipped, 3, args)["out"]
    np.testing.assert_array_equal(got, np.flip(x.reshape(3, r, c), tile_axes(axes)).reshape(x.shape))


def test_scatter_through_flipped_offsets_reverses_each_tile(rng):
    n, b = 333 * 300, 300
    x = rng.standard_normal(n).astype(np.float32)
    got = on("cuda", reversed_blocks, n // b, dict(x=x, out=np.full(n, np.nan, np.float32), B=b))["out"]
    np.testing.assert_array_equal(got, np.flip(x.reshape(-1, b), 1).reshape(-1))


@pytest.mark.parametrize("dtype", EXTREME_DTYPES)
def test_atomic_and_scatter_max_min_under_contention(rng, dtype):
    args = extremes_args(rng, dtype, blocks=200, b=300, bins=3)
    want = extremes_reference(args)
    got = on("cuda", extremes, 200, args)
    for name, expected in want.items():
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
