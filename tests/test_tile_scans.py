"""Scans from either end (`cumsum`, `cumprod`, `cummax`, `cummin`), `flip`, and the tile
atomics `atomic_max/min` and `scatter_max/min`, on every path without a GPU: the cpu backend
against NumPy (float64 references); the GPU lowering of scans and flips on the block
emulator, over every layout of `test_tile_emulated`, with padding that would pollute a
reverse scan or a flip; the whole GPU code through `host_jit` against the cpu backend; the
shape of their PTX; and the frontend's errors at the user's line.
The kernels and references are `tile_scan_kernels`'; `test_tile_codegen.py` assembles
their PTX and `tests/gpu/test_tile_scans_gpu.py` runs them on the GPU."""
from __future__ import annotations

import re

import numpy as np
import pytest

import host_jit
import located
import verdigris as vg
from block_emulator import Block
from test_tile_codegen import ptx_of
from test_tile_emulated import LAYOUT_PARAMS, held
from tile_scan_kernels import (EXTREME_DTYPES, SCAN_OUTPUTS, close_scans, extremes, extremes_args,
                               extremes_reference, flipped, inputs, poisoned, reversed_blocks, running,
                               running_flags, running_reference, scanned, tile_axes)
from verdigris import tile
from verdigris import types as T
from verdigris.ir import tiles as X
from verdigris.runtime import backend
from verdigris.tile import flips, scan

SHAPES = [(3, 300, 1), (5, 33, 0), (16, 16, 1), (64, 48, 0), (4, 7, 1)]

# ----------------------------------------------------------------------------- cpu backend


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("r,c,axis", SHAPES)
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float16])
def test_scans_match_numpy_on_the_cpu_backend(rng, dtype, r, c, axis, reverse):
    rows = 2 * r - (r > 1)  # the last tile runs past the array: its rows take the padding
    x = inputs(rng, dtype, (rows, c))
    pad = 3
    got = poisoned(x, SCAN_OUTPUTS)
    running[2](x, **got, pad=dtype(pad), R=r, C=c, AXIS=axis, REVERSE=reverse)
    want = running_reference(x, pad, r, axis, reverse)
    if dtype is np.int32:
        for name in SCAN_OUTPUTS:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    else:  # float16 accumulates in float32 and rounds once at the end
        close_scans(got, want, (r, c)[axis], np.finfo(dtype).eps / 2)


def test_narrow_integer_sums_and_products_widen_max_and_min_keep_the_dtype(rng):
    @tile.kernel
    def widths(x, sums, prods, maxes, mins, B: vg.constexpr):
        t = tile.load(x, index=(0,), shape=(B,))
        tile.store(sums, index=(0,), tile=tile.cumsum(t, reverse=True))
        tile.store(prods, index=(0,), tile=tile.cumprod(t))
        tile.store(maxes, index=(0,), tile=tile.cummax(t, reverse=True).astype(vg.int32))
        tile.store(mins, index=(0,), tile=tile.cummin(t).astype(vg.int32))

    x = rng.integers(-128, 128, 50).astype(np.int8)
    got = poisoned(np.zeros(50, np.int32), SCAN_OUTPUTS)
    widths[1](x, **got, B=50)
    wide = x.astype(np.int32)
    np.testing.assert_array_equal(got["sums"], scanned("cumsum", wide, 0, True))
    np.testing.assert_array_equal(got["prods"], np.cumprod(wide, dtype=np.int32))
    np.testing.assert_array_equal(got["maxes"], scanned("cummax", x, 0, True))
    np.testing.assert_array_equal(got["mins"], np.minimum.accumulate(x))


def flags_args(rng, n: int) -> dict:
    x = rng.standard_normal(n).astype(np.float32)
    x[[0, 7, 8]] = np.nan  # a NaN loses to a number, and leads while nothing else has come
    return dict(x=x, flags=np.zeros(n, bool), firsts=np.ones(n, bool), best=np.full(n, -7, np.float32), B=n)


