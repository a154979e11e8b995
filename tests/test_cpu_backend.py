"""The cpu backend's SIMT interpreter against NumPy and Python references: hand-built IR
kernels (which pin the interpreter down independently of the frontend), then a few source
kernels end to end. Inputs are fresh random draws (conftest's `rng`); outputs are poisoned
(NaN or a sentinel) before each run.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest

import verdigris as vg
from verdigris import ir, simt
from verdigris import types as T
from verdigris.cpu import Access, run_simt
from verdigris.errors import BoundsError, LaunchError, Loc

LOC = Loc(__file__, 1)
f16, bf16, f32, f64 = T.float16, T.bfloat16, T.float32, T.float64
i32, i64, b1 = T.int32, T.int64, T.bool_
INTS = (T.int8, T.int16, T.int32, T.int64, T.uint8, T.uint16, T.uint32, T.uint64)
SENTINEL = -7777


# ----------------------------------------------------------------------------- IR builders


def const(value, dtype):
    return ir.Const(LOC, value, dtype)


def var(name, dtype):
    return ir.Var(LOC, name, dtype)


def binary(op, a, b):
    return ir.Binary(LOC, op, a, b, a.dtype)


def compare(op, a, b):
    return ir.Compare(LOC, op, a, b, b1)


def cast(value, dtype):
    return ir.Cast(LOC, value, dtype)


def special(kind, axis=0):
    return ir.Special(LOC, kind, axis, i32)


def global_id(axis=0):
    """block_id * block_dim + thread_id, as int64."""
    ids = binary("add", binary("mul", special("block_id", axis), special("block_dim", axis)),
                 special("thread_id", axis))
    return cast(ids, i64)


def load(array, *indices):
    return ir.Load(LOC, array, tuple(indices), array.dtype)


def store(array, indices, value):
    return ir.Store(LOC, array, tuple(indices), value)


def shape(array, axis=0):
    return ir.Shape(LOC, array, axis, i64)


def assign(name, value):
    return ir.Assign(LOC, name, value)


def if_(cond, then, orelse=()):
    return ir.If(LOC, cond, list(then), list(orelse))


def array(name, dtype, ndim=1):
    return ir.ArrayRef(LOC, name, ir.ArrayType(dtype, ndim))


def kernel(name, params, body, local_vars=None):
    """`params`: ArrayRefs (array params) or (name, dtype) pairs (scalar params)."""
    ps = [ir.Param(p.name, "array", LOC, type=p.type) if isinstance(p, ir.ArrayRef)
          else ir.Param(p[0], "scalar", LOC, dtype=p[1]) for p in params]
    return ir.Kernel(name, "simt", ps, dict(local_vars or {}), [ir.Region(LOC, "kernel", body)],
                     LOC)


def elementwise(inputs, out_dtype, make_value):
    """out[i] = make_value(*[x[i] for x in inputs]) for i < out.shape[0]."""
    ins = [array(f"in{k}", dt) for k, dt in enumerate(inputs)]
    out = array("out", out_dtype)
    i = var("i", i64)
    body = [assign("i", global_id()),
            if_(compare("lt", i, shape(out)), [store(out, (i,), make_value(*(load(a, i) for a in ins)))])]
    return kernel("elementwise", [*ins, out], body, {"i": i64})


def run_elementwise(k, out, *inputs, block=128):
    args = {f"in{n}": x for n, x in enumerate(inputs)}
    run_simt(k, (-(-len(out) // block), 1, 1), (block, 1, 1), {**args, "out": out})
    return out


# ----------------------------------------------------------------------------- basic kernels


def axpy_kernel(guarded=True):
    x, y, out = array("x", f32), array("y", f32), array("out", f32)
    i = var("i", i64)
    write = store(out, (i,), binary("add", binary("mul", var("alpha", f32), load(x, i)), load(y, i)))
    body = [assign("i", global_id()),
            if_(compare("lt", i, shape(out)), [write]) if guarded else write]
    return kernel("axpy", [("alpha", f32), x, y, out], body, {"i": i64})


def test_axpy_guarded(rng):
    n = int(rng.integers(1000, 5000))
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    out = np.full(n, np.nan, np.float32)
    alpha = np.float32(rng.standard_normal())
    run_simt(axpy_kernel(), (-(-n // 256), 1, 1), (256, 1, 1),
             {"alpha": alpha, "x": x, "y": y, "out": out})
    ref = float(alpha) * x.astype(np.float64) + y
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_axpy_million_elements(rng):
    n = 1 << 20
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    out = np.full(n, np.nan, np.float32)
    k = axpy_kernel()
    args = {"alpha": np.float32(1.5), "x": x, "y": y, "out": out}
    run_simt(k, (n // 256, 1, 1), (256, 1, 1), args)
    np.testing.assert_allclose(out, 1.5 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_2d_on_strided_transposed_views_in_place(rng):
    rows, cols = int(rng.integers(20, 40)), int(rng.integers(20, 40))
    a, b, out = array("a", f64, 2), array("b", f64, 2), array("out", f64, 2)
    r, c = var("r", i64), var("c", i64)
    inside = ir.Logical(LOC, "and", compare("lt", r, shape(out, 0)), compare("lt", c, shape(out, 1)), b1)
    body = [assign("c", global_id(0)), assign("r", global_id(1)),
            if_(inside, [store(out, (r, c), binary("sub", binary("mul", load(a, r, c), const(2.0, f64)),
                                                    load(b, c, r)))])]
    k = kernel("two_d", [a, b, out], body, {"r": i64, "c": i64})
    a_np = rng.standard_normal((rows, 2 * cols))[:, ::2]  # strided
    b_np = rng.standard_normal((rows, cols)).T  # transposed
    base = np.full((2 * cols, rows + 3), np.nan)
    out_np = base[::2, 1:rows + 1].T  # a strided, transposed view of shape (rows, cols)
    run_simt(k, (-(-cols // 8), -(-rows // 4), 1), (8, 4, 1), {"a": a_np, "b": b_np, "out": out_np})
    np.testing.assert_array_equal(out_np, a_np * 2.0 - b_np.T)
    untouched = np.ones(base.shape, bool)
    untouched[::2, 1:rows + 1] = False
    assert np.isnan(base[untouched]).all()  # only the view's elements were written


def test_special_registers_3d():
    grid, block = (3, 2, 2), (4, 3, 2)
    out = array("out", i64, 6)
    regs = ["block_id", "thread_id", "block_dim", "grid_dim"]
    idx = [cast(special("block_id", ax), i64) for ax in (2, 1, 0)] + \
          [cast(special("thread_id", ax), i64) for ax in (2, 1, 0)]
    code = const(0, i64)
    for kind in regs:  # a decimal digit per (register, axis): all are < 10
        for axis in range(3):
            code = binary("add", binary("mul", code, const(10, i64)), cast(special(kind, axis), i64))
    k = kernel("specials", [out], [store(out, idx, code)])
    out_np = np.full((2, 2, 3, 2, 3, 4), SENTINEL, np.int64)
    run_simt(k, grid, block, {"out": out_np})
    bz, by, bx, tz, ty, tx = np.indices(out_np.shape)
    ref = np.zeros(out_np.shape, np.int64)
    for digit in (bx, by, bz, tx, ty, tz, *block, *grid):
        ref = ref * 10 + digit
    np.testing.assert_array_equal(out_np, ref)


# ----------------------------------------------------------------------------- control flow


def test_grid_stride_loop(rng):
    n = int(rng.integers(5000, 9000))
    x, out = array("x", f32), array("out", f32)
    i = var("i", i64)
    stride = cast(binary("mul", special("grid_dim"), special("block_dim")), i64)
    loop = ir.For(LOC, "i", global_id(), shape(out), stride,
                  [store(out, (i,), binary("mul", load(x, i), load(x, i)))])
    k = kernel("square", [x, out], [loop], {"i": i64})
    x_np = rng.standard_normal(n, np.float32)
    out_np = np.full(n, np.nan, np.float32)
    run_simt(k, (3, 1, 1), (64, 1, 1), {"x": x_np, "out": out_np})
    np.testing.assert_allclose(out_np, x_np.astype(np.float64) ** 2, rtol=1e-6)


def test_for_negative_step_with_break(rng):
    # acc = 0; for j in range(t, -1, -1): if x[j] < 0: break; acc += x[j]
    n = 300
    x, out = array("x", f64), array("out", f64)
    j, acc = var("j", i64), var("acc", f64)
    body = [assign("acc", const(0.0, f64)),
            ir.For(LOC, "j", global_id(), const(-1, i64), const(-1, i64), [
                if_(compare("lt", load(x, j), const(0.0, f64)), [ir.Break(LOC)]),
                assign("acc", binary("add", acc, load(x, j)))]),
            store(out, (global_id(),), acc)]
    k = kernel("backwards", [x, out], body, {"j": i64, "acc": f64})
    x_np = rng.standard_normal(n) + 1.5  # mostly positive: runs of varying length
    out_np = np.full(n, np.nan)
    run_simt(k, (3, 1, 1), (100, 1, 1), {"x": x_np, "out": out_np})
    ref = []
    for t in range(n):
        total = 0.0
        for jj in range(t, -1, -1):
            if x_np[jj] < 0:
                break
            total += x_np[jj]
        ref.append(total)
    np.testing.assert_allclose(out_np, ref, rtol=1e-12)


def test_while_with_continue(rng):
    # j = 0; s = 0; while j < x[t]: j += 1; if j % 3 == 0: continue; s += j * j
    n = 200
    x, out = array("x", i32), array("out", i32)
    j, s, t = var("j", i32), var("s", i32), var("t", i64)
    body = [assign("t", global_id()), assign("j", const(0, i32)), assign("s", const(0, i32)),
            ir.While(LOC, compare("lt", j, load(x, t)), [
                assign("j", binary("add", j, const(1, i32))),
                if_(compare("eq", binary("mod", j, const(3, i32)), const(0, i32)), [ir.Continue(LOC)]),
                assign("s", binary("add", s, binary("mul", j, j)))]),
            store(out, (t,), s)]
    k = kernel("while_continue", [x, out], body, {"j": i32, "s": i32, "t": i64})
    x_np = rng.integers(-3, 60, n).astype(np.int32)
    out_np = np.full(n, SENTINEL, np.int32)
    run_simt(k, (2, 1, 1), (100, 1, 1), {"x": x_np, "out": out_np})
    ref = [sum(v * v for v in range(1, max(m, 0) + 1) if v % 3) for m in x_np]
    np.testing.assert_array_equal(out_np, ref)


def test_early_return_and_inlined_region_exit(rng):
    # if x[i] < 0: out[i] = -1; return
    # region "f": r = 2; if x[i] > 1: r = 1; exit f; r = r + 10   (the inlined helper)
    # out[i] = sqrt(x[i]) + r
    n = 500
    x, out = array("x", f64), array("out", f64)
    i, r = var("i", i64), var("r", f64)
    body = [assign("i", global_id()),
            if_(compare("lt", load(x, i), const(0.0, f64)),
                [store(out, (i,), const(-1.0, f64)), ir.Exit(LOC, "kernel")]),
            ir.Region(LOC, "f", [assign("r", const(2.0, f64)),
                                 if_(compare("gt", load(x, i), const(1.0, f64)),
                                     [assign("r", const(1.0, f64)), ir.Exit(LOC, "f")]),
                                 assign("r", binary("add", r, const(10.0, f64)))]),
            store(out, (i,), binary("add", ir.MathCall(LOC, "sqrt", (load(x, i),), f64), r))]
    k = kernel("early_exit", [x, out], body, {"i": i64, "r": f64})
    x_np = rng.standard_normal(n) * 2
    out_np = np.full(n, np.nan)
    run_simt(k, (5, 1, 1), (100, 1, 1), {"x": x_np, "out": out_np})
    with np.errstate(invalid="ignore"):
        ref = np.where(x_np < 0, -1.0, np.sqrt(x_np) + np.where(x_np > 1, 1.0, 12.0))
    np.testing.assert_array_equal(out_np, ref)


def test_exit_from_inside_a_loop_leaves_the_loop():
    # for j in range(100): if j == t: out[t] = j; return   ; out[t] = -1
    out = array("out", i64)
    j, t = var("j", i64), var("t", i64)
    body = [assign("t", global_id()),
            ir.For(LOC, "j", const(0, i64), const(100, i64), const(1, i64), [
                if_(compare("eq", j, t), [store(out, (t,), j), ir.Exit(LOC, "kernel")])]),
            store(out, (t,), const(-1, i64))]
    k = kernel("exit_loop", [out], body, {"j": i64, "t": i64})
    out_np = np.full(128, SENTINEL, np.int64)
    run_simt(k, (1, 1, 1), (128, 1, 1), {"out": out_np})
    np.testing.assert_array_equal(out_np, np.where(np.arange(128) < 100, np.arange(128), -1))


@pytest.mark.parametrize("dtype, start, stop, step", [
    (T.int8, 100, 127, 50), (T.int8, -100, -128, -50), (T.uint8, 200, 255, 100), (T.int64, 2**62, 2**63 - 1, 2**62),
])
def test_for_ends_when_the_counter_would_wrap(dtype, start, stop, step):
    # count = 0; for j in range(start, stop, step): count += 1   (one iteration: the next j wraps)
    out = array("out", i32)
    count = var("count", i32)
    body = [assign("count", const(0, i32)),
            ir.For(LOC, "j", const(start, dtype), const(stop, dtype), const(step, dtype),
                   [assign("count", binary("add", count, const(1, i32)))]),
            store(out, (global_id(),), count)]
    out_np = np.full(4, SENTINEL, np.int32)
    run_simt(kernel("wrap", [out], body, {"count": i32, "j": dtype}), (1, 1, 1), (4, 1, 1), {"out": out_np})
    np.testing.assert_array_equal(out_np, len(range(start, stop, step)))


def test_lazy_select_and_logical_never_read_out_of_bounds(rng):
    # out[i] = x[i] if i < n else 0.5 ; flag[i] = i < n and x[i] > 0 (out is longer than x)
    n = int(rng.integers(100, 200))
    x, out, flag = array("x", f32), array("out", f32), array("flag", b1)
    i = var("i", i64)
    in_x = compare("lt", i, shape(x))
    body = [assign("i", global_id()),
            if_(compare("lt", i, shape(out)), [
                store(out, (i,), ir.Select(LOC, in_x, load(x, i), const(0.5, f32), f32)),
                store(flag, (i,), ir.Logical(LOC, "and", in_x, compare("gt", load(x, i), const(0.0, f32)), b1))])]
    k = kernel("lazy", [x, out, flag], body, {"i": i64})
    x_np = rng.standard_normal(n, np.float32)
    out_np = np.full(n + 77, np.nan, np.float32)
    flag_np = np.ones(n + 77, bool)
    run_simt(k, (3, 1, 1), (128, 1, 1), {"x": x_np, "out": out_np, "flag": flag_np})
    np.testing.assert_array_equal(out_np, np.concatenate([x_np, np.full(77, 0.5, np.float32)]))
    np.testing.assert_array_equal(flag_np, np.concatenate([x_np > 0, np.zeros(77, bool)]))


def test_logical_or_short_circuits(rng):
    # out[i] = 1 if (i >= n or x[i] < 0) else 0 ; i ranges past x
    n = 90
    x, out = array("x", f64), array("out", i32)
    i = var("i", i64)
    cond = ir.Logical(LOC, "or", compare("ge", i, shape(x)), compare("lt", load(x, i), const(0.0, f64)), b1)
    body = [assign("i", global_id()),
            store(out, (i,), ir.Select(LOC, cond, const(1, i32), const(0, i32), i32))]
    k = kernel("or_lazy", [x, out], body, {"i": i64})
    x_np = rng.standard_normal(n)
    out_np = np.full(128, SENTINEL, np.int32)
    run_simt(k, (1, 1, 1), (128, 1, 1), {"x": x_np, "out": out_np})
    np.testing.assert_array_equal(out_np, np.concatenate([x_np < 0, np.ones(128 - n, bool)]))


def local_array_kernel(local_len, read_at):
    # buf = local.array(8); for j in range(8): buf[j] = x[i] * j
    # out[i] = sum over j of buf[read_at(j)] * (j + 1)
    x, out = array("x", f32), array("out", f32)
    buf = ir.ArrayRef(LOC, "buf", ir.ArrayType(f32, 1, "local", shape=(local_len,)))
    i, j, acc = var("i", i64), var("j", i64), var("acc", f32)
    body = [assign("i", global_id()), ir.LocalAlloc(LOC, buf),
            ir.For(LOC, "j", const(0, i64), const(8, i64), const(1, i64),
                   [store(buf, (j,), binary("mul", load(x, i), cast(j, f32)))]),
            assign("acc", const(0.0, f32)),
            ir.For(LOC, "j", const(0, i64), const(8, i64), const(1, i64),
                   [assign("acc", binary("add", acc, binary("mul", load(buf, read_at(j)),
                                                            cast(binary("add", j, const(1, i64)), f32))))]),
            store(out, (i,), acc)]
    return kernel("local_array", [x, out], body, {"i": i64, "j": i64, "acc": f32})


def test_local_array_per_lane(rng):
    n = 256
    reverse = local_array_kernel(8, lambda j: binary("sub", const(7, i64), j))
    x_np = rng.standard_normal(n, np.float32)
    out_np = np.full(n, np.nan, np.float32)
    run_simt(reverse, (2, 1, 1), (128, 1, 1), {"x": x_np, "out": out_np})
    weights = sum((7 - j) * (j + 1) for j in range(8))
    np.testing.assert_allclose(out_np, x_np.astype(np.float64) * weights, rtol=1e-6)


def test_local_array_out_of_bounds():
    k = local_array_kernel(6, lambda j: j)  # the first loop writes buf[6]
    out_np = np.full(64, np.nan, np.float32)
    with pytest.raises(BoundsError) as info:
        run_simt(k, (1, 1, 1), (64, 1, 1), {"x": np.ones(64, np.float32), "out": out_np})
    assert "buf[6] with shape (6,)" in info.value.message
    assert "block (0, 0, 0) thread (0, 0, 0)" in info.value.message


def test_several_lanes_storing_one_element_unsafe_last_lane_wins():
    out = array("out", i64)
    k = kernel("collide", [out], [ir.Unsafe(LOC, [store(out, (const(0, i64),), global_id())])])
    out_np = np.full(1, SENTINEL, np.int64)
    blocks = 600  # several chunks of lanes
    run_simt(k, (blocks, 1, 1), (256, 1, 1), {"out": out_np})
    assert out_np[0] == blocks * 256 - 1


# ----------------------------------------------------------------------------- bounds


def test_out_of_bounds_write_leaves_memory_untouched(rng):
    n = 1000
    x, y = rng.standard_normal(1024, np.float32), rng.standard_normal(1024, np.float32)
    out = np.full(n, np.nan, np.float32)
    with pytest.raises(BoundsError) as info:
        run_simt(axpy_kernel(guarded=False), (4, 1, 1), (256, 1, 1),
                 {"alpha": np.float32(2), "x": x, "y": y, "out": out})
    err = info.value
    assert err.message == ("out of bounds: out[1000] with shape (1000,) in kernel axpy, "
                           "block (3, 0, 0) thread (232, 0, 0)")
    assert err.loc == LOC
    assert np.isnan(out).all()


def test_out_of_bounds_negative_and_2d():
    a = array("a", f32, 2)
    t, b = var("t", i64), var("b", i64)
    body = [assign("t", cast(special("thread_id"), i64)), assign("b", cast(special("block_id", 1), i64)),
            store(a, (binary("sub", b, const(1, i64)), t), const(1.0, f32))]
    k = kernel("neg", [a], body, {"t": i64, "b": i64})
    a_np = np.full((4, 8), np.nan, np.float32)
    with pytest.raises(BoundsError) as info:
        run_simt(k, (1, 2, 1), (8, 1, 1), {"a": a_np})
    assert info.value.message == ("out of bounds: a[-1, 0] with shape (4, 8) in kernel neg, "
                                  "block (0, 0, 0) thread (0, 0, 0)")
    assert "negative" in info.value.hint
    assert np.isnan(a_np).all()


def test_bounds_error_names_the_first_offending_lane():
    x, out = array("x", f32), array("out", f32)
    i = var("i", i64)
    k = kernel("gather", [x, out], [assign("i", global_id()),
                                    store(out, (i,), load(x, binary("mul", i, const(3, i64))))], {"i": i64})
    with pytest.raises(BoundsError) as info:
        run_simt(k, (4, 1, 1), (32, 1, 1), {"x": np.ones(200, np.float32),
                                             "out": np.zeros(128, np.float32)})
    # lane 67 (block 2, thread 3) is the first with 3 * i >= 200
    assert "x[201] with shape (200,) in kernel gather, block (2, 0, 0) thread (3, 0, 0)" in info.value.message


# ----------------------------------------------------------------------------- integer semantics


def wrap(value: int, dtype) -> int:
    value &= (1 << dtype.bits) - 1
    return value - (1 << dtype.bits) if dtype.is_signed and value >> (dtype.bits - 1) else value


def ref_shift(op, a, b, dtype):
    if b < 0 or b >= dtype.bits:
        return 0 if op == "lshift" or not dtype.is_signed else (-1 if a < 0 else 0)
    return a << b if op == "lshift" else a >> b


INT_REFERENCE = {
    "add": lambda a, b, d: a + b,
    "sub": lambda a, b, d: a - b,
    "mul": lambda a, b, d: a * b,
    "floordiv": lambda a, b, d: 0 if b == 0 else a // b,
    "mod": lambda a, b, d: 0 if b == 0 else a % b,
    "and": lambda a, b, d: a & b,
    "or": lambda a, b, d: a | b,
    "xor": lambda a, b, d: a ^ b,
    "lshift": lambda a, b, d: ref_shift("lshift", a, b, d),
    "rshift": lambda a, b, d: ref_shift("rshift", a, b, d),
}


def int_operands(rng, dtype, n, small=False):
    info = np.iinfo(dtype.np)
    edges = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype.np)
    if dtype.is_signed:
        edges = np.concatenate([edges, np.array([-1, -2], dtype.np)])
    if small:  # divisors and shift amounts near the interesting range
        low = max(int(info.min), -dtype.bits - 3)
        draws = rng.integers(low, dtype.bits + 4, n, endpoint=True).astype(dtype.np)
    else:
        draws = rng.integers(info.min, info.max, n, dtype=dtype.np, endpoint=True)
    return np.concatenate([edges, draws])[:n]


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(INT_REFERENCE))
def test_integer_binary_ops_match_python(rng, dtype, op):
    n = 400
    a = int_operands(rng, dtype, n)
    b = np.where(rng.random(n) < 0.5, int_operands(rng, dtype, n, small=True), int_operands(rng, dtype, n))
    b = b.astype(dtype.np)
    b[:8] = 0  # division by zero among the edge values
    k = elementwise([dtype, dtype], dtype, lambda x, y: binary(op, x, y))
    out = run_elementwise(k, np.full(n, 7, dtype.np), a, b)
    ref = [wrap(INT_REFERENCE[op](int(x), int(y), dtype), dtype) for x, y in zip(a, b)]
    assert [int(v) for v in out] == ref


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_integer_unary_and_math(rng, dtype):
    n = 300
    a, b = int_operands(rng, dtype, n), int_operands(rng, dtype, n)[::-1].copy()
    cases = {
        "neg": (lambda x, y: ir.Unary(LOC, "neg", x, dtype), lambda x, y: -x),
        "invert": (lambda x, y: ir.Unary(LOC, "invert", x, dtype), lambda x, y: ~x),
        "abs": (lambda x, y: ir.MathCall(LOC, "abs", (x,), dtype), lambda x, y: abs(x)),
        "min": (lambda x, y: ir.MathCall(LOC, "min", (x, y), dtype), min),
        "max": (lambda x, y: ir.MathCall(LOC, "max", (x, y), dtype), max),
    }
    for name, (build, reference) in cases.items():
        out = run_elementwise(elementwise([dtype, dtype], dtype, build), np.full(n, 3, dtype.np), a, b)
        ref = [wrap(reference(int(x), int(y)), dtype) for x, y in zip(a, b)]
        assert [int(v) for v in out] == ref, name


def test_integer_comparisons_and_bool_ops(rng):
    n = 300
    a, b = int_operands(rng, T.int16, n), int_operands(rng, T.int16, n, small=True)
    for op, reference in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                          ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)):
        out = run_elementwise(elementwise([T.int16, T.int16], b1, lambda x, y: compare(op, x, y)),
                              ~reference(a, b), a, b)
        np.testing.assert_array_equal(out, reference(a, b), err_msg=op)
    p, q = rng.random(n) < 0.5, rng.random(n) < 0.5
    for op, reference in (("and", np.logical_and), ("or", np.logical_or), ("xor", np.logical_xor)):
        out = run_elementwise(elementwise([b1, b1], b1, lambda x, y: binary(op, x, y)),
                              ~reference(p, q), p, q)
        np.testing.assert_array_equal(out, reference(p, q), err_msg=op)
    out = run_elementwise(elementwise([b1], b1, lambda x: ir.Unary(LOC, "not", x, b1)), p.copy(), p)
    np.testing.assert_array_equal(out, ~p)


def ref_float_to_int(x: float, dtype) -> int:
    if math.isnan(x):
        return 0
    info = np.iinfo(dtype.np)
    if math.isinf(x):
        return int(info.max) if x > 0 else int(info.min)
    return min(max(math.trunc(x), int(info.min)), int(info.max))


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
@pytest.mark.parametrize("source", (f16, f32, f64), ids=lambda d: d.name)
def test_float_to_int_casts_saturate(rng, dtype, source):
    info = np.iinfo(dtype.np)
    specials = [np.nan, np.inf, -np.inf, -0.5, 0.99, -1.0, float(info.max), float(info.min),
                float(info.max) * 1.5 + 7, float(info.min) * 1.5 - 7, 2.0 ** dtype.bits, -1e30, 1e30]
    draws = rng.standard_normal(300) * 10.0 ** rng.integers(0, 21, 300)
    with np.errstate(over="ignore"):  # float16 overflows to inf, which is a case here
        x = np.array(specials + list(draws)).astype(source.np)
    out = run_elementwise(elementwise([source], dtype, lambda v: cast(v, dtype)), np.full(len(x), 5, dtype.np), x)
    ref = [ref_float_to_int(float(v), dtype) for v in x]
    assert [int(v) for v in out] == ref


def test_int_and_bool_casts(rng):
    for src in INTS:
        a = int_operands(rng, src, 200)
        for dst in INTS:
            out = run_elementwise(elementwise([src], dst, lambda v: cast(v, dst)), np.full(200, 9, dst.np), a)
            assert [int(v) for v in out] == [wrap(int(v), dst) for v in a], (src, dst)
        out = run_elementwise(elementwise([src], b1, lambda v: cast(v, b1)), np.zeros(200, bool), a)
        np.testing.assert_array_equal(out, a != 0)
        out = run_elementwise(elementwise([src], f64, lambda v: cast(v, f64)), np.full(200, np.nan), a)
        np.testing.assert_array_equal(out, [float(int(v)) for v in a])
    p = rng.random(100) < 0.5
    out = run_elementwise(elementwise([b1], f32, lambda v: cast(v, f32)), np.full(100, np.nan, np.float32), p)
    np.testing.assert_array_equal(out, p.astype(np.float32))
    x = np.array([0.0, -0.0, np.nan, 1e-300, -3.0])
    out = run_elementwise(elementwise([f64], b1, lambda v: cast(v, b1)), np.array([True, True, False, False, False]), x)
    np.testing.assert_array_equal(out, [False, False, True, True, True])


def test_float_arithmetic_ieee(rng):
    n = 500
    a, b = rng.standard_normal(n) * 100, rng.standard_normal(n) * 3
    b[:6] = [0.0, -0.0, np.inf, np.nan, 0.0, -np.inf]
    a[:6] = [1.0, 1.0, 5.0, 1.0, 0.0, 2.0]
    for op, reference in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                          ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                          ("mod", np.remainder), ("pow", np.power)):
        x, y = (np.abs(a), b) if op == "pow" else (a, b)
        out = run_elementwise(elementwise([f64, f64], f64, lambda p, q: binary(op, p, q)), np.full(n, 123.0), x, y)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(out, reference(x, y), err_msg=op)
    for op in ("lt", "le", "gt", "ge", "eq", "ne"):  # NaN compares false except ne
        out = run_elementwise(elementwise([f64, f64], b1, lambda p, q: compare(op, p, q)),
                              np.zeros(2, bool), np.array([np.nan, 1.0]), np.array([1.0, np.nan]))
        assert list(out) == [op == "ne"] * 2, op


# ----------------------------------------------------------------------------- math


UNIT = (-0.99, 0.99)
MATH_DOMAINS = {
    "exp": (-10, 10), "exp2": (-10, 10), "expm1": (-5, 5), "log": (0.01, 100),
    "log2": (0.01, 100), "log10": (0.01, 100), "log1p": (-0.9, 10), "sqrt": (0, 100),
    "rsqrt": (0.01, 100), "cbrt": (-100, 100), "sin": (-3, 3), "cos": (-3, 3),
    "tan": (-1.4, 1.4), "asin": UNIT, "acos": UNIT, "atan": (-10, 10), "sinh": (-5, 5),
    "cosh": (-5, 5), "tanh": (-5, 5), "asinh": (-10, 10), "acosh": (1.01, 10),
    "atanh": UNIT, "erf": (-6, 6), "erfc": (-3, 9), "floor": (-10, 10), "ceil": (-10, 10),
    "trunc": (-10, 10), "round": (-10, 10), "abs": (-10, 10), "isnan": (-10, 10),
    "isinf": (-10, 10), "isfinite": (-10, 10), "pow": (0.1, 5), "atan2": (-5, 5),
    "min": (-5, 5), "max": (-5, 5), "copysign": (-5, 5), "fmod": (-20, 20), "hypot": (-5, 5),
    "fma": (-5, 5),
}
def exact_fma(a: float, b: float, c: float) -> float:
    return float(Fraction(a) * Fraction(b) + Fraction(c))  # one rounding, to nearest even


vectorized_erf, vectorized_erfc = np.vectorize(math.erf), np.vectorize(math.erfc)
MATH_REFERENCE = {  # float64 references; the rest are NumPy's float64 functions
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "erf": vectorized_erf, "erfc": vectorized_erfc,
    "round": np.rint, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "atan2": np.arctan2,
    "pow": np.power, "min": np.fmin, "max": np.fmax, "fma": np.vectorize(exact_fma),
}
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-15}


def math_inputs(rng, name, n):
    low, high = MATH_DOMAINS[name]
    args = [rng.uniform(low, high, n) for _ in range(ir.MATH_FUNCS[name])]
    if name in ("floor", "ceil", "trunc", "round"):
        args[0][:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.0, 3.0]  # ties: half to even
    if name in ("isnan", "isinf", "isfinite", "min", "max", "abs"):
        args[0][:4] = [np.nan, np.inf, -np.inf, -0.0]
    return args


@pytest.mark.parametrize("dtype", (f32, f64), ids=lambda d: d.name)
@pytest.mark.parametrize("name", [f for f in ir.MATH_FUNCS if f not in ir.BIT_FUNCS])
def test_math_matches_numpy_float64(rng, name, dtype):
    n = 400
    args = [a.astype(dtype.np) for a in math_inputs(rng, name, n)]
    predicate = name in ir.MATH_PREDICATES
    out_dtype = b1 if predicate else dtype
    k = elementwise([dtype] * len(args), out_dtype, lambda *xs: ir.MathCall(LOC, name, xs, out_dtype))
    reference = MATH_REFERENCE.get(name, getattr(np, name, None))
    with np.errstate(all="ignore"):
        ref = reference(*(a.astype(np.float64) for a in args))
    out = run_elementwise(k, ~ref if predicate else np.full(n, np.nan, dtype.np), *args)
    if predicate:
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=TOLERANCE[dtype.name], atol=1e-300, equal_nan=True)


def test_erf_is_accurate_across_its_ranges(rng):
    x = np.concatenate([rng.uniform(-0.5, 0.5, 2000), rng.uniform(-4.5, 4.5, 2000),
                        rng.uniform(-30, 30, 2000), [0.0, -0.0, 0.46875, 4.0, 26.6, np.inf, -np.inf]])
    for name, reference in (("erf", vectorized_erf), ("erfc", vectorized_erfc)):
        out = run_elementwise(elementwise([f64], f64, lambda v: ir.MathCall(LOC, name, (v,), f64)),
                              np.full(len(x), np.nan), x)
        np.testing.assert_allclose(out, reference(x), rtol=2e-15, atol=1e-320, err_msg=name)
        assert np.isnan(run_elementwise(elementwise([f64], f64, lambda v: ir.MathCall(LOC, name, (v,), f64)),
                                        np.zeros(1), np.array([np.nan]))).all()


@pytest.mark.parametrize("dtype", (f32, f64), ids=lambda d: d.name)
def test_fma_rounds_once(rng, dtype):
    n = 2000
    a, b = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n) for _ in range(2))
    a, b = a.astype(dtype.np), b.astype(dtype.np)
    # c near -a*b: the cancellation exposes a second rounding of the product
    c = np.where(rng.random(n) < 0.7, -(a.astype(np.float64) * b), rng.standard_normal(n)).astype(dtype.np)
    k = elementwise([dtype] * 3, dtype, lambda p, q, r: ir.MathCall(LOC, "fma", (p, q, r), dtype))
    out = run_elementwise(k, np.full(n, np.nan, dtype.np), a, b, c)
    ref = [exact_fma(float(p), float(q), float(r)) for p, q, r in zip(a, b, c)]
    np.testing.assert_array_equal(out, np.array(ref).astype(dtype.np))


def test_min_max_ignore_nan():
    a, b = np.array([np.nan, 1.0, np.nan]), np.array([2.0, np.nan, np.nan])
    for name, expected in (("min", [2.0, 1.0, np.nan]), ("max", [2.0, 1.0, np.nan])):
        out = run_elementwise(elementwise([f64, f64], f64, lambda x, y: ir.MathCall(LOC, name, (x, y), f64)),
                              np.zeros(3), a, b)
        np.testing.assert_array_equal(out, expected)


@simt.kernel
def nan_rule_folded_and_run(x, out):
    i = simt.global_id(0)
    if i < 1:
        out[0] = max(float("nan"), 2.0)  # folded while compiling
        out[1] = min(3.0, float("nan"))
        out[2] = max(x[0], 2.0)  # x[0] is NaN: computed at run time
        out[3] = min(3.0, x[0])


def test_constant_folded_min_max_take_the_number_over_nan_as_the_run_time_does():
    out = np.zeros(4, np.float32)
    nan_rule_folded_and_run[1, 32](np.array([np.nan], np.float32), out)
    np.testing.assert_array_equal(out, [2.0, 3.0, 2.0, 3.0])


# ----------------------------------------------------------------------------- narrow floats


def bf16_bits_reference(x: float) -> int:
    """float -> bfloat16 bits via float32 bits, round to nearest even (x a float32 value)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x):
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)


