"""Kernels of the scans from either end, flips and tile max/min atomics, with their NumPy
references: shared by `test_tile_scans.py` (cpu backend, emulator, host JIT),
`test_tile_codegen.py` (PTX through ptxas) and `gpu/test_tile_scans_gpu.py`."""
from __future__ import annotations

import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def running(x, sums, prods, maxes, mins, pad, R: vg.constexpr, C: vg.constexpr,
            AXIS: vg.constexpr, REVERSE: vg.constexpr):
    """The four scans of one tile of R rows; elements outside `x` load as `pad` (`-pad` for
    the minimum), values that would show if they joined a scan of the valid ones."""
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C), padding=pad)
    u = tile.load(x, index=(i, 0), shape=(R, C), padding=-pad)
    tile.store(sums, index=(i, 0), tile=tile.cumsum(t, AXIS, reverse=REVERSE))
    tile.store(prods, index=(i, 0), tile=t.cumprod(AXIS, reverse=REVERSE))
    tile.store(maxes, index=(i, 0), tile=tile.cummax(t, axis=AXIS, reverse=REVERSE))
    tile.store(mins, index=(i, 0), tile=u.cummin(AXIS, REVERSE))


@tile.kernel
def running_flags(x, flags, firsts, best, B: vg.constexpr):
    """Running max and min of bool tiles (any so far from the end, all so far), and the
    running maximum of floats with NaNs."""
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(flags, index=(0,), tile=tile.cummax(t > 1.0, reverse=True))
    tile.store(firsts, index=(0,), tile=tile.cummin(t < 1.5))
    tile.store(best, index=(0,), tile=t.cummax())


@tile.kernel
def flipped(x, out, R: vg.constexpr, C: vg.constexpr, AXES: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C), padding=-1)
    tile.store(out, index=(i, 0), tile=tile.flip(t, AXES))


@tile.kernel
def reversed_blocks(x, out, B: vg.constexpr):
    """Each tile of B elements reversed into `out`, through a scatter at flipped offsets (the
    mask keeps the writes of a ragged last tile inside the array)."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    tile.scatter(out, (tile.flip(offsets),), tile.load(x, index=(i,), shape=(B,)),
                 mask=tile.flip(offsets) < x.shape[0])


@tile.kernel
def extremes(x, idx, hi, lo, most, least, B: vg.constexpr):
    """The elementwise max and min of every block's tile, at tile index 0, and of the
    elements that `idx` sends to each bin."""
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.atomic_max(hi, (0,), t)
    tile.atomic_min(lo, (0,), t)
    bins = tile.load(idx, index=(i,), shape=(B,))
    tile.scatter_max(most, (bins,), t)
    tile.scatter_min(least, (bins,), t, mask=bins != 0)


def scanned(op: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """NumPy's scan `op` along `axis` (from the end when `reverse`), in x's dtype."""
    ufunc = {"cumsum": np.add, "cumprod": np.multiply, "cummax": np.fmax, "cummin": np.fmin}[op]
    if reverse:
        return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return ufunc.accumulate(x, axis=axis, dtype=x.dtype)


def tiled(x: np.ndarray, r: int, pad) -> np.ndarray:
    """x's rows as tiles of r rows, the last tile filled with `pad` (as the kernel loads it)."""
    rows = -(-x.shape[0] // r) * r
    padded = np.full((rows, x.shape[1]), pad, x.dtype)
    padded[:x.shape[0]] = x
    return padded.reshape(rows // r, r, x.shape[1])


def running_reference(x, pad, r, axis, reverse) -> dict:
    """What `running` stores, in float64 (integers exactly, in the array's dtype), and
    `scale`: the running sums of magnitudes, which bound a float sum's rounding."""
    wide = np.float64 if x.dtype.kind == "f" else x.dtype
    out = {}
    for name, op, fill in (("sums", "cumsum", pad), ("prods", "cumprod", pad), ("maxes", "cummax", pad),
                           ("mins", "cummin", -pad), ("scale", "cumsum", abs(pad))):
        tiles = tiled(x.astype(wide), r, fill)
        tiles = np.abs(tiles) if name == "scale" else tiles
        out[name] = scanned(op, tiles, axis + 1, reverse).reshape(-1, x.shape[1])[:x.shape[0]]
    return out


def inputs(rng, dtype, shape) -> np.ndarray:
    """Values whose running products neither overflow nor vanish over hundreds of elements
    (floats near +-1, integers odd, so a product never turns 0)."""
    if np.dtype(dtype).kind == "f":
        magnitude = rng.uniform(0.9, 1.1, shape)
        return (magnitude * rng.choice([-1, 1], shape)).astype(dtype)
    return (2 * rng.integers(-4, 4, shape) + 1).astype(dtype)


def close_scans(got: dict, want: dict, n: int, eps: float) -> None:
    """Max and min exact; sums and products of float32 steps (n along the axis, in any
    order), then rounded once to the output's `eps`: sums within that of the running sums
    of magnitudes, products of their own size."""
    for name in ("maxes", "mins"):
        np.testing.assert_array_equal(got[name].astype(np.float64), want[name], err_msg=name)
    steps = 2 * n * 2.0 ** -24
    for name, scale in (("sums", want["scale"]), ("prods", np.abs(want["prods"]))):
        error = np.abs(got[name].astype(np.float64) - want[name])
        bound = eps * np.abs(want[name]) + steps * scale
        assert np.all(error <= bound), (name, np.max(error / bound))


def poisoned(like: np.ndarray, names) -> dict:
    return {n: np.full_like(like, 0x55 if like.dtype.kind in "iu" else np.nan) for n in names}


SCAN_OUTPUTS = ("sums", "prods", "maxes", "mins")

def tile_axes(axes):
    """The axes of the (blocks, R, C) view that `axes` of one (R, C) tile are."""
    if axes is None:
        return (1, 2)
    return tuple(a % 2 + 1 for a in (axes if isinstance(axes, tuple) else (axes,)))


EXTREME_DTYPES = [np.float32, np.float64, np.int32, np.uint32, np.int64, np.uint64]


def extremes_args(rng, dtype, blocks=3, b=300, bins=17) -> dict:
    n = blocks * b
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(n).astype(dtype)
        x[::7] = np.nan
        start = lambda m: rng.standard_normal(m).astype(dtype)  # noqa: E731
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        start = lambda m: rng.integers(info.min, info.max, m, dtype=dtype, endpoint=True)  # noqa: E731
    hi, lo = start(b - 5), start(b - 5)  # the tile's last elements fall outside: not written
    if np.dtype(dtype).kind == "f":
        hi[:3] = np.nan  # a NaN start loses to the first number
    return dict(x=x, idx=rng.integers(0, bins, n), hi=hi, lo=lo, most=start(bins), least=start(bins), B=b)


def extremes_reference(args: dict) -> dict:
    x, idx, b = args["x"], args["idx"], args["B"]
    tiles = x.reshape(-1, b)[:, :len(args["hi"])]
    hi, lo, most, least = (args[n].copy() for n in ("hi", "lo", "most", "least"))
    (np.fmax if x.dtype.kind == "f" else np.maximum).at(most, idx, x)
    (np.fmin if x.dtype.kind == "f" else np.minimum).at(least, idx[idx != 0], x[idx != 0])
    return {"hi": np.fmax.reduce(np.vstack([hi, tiles]), 0), "lo": np.fmin.reduce(np.vstack([lo, tiles]), 0),
            "most": most, "least": least}