def check_flags(args: dict) -> None:
    x = args["x"]
    np.testing.assert_array_equal(args["flags"], np.flip(np.logical_or.accumulate(np.flip(x > 1.0))))
    np.testing.assert_array_equal(args["firsts"], np.logical_and.accumulate(x < 1.5))
    np.testing.assert_array_equal(args["best"], np.fmax.accumulate(x))
    assert np.isnan(args["best"][0]) and not np.isnan(args["best"][8])


def test_running_max_and_min_of_bools_and_floats_with_nan(rng):
    args = flags_args(rng, 40)
    running_flags[1](**args)
    check_flags(args)


@pytest.mark.parametrize("axes", [None, 0, 1, -1, (0, 1), (-1, 0)])
@pytest.mark.parametrize("r,c", [(3, 300), (5, 33), (4, 512)])
def test_flip_matches_numpy_on_the_cpu_backend(rng, r, c, axes):
    x = rng.standard_normal((2 * r, c)).astype(np.float32)
    out = np.full_like(x, np.nan)
    flipped[2](x, out, R=r, C=c, AXES=axes)
    np.testing.assert_array_equal(out, np.flip(x.reshape(2, r, c), tile_axes(axes)).reshape(x.shape))


def test_scatter_through_flipped_offsets_reverses_each_tile_and_is_proven(rng):
    n, b = 1000, 100
    x, out = rng.standard_normal(n).astype(np.float32), np.full(n, np.nan, np.float32)
    reversed_blocks[vg.cdiv(n, b)](x, out, B=b)
    np.testing.assert_array_equal(out, np.flip(x.reshape(-1, b), 1).reshape(-1))


@pytest.mark.parametrize("dtype", EXTREME_DTYPES)
def test_atomic_and_scatter_max_min_match_numpy_on_the_cpu_backend(rng, dtype):
    args = extremes_args(rng, dtype)
    want = extremes_reference(args)
    extremes[3](**args)
    for name, expected in want.items():
        np.testing.assert_array_equal(args[name], expected, err_msg=name)


# ----------------------------------------------------------------------------- block emulator