def test_bfloat16_raw_bits_load_store_and_arithmetic(rng):
    n = 500
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    x[:4] = [np.nan, np.inf, -np.inf, 3.4e38]  # the last rounds up to inf
    to_bf16 = elementwise([f32], bf16, lambda v: cast(v, bf16))
    bits = run_elementwise(to_bf16, np.full(n, 0x7FA0, np.uint16), x)
    assert [int(v) for v in bits] == [bf16_bits_reference(float(v)) for v in x]

    a, b = bits, rng.permutation(bits)
    k = elementwise([bf16, bf16], f32, lambda p, q: cast(binary("mul", p, q), f32))
    out = run_elementwise(k, np.full(n, np.nan, np.float32), a, b)
    exact = bf16_value(a).astype(np.float64) * bf16_value(b)
    ref = bf16_value([bf16_bits_reference(float(v)) for v in exact.astype(np.float32)])
    np.testing.assert_array_equal(out, ref)

    scale = elementwise([bf16], bf16, lambda p: binary("mul", p, var("s", bf16)))
    scale.params.append(ir.Param("s", "scalar", LOC, dtype=bf16))
    out_bits = np.full(n, 0x7FA0, np.uint16)
    run_simt(scale, (4, 1, 1), (128, 1, 1), {"in0": a, "out": out_bits, "s": np.uint16(0x4040)})  # 3.0
    ref = [bf16_bits_reference(float(np.float32(v * 3.0))) for v in bf16_value(a).astype(np.float64)]
    assert [int(v) for v in out_bits] == ref


