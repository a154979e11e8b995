"""A Python float argument is float64 and weak (types.py): read directly it takes the float
type of the operand it meets, so a float64 kernel computes with the exact value and a
float32 kernel stays float32; a value too large for the float type it is converted to is
refused at the launch, never silently infinity (issue #27)."""
import warnings

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def axpy(a, x, y, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = a * x[i] + y[i]


@tile.kernel
def axpy_tiles(a, x, y, out):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=a * tile.load(x, index=(i,), shape=(64,))
               + tile.load(y, index=(i,), shape=(64,)))


def _launch(kernel, a, x, y, out):
    if kernel is axpy:
        axpy[vg.cdiv(x.size, 128), 128](a, x, y, out)
    else:
        axpy_tiles[vg.cdiv(x.size, 64)](a, x, y, out)


def _multiplies(kernel, *args, block=None) -> set:
    from verdigris.frontend import walk

    return {n.dtype.name for n in walk(kernel.specialize(*args, block=block).body)
            if getattr(n, "op", None) == "mul" and n.dtype.is_float}  # scalars and tiles


@pytest.mark.parametrize("kernel", [axpy, axpy_tiles], ids=["simt", "tile"])
def test_float64_kernels_use_the_exact_value(rng, kernel):
    a = float(rng.uniform(0.05, 0.15))  # almost never a float32
    x, y = rng.standard_normal(192), rng.standard_normal(192)
    out = np.full_like(x, np.nan)
    _launch(kernel, a, x, y, out)
    np.testing.assert_array_equal(out, a * x + y)  # float64, not float32(a)


@pytest.mark.parametrize("kernel", [axpy, axpy_tiles], ids=["simt", "tile"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_narrower_float_kernels_stay_narrow(rng, kernel, dtype):
    a = float(rng.uniform(0.05, 0.15))
    x, y = rng.standard_normal(192).astype(dtype), rng.standard_normal(192).astype(dtype)
    out = np.full_like(x, np.nan)
    _launch(kernel, a, x, y, out)
    np.testing.assert_array_equal(out, dtype(a) * x + y)  # NumPy 2's weak scalar
    assert _multiplies(kernel, a, x, y, out) == {np.dtype(dtype).name}  # no float64 math


def test_python_float_with_an_integer_is_float32_as_a_literal_is():
    @simt.kernel
    def scaled_index(a, out):
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = a * i

    out = np.zeros(4, np.float64)
    assert _multiplies(scaled_index, 0.1, out, block=4) == {"float32"}
    scaled_index[1, 4](0.1, out)
    np.testing.assert_array_equal(out, np.float32(0.1) * np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("kernel", [axpy, axpy_tiles], ids=["simt", "tile"])
def test_a_float_beyond_the_kernels_float_type_is_refused(kernel):
    ones32 = np.ones(64, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no NumPy overflow warning leaks
        with pytest.raises(vg.LaunchError, match=r"'a' is a Python float beyond float32's "
                                                 r"range") as err:
            _launch(kernel, 1e40, ones32, ones32, np.zeros(64, np.float32))
        assert err.value.loc.file == __file__
        out = np.zeros(64)
        _launch(kernel, 1e40, np.ones(64), np.ones(64), out)  # float64 holds it
        assert (out == 1e40 + 1).all()
        out32 = np.zeros(64, np.float32)
        _launch(kernel, 3e38, ones32, ones32, out32)  # the same kernel, a value that fits
        assert (out32 == np.float32(3e38)).all()
        _launch(kernel, float("inf"), ones32, ones32, out32)  # infinity is a float32 too
        assert np.isinf(out32).all()


def test_float16_kernels_refuse_what_float16_cannot_hold():
    ones = np.ones(64, np.float16)
    with pytest.raises(vg.LaunchError, match="beyond float16's range"):
        _launch(axpy, 70000.0, ones, ones, np.zeros(64, np.float16))


def test_numpy_scalars_keep_their_dtype():
    x = np.ones(64, np.float32)
    assert _multiplies(axpy, np.float64(0.1), x, x, x.copy()) == {"float64"}
    assert _multiplies(axpy, np.float32(0.1), x, x, x.copy()) == {"float32"}


@simt.kernel
def combined(a, b, x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = -a * x[i] + a * b * x[i] + (a + 1.5) * x[i] + vg.math.sqrt(b) * x[i]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_floats_made_of_python_floats_stay_weak(rng, dtype):
    """`-a`, `a * b`, `a + 1.5` and `vg.math.sqrt(b)` of Python floats are weak as `a` is
    (NumPy's Python scalars: Python computes them in float64, then they meet the array's
    type)."""
    a, b = float(rng.uniform(0.05, 0.15)), float(rng.uniform(1, 2))
    x = rng.standard_normal(64).astype(dtype)
    out = np.full_like(x, np.nan)
    combined[1, 64](a, b, x, out)
    w = np.dtype(dtype).type
    np.testing.assert_array_equal(out, w(-a) * x + w(a * b) * x + w(a + 1.5) * x
                                  + w(np.sqrt(b)) * x)
    # a * b in float64, as Python computes it; every product with x[i] in x's type
    assert _multiplies(combined, a, b, x, out, block=64) == {np.dtype(dtype).name, "float64"}
    assert _products_with_x(combined, a, b, x, out) == {np.dtype(dtype).name}


def _products_with_x(kernel, *args) -> set:
    from verdigris.frontend import walk
    from verdigris.ir import nodes as N

    return {n.dtype.name for n in walk(kernel.specialize(*args, block=64).body)
            if getattr(n, "op", None) == "mul" and isinstance(n.rhs, N.Load)}


@tile.kernel
def scaled_twice(x, out, scale):
    scale2 = scale * 1.4426950408889634  # a variable made of a Python float and a literal
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(64,))
    tile.store(out, index=(i,), tile=t * scale2)


@simt.kernel
def scaled_then_replaced(x, out, scale):
    s = scale * 2.0
    i = simt.global_id(0)
    if i < x.shape[0]:
        if x[i] > 0.5:
            s = vg.float64(x[i])  # a float64 value that is not weak: s is not weak either
        out[i] = x[i] * s


def test_a_variable_made_of_python_floats_stays_weak(rng):
    """`scale2 = scale * c` is weak as `scale` is: a float32 tile times it stays float32
    (the attention example's `acc * alpha` met a float64 tile); a variable also assigned a
    value that is not weak is float64 where it is read."""
    x = rng.random(256).astype(np.float32)
    from verdigris.frontend import walk

    tile_products = {n.dtype.name for n in walk(scaled_twice.specialize(x, x.copy(), 0.5).body)
                     if getattr(n, "op", None) == "mul" and hasattr(n, "shape")}
    assert tile_products == {"float32"}  # (the scalar product is float64, then rounded once)
    out = np.full_like(x, np.nan)
    scaled_twice[4](x, out, 0.5)
    np.testing.assert_allclose(out, x.astype(np.float64) * (0.5 * 1.4426950408889634), rtol=1e-6)
    assert "float64" in _multiplies(scaled_then_replaced, x, x.copy(), 0.5, block=(64, 1, 1))
    out = np.full_like(x, np.nan)
    scaled_then_replaced[4, 64](x, out, 0.5)
    expected = np.where(x > 0.5, x.astype(np.float64) ** 2, x.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-6)
