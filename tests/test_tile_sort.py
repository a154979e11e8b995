"""`tile.sort` and `tile.argsort`: the cpu backend against NumPy (np.sort, and
np.argsort(kind="stable") of the elements' ranks for either direction) over every dtype,
1-d and 2-d tiles, either axis, power-of-two and ragged sizes; the GPU's bitonic network
bit for bit against the cpu backend, run by `block_emulator` over blocked, permuted and
3-d layouts (register, lane and warp steps) and end to end by `host_jit`; its PTX
assembled by ptxas for sm_80 and sm_90a; the errors at the user's line.
`tests/gpu/test_tile_sort_gpu.py` runs these kernels on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import host_jit
import located
import verdigris as vg
from block_emulator import Block
from test_tile_codegen import arr, needs_ptxas, ptx_of_spec
from test_tile_emulated import LAYOUT_PARAMS, held
from test_tile_hostjit import both
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.ir import tiles as X
from verdigris.tile import sorting

ml_dtypes = pytest.importorskip("ml_dtypes")


@tile.kernel
def sort_tiles(x, out, positions, R: vg.constexpr, C: vg.constexpr, AXIS: vg.constexpr,
               DESCENDING: vg.constexpr):
    """Block i sorts its (R, C) tile of x along AXIS: values to out, positions to positions."""
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C))
    tile.store(out, index=(i, 0), tile=tile.sort(t, axis=AXIS, descending=DESCENDING))
    tile.store(positions, index=(i, 0), tile=tile.argsort(t, AXIS, DESCENDING))


@tile.kernel
def sort_vector(x, out, positions, B: vg.constexpr):
    """1-d tiles, the default axis: ascending values, descending positions."""
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.store(out, index=(i,), tile=tile.sort(t))
    tile.store(positions, index=(i,), tile=tile.argsort(t, descending=True))


DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.float64, np.int32,
          np.uint32, np.int8, np.uint8, np.int64, np.uint64, np.bool_]


def widened(a: np.ndarray) -> np.ndarray:
    """ml_dtypes' narrow floats as float32, for NumPy's sort and unique."""
    return a.astype(np.float32) if a.dtype.kind == "V" else a


def sample(rng, dtype, shape) -> np.ndarray:
    """Values with many repeats (ties), and for floats NaNs, infinities and both zeros."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is not None:  # small values (ties) and the extremes
        values = rng.integers(max(info.min, -9), min(info.max, 9), shape, endpoint=True).astype(dtype)
        values[rng.random(shape) < 0.05] = info.max
        values[rng.random(shape) < 0.05] = info.min
        return values
    values = rng.integers(-6, 6, shape).astype(np.float32) / 4
    for special, share in ((np.nan, 0.08), (-np.nan, 0.04), (np.inf, 0.03), (-np.inf, 0.03), (-0.0, 0.1)):
        values[rng.random(shape) < share] = special
    return values.astype(dtype)


def reference(x: np.ndarray, axis: int, descending: bool) -> tuple:
    """(values, positions): np.sort (reversed when descending) and the stable argsort of the
    elements' ranks (np.unique's: -0.0 equals 0.0, NaNs are equal and last), of their
    negation when descending: equal elements keep their order either way."""
    wide = widened(x)
    rank = np.unique(wide, return_inverse=True)[1].reshape(x.shape).astype(np.int64)
    values = np.sort(wide, axis=axis)
    if descending:
        return np.flip(values, axis), np.argsort(-rank, axis=axis, kind="stable")
    return values, np.argsort(rank, axis=axis, kind="stable")


def check(x, got_values, got_positions, axis, descending):
    want_values, want_positions = reference(x, axis, descending)
    np.testing.assert_array_equal(widened(got_values), want_values)  # NaN equals NaN, -0.0 equals 0.0
    np.testing.assert_array_equal(got_positions, want_positions)


