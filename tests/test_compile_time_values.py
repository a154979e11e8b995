"""Compile-time values (docs/api.md "Compile-time values"), on both tracks:
- string constexprs (parameters, `NAME: vg.constexpr = "..."`, module constants, helper
  arguments) compare with == and != while compiling, so only the chosen arm is compiled
  and checked, and each value is its own specialization; any other use of a string is a
  CompileError with a caret;
- a name bound once, outside any if or loop, to an int computed from constexprs and
  literals is a compile-time int: tile and array shapes, helper constexpr parameters.
"""

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris.ir.nodes import ArrayType

F32, I32 = vg.float32, vg.int32
MODE = "double"  # a module constant read by `module_string`
GATED = ("gelu", "silu")  # a module tuple of strings, read by `membership`


def typed_ir(kernel, *args, **kwargs):
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        typed_ir(kernel, *args, **kwargs)
    return info.value


def poisoned(shape, dtype=np.float32):
    out = np.empty(shape, dtype)
    out[...] = np.nan if np.dtype(dtype).kind == "f" else -7
    return out


def leaky(v, slope=0.01):
    return np.where(v > 0, v, slope * v)


# ----------------------------------------------------------------------------- strings: SIMT


@simt.kernel
def activation(x, out, ACTIVATION: vg.constexpr = "leaky_relu"):
    i = simt.global_id(0)
    if i < x.shape[0]:
        v = x[i]
        if ACTIVATION == "leaky_relu":
            v = v if v > 0 else 0.01 * v
        elif ACTIVATION == "bits":
            v = v ^ 1          # float ^ int: refused wherever this arm is compiled
        elif ACTIVATION != "none":
            v = v * 2
        out[i] = v


def test_a_simt_string_constexpr_selects_its_arm_while_compiling(rng):
    x = rng.standard_normal(100).astype(np.float32)
    wants = {"leaky_relu": leaky(x.astype(np.float64)), "none": x, "double": 2.0 * x}
    for mode, want in wants.items():
        out = poisoned(100)
        kwargs = {} if mode == "leaky_relu" else {"ACTIVATION": mode}  # the default first
        activation[4, 32](x, out, **kwargs)
        np.testing.assert_allclose(out, want, rtol=1e-6)
    # the arm that cannot compile is compiled only where it is chosen
    err = compile_error(activation, x, poisoned(100), ACTIVATION="bits")
    assert "'^' needs integer operands" in str(err)


def test_each_string_value_is_its_own_specialization(rng):
    x = rng.standard_normal(8).astype(np.float32)
    keys = set()
    for mode in ("leaky_relu", "none", "double"):
        values = activation.bind((x, x.copy()), {"ACTIVATION": mode})
        keys.add(activation.spec_key(values, activation.describe_args(values), (32, 1, 1)))
    assert len(keys) == 3


@simt.kernel
def body_constant(x, out):
    KIND: vg.constexpr = "square"
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = x[i] * x[i] if KIND == "square" else x[i]


