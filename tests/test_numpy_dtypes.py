"""NumPy dtypes are dtypes in kernels (docs/api.md "Dtypes"): `np.float16` and
`np.dtype("float16")` mean `vg.float16` wherever a kernel takes, converts with or compares a
dtype, on both tracks, whether the kernel names them from its module, takes them as
vg.constexpr arguments or as a helper's default (`frontend.typing.static_value`)."""
import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import simt, tile

HALF = np.dtype("float16")  # a module constant: read again at every launch
WIDE = np.float64


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype)


@tile.kernel
def converted(x, out, B: vg.constexpr, DT: vg.constexpr):
    t = tile.load(x, index=(tile.bid(0),), shape=(B,))
    narrow = t.astype(DT)                               # a constexpr NumPy dtype
    ones = tile.full((B,), 1, np.int32) + tile.zeros((B,), HALF)
    tile.store(out, index=(tile.bid(0),), tile=narrow.astype(np.float32) + ones)


@pytest.mark.parametrize("spelling", [np.float16, np.dtype("float16"), vg.float16])
def test_tile_dtypes_spelled_the_numpy_way(spelling, rng):
    x = rng.standard_normal(200).astype(np.float32) * 100
    out = poisoned(200, np.float32)
    converted[4](x, out, B=64, DT=spelling)
    expected = x.astype(np.float16).astype(np.float64) + 1.0
    np.testing.assert_array_equal(out, expected.astype(np.float32))


def shift(t, dt=np.int16):  # a plain helper whose default is a NumPy dtype
    return t.astype(dt) + 1


@tile.kernel
def helper_default(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=shift(t))


def test_a_helper_default_numpy_dtype(rng):
    x = rng.integers(-30000, 30000, 64).astype(np.int32)
    out = np.full(64, -7, np.int64)
    helper_default[1](x, out, B=64)
    np.testing.assert_array_equal(out, x.astype(np.int16).astype(np.int64) + 1)


@simt.kernel
def simt_dtypes(x, out):
    staged = simt.shared.array(64, np.float64)
    scratch = simt.local.array(1, HALF)
    i = simt.thread_id(0)
    staged[i] = x[i]
    simt.barrier()
    scratch[0] = np.float16(staged[63 - i])             # a conversion, as vg.float16(...)
    wide: WIDE = scratch[0]                             # an annotation
    if x.dtype == np.float32:                           # decided while compiling
        wide = wide + 1000
    out[i] = wide


@pytest.mark.parametrize("dtype, offset", [(np.float32, 1000.0), (np.float64, 0.0)])
def test_simt_dtypes_spelled_the_numpy_way(dtype, offset, rng):
    x = rng.standard_normal(64).astype(dtype)
    out = poisoned(64, np.float64)
    simt_dtypes[1, 64](x, out)
    expected = x[::-1].astype(np.float64).astype(np.float16).astype(np.float64) + offset
    np.testing.assert_array_equal(out, expected)


@tile.kernel
def module_dtype(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=t.astype(HALF))


def test_a_rebound_numpy_dtype_constant_is_read_by_the_next_launch(rng, monkeypatch):
    x = (rng.standard_normal(64) * 1000).astype(np.float64)
    out = poisoned(64, np.float64)
    module_dtype[1](x, out, B=64)
    np.testing.assert_array_equal(out, x.astype(np.float16))
    monkeypatch.setitem(globals(), "HALF", np.float32)
    module_dtype[1](x, out, B=64)
    np.testing.assert_array_equal(out, x.astype(np.float32))


@tile.kernel
def complex_zeros(out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.zeros((B,), np.complex64))  # marker: complex


@tile.kernel
def class_as_dtype(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=t.astype(np.floating))  # marker: abstract


@pytest.mark.parametrize("kernel, marker, named", [
    (complex_zeros, "marker: complex", "complex64"),
    (class_as_dtype, "marker: abstract", "floating"),
])
def test_a_numpy_dtype_verdigris_lacks_is_named(kernel, marker, named):
    out = np.zeros(8, np.float32)
    args = (out, out) if kernel is class_as_dtype else (out,)
    with pytest.raises(vg.CompileError) as info:
        kernel[1](*args, B=8)
    assert f"NumPy's {named} is not one" in str(info.value)
    located.assert_points_at(info.value, marker, __file__)


@tile.kernel
def chosen(x, out, B: vg.constexpr, DTS: vg.constexpr, K: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=t.astype(DTS[K]))


@pytest.mark.parametrize("k, dtype", [(0, np.int8), (1, np.float16)])
def test_a_tuple_of_numpy_dtypes_as_a_constexpr(k, dtype, rng):
    x = rng.uniform(-120, 120, 32).astype(np.float32)  # within int8: NumPy's cast is defined
    out = poisoned(32, np.float64)
    chosen[1](x, out, B=32, DTS=(np.int8, np.dtype("float16")), K=k)
    np.testing.assert_array_equal(out, x.astype(dtype).astype(np.float64))