def test_bfloat16_math_and_f16_arithmetic(rng):
    x = rng.uniform(-3, 3, 300).astype(np.float32)
    bits = np.array([bf16_bits_reference(float(v)) for v in x], np.uint16)
    k = elementwise([bf16], f32, lambda v: cast(ir.MathCall(LOC, "exp", (v,), bf16), f32))
    out = run_elementwise(k, np.full(300, np.nan, np.float32), bits)
    ref = bf16_value([bf16_bits_reference(float(v)) for v in np.exp(bf16_value(bits).astype(np.float64)).astype(np.float32)])
    np.testing.assert_allclose(out, ref, rtol=TOLERANCE["bfloat16"])
    h = [rng.standard_normal(300).astype(np.float16) for _ in range(3)]
    k = elementwise([f16] * 3, f16, lambda p, q, r: binary("add", binary("mul", p, q), r))
    out = run_elementwise(k, np.full(300, np.nan, np.float16), *h)
    ref = (h[0].astype(np.float64) * h[1]).astype(np.float16).astype(np.float64) + h[2]
    np.testing.assert_array_equal(out, ref.astype(np.float16))


def fp8_reference_values(exponent_bits, mantissa_bits, bias, has_inf):
    """All finite non-negative values of an fp8 format, by the definition of the format."""
    values = []
    for e in range(1 << exponent_bits):
        for m in range(1 << mantissa_bits):
            if e == (1 << exponent_bits) - 1 and (has_inf or m == (1 << mantissa_bits) - 1):
                continue
            values.append(m * 2.0 ** (1 - bias - mantissa_bits) if e == 0 else
                          (1 + m / 2 ** mantissa_bits) * 2.0 ** (e - bias))
    return values


