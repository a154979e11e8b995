"""Frontend: typed IR from Python source, and the errors users get for what it refuses."""
import inspect
import math
import re

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import simt
from verdigris.ir import nodes as N
from verdigris.ir.printer import format_kernel

F32 = np.zeros(8, np.float32)
I32 = np.zeros(8, np.int32)


def typed_ir(kernel, *args, **kwargs) -> N.Kernel:
    """The frontend's IR for these arguments, before safety checks (some kernels here race)."""
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        kernel.specialize(*args, **kwargs)
    return info.value


def assert_points_at(err: vg.Error, marker: str):
    located.assert_points_at(err, marker, __file__)


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


def test_axpy_ir_is_typed_and_reads_writes_are_inferred():
    k = axpy.specialize(2.0, F32, F32, F32)
    assert k.writes == {"out"} and k.reads == {"x", "y"}
    assert k.param("alpha").dtype is vg.float64  # a Python float: weak, float32 where it meets x[i]
    assert k.locals["i"] is vg.int64
    text = format_kernel(k)
    assert "out[i] = ((float32(alpha) * x[i]) + y[i])" in text
    assert format_kernel(axpy.specialize(2.0, F32, F32, F32)) == text  # deterministic


def test_every_node_carries_the_user_location():
    k = axpy.specialize(2.0, F32, F32, F32)
    from verdigris.frontend import walk

    lines = {n.loc.line for n in walk(k.body)}
    assert all(n.loc.file == __file__ for n in walk(k.body))
    store = next(n for n in walk(k.body) if isinstance(n, N.Store))
    assert "out[i] = alpha" in open(__file__).read().splitlines()[store.loc.line - 1]
    assert len(lines) >= 3


@simt.kernel
def accumulate(x, out):
    acc = 0
    for i in range(x.shape[0]):
        acc += x[i]
    out[0] = acc


def test_variable_types_join_across_assignments():
    k = typed_ir(accumulate, np.zeros(4, np.float64), np.zeros(1, np.float64))
    assert k.locals["acc"] is vg.float64
    assert k.locals["i"] is vg.int64


@simt.kernel
def swap_kernel(out):
    a = 1.0
    b = 2.0
    a, b = b, a
    out[0] = a - b


def test_tuple_assignment_evaluates_the_right_side_first():
    text = format_kernel(typed_ir(swap_kernel, F32))
    assert re.search(r"tmp\.\d+ = b", text) and re.search(r"tmp\.\d+ = a", text)


@simt.kernel
def unrolled(out, N_: vg.constexpr):
    for i in range(N_):
        out[i] = i * 2


def test_each_constexpr_value_is_its_own_specialization():
    a = typed_ir(unrolled, I32, N_=3)
    b = typed_ir(unrolled, I32, N_=5)
    assert "range(0:i32, 3:i32" in format_kernel(a) and "range(0:i32, 5:i32" in format_kernel(b)
    with pytest.raises(vg.LaunchError, match="missing its constexpr argument 'N_'"):
        typed_ir(unrolled, I32)


@vg.func
def fact(n):
    return n * fact(n - 1)


@simt.kernel
def recursive(out):
    out[0] = fact(3)


def test_recursion_is_refused_at_the_call():
    err = compile_error(recursive, I32)
    assert "recursion" in str(err)
    assert_points_at(err, "return n * fact(n - 1)")


@vg.func
def first_positive(x, n):
    for i in range(n):
        if x[i] > 0:
            return i
    return -1


@simt.kernel
def uses_helper(x, out):
    out[0] = first_positive(x, x.shape[0])


def test_helpers_inline_as_regions_with_early_returns():
    k = typed_ir(uses_helper, F32, np.zeros(1, np.int64))
    text = format_kernel(k)
    assert "region first_positive.0.exit" in text and "exit first_positive.0.exit" in text


# ---------------------------------------------------------------- refused constructs


@simt.kernel
def uses_list_comp(out):
    vals = [i for i in range(4)]  # MARK-listcomp
    out[0] = vals[0]


@simt.kernel
def uses_try(out):
    try:  # MARK-try
        out[0] = 1.0
    except Exception:
        pass


class Holder:
    pass


@simt.kernel
def calls_python(out):
    out[0] = np.sum(out)  # MARK-python-call


GLOBAL_LIST = [1, 2, 3]


@simt.kernel
def reads_mutable_global(out):
    out[0] = GLOBAL_LIST[0]  # MARK-global


