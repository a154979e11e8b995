"""Parts of tiles and tiles of parts (tests/test_tile_pieces.py) on the GPU against the cpu
backend on the same inputs, bit for bit: slices (steps, negative bounds, padded shapes),
tile.extract, tile.cat (padded parts, both axes, bool tiles) and order= loads and stores."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from tests.gpu.test_tile_gpu import run_both, same_bits
from test_tile_pieces import (SLICES, extracted, joined, loaded_in_order, sliced_rows,
                              stored_in_order, three_masks)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("a,b,s,d,e", SLICES)
def test_slices(a, b, s, d, e, rng):
    x = rng.standard_normal((3 * 8, 16)).astype(np.float32)
    rows, cols = len(range(*slice(a, b, s).indices(8))), len(range(*slice(d, e).indices(16)))
    got, want = run_both(sliced_rows, 3, dict(x=x, out=np.zeros((3 * rows, cols), np.float32), R=8,
                                              C=16, A=a, B=b, S=s, D=d, E=e), ("out",))
    same_bits(got["out"], want["out"])


@pytest.mark.parametrize("i,j", [(0, 0), (3, 2), (1, 1)])
def test_extract(i, j, rng):
    x = rng.standard_normal((64, 96)).astype(np.float16)
    got, want = run_both(extracted, 1, dict(x=x, out=np.zeros((16, 32), np.float16), R=64, C=96,
                                            I=i, J=j, SR=16, SC=32, METHOD=True), ("out",))
    same_bits(got["out"], want["out"])


@pytest.mark.parametrize("r,cx,cy", [(5, 3, 6), (16, 32, 1), (64, 48, 80), (128, 64, 64)])
@pytest.mark.parametrize("axis", [0, 1])
def test_cat(r, cx, cy, axis, rng):
    x = rng.standard_normal((r, cx)).astype(np.float32)
    y = rng.standard_normal((r, cy)).astype(np.float32)
    got, want = run_both(joined, 1, dict(x=x, y=y, out=np.zeros((r, cx + cy), np.float32), R=r,
                                         CX=cx, CY=cy, AXIS=axis), ("out",))
    same_bits(got["out"], want["out"])


def test_cat_of_bool_tiles(rng):
    x = rng.standard_normal(11).astype(np.float32) * 2
    got, want = run_both(three_masks, 1, dict(x=x, out=np.zeros(11, np.int32), B=11), ("out",))
    same_bits(got["out"], want["out"])


@pytest.mark.parametrize("kernel", [loaded_in_order, stored_in_order])
@pytest.mark.parametrize("order", [(1, 0), "F"])
def test_order(kernel, order, rng):
    x = rng.standard_normal((300, 200)).astype(np.float32)
    got, want = run_both(kernel, (vg.cdiv(300, 32), vg.cdiv(200, 64)),
                         dict(x=x, out=np.zeros((200, 300), np.float32), BM=32, BN=64, ORDER=order),
                         ("out",))
    same_bits(got["out"], want["out"])
