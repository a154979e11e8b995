"""What a user who gets something wrong sees: a `vg.Error` naming their line and saying what
to do, never a raw Python exception or the name of an `ast` class (issue #27)."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def fill_one(x):
    i = simt.thread_id(0)
    x[i] = 1.0


@pytest.mark.parametrize("config", [([4], 256), (4, [256]), ((4, [1]), 256)])
def test_a_list_as_grid_or_block_is_a_launch_error(config):
    with pytest.raises(vg.LaunchError, match="must be an int or a tuple") as err:
        fill_one[config](np.zeros(256, np.float32))
    assert err.value.loc is not None and err.value.loc.file == __file__


class NotAFunction:
    pass


@pytest.mark.parametrize("decorate", [simt.kernel, tile.kernel, vg.func],
                         ids=["simt", "tile", "func"])
@pytest.mark.parametrize("target, said", [
    (lambda x: None, "not a lambda"), (NotAFunction, "not the class NotAFunction"),
    (3, "not the int 3"), (print, "not <built-in function print>")])
def test_only_def_functions_are_kernels_and_helpers(decorate, target, said):
    with pytest.raises(vg.CompileError, match=f"takes a function defined with def, {said}") as err:
        decorate(target)
    assert err.value.loc.file == __file__ and "hint:" in str(err.value)


def test_a_def_function_is_still_taken():
    @vg.func
    def twice(v):
        return v * 2

    assert twice(3) == 6 and simt.kernel(fill_one.fn) is not None


@simt.kernel
def walrus(x):
    i = simt.thread_id(0)
    if (j := i) < 4:
        x[j] = 1.0


@simt.kernel
def matched(x):
    i = simt.thread_id(0)
    match i:
        case 0:
            x[i] = 1.0


@simt.kernel
def contains(x):
    i = simt.thread_id(0)
    if i in x:
        x[i] = 1.0


@pytest.mark.parametrize("kernel, said", [
    (walrus, "an assignment expression (:=)"), (matched, "a match statement"),
    (contains, "the comparison `in`")])
def test_unsupported_constructs_are_named_in_python_terms(kernel, said):
    with pytest.raises(vg.UnsupportedConstruct) as err:
        kernel[1, 4](np.zeros(4, np.float32))
    message = str(err.value)
    assert said in message and (kernel is contains or "hint:" in message)
    assert not any(name in message for name in ("NamedExpr", "Match", "In`", "Compare"))


@tile.kernel
def add(a, b, out):
    i = tile.bid(0)
    x = tile.load(a, index=(i,), shape=(256,))
    tile.store(out, index=(i,), tile=x + tile.load(b, index=(i,), shape=(256,)))


def test_tile_kernel_launched_simt_style_says_it_takes_only_a_grid(rng):
    a, b = rng.standard_normal(768).astype(np.float32), rng.standard_normal(768).astype(np.float32)
    with pytest.raises(vg.SafetyError, match="VG202") as err:
        add[3, 256](a, b, np.zeros_like(a))
    assert "a tile kernel takes only a grid" in str(err.value)
    assert "launch add[3]" in str(err.value)
    out = np.full_like(a, np.nan)
    add[3](a, b, out)  # the fixed launch
    np.testing.assert_array_equal(out, a + b)


@simt.kernel
def store_int8(x, v):
    i = simt.thread_id(0)
    x[i] = vg.int8(v)


@simt.kernel
def store_int8_300(x):
    i = simt.thread_id(0)
    x[i] = vg.int8(300)


@simt.kernel
def store_uint8_minus_1(x):
    i = simt.thread_id(0)
    x[i] = vg.uint8(-1)


@simt.kernel
def store_int8_127(x):
    i = simt.thread_id(0)
    x[i] = vg.int8(127) + vg.int8(-128)


@pytest.mark.parametrize("kernel, value", [(store_int8_300, "300"), (store_uint8_minus_1, "-1")])
def test_a_constant_an_integer_dtype_cannot_hold_is_refused(kernel, value):
    with pytest.raises(vg.CompileError, match=f"{value} does not fit") as err:
        kernel[1, 4](np.zeros(4, np.int8 if "int8_" in kernel.__name__ else np.uint8))
    assert "^" in str(err.value) and err.value.loc.file == __file__
    with pytest.raises((OverflowError, vg.Error)):  # the host refuses it too
        (vg.int8 if value == "300" else vg.uint8)(int(value))


def test_constants_in_range_and_run_time_values_convert():
    out = np.full(4, 7, np.int8)
    store_int8_127[1, 4](out)
    assert (out == -1).all()
    store_int8[1, 4](out, 300)  # a run-time value wraps around: 300 - 256
    assert (out == 44).all()


@simt.kernel
def store_huge_constant(x):
    i = simt.thread_id(0)
    x[i] = 1 << 70


@simt.kernel
def store_uint64_constant(x):
    i = simt.thread_id(0)
    x[i] = vg.uint64(2**64 - 1) & (2**64 - 1)


def test_an_integer_constant_beyond_int64_is_refused_not_wrapped_to_zero():
    with pytest.raises(vg.CompileError, match="does not fit") as err:
        store_huge_constant[1, 4](np.zeros(4, np.int64))
    assert err.value.loc.file == __file__
    out = np.zeros(4, np.uint64)
    store_uint64_constant[1, 4](out)  # with a uint64 operand it is a uint64
    assert (out == 2**64 - 1).all()