@simt.kernel
def wrong_rank(x, out):
    out[0] = x[0, 1]  # MARK-rank


@simt.kernel
def float_into_int(out):
    out[0] = 1.5 * out[1]  # MARK-narrowing


@simt.kernel
def negative_index(out):
    out[-1] = 1.0  # MARK-negative


@simt.kernel
def returns_value(out):
    return 1  # MARK-return


@simt.kernel
def undefined_name(out):
    out[0] = not_defined_anywhere  # noqa: F821  MARK-undefined


@simt.kernel
def bad_axis(out):
    out[0] = simt.thread_id(3)  # MARK-axis


@simt.kernel
def string_const(out):
    out[0] = "text"  # MARK-string


@simt.kernel
def prints(out):
    print("out =", out)  # MARK-print


@simt.kernel
def calls_numpy(out):
    out[0] = np.sin(out[0])  # MARK-numpy


@simt.kernel
def orders_dtypes(x, out):
    out[0] = 1.0 if x.dtype < vg.float64 else 2.0  # MARK-dtype-order


@pytest.mark.parametrize("kernel, args, marker, words", [
    (prints, (F32,), "MARK-print", "print() of the array 'out'"),
    (calls_numpy, (F32,), "MARK-numpy", "call vg.math.sin(...)"),
    (uses_list_comp, (F32,), "MARK-listcomp", "a list comprehension is not supported"),
    (uses_try, (F32,), "MARK-try", "try/except is not supported"),
    (calls_python, (F32,), "MARK-python-call", "cannot call"),
    (reads_mutable_global, (F32,), "MARK-global", "a list"),
    (wrong_rank, (F32, F32), "MARK-rank", "1 dimension but is indexed with 2"),
    (float_into_int, (I32,), "MARK-narrowing", "would drop the fraction"),
    (negative_index, (F32,), "MARK-negative", "never wraps negative indices"),
    (returns_value, (F32,), "MARK-return", "kernels return nothing"),
    (undefined_name, (F32,), "MARK-undefined", "not defined"),
    (bad_axis, (I32,), "MARK-axis", "constant axis"),
    (string_const, (F32,), "MARK-string", "a string is not supported"),
    (orders_dtypes, (F32, F32), "MARK-dtype-order", "compare two with == or !="),
])
def test_refused_constructs_point_at_the_line(kernel, args, marker, words):
    err = compile_error(kernel, *args)
    assert words in str(err)
    assert_points_at(err, marker)


def test_unsafe_blocks_are_recorded():
    @simt.kernel
    def with_unsafe(out):
        with vg.unsafe():
            out[0] = 1.0

    k = with_unsafe.specialize(F32)
    assert len(k.unsafe_regions) == 1
    assert "unsafe:" in format_kernel(k)


def test_kernels_cannot_be_called_directly():
    with pytest.raises(vg.LaunchError, match=r"axpy\[grid, block\]"):
        axpy(1.0, F32, F32, F32)


def test_wrong_argument_count_and_names():
    with pytest.raises(vg.LaunchError, match="takes 4 arguments"):
        axpy.specialize(1.0, F32, F32, F32, F32)
    with pytest.raises(vg.LaunchError, match="missing its argument 'out'"):
        axpy.specialize(1.0, F32, F32)
    with pytest.raises(vg.LaunchError, match="has no parameter 'z'"):
        axpy.specialize(1.0, F32, F32, F32, z=1)
    with pytest.raises(vg.LaunchError, match="argument 'alpha' is a list"):
        axpy.specialize([1.0], F32, F32, F32)


def test_a_launch_error_names_the_users_call_with_a_caret():
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(vg.LaunchError) as info:
        axpy[1, 32]("two", np.ones(4, np.float32), np.ones(4, np.float32), np.ones(4, np.float32))
    text = str(info.value)
    assert text.startswith(f"{__file__}:{line}:9: axpy: argument 'alpha' is a str")
    assert 'axpy[1, 32]("two"' in text.splitlines()[1] and text.splitlines()[2].strip() == "^"
    assert "hint: pass an array or a number" in text


@pytest.mark.parametrize("config, words", [
    ((-1, 32), "every grid dimension must be 0 or more"),
    ((1, (32, 0)), "every block dimension must be positive"),
    ((4, (64, 32)), "has 2048 threads, past the limit of 1024"),
    ((4, 2.5), "tuple of 1 to 3 ints"),
    ((1, 2, 3, 4), "grid and a block"),
    ((1, None), "grid and a block"),
])
def test_bad_launch_configurations(config, words):
    with pytest.raises(vg.LaunchError, match=re.escape(words)):
        axpy[config]