@simt.kernel
def module_string(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = x[i] * 2 if MODE == "double" and MODE != 2 else x[i]


def test_body_constexprs_and_module_constants_may_be_strings(rng):
    x = rng.standard_normal(40).astype(np.float32)
    out = poisoned(40)
    body_constant[2, 32](x, out)
    np.testing.assert_allclose(out, x.astype(np.float64) ** 2, rtol=1e-6)
    out = poisoned(40)
    module_string[2, 32](x, out)
    np.testing.assert_array_equal(out, 2 * x)


def apply(v, kind):
    if kind == "negate":
        return -v
    return v


@vg.func
def apply_func(v, KIND: vg.constexpr):
    return v * 3 if KIND == "triple" else v


@simt.kernel
def helper_strings(x, out, OP: vg.constexpr):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = apply(x[i], "negate") + apply_func(x[i], OP) + apply(x[i], OP)


def test_strings_pass_on_to_helpers_as_literals_and_constexprs(rng):
    x = rng.standard_normal(40).astype(np.float32)
    for op, factor in (("triple", -1 + 3 + 1), ("other", -1 + 1 + 1)):
        out = poisoned(40)
        helper_strings[2, 32](x, out, OP=op)
        np.testing.assert_allclose(out, factor * x.astype(np.float64), rtol=1e-6)


@simt.kernel
def membership(x, out, A: vg.constexpr):
    i = simt.global_id(0)
    if i < x.shape[0]:
        v = x[i]
        if A in ("relu", "leaky", "gelu") and A not in GATED:
            v = v * 2
        if i % 4 in (1, 3):     # run-time values: i % 4 == 1 or i % 4 == 3
            v = v + 100
        if i not in (0, 2):
            v = v + 1000
        out[i] = v


def test_in_tests_a_tuple_as_python_does(rng):
    x = rng.standard_normal(64).astype(np.float32)
    i = np.arange(64)
    for mode, doubled in (("relu", True), ("leaky", True), ("gelu", False), ("tanh", False)):
        out = poisoned(64)
        membership[2, 32](x, out, A=mode)
        want = 2 * x if doubled else x.copy()  # float32 steps, as the kernel rounds
        want[np.isin(i % 4, (1, 3))] += np.float32(100)
        want[~np.isin(i, (0, 2))] += np.float32(1000)
        np.testing.assert_array_equal(out, want)


# ----------------------------------------------------------------------------- strings: tile


@tile.kernel
def tile_activation(x, out, B: vg.constexpr, ACTIVATION: vg.constexpr = "leaky_relu"):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    if ACTIVATION == "leaky_relu":
        t = tile.where(t > 0, t, 0.01 * t)
    elif ACTIVATION == "relu":
        t = tile.maximum(t, 0.0)
    tile.store(out, index=(i,), tile=t)


def test_a_tile_string_constexpr_selects_its_arm_while_compiling(rng):
    x = rng.standard_normal(128).astype(np.float32)
    x64 = x.astype(np.float64)
    for mode, want in (("leaky_relu", leaky(x64)), ("relu", np.maximum(x64, 0)), ("id", x64)):
        out = poisoned(128)
        tile_activation[4](x, out, B=32, ACTIVATION=mode)
        np.testing.assert_allclose(out, want, rtol=1e-6)


# ----------------------------------------------------------------------------- strings and races


@simt.kernel
def string_selects_race(x, out, MODE: vg.constexpr):
    i = simt.global_id(0)
    if i < x.shape[0]:
        if MODE == "gather":
            out[0] = x[i]      # every thread writes out[0]
        else:
            out[i] = x[i]


def test_the_checker_sees_the_arm_a_string_selects(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = poisoned(64)
    string_selects_race[2, 32](x, out, MODE="copy")
    np.testing.assert_array_equal(out, x)
    out = poisoned(64)
    with pytest.raises(vg.SafetyError, match=r"thread .* both write out\[") as info:
        string_selects_race[2, 32](x, out, MODE="gather")
    assert info.value.code == "VG202"
    assert np.isnan(out).all()


# ----------------------------------------------------------------------------- strings: errors


@simt.kernel
def orders_strings(out, A: vg.constexpr = "relu"):
    out[0] = 1.0 if A < "z" else 0.0  # MARK-order


@simt.kernel
def compares_at_run_time(x, out, A: vg.constexpr = "relu"):
    out[0] = 1.0 if x[0] == A else 0.0  # MARK-runtime


@simt.kernel
def adds_to_string(out, A: vg.constexpr = "relu"):
    out[0] = A + 1  # MARK-add


@simt.kernel
def stores_string(out, A: vg.constexpr = "relu"):
    v = A
    out[0] = v  # MARK-store


@simt.kernel
def string_condition(out, A: vg.constexpr = "relu"):
    if A:  # MARK-condition
        out[0] = 1.0 if A else 0.0


@simt.kernel
def string_condition_expression(out, A: vg.constexpr = "relu"):
    out[0] = 1.0 if A else 0.0  # MARK-ifexp


@simt.kernel
def string_operand_of_and(out, A: vg.constexpr = "relu"):
    out[0] = 1.0 if A and out[0] > 0 else 0.0  # MARK-and


@simt.kernel
def in_an_array(x, out):
    out[0] = 1.0 if 3 in x else 0.0  # MARK-in-array


@simt.kernel
def string_literal_elsewhere(out):
    out[0] = "relu"  # MARK-literal


@tile.kernel
def tile_compares_string(x, out, A: vg.constexpr = "relu"):
    t = tile.load(x, index=(0,), shape=(8,))
    tile.store(out, index=(0,), tile=tile.where(t == A, t, 0.0))  # MARK-tile


@tile.kernel
def string_as_shape(x, out, A: vg.constexpr = "relu"):
    tile.store(out, index=(0,), tile=tile.arange(A))  # MARK-shape


@pytest.mark.parametrize("kernel, args, marker, words", [
    (orders_strings, (np.zeros(1, np.float32),), "MARK-order", "only with == and !="),
    (compares_at_run_time, (np.zeros(1, np.float32),) * 2, "MARK-runtime",
     "compared with a value computed at run time"),
    (adds_to_string, (np.zeros(1, np.float32),), "MARK-add", "not a value a kernel can compute"),
    (stores_string, (np.zeros(1, np.float32),), "MARK-store", "not a value a kernel can compute"),
    (string_condition, (np.zeros(1, np.float32),), "MARK-condition", "condition is not a number"),
    (string_condition_expression, (np.zeros(1, np.float32),), "MARK-ifexp",
     "condition is not a number"),
    (string_operand_of_and, (np.zeros(1, np.float32),), "MARK-and", "condition is not a number"),
    (in_an_array, (np.zeros(1, np.float32),) * 2, "MARK-in-array", "`in` tests a tuple"),
    (string_literal_elsewhere, (np.zeros(1, np.float32),), "MARK-literal",
     "a string is not supported"),
    (tile_compares_string, (np.zeros(8, np.float32),) * 2, "MARK-tile",
     "compared with a value computed at run time"),
    (string_as_shape, (np.zeros(8, np.float32), np.zeros(8, np.int32)), "MARK-shape",
     "must be a constant int"),
])
def test_a_string_used_elsewhere_is_refused_at_its_line(kernel, args, marker, words):
    err = compile_error(kernel, *args)
    assert words in str(err), str(err)
    located.assert_points_at(err, marker, __file__)


# ----------------------------------------------------------------------------- derived constants


def summed_halves(x, N: vg.constexpr):
    return tile.load(x, index=(0,), shape=(N,)) + tile.load(x, index=(1,), shape=(N,))


def ramp(n):  # a plain parameter given a compile-time int sizes a tile too
    return tile.arange(n)


@tile.kernel
def tile_halves(x, out, idx, B: vg.constexpr):
    HALF = B // 2
    QUARTER: vg.constexpr = HALF // 2
    t = summed_halves(x, HALF) * 2 - tile.load(x, index=(0,), shape=(HALF,))
    tile.store(out, index=(0,), tile=t)
    tile.store(idx, index=(0,), tile=tile.arange(HALF) + ramp(QUARTER * 2) + ramp(HALF))


def test_tile_constants_derived_from_constexprs_are_compile_time(rng):
    x = rng.standard_normal(32).astype(np.float32)
    out, idx = poisoned(16), poisoned(16, np.int32)
    tile_halves[1](x, out, idx, B=32)
    x64 = x.astype(np.float64)
    # (a + b) * 2 - a in float32: two roundings of values near |a| + 2|b|, where the result
    # may cancel to far less (relative to it, 3e-6 seen)
    bound = 4 * np.finfo(np.float32).eps * (np.abs(x64[:16]) + 2 * np.abs(x64[16:]))
    assert np.all(np.abs(out - (x64[:16] + 2 * x64[16:])) <= bound), (out, x64)
    np.testing.assert_array_equal(idx, 3 * np.arange(16))


@simt.kernel
def simt_halves(x, out, B: vg.constexpr):
    HALF = B // 2
    acc = simt.local.array(HALF, vg.float32)
    staged = simt.shared.array((2, HALF), vg.float32)
    t = simt.thread_id(0)
    if t < HALF:
        staged[0, t] = x[t]
        staged[1, t] = x[t + HALF]
    simt.barrier()
    if t == 0:
        for k in range(HALF):
            acc[k] = staged[0, k] + staged[1, k]
        for k in range(HALF):
            out[k] = acc[k]


def test_simt_array_shapes_derived_from_constexprs_are_compile_time(rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = poisoned(16)
    simt_halves[1, 32](x, out, B=32)
    np.testing.assert_allclose(out, x[:16].astype(np.float64) + x[16:], rtol=1e-6)


def scaled_if(t, DOUBLE: vg.constexpr):
    return t * 2 if DOUBLE else t


@tile.kernel
def known_conditions(x, out, B: vg.constexpr):
    HALF = B // 2
    EVEN = HALF % 4 == 0                # a compile-time bool: HALF is a compile-time int
    WIDE = HALF > 8
    t = tile.load(x, index=(0,), shape=(HALF,))
    if EVEN:
        t = scaled_if(t, WIDE)
    else:
        t = t ^ 1                       # float ^ int: refused wherever this arm is compiled
    tile.store(out, index=(0,), tile=t + (1.0 if WIDE else 0.0))


def test_bools_derived_from_constexprs_decide_branches_and_pass_on(rng):
    x = rng.standard_normal(32).astype(np.float32)
    for b, factor, offset in ((32, 2, 1), (16, 1, 0)):  # HALF = 16 (wide) and 8 (narrow)
        out = poisoned(b // 2)
        known_conditions[1](x, out, B=b)
        np.testing.assert_array_equal(out, x[:b // 2] * np.float32(factor) + np.float32(offset))
    err = compile_error(known_conditions, x, poisoned(6), B=12)   # HALF = 6: the odd arm
    assert "'^' needs integer operands" in str(err)


@tile.kernel
def shape_from_argument(x, out, n):
    H = n // 2                          # n is a run-time argument
    tile.store(out, index=(0,), tile=tile.load(x, index=(0,), shape=(H,)))  # MARK-runtime-shape


@tile.kernel
def rebound_half(x, out, B: vg.constexpr):
    HALF = B // 2
    HALF = HALF + 1                     # bound twice: a variable
    tile.store(out, index=(0,), tile=summed_halves(x, HALF))  # MARK-rebound


@simt.kernel
def wrapping_constant(out, B: vg.constexpr):
    H = vg.int32(B) * 65536             # wraps int32 to 0 for B = 65536
    N: vg.constexpr = H  # MARK-wraps
    out[0] = N


@simt.kernel
def wrapping_step(out, B: vg.constexpr):
    H = (vg.int32(B) * 65536) // 65536  # 0 for B = 65536: the product wraps int32 first
    N: vg.constexpr = H  # MARK-step-wraps
    out[0] = N


@simt.kernel
def negative_shift(out, B: vg.constexpr):
    H = B // 2
    S = 1 << (H - 32800)                # a negative count: 0 in kernels, an error in Python
    N: vg.constexpr = S  # MARK-negative-shift
    out[0] = N


@pytest.mark.parametrize("kernel, args, marker, words", [
    (wrapping_step, (np.zeros(1, np.int64),), "MARK-step-wraps", "not known while compiling"),
    (negative_shift, (np.zeros(1, np.int64),), "MARK-negative-shift", "not known while compiling"),
    (shape_from_argument, (np.zeros(8, np.float32), np.zeros(4, np.float32), 8),
     "MARK-runtime-shape", "must be a constant int"),
    (rebound_half, (np.zeros(32, np.float32), np.zeros(17, np.float32)), "MARK-rebound",
     "not known while compiling"),
    (wrapping_constant, (np.zeros(1, np.int64),), "MARK-wraps", "not known while compiling"),
])
def test_values_not_known_while_compiling_stay_refused(kernel, args, marker, words):
    """Run-time values, names bound twice, and ints whose computation wraps (or shifts by a
    negative count: Python's value would not be the kernel's) are not compile-time ints."""
    kwargs = {} if kernel is shape_from_argument else \
        {"B": 65536 if kernel in (wrapping_constant, wrapping_step, negative_shift) else 32}
    err = compile_error(kernel, *args, **kwargs)
    assert words in str(err), str(err)
    located.assert_points_at(err, marker, __file__)


# ----------------------------------------------------------------------------- PTX


PTX_SPECS = {
    "activation": (activation, dict(x=ArrayType(F32, 1, "global"), out=ArrayType(F32, 1, "global"),
                                     ACTIVATION="leaky_relu")),
    "tile_activation": (tile_activation, dict(x=ArrayType(F32, 1, "global"),
                                              out=ArrayType(F32, 1, "global"), B=64,
                                              ACTIVATION="relu")),
    "tile_halves": (tile_halves, dict(x=ArrayType(F32, 1, "global"), out=ArrayType(F32, 1, "global"),
                                      idx=ArrayType(I32, 1, "global"), B=64)),
    "known_conditions": (known_conditions, dict(x=ArrayType(F32, 1, "global"),
                                                out=ArrayType(F32, 1, "global"), B=32)),
    "simt_halves": (simt_halves, dict(x=ArrayType(F32, 1, "global"),
                                      out=ArrayType(F32, 1, "global"), B=64)),
}


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("name", sorted(PTX_SPECS))
def test_compile_time_values_assemble(name):
    kernel, specs = PTX_SPECS[name]
    ptx = codegen.compile_to_ptx(kernel.specialize_types(specs), "sm_80").ptx
    assert codegen.assemble(ptx, "sm_80")[:4] == b"\x7fELF"


@tile.kernel
def doubled_unless_full(x, out, MODE: vg.constexpr = None):
    t = tile.load(x, index=(0,), shape=(8,))
    if MODE != "full":  # MODE left out: None, a compile-time value like any other
        t = t * 2.0
    tile.store(out, index=(0,), tile=t)


def test_a_constexpr_left_as_none_compares_with_a_string(rng):
    x = rng.standard_normal(8).astype(np.float32)
    out = np.full_like(x, np.nan)
    doubled_unless_full[1](x, out)
    np.testing.assert_array_equal(out, x * np.float32(2.0))
    doubled_unless_full[1](x, out, MODE="full")
    np.testing.assert_array_equal(out, x)
