"""Tile kernels whose statements meet within one block, each with its program-order result
(NumPy, float64 or exact integers): the class of `docs/safety.md`'s "One block's
statements". `CASES`: name -> (kernel, grid, make(rng) -> arguments, want(arguments) -> the
arrays the kernel leaves, by name). `tests/test_tile_order.py` runs them on the host JIT in
two thread orders and on the cpu backend, `tests/gpu/test_tile_order_gpu.py` on the GPU."""
import numpy as np

import verdigris as vg
from verdigris import tile

ROWS = 8


@tile.kernel
def overwrite_half(x):  # store/store, two shapes (issue #25)
    i = tile.bid(0)
    tile.store(x, (i, 0), tile.full((ROWS, 64), 1.0, vg.float32))
    tile.store(x, (i, 1), tile.full((ROWS, 32), 2.0, vg.float32))


@tile.kernel
def read_back_half(x, a, out):  # store, then a load of another shape: read after write
    i = tile.bid(0)
    tile.store(x, (i, 0), tile.load(a, (i, 0), (ROWS, 64)))
    tile.store(out, (i, 0), tile.load(x, (i, 1), (ROWS, 32)) * 2.0)


@tile.kernel
def read_then_overwrite(x, out):  # load, then a store of another shape: write after read
    i = tile.bid(0)
    t = tile.load(x, (i, 0), (ROWS, 64))
    tile.store(x, (i, 1), tile.full((ROWS, 32), -1.0, vg.float32))
    tile.store(out, (i, 0), t + 1.0)


@tile.kernel
def scalar_beside_tile(x, out):  # scalar accesses beside tile accesses of one row
    i = tile.bid(0)
    tile.store(x, (i, 0), tile.full((1, 64), 1.0, vg.float32))
    x[i, 5] = x[i, 7] + 2.0
    tile.store(out, (i, 0), tile.load(x, (i, 0), (1, 64)))


@tile.kernel
def reverse_in_place(x):  # a gather, then a store over what it read
    i = int(tile.bid(0))
    t = tile.gather(x, (i * 64 + 63 - tile.arange(64),))
    tile.store(x, (i,), t)


@tile.kernel
def scatter_then_load(x, out):  # a scatter, then a tile load of what it wrote
    i = int(tile.bid(0))
    tile.scatter(x, (i * 64 + 63 - tile.arange(64),), tile.arange(64).astype(vg.float32))
    tile.store(out, (i,), tile.load(x, (i,), (64,)))


@tile.kernel
def halves_in_a_loop(x):  # iteration k's row store, iteration k+1's half-row load
    i = tile.bid(0)
    for k in range(3):
        h = tile.load(x, (i, 1), (1, 32))
        tile.store(x, (i, 0), tile.full((1, 64), 0, vg.int32) + tile.sum(h) + k)


@tile.kernel
def broadcast_read_back(x, a, out):  # one view, but 16 elements over 32 threads
    i = tile.bid(0)
    tile.store(x, (i,), tile.load(a, (i,), (16,)) + 1.0)
    tile.store(out, (i,), tile.load(x, (i,), (16,)) * 3.0)


@tile.kernel
def in_either_arm(x, out, flag):  # stores in the arms of an `if`, a load after it
    i = tile.bid(0)
    if flag > 0:
        tile.store(x, (i, 0), tile.full((1, 64), 4.0, vg.float32))
    else:
        tile.store(x, (i, 0), tile.full((1, 64), 5.0, vg.float32))
    tile.store(out, (i, 0), tile.load(x, (i, 1), (1, 32)))


@tile.kernel
def read_in_a_select(x, out, flag):  # a scalar load in one arm of a conditional expression
    i = tile.bid(0)
    tile.store(x, (i, 0), tile.full((1, 64), 6.0, vg.float32))
    s = x[i, 3] + 1.0 if flag > 0 else -1.0
    tile.store(out, (i, 0), tile.full((1, 32), 0.0, vg.float32) + s)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _overwrite_half(x):
    x = x.copy()
    x[:] = 1.0
    x[:, 32:] = 2.0
    return {"x": x}


