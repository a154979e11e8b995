"""Module-level constants are read at every launch (runtime/constants.py, docs/api.md):
rebinding one between launches changes what the next launch computes, whatever its block
size or arguments, in the kernel's helpers too (issue #27)."""
import numpy as np
import pytest

from tests.sources import module_constants as m


@pytest.fixture
def constants():
    saved = {name: getattr(m, name) for name in ("SCALE", "OFFSET", "DTYPE", "WIDTHS")}
    yield m
    for name, value in saved.items():
        setattr(m, name, value)


def _simt(x, block=128):
    out = np.full_like(x, np.nan)
    m.scaled[-(-x.size // block), block](x, out)
    return out


def test_a_rebound_constant_is_read_by_the_next_launch_with_the_same_types(constants, rng):
    x = rng.standard_normal(300).astype(np.float32)
    np.testing.assert_array_equal(_simt(x), x * np.float32(2.0) + 1 + 2)
    constants.SCALE = 3.0
    np.testing.assert_array_equal(_simt(x), x * np.float32(3.0) + 1 + 2)  # same block, types
    constants.OFFSET = 5  # read in a @vg.func helper
    np.testing.assert_array_equal(_simt(x, 64), x * np.float32(3.0) + 5 + 2)
    np.testing.assert_array_equal(_simt(x), x * np.float32(3.0) + 5 + 2)  # the first block too
    constants.WIDTHS = (1, 7)
    np.testing.assert_array_equal(_simt(x), x * np.float32(3.0) + 5 + 7)
    constants.SCALE = 2.0  # back again
    np.testing.assert_array_equal(_simt(x), x * np.float32(2.0) + 5 + 7)


def test_a_rebound_dtype_constant_recompiles(constants, rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan)
    m.scaled[1, 64](x, out)
    assert out.dtype == np.float64
    constants.DTYPE = m.vg.int8
    constants.WIDTHS = (1, 300)  # int8(300) as a constant: refused, as the host refuses it
    with pytest.raises(m.vg.CompileError, match="300 does not fit int8"):
        m.scaled[1, 64](x, out)


def test_tile_kernels_read_constants_at_each_launch_too(constants, rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.full_like(x, np.nan)
    m.scaled_tiles[2](x, out)
    np.testing.assert_array_equal(out, x * np.float32(2.0) + 1)
    constants.SCALE = -0.5
    m.scaled_tiles[2](x, out)
    np.testing.assert_array_equal(out, x * np.float32(-0.5) + 1)


def test_an_equal_value_keeps_the_compiled_specialization(constants, rng):
    x = rng.standard_normal(64).astype(np.float32)
    _simt(x)
    built = dict(m.scaled._specializations)
    constants.SCALE = float("2.0")  # another object, the same value and type
    _simt(x)
    assert m.scaled._specializations == built
    constants.SCALE = 2  # the same value, another type: int * float32 is still float32,
    _simt(x)  # but the code is built again (as a constexpr's 2 and 2.0 are two specializations)
    assert m.scaled._specializations != built


def test_closure_constants_are_read_at_every_launch_too(rng):
    from verdigris import simt

    scale = 2.0

    @simt.kernel
    def scaled_by_closure(x, out):
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = x[i] * scale

    x = rng.standard_normal(64).astype(np.float32)
    out = np.full_like(x, np.nan)
    scaled_by_closure[1, 64](x, out)
    np.testing.assert_array_equal(out, x * np.float32(2.0))
    scale = 5.0  # noqa: F841 -- read by the kernel through its closure
    scaled_by_closure[1, 64](x, out)
    np.testing.assert_array_equal(out, x * np.float32(5.0))
