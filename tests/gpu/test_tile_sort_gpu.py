"""`tile.sort` and `tile.argsort` on the GPU against the cpu backend on the same inputs,
bit for bit (values and positions; a NaN as a NaN, its bits the hardware's), and against NumPy: every dtype, rows and columns,
ragged and power-of-two sizes, rows within a warp and across warps, the largest tiles a
sort takes, and other warp counts."""
from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_tile_gpu import run_both, same_bits
from test_tile_sort import DTYPES, argsort_rows, check, sample, sort_tiles, sort_vector, tiles_of

pytestmark = pytest.mark.gpu


def sort_both(rng, dtype, rows, cols, axis, descending, blocks=3, **options):
    x = sample(rng, dtype, (blocks * rows, cols))
    args = dict(x=x, out=x.copy(), positions=np.zeros(x.shape, np.int32), R=rows, C=cols, AXIS=axis,
                DESCENDING=descending)
    gpu, cpu = run_both(sort_tiles, blocks, args, ("out", "positions"), **options)
    same_bits(gpu["out"], cpu["out"])
    np.testing.assert_array_equal(gpu["positions"], cpu["positions"])
    for part, values, where in zip(tiles_of(x, rows), tiles_of(gpu["out"], rows), tiles_of(gpu["positions"], rows)):
        check(part, values, where, axis, descending)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("descending", [False, True])
def test_rows_of_every_dtype(rng, dtype, descending):
    for rows, cols in ((4, 16), (2, 13), (1, 300), (8, 1024)):
        sort_both(rng, dtype, rows, cols, 1, descending)


@pytest.mark.parametrize("rows,cols", [(64, 8), (100, 32), (512, 4)])
def test_columns(rng, rows, cols):
    for descending in (False, True):
        sort_both(rng, np.float32, rows, cols, 0, descending)


@pytest.mark.parametrize("rows,cols", [(1, 16384), (4, 4096), (16, 1000)])
def test_the_largest_tiles(rng, rows, cols):
    sort_both(rng, np.float32, rows, cols, 1, True, blocks=2)


@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_warp_counts(rng, warps):
    sort_both(rng, np.int32, 2, 1000, 1, False, num_warps=warps)


def test_vectors_and_argsort_alone(rng):
    x = sample(rng, np.float32, 5 * 700)
    gpu, cpu = run_both(sort_vector, 5, dict(x=x, out=x.copy(), positions=np.zeros(x.shape, np.int32), B=700),
                        ("out", "positions"))
    np.testing.assert_array_equal(gpu["out"].view(np.uint32), cpu["out"].view(np.uint32))
    np.testing.assert_array_equal(gpu["positions"], cpu["positions"])
    x = sample(rng, np.float16, (6, 4096))
    gpu, cpu = run_both(argsort_rows, 3, dict(x=x, positions=np.zeros(x.shape, np.int32), R=2, C=4096),
                        ("positions",))
    np.testing.assert_array_equal(gpu["positions"], cpu["positions"])
