"""The cross-warp step of tile reductions (`tile.reduce._across_warps`) on `block_emulator`:
one copy per warp read back as broadcast vectors where every lane holds the same partials
(a whole row: float32 in 16-byte vectors, float64 in pairs, narrow integers widened to
32-bit slots, argmax's value and position in slots of their own sizes), one slot per lane
otherwise; every thread ends with the same bits, equal to NumPy's answer. The emulator runs
straight-line code, so these take the one-stage exchange at any partial count; the
two-stage one (`reduce._two_stage`, a branch for the combining warps) runs in
test_tile_hostjit."""
from __future__ import annotations

import numpy as np
import pytest

from block_emulator import Block
from test_tile_emulated import held
from verdigris import types as T
from verdigris.ir import tiles as X
from verdigris.tile import layout as L
from verdigris.tile import reduce

CASES = [((1, 4096), 8, 4, None), ((1, 2048), 4, 4, None), ((4, 1024), 8, 4, 1), ((64, 64), 8, 4, 1),
         ((64, 64), 8, 4, 0), ((8, 32), 2, 4, 1)]


@pytest.mark.parametrize("dtype", [T.float32, T.float64, T.int8, T.int64])
@pytest.mark.parametrize("op", ["sum", "max", "argmax"])
@pytest.mark.parametrize("shape,warps,vec,axis", CASES)
def test_whole_rows_and_per_lane_partials(rng, monkeypatch, dtype, op, shape, warps, vec, axis):
    monkeypatch.setattr(reduce, "TWO_STAGE_AFTER", 1 << 30)
    layout = L.blocked(shape, warps, vec)
    block = Block(warps)
    x = rng.integers(-50, 50, shape).astype(dtype.np)
    result_dtype = T.int32 if op == "argmax" else dtype
    out_shape = () if axis is None else tuple(n for k, n in enumerate(shape) if k != axis)
    got = reduce.reduce(block, X.TileReduce(None, op, held(block, layout, x, dtype), axis, result_dtype,
                                            out_shape))
    want = np.asarray(np.sum(x, axis=axis, dtype=x.dtype) if op == "sum" else getattr(np, op)(x, axis=axis))
    if axis is None:  # a scalar: every thread holds the same bits
        values = block.b.v(got).data
        assert (values == values[0]).all() and values[:1].astype(result_dtype.np)[0] == want
    else:
        np.testing.assert_array_equal(block.gather(got, out_shape).astype(result_dtype.np), want)