def test_a_grid_of_zero_blocks_runs_nothing_but_checks_its_arguments():
    """`k[vg.cdiv(n, 256), 256]` with n = 0 is a launch of nothing, as in Triton."""
    x, out = np.ones(0, np.float32), np.full(4, 7.0, np.float32)
    axpy[0, 32](2.0, x, x, out)
    axpy[(4, 0), 32](2.0, x, x, out)
    assert (out == 7.0).all()
    with pytest.raises(vg.LaunchError, match="argument 'alpha' is a str"):
        axpy[0, 32]("two", x, x, out)


@simt.kernel
def scale_by(x, out, S: vg.constexpr):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * S


def test_a_float_constexpr_after_an_equal_int_one_gets_its_own_code():
    x, out = np.array([2], np.int8), np.zeros(1, np.float32)
    scale_by[1, 32](x, out, S=100)  # int8 arithmetic: wraps to -56
    assert out[0] == -56.0
    scale_by[1, 32](x, out, S=100.0)  # an int times a float literal is float32
    assert out[0] == 200.0


def test_promotion_rules():
    from verdigris import types as T

    assert T.promote(vg.int32, vg.int64) is vg.int64
    assert T.promote(vg.int32, vg.uint32) is vg.int64
    assert T.promote(vg.float16, vg.bfloat16) is vg.float32
    assert T.promote(vg.int64, vg.float32) is vg.float32
    assert T.promote_weak(vg.int8, 3) is vg.int8
    assert T.promote_weak(vg.int32, 1.5) is vg.float32
    with pytest.raises(TypeError, match="cast one of them explicitly"):
        T.promote(vg.uint64, vg.int64)


@pytest.mark.parametrize("dtype", [np.complex64, object, "U3"])
def test_unsupported_array_dtypes_name_the_parameter(dtype):
    with pytest.raises(vg.LaunchError, match=r"axpy: argument 'x': arrays of dtype"):
        axpy.specialize(1.0, np.zeros(4, dtype), F32, F32)


# ---------------------------------------------------------------- definite assignment


@simt.kernel
def set_in_one_arm(x, out):
    i = simt.global_id(0)
    if x[i] > 0.0:
        v = x[i]
    out[i] = v  # MARK-one-arm


@simt.kernel
def set_in_both_arms(x, out):
    i = simt.global_id(0)
    if x[i] > 0.0:
        v = x[i]
    else:
        v = 0.0
    out[i] = v


@simt.kernel
def set_in_a_loop_that_may_not_run(x, out):
    for k in range(x.shape[0]):
        last = x[k]
    out[0] = last  # MARK-maybe-loop


@simt.kernel
def set_in_a_loop_that_runs(x, out, K: vg.constexpr):
    for k in range(K):
        last = x[k]
    out[0] = last + k


@simt.kernel
def set_before_a_break(x, out):
    for k in range(4):
        if x[k] > 0.0:
            break
        last = x[k]
    out[0] = last  # MARK-break


@simt.kernel
def read_before_set_in_the_body(x, out):
    for k in range(4):
        if k > 0:
            out[k] = prev  # noqa: F821  MARK-carried
        prev = x[k]


@simt.kernel
def set_in_a_while_body(x, out):
    k = 0
    while x[k] > 0.0:
        seen = x[k]
        k += 1
    out[0] = seen  # MARK-while


@vg.func
def sign_or_nothing(v):
    if v > 0.0:
        return 1.0
    elif v < 0.0:
        return -1.0


@simt.kernel
def uses_partial_helper(x, out):
    out[0] = sign_or_nothing(x[0])  # MARK-no-return


@simt.kernel
def after_an_early_exit(x, out):
    i = simt.global_id(0)
    if i >= out.shape[0]:
        return
    v = x[i]
    out[i] = v


@pytest.mark.parametrize("kernel, args, marker", [
    (set_in_one_arm, (F32, F32), "MARK-one-arm"),
    (set_in_a_loop_that_may_not_run, (F32, F32), "MARK-maybe-loop"),
    (set_before_a_break, (F32, F32), "MARK-break"),
    (read_before_set_in_the_body, (F32, F32), "MARK-carried"),
    (set_in_a_while_body, (F32, F32), "MARK-while"),
])
def test_a_variable_some_path_leaves_unassigned_is_refused_at_its_read(kernel, args, marker):
    err = compile_error(kernel, *args)
    assert "used before it is assigned" in str(err)  # the type-inference pass finds some first
    assert err.code == "VG303" and isinstance(err, vg.SafetyError)
    assert_points_at(err, marker)