def poisoned(x: np.ndarray) -> np.ndarray:
    """An output like x, every byte 0xAB (bools: each the opposite of x's)."""
    if x.dtype == np.bool_:
        return ~x
    out = np.empty_like(x)
    out.view(np.uint8)[...] = 0xAB
    return out


def launch(x, rows, cols, axis, descending) -> tuple:
    out, positions = poisoned(x), np.full(x.shape, -1, np.int32)
    sort_tiles[x.shape[0] // rows](x, out, positions, R=rows, C=cols, AXIS=axis, DESCENDING=descending)
    return out, positions


def tiles_of(a: np.ndarray, rows: int):
    return (a[i:i + rows] for i in range(0, a.shape[0], rows))


# ----------------------------------------------------------------------------- cpu backend


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("descending", [False, True])
def test_rows_sort_as_numpy(rng, dtype, descending):
    for rows, cols in ((4, 16), (2, 13), (1, 300)):
        x = sample(rng, dtype, (3 * rows, cols))
        out, positions = launch(x, rows, cols, 1, descending)
        for part, values, where in zip(tiles_of(x, rows), tiles_of(out, rows), tiles_of(positions, rows)):
            check(part, values, where, 1, descending)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("rows", [16, 7])
def test_columns_sort_as_numpy(rng, dtype, rows):
    x = sample(rng, dtype, (2 * rows, 24))
    for descending in (False, True):
        out, positions = launch(x, rows, 24, 0, descending)
        for part, values, where in zip(tiles_of(x, rows), tiles_of(out, rows), tiles_of(positions, rows)):
            check(part, values, where, 0, descending)


def test_one_dimensional_tiles(rng):
    for block in (64, 100):
        x = sample(rng, np.float32, 3 * block)
        out, positions = poisoned(x), np.full(x.shape, -1, np.int32)
        sort_vector[3](x, out, positions, B=block)
        for i in range(3):
            part = x[i * block:(i + 1) * block]
            np.testing.assert_array_equal(out[i * block:(i + 1) * block], reference(part, 0, False)[0])
            np.testing.assert_array_equal(positions[i * block:(i + 1) * block], reference(part, 0, True)[1])


def test_signed_zeros_and_nans_in_their_documented_places():
    """sort: -0.0 before +0.0 (both kept), every NaN the canonical one, last (descending:
    first); argsort: the zeros are equal, and so are the NaNs, each group in its order."""
    x = np.array([[np.nan, 0.0, -0.0, -np.nan, 1.0, -1.0, 0.0, -0.0]], np.float32)
    x[0, 0] = np.array(0x7F800001, np.uint32).view(np.float32)  # a signalling NaN

    def bits(*values):
        return np.array(values, np.float32).view(np.uint32).tolist()

    out, positions = launch(x, 1, 8, 1, False)
    assert out[0].view(np.uint32).tolist() == bits(-1.0, -0.0, -0.0, 0.0, 0.0, 1.0, np.nan, np.nan)
    assert positions[0].tolist() == [5, 1, 2, 6, 7, 4, 0, 3]
    out, positions = launch(x, 1, 8, 1, True)
    assert out[0].view(np.uint32).tolist() == bits(np.nan, np.nan, 1.0, 0.0, 0.0, -0.0, -0.0, -1.0)
    assert positions[0].tolist() == [0, 3, 4, 1, 2, 6, 7, 5]


# ----------------------------------------------------------------------------- errors


@tile.kernel
def bad_axis(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0, 0), shape=(B, B))
    tile.store(out, index=(0, 0), tile=tile.sort(t, axis=2))  # MARK-axis


@tile.kernel
def bad_direction(x, out, flag, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=tile.argsort(t, descending=flag > 0))  # MARK-direction


@tile.kernel
def scalar_sort(x, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.sort(x[0]) + tile.zeros((B,)))  # MARK-scalar


@tile.kernel
def oversized_sort(x, out, R: vg.constexpr, C: vg.constexpr):
    t = tile.load(x, index=(tile.bid(0), 0), shape=(R, C))
    tile.store(out, index=(tile.bid(0), 0), tile=tile.sort(t))  # MARK-oversized