def round_to(values, x):
    """Nearest of `values` (sorted, all >= 0) to |x|, ties to the even code; saturating."""
    magnitude = abs(x)
    best = min(range(len(values)), key=lambda k: (abs(values[k] - magnitude), k % 2))
    return math.copysign(values[best], x)


@pytest.mark.parametrize("fmt", [("float8_e4m3fn", 4, 3, 7, False), ("float8_e5m2", 5, 2, 15, True)],
                         ids=lambda f: f[0])
def test_fp8_raw_bits_round_trip(rng, fmt):
    name, *spec = fmt
    dtype = T.from_name(name)
    values = fp8_reference_values(*spec)
    x = (rng.standard_normal(300) * 10.0 ** rng.integers(-3, 4, 300)).astype(np.float32)
    x[:3] = [1e6, -1e6, 0.0]  # saturate at the largest finite value
    k = elementwise([f32], f32, lambda v: cast(cast(v, dtype), f32))
    out = run_elementwise(k, np.full(300, np.nan, np.float32), x)
    np.testing.assert_array_equal(out, [round_to(values, float(v)) for v in x])
    # load and store through raw bits: a copy keeps every code but the NaNs' spelling
    codes = np.arange(256, dtype=np.uint8)
    copy = elementwise([dtype], dtype, lambda v: v)
    out_codes = run_elementwise(copy, np.zeros(256, np.uint8), codes)
    decoded = run_elementwise(elementwise([dtype], f64, lambda v: cast(v, f64)), np.zeros(256), codes)
    nan = np.isnan(decoded)
    np.testing.assert_array_equal(out_codes[~nan], codes[~nan])
    assert sorted(set(np.abs(decoded[~nan & np.isfinite(decoded)]))) == values


