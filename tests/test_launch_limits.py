"""Launch shapes are part of the model (docs/safety.md, "Launch limits"): grids and blocks
past CUDA's limits are refused on every backend, naming the axis, the value and the limit;
a grid with no blocks runs nothing but is checked (arguments, aliasing, races, compile) as
any launch; and the cpu backend runs on the very memory the alias check inspected."""
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile
from verdigris.ir.limits import MAX_AXIS_THREADS, MODEL
from verdigris.runtime import limits


@simt.kernel
def copy_3d(x, out):
    i = simt.global_id(0)
    j = simt.global_id(1)
    k = simt.global_id(2)
    if i < out.shape[0] and j < out.shape[1] and k < out.shape[2]:
        out[i, j, k] = x[i, j, k]


@simt.kernel
def one_element_for_all(x, out):
    out[0] = x[simt.global_id(0)]


@simt.kernel
def copy_1d(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i]


@tile.kernel
def tile_copy_3d(x, out):
    t = tile.load(x, index=(tile.bid(0), tile.bid(1), tile.bid(2)), shape=(1, 1, 1))
    tile.store(out, index=(tile.bid(0), tile.bid(1), tile.bid(2)), tile=t)


@tile.kernel
def tile_first_row(x, out):
    tile.store(out, index=(0,), tile=tile.load(x, index=(tile.bid(0),), shape=(4,)))


def _shapes_past_the_limits():
    """(grid, block, the words of the refusal) for each axis just past its limit."""
    cases = []
    for axis, name in enumerate("xyz"):
        grid = [1, 1, 1]
        grid[axis] = MODEL.grid[axis] + 1
        cases.append((tuple(grid), (1, 1, 1), f"{MODEL.grid[axis] + 1} blocks along {name}, "
                                              f"past the limit of {MODEL.grid[axis]}"))
        block = [1, 1, 1]
        block[axis] = MODEL.block[axis] + 1
        cases.append(((1, 1, 1), tuple(block), f"{MODEL.block[axis] + 1} threads along {name}, "
                                               f"past the limit of {MODEL.block[axis]}"))
    cases.append(((1, 1, 1), (32, 32, 2), "has 2048 threads, past the limit of 1024"))
    cases.append(((2**30, 1, 1), (4, 1, 1), f"{2**32} threads along x, past the limit of "
                                            f"{MAX_AXIS_THREADS}"))
    return cases


@pytest.mark.parametrize("grid, block, words", _shapes_past_the_limits())
def test_a_simt_launch_past_a_limit_is_refused_naming_axis_value_and_limit(grid, block, words):
    x = np.ones((2, 2, 2), np.float32)
    out = np.full((2, 2, 2), np.nan, np.float32)
    with pytest.raises(vg.LaunchError, match=re.escape(words)) as info:
        copy_3d[grid, block](x, out)
    assert info.value.loc is not None and info.value.loc.file == __file__  # the launch line
    assert np.isnan(out).all()


@pytest.mark.parametrize("axis", range(3))
def test_a_simt_launch_at_each_limit_runs(axis, rng):
    """The limits themselves are launches (one block per axis beyond x, so the cpu backend
    stays quick): block x 1024, y 1024, z 64."""
    block = [1, 1, 1]
    block[axis] = MODEL.block[axis]
    shape = tuple(block)
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.full(shape, np.nan, np.float32)
    copy_3d[(1, 1, 1), tuple(block)](x, out)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("axis", [1, 2])
def test_a_tile_grid_past_65535_along_y_or_z_is_refused(axis):
    grid = [1, 1, 1]
    grid[axis] = 65536
    x = np.ones((1, 1, 1), np.float32)
    out = np.full((1, 1, 1), np.nan, np.float32)
    with pytest.raises(vg.LaunchError, match=f"65536 blocks along {'xyz'[axis]}, past the "
                                             "limit of 65535"):
        tile_copy_3d[tuple(grid)](x, out)
    assert np.isnan(out).all()


def test_the_device_limits_are_checked_where_smaller(monkeypatch):
    """On the cuda backend each device's own limits (driver attributes, read once) are
    checked as well; a device with smaller limits refuses what the model allows."""
    small = MODEL._replace(grid=(2**31 - 1, 1024, 1024), block=(512, 512, 64), block_threads=512)
    monkeypatch.setitem(limits._device_limits, 7, small)
    monkeypatch.setattr(limits, "_describe_device", lambda device: f" of GPU {device}")
    with pytest.raises(vg.LaunchError, match="1024 threads along x, past the limit of 512 of GPU 7"):
        limits.check_device("k", (1, 1, 1), (1024, 1, 1), 7)
    limits.check_device("k", (1, 1024, 1), (512, 1, 1), 7)
    monkeypatch.setitem(limits._device_limits, 8, MODEL)
    limits.check_device("k", (2**31 - 1, 65535, 65535), (1024, 1, 1), 8)