def refused(kernel, *args, match: str, marker: str, **kwargs) -> None:
    with pytest.raises(vg.CompileError, match=match) as info:
        kernel.specialize(*args, **kwargs)
    located.assert_points_at(info.value, marker, __file__)


def test_errors_point_at_the_call():
    x = np.zeros((64, 64), np.float32)
    refused(bad_axis, x, x, B=8, match=r"axis 2 is out of range for a tile of shape \(8, 8\)", marker="MARK-axis")
    refused(bad_direction, x[0], x[0], 1, B=8, match="descending must be a constant True or False",
            marker="MARK-direction")
    refused(scalar_sort, x[0], x[0], B=8, match=r"tile.sort\(\) needs a tile", marker="MARK-scalar")
    big = np.zeros((128, 256), np.float32)
    refused(oversized_sort, big, big, R=65, C=200, match=r"32,768 elements \(padded to powers of two\), more "
            r"than the 16,384 a sort takes", marker="MARK-oversized")
    oversized_sort.specialize(big, big, R=64, C=256)  # at the limit: accepted


# ----------------------------------------------------------------------------- GPU lowering


@pytest.mark.parametrize("layout,warps", LAYOUT_PARAMS)
@pytest.mark.parametrize("dtype", [T.float32, T.int64, T.uint8, T.float64])
def test_the_network_sorts_along_every_axis_of_every_layout(rng, layout, warps, dtype):
    """The lowering's network on the emulated block, against the cpu backend's sort, with
    the tile's logical extents ragged where the layout allows (the padding sorts last)."""
    from verdigris.cpu import tile_ops

    for axis in range(layout.rank):
        logical = tuple(n - (n > 2 and k == axis) * (n // 3) for k, n in enumerate(layout.shape))
        x = sample(rng, dtype.np, layout.shape)
        for op, descending in (("sort", False), ("argsort", True)):
            block = Block(warps)
            source = held(block, layout, x, dtype)
            source.shape = logical
            node = X.TileSort(None, op, source, axis, descending, T.int32 if op == "argsort" else dtype, logical)
            got = block.gather(sorting.sort(block, node), logical)
            inside = x[tuple(slice(0, n) for n in logical)]
            want = np.ascontiguousarray(tile_ops.sorting(op, dtype, descending)(inside, axis))
            np.testing.assert_array_equal(got.view(np.uint8), want.astype(got.dtype).view(np.uint8))


@pytest.mark.parametrize("rows,cols,axis,dtype,warps", [
    (4, 13, 1, np.float32, 1), (2, 150, 1, np.int32, 1), (16, 16, 0, np.int8, 2),
    (1, 256, 1, np.float64, 2), (8, 24, 1, ml_dtypes.bfloat16, 1), (4, 64, 1, np.uint64, 1),
    (4, 40, 1, ml_dtypes.float8_e4m3fn, 1), (4, 16, 1, ml_dtypes.float8_e4m3fn, 1), (4, 20, 1, np.bool_, 1)])
def test_gpu_code_matches_the_cpu_backend_bit_for_bit(rng, rows, cols, axis, dtype, warps):
    x = sample(rng, dtype, (2 * rows, cols))
    for descending in (False, True):
        args = dict(x=x, out=poisoned(x), positions=np.full(x.shape, -1, np.int32), R=rows, C=cols,
                    AXIS=axis, DESCENDING=descending)
        want = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}
        sort_tiles[2](**want)
        assert host_jit.run(sort_tiles, 2, num_warps=warps, **args) is None
        np.testing.assert_array_equal(args["out"].view(np.uint8), want["out"].view(np.uint8))
        np.testing.assert_array_equal(args["positions"], want["positions"])


@tile.kernel
def sort_in_a_loop(x, out, C: vg.constexpr):
    """Rows taken in turn by the blocks: the network's shared-memory rounds in a loop."""
    for r in range(tile.bid(0), x.shape[0], tile.num_blocks(0)):
        t = tile.load(x, index=(r, 0), shape=(1, C))
        tile.store(out, index=(r, 0), tile=tile.sort(t, descending=True) * 2)


def test_gpu_code_in_a_loop(rng):
    x = sample(rng, np.float32, (5, 200))
    want = poisoned(x)
    sort_in_a_loop[2](x, want, C=200)
    got = poisoned(x)
    assert host_jit.run(sort_in_a_loop, 2, num_warps=2, x=x, out=got, C=200) is None
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got, 2 * reference(x, 1, True)[0])