def test_narrow_floats_against_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = (rng.standard_normal(400) * 10.0 ** rng.integers(-3, 3, 400)).astype(np.float32)
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        dtype = T.from_name(name)
        out = run_elementwise(elementwise([f32], dtype, lambda v: cast(v, dtype)),
                              np.zeros(400, getattr(ml_dtypes, name)), x)
        ref = np.clip(x, -float(ml_dtypes.finfo(out.dtype).max), float(ml_dtypes.finfo(out.dtype).max)) \
            if name != "bfloat16" else x
        np.testing.assert_array_equal(out.astype(np.float32), ref.astype(out.dtype).astype(np.float32))
        strided = out[::3]  # ml_dtypes arrays load through views too
        back = run_elementwise(elementwise([dtype], f32, lambda v: cast(v, f32)),
                               np.full(len(strided), np.nan, np.float32), strided)
        np.testing.assert_array_equal(back, strided.astype(np.float32))


# ----------------------------------------------------------------------------- seam, arguments


def test_observer_sees_every_access():
    x, out = array("x", f32, 2), array("out", f32)
    i, v = var("i", i64), var("v", f32)
    body = [assign("i", global_id()),
            if_(compare("lt", i, const(40, i64)),
                [assign("v", load(x, const(1, i64), i)),
                 ir.Unsafe(LOC, [store(out, (binary("floordiv", i, const(2, i64)),), v)])])]
    k = kernel("observed", [x, out], body, {"i": i64, "v": f32})
    seen: list[Access] = []
    run_simt(k, (2, 1, 1), (32, 1, 1), {"x": np.ones((2, 50), np.float32), "out": np.zeros(20, np.float32)},
             observer=seen.append)
    read, write = seen
    assert not read.is_write and write.is_write and read.array == "x" and write.array == "out"
    assert not read.unsafe and write.unsafe and not write.atomic
    np.testing.assert_array_equal(read.flat, 50 + np.arange(40))
    np.testing.assert_array_equal(write.flat, np.arange(40) // 2)
    np.testing.assert_array_equal(write.block, np.arange(40) // 32)
    np.testing.assert_array_equal(write.thread, np.arange(40) % 32)


def test_arguments_are_checked():
    k = axpy_kernel()
    good = {"alpha": np.float32(1), "x": np.ones(8, np.float32), "y": np.ones(8, np.float32)}
    with pytest.raises(LaunchError, match="float64"):
        run_simt(k, (1, 1, 1), (8, 1, 1), {**good, "out": np.zeros(8)})
    with pytest.raises(LaunchError, match="'out'"):
        run_simt(k, (1, 1, 1), (8, 1, 1), good)


# ----------------------------------------------------------------------------- from source


@simt.kernel
def collatz_steps(x, out, limit):
    for k in range(simt.global_id(0), out.shape[0], simt.grid_dim(0) * simt.block_dim(0)):
        n = x[k]
        steps = 0
        while n != 1:
            if n % 2 == 0:
                n = n // 2
            else:
                n = 3 * n + 1
            steps += 1
            if steps >= limit:
                break
        out[k] = steps


@simt.kernel
def window(x, out):
    i = simt.global_id(0)
    if i >= out.shape[0]:
        return
    buf = simt.local.array(4, vg.float32)
    for j in range(4):
        buf[j] = x[i + j] if i + j < x.shape[0] else 0.5
    out[i] = buf[0] + buf[1] * 2.0 + math.erf(buf[3])


@simt.kernel
def unguarded_copy(x, out):
    i = simt.global_id(0)
    out[i] = x[i]  # the launch below has more threads than elements


def test_source_kernel_loops_and_break(rng):
    n = 3000
    x = rng.integers(1, 100_000, n)
    out = np.full(n, SENTINEL, np.int64)
    collatz_steps[5, 64](x, out, 200)

    def steps(v):
        count = 0
        while v != 1 and count < 200:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            count += 1
        return count
    np.testing.assert_array_equal(out, [steps(int(v)) for v in x])


def test_source_kernel_local_array_lazy_select_and_return(rng):
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    window[vg.cdiv(n, 128), 128](x, out)
    padded = np.concatenate([x, np.full(3, 0.5, np.float32)]).astype(np.float64)
    ref = padded[:n] + 2 * padded[1:n + 1] + vectorized_erf(padded[3:n + 3])
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_source_kernel_bounds_error_points_at_the_line(rng):
    out = np.full(1000, np.nan, np.float32)
    with pytest.raises(vg.BoundsError) as info:
        unguarded_copy[8, 128](rng.standard_normal(1024).astype(np.float32), out)
    text = str(info.value)
    assert "out of bounds: out[1000] with shape (1000,) in kernel unguarded_copy, " \
           "block (7, 0, 0) thread (104, 0, 0)" in text
    assert "out[i] = x[i]" in text and info.value.loc.line == unguarded_copy.fn.__code__.co_firstlineno + 3
    assert np.isnan(out).all()


# ----------------------------------------------------------------------------- atomics

u32, u64 = T.uint32, T.uint64
ATOMIC_CASES = [(op, dtype) for op in ir.ATOMIC_OPS for dtype in (i32, i64, u32, u64, f32, f64)
                if not (dtype.is_float and op in ("and", "or", "xor"))] + [("add", f16), ("add", bf16)]


def atomic_kernel(op, dtype, columns=None):
    """old = atomic_<op>(target, idx[i], val[i] [cmp[i]]); olds[i] = old, for i < n.
    With `columns`, target is 2-d and idx[i] its row-major element number."""
    target, olds = array("target", dtype, 1 if columns is None else 2), array("olds", dtype)
    idx, val, cmp = array("idx", i64), array("val", dtype), array("cmp", dtype)
    i, old = var("i", i64), var("old", dtype)
    at = load(idx, i)
    where = (at,) if columns is None else (binary("floordiv", at, const(columns, i64)),
                                          binary("mod", at, const(columns, i64)))
    rmw = ir.Atomic(LOC, op, target, where, load(val, i), load(cmp, i) if op == "cas" else None,
                    dtype)
    body = [assign("i", global_id()),
            if_(compare("lt", i, shape(olds)), [assign("old", rmw), store(olds, (i,), old)])]
    return kernel(f"atomic_{op}", [target, olds, idx, val, cmp], body, {"i": i64, "old": dtype})


def bits_of(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def float_step(op, dtype):
    """The float reference of one atomic, on Python floats, rounded to `dtype`."""
    def fmax(a, b):
        return b if math.isnan(a) else a if math.isnan(b) else max(a, b)

    def fmin(a, b):
        return b if math.isnan(a) else a if math.isnan(b) else min(a, b)
    exact = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "max": fmax, "min": fmin}[op]
    if dtype is bf16:  # IR: compute in float32, round to bfloat16
        return lambda a, b: float(bf16_value(bf16_bits_reference(
            float(np.float32(a) + np.float32(b)))))
    return lambda a, b: float(dtype.np.type(exact(a, b)))


def atomic_reference(op, dtype, target, idx, val, cmp):
    """The lanes' atomics one after another in lane order, in Python."""
    target = list(target)
    olds = []
    for k, e in enumerate(idx):
        old = target[e]
        olds.append(old)
        if op == "exch":
            target[e] = val[k]
        elif op == "cas":  # compares bit patterns, as the hardware does
            same = bits_of(np.array(old, dtype.np)) == bits_of(np.array(cmp[k], dtype.np))
            target[e] = val[k] if same else old
        elif dtype.is_float:
            target[e] = float_step(op, dtype)(old, val[k])
        else:
            target[e] = wrap({"add": old + val[k], "sub": old - val[k], "max": max(old, val[k]),
                              "min": min(old, val[k]), "and": old & val[k], "or": old | val[k],
                              "xor": old ^ val[k]}[op], dtype)
    return target, olds


def atomic_operands(rng, op, dtype, size):
    """Random elements in the array's memory form (raw bits for bfloat16)."""
    if op == "cas":  # few distinct values, so that compares match; signed zeros and NaN
        pool = np.array([3, 1, 2, 0] if not dtype.is_float else [1.5, -0.0, 0.0, np.nan])
        values = rng.choice(pool, size)
    elif dtype.is_float:
        values = rng.standard_normal(size) * 10.0 ** rng.integers(-2, 3, size)
        if op in ("max", "min"):
            values[rng.random(size) < 0.15] = np.nan
    else:
        info = np.iinfo(dtype.np)
        return rng.integers(info.min, info.max, size, dtype=dtype.np, endpoint=True)
    if dtype is bf16:
        return np.array([bf16_bits_reference(float(np.float32(v))) for v in values], np.uint16)
    return values.astype(dtype.np)


def as_floats(x, dtype):
    return list(map(float, bf16_value(x) if dtype is bf16 else x)) if dtype.is_float \
        else list(map(int, x))


@pytest.mark.parametrize("op, dtype", ATOMIC_CASES, ids=lambda c: getattr(c, "name", c))
def test_atomics_match_lanes_in_order(rng, op, dtype):
    n, elements = int(rng.integers(200, 400)), 7  # many lanes per element; 3-4 blocks
    target = atomic_operands(rng, op, dtype, elements)
    val, cmp = atomic_operands(rng, op, dtype, n), atomic_operands(rng, op, dtype, n)
    idx = rng.integers(0, elements, n)
    olds = np.full(n, 0xBB if dtype.bits == 16 else 77, target.dtype)
    ref_target, ref_olds = atomic_reference(op, dtype, *(as_floats(a, dtype) if a is not idx
                                                         else a for a in (target, idx, val, cmp)))
    run_simt(atomic_kernel(op, dtype), (vg.cdiv(n, 128), 1, 1), (128, 1, 1),
             {"target": target, "olds": olds, "idx": idx, "val": val, "cmp": cmp})
    for got, want in ((target, ref_target), (olds, ref_olds)):
        want = np.array(want, np.float32 if dtype is bf16 else dtype.np)
        got = bf16_value(got) if dtype is bf16 else got
        if op in ("exch", "cas"):  # values are only moved: bit for bit
            np.testing.assert_array_equal(bits_of(got), bits_of(want))
        else:
            np.testing.assert_array_equal(got, want)


def test_atomic_on_a_2d_array_across_chunks(rng):
    rows, columns = 3, 5
    n = 3 * (1 << 16) + int(rng.integers(1, 1000))  # several chunks of lanes
    target = rng.integers(-1000, 1000, (rows, columns)).astype(np.int64)
    idx = rng.integers(0, rows * columns, n)
    val = rng.integers(-1 << 40, 1 << 40, n)
    olds = np.full(n, SENTINEL, np.int64)
    start = target.copy()
    expected = start.copy()
    np.add.at(expected.reshape(-1), idx, val)
    run_simt(atomic_kernel("add", i64, columns), (vg.cdiv(n, 256), 1, 1), (256, 1, 1),
             {"target": target, "olds": olds, "idx": idx, "val": val, "cmp": val})
    np.testing.assert_array_equal(target, expected)
    # lane order: each lane's old value is the start plus the earlier lanes' values there
    for e in rng.integers(0, rows * columns, 3):
        lanes = np.flatnonzero(idx == e)
        np.testing.assert_array_equal(olds[lanes], start.reshape(-1)[e] + np.concatenate(
            ([0], np.cumsum(val[lanes])[:-1])))


def test_atomic_bounds_are_checked_before_memory(rng):
    n = 300
    target = rng.integers(0, 100, 7).astype(np.int32)
    start = target.copy()
    idx = rng.integers(0, 7, n)
    idx[201] = 7
    with pytest.raises(BoundsError) as info:
        run_simt(atomic_kernel("add", i32), (3, 1, 1), (128, 1, 1),
                 {"target": target, "olds": np.zeros(n, np.int32), "idx": idx,
                  "val": np.ones(n, np.int32), "cmp": np.ones(n, np.int32)})
    assert "target[7] with shape (7,) in kernel atomic_add, block (1, 0, 0) thread (73, 0, 0)" \
        in info.value.message
    np.testing.assert_array_equal(target, start)


def test_atomic_without_a_meaning_is_a_compile_error():
    with pytest.raises(vg.CompileError, match="no atomic xor on float32"):
        run_simt(atomic_kernel("xor", f32), (1, 1, 1), (1, 1, 1), {})


def run_unchecked(k, grid, block, *args):
    """Run a source kernel on the cpu backend without the static checker: what shadow memory
    alone finds."""
    values = k.bind(args, {})
    block = block + (1,) * (3 - len(block))
    kernel_ir = k.build(k.spec_key(values, k.describe_args(values), block))
    run_simt(kernel_ir, grid, block, {p.name: v for p, v in zip(k.params, values)})


@simt.kernel
def histogram(x, weights, counts, sums):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(counts, x[i], 1)
        simt.atomic_add(sums, x[i], weights[i])


@simt.kernel
def take_a_ticket(counter, order):
    i = simt.global_id(0)
    if i < order.shape[0]:
        order[simt.atomic_add(counter, 0, 1)] = i


@simt.kernel
def lock_free_max(x, best):
    i = simt.global_id(0)
    if i < x.shape[0]:
        v = x[i]
        seen = simt.atomic_add(best, 0, 0.0)  # an atomic read
        while seen < v:
            before = simt.atomic_cas(best, 0, seen, v)
            if before == seen:
                break
            seen = before


def test_source_histogram_with_atomics(rng):
    n, bins = (1 << 17) + int(rng.integers(1, 5000)), int(rng.integers(20, 300))
    x = rng.integers(0, bins, n).astype(np.int32)
    weights = rng.standard_normal(n).astype(np.float32)
    counts, sums = np.zeros(bins, np.int64), np.zeros(bins, np.float32)
    histogram[vg.cdiv(n, 256), 256](x, weights, counts, sums)
    np.testing.assert_array_equal(counts, np.bincount(x, minlength=bins))
    expected = np.zeros(bins, np.float32)
    np.add.at(expected, x, weights)  # float32, one element at a time, in order: as the lanes
    np.testing.assert_array_equal(sums, expected)
    np.testing.assert_allclose(sums, np.bincount(x, weights.astype(np.float64), bins),
                               rtol=1e-3, atol=1e-3)


def test_source_ticket_counter_serializes_in_lane_order():
    n = 1000
    counter, order = np.zeros(1, np.int32), np.full(n, SENTINEL, np.int64)
    run_unchecked(take_a_ticket, (4,), (256,), counter, order)
    assert counter[0] == n
    np.testing.assert_array_equal(order, np.arange(n))


def test_source_lock_free_max_with_compare_and_swap(rng):
    n = int(rng.integers(500, 2000))
    x = rng.standard_normal(n).astype(np.float32)
    best = np.full(1, -np.inf, np.float32)
    lock_free_max[vg.cdiv(n, 128), 128](x, best)
    assert best[0] == x.max()


# ----------------------------------------------------------------------------- shadow memory


@simt.kernel
def copy_missing_block_offset(x, out):
    out[simt.thread_id(0)] = x[simt.global_id(0)]


@simt.kernel
def shift_left_in_place(x):
    i = simt.global_id(0)
    if i + 1 < x.shape[0]:
        x[i] = x[i + 1]


@simt.kernel
def reset_then_count(x, h):
    i = simt.global_id(0)
    if i < h.shape[0]:
        h[i] = 0
    simt.atomic_add(h, x[i], 1)


@simt.kernel
def first_then_last(out):
    i = simt.global_id(0)
    if i == 0:
        out[0] = 1.0
    if i == out.shape[0] - 1:
        out[i] = out[0]


@simt.kernel
def readers_then_writer(x, out):
    i = simt.global_id(0)
    if i == 0:
        out[i] = x[0]
    if i == 5:
        out[i] = x[0]
    if i == 0:
        x[0] = 2.0


@simt.kernel
def tile_missing_block_offset(out):
    out[simt.thread_id(1), simt.thread_id(0)] = 1.0


@simt.kernel
def own_elements(alpha, x, y, h):
    i = simt.global_id(0)
    if i < y.shape[0]:
        y[i] = alpha * x[i] + y[i]  # in place: a thread reads and writes its own element
        h[i] = 0
        simt.atomic_add(h, i, 3)  # plain, then atomic, on its own element
        y[i] = y[i] + h[i]


@simt.kernel
def copy_missing_block_offset_unsafe(x, out):
    with vg.unsafe():
        out[simt.thread_id(0)] = x[simt.global_id(0)]


def race_of(k, grid, block, *args) -> vg.SafetyError:
    with pytest.raises(vg.SafetyError) as info:
        run_unchecked(k, grid, block, *args)
    assert str(info.value.loc).startswith(__file__)
    assert "observed while running on the cpu backend" in info.value.message
    return info.value


def source_line(k, offset) -> int:
    return k.fn.__code__.co_firstlineno + offset


def test_two_writers_are_reported_before_memory_changes(rng):
    out = np.full(128, np.nan, np.float32)
    err = race_of(copy_missing_block_offset, (2,), (128,),
                  rng.standard_normal(256).astype(np.float32), out)
    assert err.code == "VG202"
    assert err.message == ("two threads may write the same element: thread (block 0, thread 0) "
                           "and thread (block 1, thread 0) both write out[0] (observed while "
                           "running on the cpu backend)")
    assert err.loc.line == source_line(copy_missing_block_offset, 2)
    assert "out[simt.thread_id(0)] = x[simt.global_id(0)]" in str(err) and "^" in str(err)
    assert np.isnan(out).all()


def test_a_read_of_another_threads_element_is_reported(rng):
    x = rng.standard_normal(300).astype(np.float32)
    start = x.copy()
    err = race_of(shift_left_in_place, (3,), (128,), x)
    assert err.code == "VG203"
    assert "thread (block 0, thread 1) writes x[1] while thread (block 0, thread 0) reads it" \
        in err.message
    np.testing.assert_array_equal(x, start)


def test_plain_and_atomic_access_of_one_element_is_reported(rng):
    h = np.full(16, SENTINEL, np.int32)
    x = np.concatenate([[3], rng.integers(0, 16, 63)]).astype(np.int32)
    err = race_of(reset_then_count, (1,), (64,), x, h)
    assert err.code == "VG204"
    assert err.message.startswith("an array is accessed both atomically and with plain reads or "
                                  "writes: thread (block 0, thread 0) updates h[3] atomically "
                                  "while thread (block 0, thread 3) writes it without an atomic")
    assert err.loc.line == source_line(reset_then_count, 5)


def test_races_across_chunks_of_lanes():
    n = 3 * (1 << 16)  # the writer and the reader run in different chunks
    err = race_of(first_then_last, (n // 256,), (256,), np.zeros(n, np.float32))
    assert err.code == "VG203"
    assert f"thread (block 0, thread 0) writes out[0] while thread (block {n // 256 - 1}, " \
           f"thread 255) reads it" in err.message


def test_a_write_names_a_reader_other_than_itself():
    err = race_of(readers_then_writer, (1,), (32,), np.ones(4, np.float32),
                  np.zeros(32, np.float32))
    assert "thread (block 0, thread 0) writes x[0] while thread (block 0, thread 5) reads it" \
        in err.message


def test_multi_dimensional_launches_name_coordinates():
    err = race_of(tile_missing_block_offset, (2, 2), (4, 3), np.zeros((3, 4), np.float32))
    assert err.code == "VG202"
    assert "thread (block (0, 0), thread (0, 0)) and thread (block (1, 1), thread (0, 0)) " \
           "both write out[0, 0]" in err.message


def test_own_elements_in_place_plain_then_atomic_are_fine(rng):
    n = int(rng.integers(1000, 3000))
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    h = np.full(n, SENTINEL, np.int64)
    expected = 0.5 * x + y + 3
    run_unchecked(own_elements, (vg.cdiv(n, 256),), (256,), 0.5, x, y, h)
    np.testing.assert_allclose(y, expected, rtol=1e-12)
    assert (h == 3).all()


def test_unsafe_accesses_are_not_checked(rng):
    x, out = rng.standard_normal(256).astype(np.float32), np.full(128, np.nan, np.float32)
    run_unchecked(copy_missing_block_offset_unsafe, (2,), (128,), x, out)
    np.testing.assert_array_equal(out, x[128:])  # the last lane wins


@simt.kernel
def waits_for_a_later_block(flag):
    if simt.block_id(0) == 1 and simt.thread_id(0) == 0:
        while simt.atomic_add(flag, 0, 0) == 0:  # block 0's add comes later in the program
            pass
    if simt.block_id(0) == 0 and simt.thread_id(0) == 0:
        simt.atomic_add(flag, 0, 1)


@simt.kernel
def waits_for_an_earlier_step(flag):
    if simt.block_id(0) == 0 and simt.thread_id(0) == 0:
        simt.atomic_add(flag, 0, 1)
    if simt.block_id(0) == 1 and simt.thread_id(0) == 0:
        while simt.atomic_add(flag, 0, 0) == 0:
            pass


def test_a_spin_wait_that_would_hang_is_an_error_naming_the_loop():
    """A block spinning on what a later step of another block writes: the lock-step cpu
    backend would loop forever, so the first iteration that changes nothing (no memory, no
    variable, the same lanes) raises, at the loop's line. Its twin, whose write comes first,
    runs (its loop makes one pass)."""
    flag = np.zeros(1, np.int32)
    with pytest.raises(LaunchError, match="changed nothing") as info:
        waits_for_a_later_block[2, 32](flag)
    assert info.value.loc.line == waits_for_a_later_block.fn.__code__.co_firstlineno + 3
    assert "block (1, 0, 0) thread (0, 0, 0)" in str(info.value)
    flag = np.zeros(1, np.int32)
    waits_for_an_earlier_step[2, 32](flag)
    assert flag[0] == 1


WEIGHTS = (0.25, 0.5, 0.25)
TAPS = (3, -1, 4, 1)


@simt.kernel
def smooth3(x, out):
    i = simt.global_id(0)
    if 1 <= i < x.shape[0] - 1:
        acc = vg.float32(0)
        for k in range(3):
            acc += x[i + k - 1] * WEIGHTS[k]
        out[i] = acc


@simt.kernel
def scale_by_tap(x, out, j):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * TAPS[j]


def test_a_constant_tuple_indexed_at_run_time(rng):
    """A module's tuple of weights indexed by a loop's variable (numba's const arrays), or
    by a run-time int, which is checked against the tuple's length."""
    x = rng.standard_normal(300).astype(np.float32)
    out = np.full(300, np.nan, np.float32)
    smooth3[3, 128](x, out)
    want = 0.25 * x[:-2].astype(np.float64) + 0.5 * x[1:-1] + 0.25 * x[2:]
    np.testing.assert_allclose(out[1:-1], want, rtol=1e-6, atol=1e-6)
    scale_by_tap[3, 128](x, out, 2)
    np.testing.assert_array_equal(out, x * np.float32(4))
    with pytest.raises(BoundsError, match=r"TAPS\.\d+\[4\] with shape \(4,\)"):
        scale_by_tap[3, 128](x, out, 4)


@simt.kernel
def bit_functions(x, counts, reversed_bits):
    i = simt.global_id(0)
    if i < x.shape[0]:
        counts[i, 0] = vg.math.popc(x[i])
        counts[i, 1] = vg.math.clz(x[i])
        counts[i, 2] = vg.math.ffs(x[i])
        reversed_bits[i] = vg.math.brev(x[i])


def _bits_of(value: int, bits: int) -> str:
    return f"{value & ((1 << bits) - 1):0{bits}b}"


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint32, np.int64, np.uint64])
def test_bit_functions_count_and_reverse_as_cuda_does(rng, dtype):
    """popc, clz, ffs (int32) and brev (the operand's dtype), against Python's own bit
    strings, with zero, -1 and the extremes among the inputs."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True)
    x[:4] = [0, info.max, info.min, 1]
    counts, reversed_bits = np.full((200, 3), -1, np.int32), np.zeros(200, dtype)
    bit_functions[2, 128](x, counts, reversed_bits)
    bits = 8 * x.itemsize
    strings = [_bits_of(int(v), bits) for v in x]
    assert counts[:, 0].tolist() == [s.count("1") for s in strings]
    assert counts[:, 1].tolist() == [len(s) - len(s.lstrip("0")) for s in strings]
    assert counts[:, 2].tolist() == [bits - s.rindex("1") if "1" in s else 0 for s in strings]
    assert [_bits_of(int(v), bits) for v in reversed_bits] == [s[::-1] for s in strings]
    assert vg.math.popc(np.int32(-1)) == 32 and vg.math.ffs(np.uint8(8)) == 4  # on the host too


def test_bit_functions_take_integers_only():
    @simt.kernel
    def float_bits(x, out):
        out[0] = vg.math.popc(x[0])

    with pytest.raises(vg.CompileError, match=r"popc\(\) takes an integer, not float32"):
        float_bits[1, 1](np.ones(1, np.float32), np.zeros(1, np.int32))