def _read_back_half(x, a, out):
    return {"x": a.copy(), "out": (a[:, 32:].astype(np.float64) * 2.0).astype(np.float32)}


def _read_then_overwrite(x, out):
    y = x.copy()
    y[:, 32:] = -1.0
    return {"x": y, "out": x + np.float32(1.0)}


def _scalar_beside_tile(x, out):
    x = x.copy()
    x[:] = 1.0
    x[:, 5] = 3.0
    return {"x": x, "out": x.copy()}


def _reverse_in_place(x):
    return {"x": x.reshape(-1, 64)[:, ::-1].reshape(-1).copy()}


def _scatter_then_load(x, out):
    y = np.tile(np.arange(64)[::-1].astype(np.float32), len(x) // 64)
    return {"x": y, "out": y.copy()}


def _halves_in_a_loop(x):
    x = x.copy()
    for k in range(3):
        x[:] = x[:, 32:].sum(1, keepdims=True) + k
    return {"x": x}


def _broadcast_read_back(x, a, out):
    y = a + np.float32(1.0)
    return {"x": y, "out": y * np.float32(3.0)}


def _in_either_arm(x, out, flag):
    value = np.float32(4.0 if flag > 0 else 5.0)
    return {"x": np.full_like(x, value), "out": np.full_like(out, value)}


def _read_in_a_select(x, out, flag):
    return {"x": np.full_like(x, 6.0), "out": np.full_like(out, 7.0 if flag > 0 else -1.0)}


CASES = {
    "overwrite_half": (overwrite_half, 3, lambda rng: {"x": _f32(rng, 3 * ROWS, 64)}, _overwrite_half),
    "read_back_half": (read_back_half, 3, lambda rng: {"x": _f32(rng, 3 * ROWS, 64), "a": _f32(rng, 3 * ROWS, 64),
                                                      "out": np.full((3 * ROWS, 32), np.nan, np.float32)},
                       _read_back_half),
    "read_then_overwrite": (read_then_overwrite, 3, lambda rng: {"x": _f32(rng, 3 * ROWS, 64),
                                                                "out": np.full((3 * ROWS, 64), np.nan, np.float32)},
                            _read_then_overwrite),
    "scalar_beside_tile": (scalar_beside_tile, 4, lambda rng: {"x": _f32(rng, 4, 64),
                                                              "out": np.full((4, 64), np.nan, np.float32)},
                           _scalar_beside_tile),
    "reverse_in_place": (reverse_in_place, 3, lambda rng: {"x": _f32(rng, 3 * 64)}, _reverse_in_place),
    "scatter_then_load": (scatter_then_load, 3, lambda rng: {"x": _f32(rng, 3 * 64),
                                                            "out": np.full(3 * 64, np.nan, np.float32)},
                          _scatter_then_load),
    "halves_in_a_loop": (halves_in_a_loop, 4, lambda rng: {"x": rng.integers(-50, 50, (4, 64), dtype=np.int32)},
                         _halves_in_a_loop),
    "broadcast_read_back": (broadcast_read_back, 3, lambda rng: {"x": _f32(rng, 48), "a": _f32(rng, 48),
                                                                "out": np.full(48, np.nan, np.float32)},
                            _broadcast_read_back),
    "read_in_a_select": (read_in_a_select, 2, lambda rng: {"x": _f32(rng, 2, 64),
                                                          "out": np.full((2, 32), np.nan, np.float32),
                                                          "flag": int(rng.integers(0, 2))}, _read_in_a_select),
    "in_either_arm": (in_either_arm, 2, lambda rng: {"x": _f32(rng, 2, 64), "out": np.full((2, 32), np.nan, np.float32),
                                                    "flag": int(rng.integers(-1, 2))}, _in_either_arm),
}