def _padded_extents(shape: tuple) -> list:
    """Logical extents for a padded shape: one shorter (or a third shorter) per axis."""
    return [n - max(1, n // 3) if n > 2 else n for n in shape]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("layout,warps", LAYOUT_PARAMS)
def test_scans_along_every_axis_of_every_layout_skip_the_padding(rng, layout, warps, reverse):
    for axis in range(layout.rank):
        for dtype, op in ((T.int32, "cumsum"), (T.int32, "cumprod"), (T.int32, "cummax"),
                          (T.uint32, "cummin"), (T.float32, "cummax"), (T.float32, "cummin")):
            shape = list(layout.shape)
            shape[axis] = _padded_extents(layout.shape)[axis]
            logical = tuple(shape)
            x = inputs(rng, dtype.np, layout.shape)
            if dtype.is_float:
                x[rng.random(layout.shape) < 0.1] = np.nan
            polluting = {"cumsum": 1000, "cumprod": 0, "cummax": 1000, "cummin": 0}[op]
            x[tuple(slice(n, None) if k == axis else slice(None) for k, n in enumerate(logical))] = polluting
            block = Block(warps)
            node = X.TileScan(None, op, held(block, layout, x, dtype), axis, dtype, logical, reverse)
            got = block.gather(scan.scan(block, node), logical)
            valid = x[tuple(slice(0, n) for n in logical)]
            np.testing.assert_array_equal(got if dtype.is_float else got.astype(np.int64).astype(dtype.np),
                                          scanned(op, valid, axis, reverse), err_msg=f"{op} axis {axis}")


@pytest.mark.parametrize("layout,warps", LAYOUT_PARAMS)
def test_flips_of_every_layout_read_valid_elements_only(rng, layout, warps):
    axes_sets = [(k,) for k in range(layout.rank)] + [tuple(range(layout.rank))]
    for axes in axes_sets:
        for logical in (layout.shape, tuple(_padded_extents(layout.shape))):
            axes_kept = tuple(k for k in axes if logical[k] > 1)
            if not axes_kept:
                continue
            x = rng.integers(0, 1 << 20, layout.shape).astype(np.int32)
            x[tuple(slice(0, n) for n in logical)] *= -1  # valid elements negative, padding not
            block = Block(warps)
            node = X.Flip(None, held(block, layout, x, T.int32), axes_kept, T.int32, logical)
            value = flips.flip(block, node, None)
            got = block.gather(value, logical).astype(np.uint32).view(np.int32)
            want = np.flip(x[tuple(slice(0, n) for n in logical)], axes_kept)
            np.testing.assert_array_equal(got, want, err_msg=f"axes {axes_kept} of {logical}")
            in_registers = flips._in_registers(layout, node) is not None
            assert block.barriers == (not in_registers)


def test_a_flip_along_registers_and_lanes_moves_nothing_through_shared_memory():
    from verdigris.tile import layout as L

    blocked = L.blocked((4, 512), 4, 4)  # the last axis in registers, lanes and warps
    plan = flips._in_registers(blocked, X.Flip(None, None, (0,), T.float32, (3, 512)))
    assert plan is not None and plan[1] == 0  # the rows: registers only, padded or not
    assert flips._in_registers(blocked, X.Flip(None, None, (1,), T.float32, (4, 512))) is None  # warps
    narrow = L.blocked((64, 32), 1, 4)  # one warp: the columns in registers and lanes
    sources, lanes = flips._in_registers(narrow, X.Flip(None, None, (1,), T.float32, (64, 32)))
    assert lanes == 0b111 and sources[0] == 3
    assert flips._in_registers(narrow, X.Flip(None, None, (1,), T.float32, (64, 30))) is None


# ----------------------------------------------------------------------------- GPU code on the host


def on_cpu(kernel, grid, arguments: dict) -> dict:
    copies = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arguments.items()}
    backend.set_backend("cpu")
    kernel[grid](**copies)
    return copies


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("r,c,axis", [(3, 100, 1), (30, 24, 0), (5, 33, 0), (16, 16, 1)])
def test_scans_on_the_gpu_path_agree_with_the_cpu_backend(rng, r, c, axis, reverse):
    for dtype in (np.int32, np.float32):
        x = inputs(rng, dtype, (2 * r - 1, c))
        args = dict(x=x, **poisoned(x, SCAN_OUTPUTS), pad=dtype(1000), R=r, C=c, AXIS=axis, REVERSE=reverse)
        want = on_cpu(running, 2, args)
        assert host_jit.run(running, 2, num_warps=2, **args) is None
        if dtype is np.int32:
            for name in SCAN_OUTPUTS:
                np.testing.assert_array_equal(args[name], want[name], err_msg=name)
        else:
            reference = running_reference(x, 1000, r, axis, reverse)
            close_scans(args, {**reference, "maxes": want["maxes"], "mins": want["mins"]},
                        (r, c)[axis], 2.0 ** -24)


@pytest.mark.parametrize("axes", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("r,c", [(3, 100), (64, 48), (5, 33), (4, 512)])
def test_flips_on_the_gpu_path_agree_with_the_cpu_backend(rng, r, c, axes):
    x = rng.integers(-100, 100, (2 * r - 1, c)).astype(np.int32)
    args = dict(x=x, out=np.full_like(x, 0x55), R=r, C=c, AXES=axes)
    want = on_cpu(flipped, 2, args)
    assert host_jit.run(flipped, 2, num_warps=2, **args) is None
    np.testing.assert_array_equal(args["out"], want["out"])


def test_bool_and_nan_scans_on_the_gpu_path(rng):
    args = flags_args(rng, 3000)  # two warps: the warp step carries bools through shared memory
    assert host_jit.run(running_flags, 1, num_warps=2, **args) is None
    check_flags(args)


@pytest.mark.parametrize("dtype", EXTREME_DTYPES)
def test_atomic_and_scatter_max_min_on_the_gpu_path(rng, dtype):
    args = extremes_args(rng, dtype, b=64, bins=5)
    want = extremes_reference(args)
    assert host_jit.run(extremes, 3, num_warps=1, **args) is None
    for name, expected in want.items():
        np.testing.assert_array_equal(args[name], expected, err_msg=name)


# ----------------------------------------------------------------------------- PTX

def test_integer_extremes_are_single_atomics_and_float_ones_compare_and_swap():
    ints = ptx_of("extremes_int32", "sm_90a")
    assert re.search(r"atom\.global(\.\w+)*\.max\.s32", ints) and re.search(r"atom\.global(\.\w+)*\.min\.s32", ints)
    unsigned = ptx_of("extremes_uint64", "sm_80")
    assert re.search(r"atom\.global(\.\w+)*\.max\.u64", unsigned)
    floats = ptx_of("extremes_float32", "sm_90a")
    assert "cas.b32" in floats and not re.search(r"atom\.global(\.\w+)*\.max\.f32", floats)


def test_a_flip_in_registers_needs_no_barrier():
    assert "bar.sync" not in ptx_of("flip_registers", "sm_90a")
    assert "bar.sync" in ptx_of("flip_shared", "sm_90a")


# ----------------------------------------------------------------------------- frontend


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        kernel[1](*args, **kwargs)
    return info.value


F32 = np.zeros(64, np.float32)
M32 = np.zeros((8, 8), np.float32)


@tile.kernel
def scan_past_the_axes(a, out):
    t = tile.load(a, index=(0, 0), shape=(4, 8))
    tile.store(out, index=(0, 0), tile=t.cumprod(axis=2))  # marker: scan axis


@tile.kernel
def scan_reverse_at_run_time(a, out, flag):
    t = tile.load(a, index=(0,), shape=(8,))
    tile.store(out, index=(0,), tile=tile.cumsum(t, reverse=flag > 0))  # marker: run-time reverse


@tile.kernel
def flip_an_axis_twice(a, out):
    t = tile.load(a, index=(0, 0), shape=(4, 8))
    tile.store(out, index=(0, 0), tile=tile.flip(t, (1, -1)))  # marker: flip twice


@tile.kernel
def flip_a_scalar(a, out):
    tile.store(out, index=(0,), tile=tile.full((8,), tile.flip(a[0])))  # marker: flip scalar


@tile.kernel
def half_max(a, out):
    tile.atomic_max(out, (0,), tile.load(a, index=(0,), shape=(8,)))  # marker: half max


@tile.kernel
def byte_scatter_min(a, idx, out):
    tile.scatter_min(out, (tile.load(idx, index=(0,), shape=(8,)),),  # marker: byte min
                     tile.load(a, index=(0,), shape=(8,)))


@pytest.mark.parametrize("kernel,args,marker,words", [
    (scan_past_the_axes, (M32, M32), "marker: scan axis", "axis 2 is out of range for a tile of shape (4, 8)"),
    (scan_reverse_at_run_time, (F32, F32, 1), "marker: run-time reverse",
     "tile.cumsum()'s reverse must be a constant True or False"),
    (flip_an_axis_twice, (M32, M32), "marker: flip twice", "tile.flip() names an axis twice: (1, -1)"),
    (flip_a_scalar, (F32, F32), "marker: flip scalar", "tile.flip() needs a tile, not a scalar"),
    (half_max, (np.zeros(8, np.float16),) * 2, "marker: half max",
     "tile.atomic_max() is not available for float16 arrays"),
    (byte_scatter_min, (np.zeros(8, np.int8), np.zeros(8, np.int64), np.zeros(8, np.int8)),
     "marker: byte min", "tile.scatter_min() is not available for int8 arrays"),
], ids=lambda v: getattr(v, "__name__", None))
def test_errors_point_at_the_users_line(kernel, args, marker, words):
    err = compile_error(kernel, *args)
    assert words in err.message, err.message
    located.assert_points_at(err, marker, __file__)
    if "not available" in words:
        assert "int32, int64, uint32, uint64, float32 and float64" in err.hint