def test_gpu_code_of_a_vector(rng):
    x = sample(rng, np.float32, 300)
    got, want = both(sort_vector, 3, x=x, out=poisoned(x), positions=np.full(300, -1, np.int32), B=100)
    np.testing.assert_array_equal(got["out"].view(np.uint32), want["out"].view(np.uint32))
    np.testing.assert_array_equal(got["positions"], want["positions"])


def specs(dtype, rows, cols, axis, descending) -> dict:
    return dict(x=arr(dtype, 2), out=arr(dtype, 2), positions=arr(T.int32, 2), R=rows, C=cols, AXIS=axis,
                DESCENDING=descending)


PTX_SPECS = {
    "rows_f32": specs(T.float32, 4, 1000, 1, False),
    "columns_bf16": specs(T.bfloat16, 100, 32, 0, True),
    "rows_i64": specs(T.int64, 8, 64, 1, True),
    "row_across_warps": specs(T.float32, 1, 2048, 1, False),
    "ragged_u8": specs(T.uint8, 3, 77, 1, True),
}


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", PTX_SPECS)
def test_ptx_assembles(name, target):
    codegen.assemble(ptx_of_spec(sort_tiles, PTX_SPECS[name], target), target, optimize=False)


@tile.kernel
def argsort_rows(x, positions, R: vg.constexpr, C: vg.constexpr):
    i = tile.bid(0)
    tile.store(positions, index=(i, 0), tile=tile.argsort(tile.load(x, index=(i, 0), shape=(R, C))))


@pytest.mark.slow  # ptxas's optimizing back end on a 16,384-element network: ~50 s
@needs_ptxas
def test_the_largest_argsort_fits_in_registers():
    """MAX_SORT_ELEMENTS' reason: at the limit, an argsort's (key, position) pairs (64 per
    thread of 8 warps) fit in registers without spills."""
    import subprocess
    import tempfile

    ptx = ptx_of_spec(argsort_rows, dict(x=arr(T.float32, 2), positions=arr(T.int32, 2), R=4, C=4096), "sm_90a")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        done = subprocess.run([codegen.ptxas_path(), "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"],
                              capture_output=True, text=True, check=True)
    assert "0 bytes spill stores" in done.stderr, done.stderr


def test_rows_across_warps_go_through_shared_memory_and_rows_within_one_do_not():
    """A 2048-element row over 8 warps: its warp bits exchange through shared memory
    (barriers); 32-element rows, one per lane group of a warp: shuffles and, between
    registers of a thread, unsigned min and max of the keys. Each network is lowered once
    (not once per path of its loads)."""
    across = ptx_of_spec(sort_tiles, PTX_SPECS["row_across_warps"])
    assert "bar.sync" in across and "st.shared" in across
    within = ptx_of_spec(sort_tiles, specs(T.float32, 64, 32, 1, False))
    assert "bar.sync" not in within and "shfl.sync.bfly" in within
    assert "min.u32" in within and "max.u32" in within
    # A row: 4 consecutive elements in registers, then 8 lanes (coordinate bits 2-4). Of its
    # 15 steps, 6 meet other lanes (the mirrors of k = 3, 4, 5; j = 2 at k = 4; j = 3, 2 at
    # k = 5): one shuffle per register (8) and word (sort: the key; argsort: key, position).
    assert within.count("shfl.sync.bfly") == 6 * 8 * (1 + 2)