def test_a_helper_that_can_end_without_returning_is_refused_at_the_call():
    err = compile_error(uses_partial_helper, F32, F32)
    assert "can end without returning a value" in str(err) and err.code == "VG303"
    assert_points_at(err, "MARK-no-return")


@pytest.mark.parametrize("kernel, args", [
    (set_in_both_arms, (F32, F32)), (set_in_a_loop_that_runs, (F32, F32), ), (after_an_early_exit, (F32, F32)),
    (uses_helper, (F32, np.zeros(1, np.int64))),
])
def test_variables_assigned_on_every_path_are_accepted(kernel, args):
    kwargs = {"K": 3} if kernel is set_in_a_loop_that_runs else {}
    assert typed_ir(kernel, *args, **kwargs).body


def test_and_or_give_an_operand_value_as_python_does(rng):
    from tests.sources import python_values as pv

    x = pv.and_or_inputs(rng)
    out = np.full((7, len(x) + 37), np.nan, np.float32)
    pv.and_or_values[2, 128](x, len(x), out)
    np.testing.assert_allclose(out, pv.and_or_reference(x, out.shape[1]), rtol=1e-6)


def test_and_or_of_conditions_stay_conditions():
    from tests.sources import python_values as pv

    x, out = np.zeros(4, np.float32), np.zeros((7, 4), np.float32)
    ir = pv.and_or_values.specialize(x, 4, out, block=(128,))
    from verdigris.frontend import walk

    logical = [n for n in walk(ir.body) if isinstance(n, N.Logical)]
    assert [n.op for n in logical] == ["or", "or"]  # `i < 2 or v > 1.0`, `not inside or ...`


def test_min_max_are_minnum_maxnum_in_kernels_and_on_the_host():
    from tests.sources import python_values as pv

    x, y = pv.min_max_inputs()
    out = np.zeros((4, len(x)), np.float32)
    pv.min_max[1, 32](x, y, out)
    np.testing.assert_array_equal(out, pv.min_max_reference(x, y))
    assert out[0, 0] == 1.0 and np.isnan(out[1, 2])  # a NaN loses; two NaNs give NaN


@simt.kernel
def scale_by_dtype(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        scale = 2.0 if x.dtype == vg.float64 else 3.0
        if out.dtype != x.dtype:
            scale = -scale
        out[i] = x[i] * scale


@pytest.mark.parametrize("x_dtype, out_dtype, scale", [
    (np.float64, np.float64, 2.0), (np.float32, np.float32, 3.0), (np.float32, np.float64, -3.0)])
def test_dtypes_compare_while_compiling(rng, x_dtype, out_dtype, scale):
    x = rng.standard_normal(100).astype(x_dtype)
    out = np.full(100, np.nan, out_dtype)
    scale_by_dtype[1, 128](x, out)
    np.testing.assert_allclose(out, x.astype(np.float64) * scale, rtol=1e-6)
    from verdigris.frontend import walk

    branches = [n for n in walk(typed_ir(scale_by_dtype, x, out).body)
                if isinstance(n, (N.If, N.Select))]
    assert len(branches) == 1  # `i < x.shape[0]`: the dtype tests were decided while compiling


@simt.kernel
def infinities(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        v = x[i]
        if v > 1.0:
            v = float("inf")
        elif v < -1.0:
            v = float(" -Infinity ")
        elif v < -0.5:
            v = float("NaN")
        elif v < 0.0:
            v = -math.inf
        out[i] = v


def test_float_of_a_string_is_a_constant_as_math_inf_is(rng):
    x = (2 * rng.standard_normal(200)).astype(np.float16)
    out = np.zeros(200, np.float16)
    infinities[2, 128](x, out)
    want = np.select([x > 1, x < -1, x < -0.5, x < 0], [np.inf, -np.inf, np.nan, -np.inf], x)
    np.testing.assert_array_equal(out, want)
    assert typed_ir(infinities, x, out).locals["v"] is vg.float16  # weak: no float32 widening


@simt.kernel
def float_of_a_word(out):
    out[0] = float("one")  # MARK-float-word


def test_float_of_a_string_that_is_no_number_is_refused_at_the_call():
    err = compile_error(float_of_a_word, F32)
    assert err.message == "float('one') is not a number" and 'float("inf")' in err.hint
    assert_points_at(err, "MARK-float-word")