# ----------------------------------------------------------------------------- no blocks


@pytest.mark.parametrize("grid", [0, (4, 0), (0, 1, 3)])
def test_a_grid_of_no_blocks_still_refuses_a_racy_kernel(grid):
    x = np.ones(64, np.float32)
    with pytest.raises(vg.SafetyError, match="VG202"):
        one_element_for_all[grid, 32](x, np.full(1, np.nan, np.float32))


def test_a_grid_of_no_blocks_of_the_fixed_kernel_runs_nothing(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    copy_1d[0, 32](x, out)
    copy_1d[(4, 0), 32](x, out)
    assert np.isnan(out).all()


def test_a_grid_of_no_blocks_still_refuses_aliased_arguments():
    x = np.ones(64, np.float32)
    with pytest.raises(vg.AliasError, match="VG201|is the same memory as 'x'"):
        copy_1d[0, 32](x, x)


def test_a_grid_of_no_blocks_still_compiles_the_kernel():
    @simt.kernel
    def returns_a_value(x, out):
        out[0] = x[0]
        return 1

    with pytest.raises(vg.CompileError, match="kernels return nothing"):
        returns_a_value[0, 32](np.ones(1, np.float32), np.ones(1, np.float32))


def test_a_tile_grid_of_no_blocks_is_race_checked():
    """(A grid axis of 0 or 1 blocks is one where no two blocks meet: (2, 0) is checked as
    two blocks along x.)"""
    x = np.ones(64, np.float32)
    with pytest.raises(vg.SafetyError, match="VG202"):
        tile_first_row[(2, 0)](x, np.full(4, np.nan, np.float32))
    out = np.full(4, np.nan, np.float32)
    tile_first_row[(1,)](x, out)  # the fixed twin: one block
    np.testing.assert_array_equal(out, x[:4])


# ----------------------------------------------------------------------------- one export


class ExportsAnotherBufferEachTime:
    """A host array whose every `__dlpack__()` hands out a different buffer: the launch may
    export it once only, and must run on that export."""

    def __init__(self, buffers):
        self.buffers, self.exports = buffers, 0

    def __dlpack__(self, stream=None, **kwargs):
        buffer = self.buffers[self.exports]
        self.exports += 1
        return buffer.__dlpack__()

    def __dlpack_device__(self):
        return self.buffers[0].__dlpack_device__()


def test_the_cpu_backend_runs_on_the_export_the_alias_check_saw(rng):
    x = rng.standard_normal(64).astype(np.float32)
    first, second = (np.full(64, np.nan, np.float32) for _ in range(2))
    out = ExportsAnotherBufferEachTime([first, second])
    copy_1d[1, 64](x, out)
    assert out.exports == 1
    np.testing.assert_array_equal(first, x)
    assert np.isnan(second).all()


def test_an_exported_output_that_is_an_input_is_refused_and_not_run(rng):
    """The one export is what the alias check compares: the output aliasing `x` is refused
    even though a second export would have been a separate buffer."""
    x = rng.standard_normal(64).astype(np.float32)
    spare = np.full(64, np.nan, np.float32)
    out = ExportsAnotherBufferEachTime([x, spare])
    with pytest.raises(vg.AliasError):
        copy_1d[1, 64](x, out)
    assert out.exports == 1 and np.isnan(spare).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn", "bool", "int64"])
def test_an_exported_host_array_of_any_dtype_is_run_in_place(dtype, rng):
    from verdigris import types as T

    np_dtype = T.from_name(dtype).np
    x = (rng.standard_normal(40) * 4).astype(np_dtype)
    first = np.zeros(40, np_dtype)
    out = ExportsAnotherBufferEachTime([_Exported(first)])
    copy_1d[1, 64](x, out)
    np.testing.assert_array_equal(first.view(np.uint8), x.view(np.uint8))


class _Exported:
    """DLPack of a NumPy array of any dtype verdigris has (NumPy's own `__dlpack__` refuses
    bfloat16 and fp8), through verdigris's exporter."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None, **kwargs):
        from verdigris.runtime import dlpack
        from verdigris.runtime.interop import describe

        return dlpack.export(describe(self.array), self.array)

    def __dlpack_device__(self):
        return (1, 0)
