"""The cpu backend's tile interpreter (`cpu.run_tile`) against NumPy references, on
hand-built tile IR (which pins the interpreter down independently of the frontend), its
elementwise ops against the SIMT interpreter bit for bit, Philox against the published
known-answer vectors, shadow memory's reports of races between blocks, then source kernels
through `@tile.kernel` and `k[grid](...)`. Inputs are fresh
random draws (conftest's `rng`); outputs are poisoned before each run.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import verdigris as vg
from verdigris import ir, tile
from verdigris import types as T
from verdigris.cpu import philox, run_simt, run_tile
from verdigris.errors import BoundsError, CompileError, Loc, SafetyError
from verdigris.ir import tiles as t

LOC = Loc(__file__, 1)
f16, bf16, f32, f64 = T.float16, T.bfloat16, T.float32, T.float64
i8, i32, i64, b1 = T.int8, T.int32, T.int64, T.bool_


# ----------------------------------------------------------------------------- IR builders


def const(value, dtype):
    return ir.Const(LOC, value, dtype)


def var(name, dtype):
    return ir.Var(LOC, name, dtype)


def bid(axis=0):
    return ir.Cast(LOC, ir.Special(LOC, "block_id", axis, i32), i64)


def binary(op, a, b):
    return ir.Binary(LOC, op, a, b, a.dtype)


def array(name, dtype, ndim=1):
    return ir.ArrayRef(LOC, name, ir.ArrayType(dtype, ndim))


def load(a, index, shape, padding=0):
    return t.TileLoad(LOC, a, tuple(index), const(padding, a.dtype), a.dtype, tuple(shape))


def store(a, index, tile):
    return t.TileStore(LOC, a, tuple(index), tile)


def tmap(op, *args, dtype=None):
    return t.TileMap(LOC, op, args, dtype or args[-1].dtype, args[0].shape)


def splat(value, shape):
    return t.Splat(LOC, value, value.dtype, tuple(shape))


def reduce(op, value, axis, dtype=None):
    dtype = dtype or (i32 if op.startswith("arg") else value.dtype)
    shape = () if axis is None else value.shape[:axis] + value.shape[axis + 1:]
    return t.TileReduce(LOC, op, value, axis, dtype, shape)


def tile_var(name, dtype, shape):
    """A read of a tile variable (as the frontend makes it: a Var with a shape) and its type."""
    read = var(name, dtype)
    read.shape = tuple(shape)
    return read, t.TileType(dtype, tuple(shape))


def kernel(arrays, body, scalars=(), locals=None, writes=()):
    """A tile kernel over array refs `arrays` and scalar (name, dtype) pairs."""
    params = [ir.Param(a.name, "array", LOC, type=a.type) for a in arrays]
    params += [ir.Param(name, "scalar", LOC, dtype=dtype) for name, dtype in scalars]
    return ir.Kernel("k", "tile", params, dict(locals or {}), [ir.Region(LOC, "kernel", body)],
                     LOC, writes=frozenset(writes))


def cdiv(a, b):
    return -(-a // b)


# ----------------------------------------------------------------------------- loads, stores


@pytest.mark.parametrize("dtype", [f32, f16, i32])
def test_vector_add_ragged_edge(rng, dtype):
    n, block = int(rng.integers(900, 1100)), 128
    a, b, out = array("a", dtype), array("b", dtype), array("out", dtype)
    x, y = load(a, [bid()], [block]), load(b, [bid()], [block])
    k = kernel([a, b, out], [store(out, [bid()], tmap("add", x, y))], writes=["out"])
    if dtype.is_int:
        xa, xb = (rng.integers(-2**31, 2**31, n, dtype=np.int32) for _ in range(2))
        expected = (xa.astype(np.int64) + xb).astype(np.int32)  # wraps
    else:
        xa, xb = (rng.standard_normal(n).astype(dtype.np) for _ in range(2))
        expected = (xa.astype(np.float64) + xb).astype(dtype.np)  # one rounding
    buffer = np.full(n + 5, 77, dtype.np)
    run_tile(k, cdiv(n, block), {"a": xa, "b": xb, "out": buffer[:n]})
    np.testing.assert_array_equal(buffer[:n], expected)
    assert (buffer[n:] == 77).all()  # the masked edge wrote nothing past the view


def test_2d_tiles_on_strided_views(rng):
    rows, cols, tr, tc = 37, 45, 8, 16
    big = rng.standard_normal((2 * rows, 3 * cols + 1)).astype(np.float32)
    x_view = big[::2, 1::3]
    out_big = np.full((rows, 2 * cols), np.nan, np.float32)
    out_view = out_big[:, ::2]
    a, out = array("a", f32, 2), array("out", f32, 2)
    index = [bid(1), bid(0)]
    doubled = tmap("mul", load(a, index, [tr, tc]), splat(const(2.0, f32), [tr, tc]))
    k = kernel([a, out], [store(out, index, doubled)], writes=["out"])
    run_tile(k, (cdiv(cols, tc), cdiv(rows, tr)), {"a": x_view, "out": out_view})
    np.testing.assert_array_equal(out_view, 2 * x_view)
    assert np.isnan(out_big[:, 1::2]).all()


def test_load_outside_gives_padding_and_store_outside_writes_nothing(rng):
    n = 10
    a, out = array("a", f32), array("out", f32)
    tiles = [load(a, [const(i, i64)], [4], padding=-1.5) for i in (-1, 2, 5)]
    body = [store(out, [const(j, i64)], tile) for j, tile in enumerate(tiles)]
    body.append(store(out, [const(-3, i64)], load(a, [const(0, i64)], [4])))
    body.append(store(out, [const(9, i64)], load(a, [const(0, i64)], [4])))
    k = kernel([a, out], body, writes=["out"])
    x, result = rng.standard_normal(n).astype(np.float32), np.zeros(12, np.float32)
    run_tile(k, 1, {"a": x, "out": result})
    expected = np.concatenate([np.full(4, -1.5), [x[8], x[9], -1.5, -1.5],
                               np.full(4, -1.5)]).astype(np.float32)
    np.testing.assert_array_equal(result, expected)


def test_softmax_rows_with_minus_infinity_padding(rng):
    rows, cols, width = 9, 50, 64
    a, out = array("x", f32, 2), array("out", f32, 2)
    shape = (1, width)
    xv, xt = tile_var("xt", f32, shape)
    ev, et = tile_var("e", f32, shape)
    index = [bid(), const(0, i64)]
    body = [
        ir.Assign(LOC, "xt", load(a, index, shape, padding=-np.inf)),
        ir.Assign(LOC, "e", tmap("exp", tmap("sub", xv, splat(reduce("max", xv, None),
                                                                 shape)))),
        store(out, index, tmap("truediv", ev, splat(reduce("sum", ev, None), shape))),
    ]
    k = kernel([a, out], body, locals={"xt": xt, "e": et}, writes=["out"])
    x = (3 * rng.standard_normal((rows, cols))).astype(np.float32)
    result = np.full((rows, cols), np.nan, np.float32)
    run_tile(k, rows, {"x": x, "out": result})
    wide = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    np.testing.assert_allclose(result, wide / wide.sum(axis=1, keepdims=True), rtol=2e-6)


# ----------------------------------------------------------------------------- reductions


def _reduce_kernel(op, dtype, axis, shape):
    """Loads the whole (small) array as one tile, reduces it, stores the result."""
    a, out = array("a", dtype, 2), array("out", i32 if op.startswith("arg") else dtype, 1)
    reduced = reduce(op, load(a, [const(0, i64)] * 2, shape), axis)
    zero = const(0, i64)
    result = ir.Store(LOC, out, (zero,), reduced) if axis is None else \
        store(out, [zero], reduced)
    return kernel([a, out], [result], writes=["out"])


_NUMPY = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
          "argmax": np.argmax, "argmin": np.argmin}


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("op", list(_NUMPY))
def test_reductions_against_numpy(rng, op, axis):
    shape = (5, 7)
    x = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    n_out = 1 if axis is None else shape[1 - axis]
    result = np.full(n_out, -99, np.int32 if op.startswith("arg") else np.float32)
    run_tile(_reduce_kernel(op, f32, axis, shape), 1, {"a": x, "out": result})
    expected = np.atleast_1d(_NUMPY[op](x.astype(np.float64), axis=axis))
    np.testing.assert_allclose(result, expected, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "argmax", "argmin"])
def test_integer_reductions_wrap_and_argmax_ties_take_the_first(rng, op, axis):
    shape = (6, 11)
    x = rng.integers(-3, 4, shape).astype(np.int8)  # many ties; products and sums wrap
    if op in ("sum", "prod"):
        x = rng.integers(-128, 128, shape).astype(np.int8)
    n_out = 1 if axis is None else shape[1 - axis]
    result = np.full(n_out, 99, np.int32 if op.startswith("arg") else np.int8)
    run_tile(_reduce_kernel(op, i8, axis, shape), 1, {"a": x, "out": result})
    wide = _NUMPY[op](x.astype(np.int64), axis=axis)
    expected = np.atleast_1d(wide if op.startswith("arg") else (wide % 256).astype(np.uint8)
                             .astype(np.int8))
    np.testing.assert_array_equal(result, expected)


def test_float16_sums_accumulate_in_float32(rng):
    n = 4096
    x = rng.uniform(0.0, 1.0, (1, n)).astype(np.float16)
    result = np.zeros(1, np.float16)
    run_tile(_reduce_kernel("sum", f16, None, (1, n)), 1, {"a": x, "out": result})
    exact = x.astype(np.float64).sum()
    ulp = float(np.spacing(np.float16(exact)))
    assert abs(float(result[0]) - exact) <= ulp / 2 + 1e-3 * ulp  # one rounding, at the end
    # Partial sums past float16's range (65504) stay finite in float32.
    big = np.repeat(np.float16([60000, -60000]), n // 2).reshape(1, n)
    run_tile(_reduce_kernel("sum", f16, None, (1, n)), 1, {"a": big, "out": result})
    assert result[0] == 0


def test_max_ignores_nan_and_argmax_skips_it():
    x = np.array([[np.nan, 1.0, 3.0, np.nan, 3.0]], np.float32)
    for op, expected in (("max", 3.0), ("min", 1.0), ("argmax", 2), ("argmin", 1)):
        result = np.zeros(1, np.int32 if op.startswith("arg") else np.float32)
        run_tile(_reduce_kernel(op, f32, None, (1, 5)), 1, {"a": x, "out": result})
        assert result[0] == expected, op


@pytest.mark.parametrize("dtype", [f32, i32])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum(rng, dtype, axis):
    shape = (6, 9)
    x = rng.integers(-50, 50, shape).astype(dtype.np) if dtype.is_int else \
        rng.standard_normal(shape).astype(np.float32)
    a, out = array("a", dtype, 2), array("out", dtype, 2)
    origin = [const(0, i64)] * 2
    scanned = t.TileScan(LOC, "cumsum", load(a, origin, shape), axis, dtype, shape)
    k = kernel([a, out], [store(out, origin, scanned)], writes=["out"])
    result = np.zeros(shape, dtype.np)
    run_tile(k, 1, {"a": x, "out": result})
    np.testing.assert_allclose(result, np.cumsum(x.astype(np.float64), axis=axis), rtol=1e-5,
                               atol=1e-5)


# ----------------------------------------------------------------------------- shapes


def test_reshape_and_permute(rng):
    a = array("a", f32, 2)
    r_out, p_out, p3_out = array("r", f32, 2), array("p", f32, 2), array("p3", f32, 3)
    origin2, origin3 = [const(0, i64)] * 2, [const(0, i64)] * 3
    x = load(a, origin2, (4, 6))
    body = [store(r_out, origin2, t.Reshape(LOC, x, f32, (3, 8))),
            store(p_out, origin2, t.Permute(LOC, x, (1, 0), f32, (6, 4))),
            store(p3_out, origin3, t.Permute(LOC, t.Reshape(LOC, x, f32, (2, 3, 4)), (2, 0, 1),
                                             f32, (4, 2, 3)))]
    k = kernel([a, r_out, p_out, p3_out], body, writes=["r", "p", "p3"])
    data = rng.standard_normal((4, 6)).astype(np.float32)
    outs = {"r": np.zeros((3, 8), np.float32), "p": np.zeros((6, 4), np.float32),
            "p3": np.zeros((4, 2, 3), np.float32)}
    run_tile(k, 1, {"a": data, **outs})
    np.testing.assert_array_equal(outs["r"], data.reshape(3, 8))
    np.testing.assert_array_equal(outs["p"], data.T)
    np.testing.assert_array_equal(outs["p3"], data.reshape(2, 3, 4).transpose(2, 0, 1))


def test_where_broadcast_and_arange(rng):
    n, block = 300, 64
    a, out = array("a", f32), array("out", f32)
    x = load(a, [bid()], [block])
    leaky = tmap("where", tmap("gt", x, splat(const(0.0, f32), [block]), dtype=b1), x,
                 tmap("mul", x, splat(const(0.25, f32), [block])))
    position = tmap("cast", t.Arange(LOC, i32, (block,)), dtype=f32)
    column = t.Broadcast(LOC, t.Reshape(LOC, position, f32, (1, block)), f32, (3, block))
    row_sum = reduce("sum", column, 0)  # 3 * position
    k = kernel([a, out], [store(out, [bid()], tmap("add", leaky, row_sum))], writes=["out"])
    data = rng.standard_normal(n).astype(np.float32)
    result = np.zeros(n, np.float32)
    run_tile(k, cdiv(n, block), {"a": data, "out": result})
    expected = np.where(data > 0, data, data * np.float32(0.25)) + 3 * (np.arange(n) % block)
    np.testing.assert_allclose(result, expected, rtol=1e-6)


# ----------------------------------------------------------------------------- against SIMT


_ELEMENTWISE_CASES = [  # (op, operand dtype, result dtype, operand count)
    ("add", bf16, bf16, 2), ("mul", f16, f16, 2), ("truediv", f32, f32, 2),
    ("floordiv", i8, i8, 2), ("mod", i32, i32, 2), ("rshift", i8, i8, 2),
    ("exp", f32, f32, 1), ("erf", bf16, bf16, 1), ("tanh", f16, f16, 1),
    ("rsqrt", f32, f32, 1), ("max", f32, f32, 2), ("cast", f32, i8, 1),
    ("cast", f32, bf16, 1), ("neg", i32, i32, 1), ("lt", f16, b1, 2),
]


def _draw(rng, dtype, n):
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        return rng.integers(info.min, int(info.max) + 1, n, dtype=dtype.np)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    x[:4] = (np.nan, np.inf, -0.0, 1e30)
    if dtype == bf16:
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    with np.errstate(over="ignore"):  # 1e30 becomes inf in float16: wanted
        return x.astype(dtype.np)


def _simt_node(op, args, dtype):
    if op == "cast":
        return ir.Cast(LOC, args[0], dtype)
    if op in ir.COMPARE_OPS:
        return ir.Compare(LOC, op, *args, dtype)
    if op in ir.UNARY_OPS:
        return ir.Unary(LOC, op, args[0], dtype)
    if op in ir.BINARY_OPS:
        return ir.Binary(LOC, op, *args, dtype)
    return ir.MathCall(LOC, op, tuple(args), dtype)


@pytest.mark.parametrize("op, operand, result, arity", _ELEMENTWISE_CASES)
def test_elementwise_ops_equal_the_simt_interpreter_bit_for_bit(rng, op, operand, result,
                                                               arity):
    n = 256
    ins = [array(f"x{i}", operand) for i in range(arity)]
    out = array("out", result)
    tiled = tmap(op, *(load(a, [bid()], [n]) for a in ins), dtype=result)
    tile_kernel = kernel(ins + [out], [store(out, [bid()], tiled)], writes=["out"])
    lane = ir.Cast(LOC, ir.Special(LOC, "thread_id", 0, i32), i64)
    scalar = _simt_node(op, [ir.Load(LOC, a, (lane,), operand) for a in ins], result)
    simt_kernel = ir.Kernel("s", "simt", tile_kernel.params, {},
                            [ir.Region(LOC, "kernel", [ir.Store(LOC, out, (lane,), scalar)])],
                            LOC, writes=frozenset({"out"}))
    data = {a.name: _draw(rng, operand, n) for a in ins}
    if op == "rshift":  # amounts of every kind: negative, >= width, in range
        data["x1"] = rng.integers(-10, 12, n).astype(np.int8)
    bits = np.uint16 if result == bf16 else result.np
    by_tile, by_simt = np.zeros(n, bits), np.ones(n, bits)
    run_tile(tile_kernel, 1, {**data, "out": by_tile})
    run_simt(simt_kernel, 1, n, {**data, "out": by_simt})
    np.testing.assert_array_equal(by_tile.view(np.uint8), by_simt.view(np.uint8))


def test_sigmoid_rounds_once_from_float32(rng):
    n = 500
    a, out = array("a", f16), array("out", f16)
    k = kernel([a, out], [store(out, [bid()], tmap("sigmoid", load(a, [bid()], [n])))],
               writes=["out"])
    x = (rng.standard_normal(n) * 6).astype(np.float16)
    result = np.zeros(n, np.float16)
    run_tile(k, 1, {"a": x, "out": result})
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(result, exact, rtol=2 ** -10, atol=1e-7)


# ----------------------------------------------------------------------------- gather, scatter


def _indexed(node_for, n, block, dtype=f32, atomic=False):
    a, idx, out = array("a", dtype), array("idx", i64), array("out", dtype)
    indices = load(idx, [bid()], [block])
    return kernel([a, idx, out], node_for(a, indices, out, block), writes=["out"])


def test_gather_permutes_and_pads_out_of_bounds(rng):
    n, block = 200, 32
    indices = rng.permutation(n + 40) - 20  # some negative, some past the end

    def body(a, ix, out, block):
        gathered = t.Gather(LOC, a, (ix,), const(-9.0, f32), f32, (block,))
        return [store(out, [bid()], gathered)]
    x, result = rng.standard_normal(n).astype(np.float32), np.zeros(n + 40, np.float32)
    run_tile(_indexed(body, n, block), cdiv(n + 40, block),
             {"a": x, "idx": indices, "out": result})
    inside = (indices >= 0) & (indices < n)
    np.testing.assert_array_equal(result[inside], x[indices[inside]])
    assert (result[~inside] == -9.0).all()


def _scatter_body(atomic=None):
    def body(a, ix, out, block):
        return [t.Scatter(LOC, out, (ix,), load(a, [bid()], [block]), atomic)]
    return body


def test_scatter_permutes(rng):
    n, block = 256, 64
    indices = rng.permutation(n)
    x, result = rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)
    run_tile(_indexed(_scatter_body(), n, block), n // block,
             {"a": x, "idx": indices, "out": result})
    expected = np.zeros(n, np.float32)
    expected[indices] = x
    np.testing.assert_array_equal(result, expected)


def test_scatter_out_of_bounds_raises_before_writing(rng):
    n, block = 128, 32
    indices = rng.permutation(n)
    indices[70] = n + 3  # block 2, tile element 6
    x, result = rng.standard_normal(n).astype(np.float32), np.full(n, 5.0, np.float32)
    with pytest.raises(BoundsError) as err:
        run_tile(_indexed(_scatter_body(), n, block), n // block,
                 {"a": x, "idx": indices, "out": result})
    message = str(err.value)
    assert err.value.code == "VG302"
    assert f"out[{n + 3}] with shape ({n},)" in message and "kernel k" in message
    assert "block (2, 0, 0)" in message and "tile element (6,)" in message
    written = np.zeros(n, bool)
    written[indices[:2 * block]] = True  # blocks 0 and 1 ran before
    assert (result[~written] == 5.0).all()


def test_atomic_scatter_histogram(rng):
    n, block, bins = 1000, 100, 17
    values = rng.integers(0, bins, n)

    def body(a, ix, out, block):
        ones = splat(const(1, i32), [block])
        return [t.Scatter(LOC, out, (ix,), ones, atomic="add")]
    counts = np.zeros(bins, np.int32)
    run_tile(_indexed(body, n, block, dtype=i32), n // block,
             {"a": np.zeros(n, np.int32), "idx": values, "out": counts})
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=bins))


def test_plain_scatter_writing_one_element_twice_is_a_race(rng):
    n, block = 64, 64
    indices = rng.permutation(n)
    indices[9] = indices[40]
    with pytest.raises(SafetyError) as err:
        run_tile(_indexed(_scatter_body(), n, block), 1,
                 {"a": np.zeros(n, np.float32), "idx": indices,
                  "out": np.zeros(n, np.float32)})
    assert err.value.code == "VG202"
    assert f"out[{indices[9]}]" in str(err.value) and "(9,) and (40,)" in str(err.value)


def test_tile_atomic_add_sums_split_k_partials(rng):
    rows, chunk, parts = 12, 16, 5
    a, out = array("a", f32, 2), array("out", f32, 2)
    partial = load(a, [const(0, i64), bid()], (rows, chunk))
    k = kernel([a, out], [t.TileAtomic(LOC, "add", out, (const(0, i64), const(0, i64)), partial)],
               writes=["out"])
    x = rng.standard_normal((rows, chunk * parts - 3)).astype(np.float32)
    result = np.zeros((rows, chunk), np.float32)
    run_tile(k, parts, {"a": x, "out": result})
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 3)))
    np.testing.assert_allclose(result, padded.reshape(rows, parts, chunk).sum(1), rtol=1e-5,
                               atol=1e-6)


# ----------------------------------------------------------------------------- control flow


def test_loop_carries_a_tile_and_scalar_control_flow(rng):
    """Row sums in chunks; block 1 returns early; `continue` skips chunk 1, `break` stops
    after chunk 3 (so chunks 0, 2, 3 count)."""
    rows, cols, chunk = 4, 150, 32
    a, out = array("a", f32, 2), array("out", f32, 1)
    accv, acct = tile_var("acc", f32, (1, chunk))
    kv = var("c", i64)
    n_chunks = binary("floordiv", binary("add", ir.Shape(LOC, a, 1, i64), const(chunk - 1, i64)),
                      const(chunk, i64))
    cmp = lambda op, x, y: ir.Compare(LOC, op, x, y, b1)  # noqa: E731
    body = [
        ir.If(LOC, cmp("eq", bid(), const(1, i64)), [ir.Exit(LOC, "kernel")], []),
        ir.Assign(LOC, "acc", splat(const(0.0, f32), (1, chunk))),
        ir.For(LOC, "c", const(0, i64), n_chunks, const(1, i64), [
            ir.If(LOC, cmp("eq", kv, const(1, i64)), [ir.Continue(LOC)], []),
            ir.Assign(LOC, "acc", tmap("add", accv, load(a, [bid(), kv], (1, chunk)))),
            ir.If(LOC, cmp("eq", kv, const(3, i64)), [ir.Break(LOC)], []),
        ]),
        ir.Store(LOC, out, (bid(),), reduce("sum", accv, None)),
    ]
    k = kernel([a, out], body, locals={"acc": acct, "c": i64}, writes=["out"])
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    result = np.full(rows, -1.0, np.float32)
    run_tile(k, rows, {"a": x, "out": result})
    counted = np.r_[0:chunk, 2 * chunk:4 * chunk]
    expected = x[:, counted].astype(np.float64).sum(1)
    expected[1] = -1.0
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-4)  # 96 float32 adds


def test_while_loop_and_grid_dim(rng):
    """Each block halves its tile while its sum exceeds the number of blocks."""
    n, block = 96, 32
    a, out = array("a", f32), array("out", f32)
    xv, xt = tile_var("x", f32, (block,))
    grid_dim = ir.Cast(LOC, ir.Special(LOC, "grid_dim", 0, i32), f32)
    body = [ir.Assign(LOC, "x", load(a, [bid()], [block])),
            ir.While(LOC, ir.Compare(LOC, "gt", reduce("sum", xv, None), grid_dim, b1),
                     [ir.Assign(LOC, "x", tmap("mul", xv, splat(const(0.5, f32), [block])))]),
            store(out, [bid()], xv)]
    k = kernel([a, out], body, locals={"x": xt}, writes=["out"])
    x = rng.uniform(0, 2, n).astype(np.float32)
    result = np.zeros(n, np.float32)
    run_tile(k, n // block, {"a": x, "out": result})
    for b in range(n // block):
        expected = x[b * block:(b + 1) * block]
        while expected.sum() > n // block:
            expected = expected * np.float32(0.5)
        np.testing.assert_array_equal(result[b * block:(b + 1) * block], expected)


def test_threads_are_not_tile_code():
    out = array("out", i32)
    k = kernel([out], [ir.Store(LOC, out, (const(0, i64),),
                                ir.Special(LOC, "thread_id", 0, i32))], writes=["out"])
    with pytest.raises(CompileError, match="thread_id"):
        run_tile(k, 1, {"out": np.zeros(1, np.int32)})


# ----------------------------------------------------------------------------- Philox


@pytest.mark.parametrize("counter, key, expected", [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
])
def test_philox_known_answers(counter, key, expected):
    assert tuple(int(w) for w in philox.philox4x32(counter, key)) == expected


def _rand_kernel(block):
    out = array("out", f32)
    offsets = tmap("add", t.Arange(LOC, i32, (block,)),
                   splat(ir.Cast(LOC, binary("mul", bid(), const(block, i64)), i32), [block]))
    rand = t.Rand(LOC, var("seed", i64), offsets, f32, (block,))
    return kernel([out], [store(out, [bid()], rand)], scalars=[("seed", i64)], writes=["out"])


def test_rand_is_reproducible_and_keyed_by_seed(rng):
    n, block = 1000, 128
    k = _rand_kernel(block)
    seed = int(rng.integers(0, 2**32))
    first, again, other = (np.full(n, -1.0, np.float32) for _ in range(3))
    run_tile(k, cdiv(n, block), {"out": first, "seed": np.int64(seed)})
    run_tile(k, cdiv(n, block), {"out": again, "seed": np.int64(seed)})
    run_tile(k, cdiv(n, block), {"out": other, "seed": np.int64(seed ^ 1)})
    np.testing.assert_array_equal(first, again)
    assert (first != other).mean() > 0.99
    # The documented mapping: key (seed, 0), counter (offset, 0, 0, 0), word 0 >> 8 * 2**-24.
    word = philox.philox4x32((np.arange(n, dtype=np.uint32), 0, 0, 0), (seed, 0))[0]
    np.testing.assert_array_equal(first, (word >> 8).astype(np.float64) * 2.0 ** -24)


def test_rand_is_uniform(rng):
    n, block, bins = 1 << 16, 4096, 64
    result = np.zeros(n, np.float32)
    run_tile(_rand_kernel(block), n // block,
             {"out": result, "seed": np.int64(rng.integers(0, 2**32))})
    assert result.min() >= 0.0 and result.max() < 1.0
    counts = np.bincount((result * bins).astype(np.int64), minlength=bins)
    chi2 = ((counts - n / bins) ** 2 / (n / bins)).sum()
    assert chi2 < 120  # 63 degrees of freedom: p < 1e-5 of a false failure
    assert abs(result.mean() - 0.5) < 0.01 and abs(result.var() - 1 / 12) < 0.005


# ----------------------------------------------------------------------------- races


def test_two_blocks_storing_one_tile_race():
    a, out = array("a", f32), array("out", f32)
    zero = const(0, i64)
    k = kernel([a, out], [store(out, [zero], load(a, [bid()], [16]))], writes=["out"])
    with pytest.raises(SafetyError) as err:
        run_tile(k, 2, {"a": np.zeros(32, np.float32), "out": np.zeros(16, np.float32)})
    assert err.value.code == "VG202"
    assert "block 1 and block 0 both write out[0]" in str(err.value)
    assert "tile.atomic_add" in err.value.hint


def test_reading_the_neighbours_tile_races_unless_unsafe():
    """An in-place shift: block b reads tile b + 1, which block b + 1 writes."""
    x = array("x", f32)
    shifted = store(x, [bid()], load(x, [binary("add", bid(), const(1, i64))], [8]))
    racy = kernel([x], [shifted], writes=["x"])
    with pytest.raises(SafetyError) as err:
        run_tile(racy, 4, {"x": np.arange(32, dtype=np.float32)})
    assert err.value.code == "VG203"
    assert "block 1 writes x[8] while block 0 reads it" in str(err.value)
    data = np.arange(32, dtype=np.float32)
    run_tile(kernel([x], [ir.Unsafe(LOC, [shifted])], writes=["x"]), 4, {"x": data})
    np.testing.assert_array_equal(data[:24], np.arange(8, 32))


def test_atomic_adds_of_many_blocks_do_not_race_but_mixed_access_does():
    a, out = array("a", f32), array("out", f32)
    zero = const(0, i64)
    add = t.TileAtomic(LOC, "add", out, (zero,), load(a, [bid()], [4]))
    result = np.zeros(4, np.float32)
    run_tile(kernel([a, out], [add], writes=["out"]), 3,
             {"a": np.arange(12, dtype=np.float32), "out": result})
    np.testing.assert_array_equal(result, np.arange(12).reshape(3, 4).sum(0))
    mixed = kernel([a, out], [add, store(out, [zero], load(a, [bid()], [4]))], writes=["out"])
    with pytest.raises(SafetyError) as err:
        run_tile(mixed, 2, {"a": np.zeros(8, np.float32), "out": np.zeros(4, np.float32)})
    assert err.value.code == "VG204"


# ----------------------------------------------------------------------------- end to end


@tile.kernel
def _add(a, b, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    x = tile.load(a, index=(i,), shape=(BLOCK,))
    y = tile.load(b, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=x + y)


@tile.kernel
def _softmax(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS), padding=-math.inf)
    e = tile.exp(t - tile.max(t))
    tile.store(out, index=(r, 0), tile=e / tile.sum(e))


@tile.kernel
def _row_sum(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    acc = tile.zeros((1, COLS), vg.float32)
    for c in range((x.shape[1] + COLS - 1) // COLS):
        acc += tile.load(x, index=(r, c), shape=(1, COLS))
    tile.store(out, index=(r,), tile=acc.sum(1))


@tile.kernel
def _dropout(x, out, seed, p, BLOCK: vg.constexpr):
    i = tile.bid(0)
    keep = tile.rand(seed, i * BLOCK + tile.arange(BLOCK)) >= p
    t = tile.load(x, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=tile.where(keep, t / (1 - p), 0.0))


@tile.kernel
def _transpose(x, out, B: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    tile.store(out, index=(j, i), tile=tile.load(x, index=(i, j), shape=(B, B)).T)


def test_source_vector_add(rng):
    n = int(rng.integers(900, 1100))
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.full(n, np.nan, np.float32)
    _add[vg.cdiv(n, 128)](a, b, out, BLOCK=128)
    np.testing.assert_array_equal(out, (a.astype(np.float64) + b).astype(np.float32))


def test_source_softmax_and_row_sum(rng):
    x = (3 * rng.standard_normal((7, 50))).astype(np.float32)
    out = np.full_like(x, np.nan)
    _softmax[7](x, out, COLS=64)
    wide = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    np.testing.assert_allclose(out, wide / wide.sum(axis=1, keepdims=True), rtol=2e-6)
    sums = np.full(7, np.nan, np.float32)
    _row_sum[7](x, sums, COLS=16)
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def test_source_dropout_matches_philox(rng):
    n, block, p, seed = 3000, 256, 0.3, int(rng.integers(0, 2**31))
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    _dropout[vg.cdiv(n, block)](x, out, seed, p, BLOCK=block)
    keep = philox.uniform(np.int64(seed), np.arange(n)) >= np.float32(p)
    np.testing.assert_allclose(out, np.where(keep, x / np.float32(1 - p), 0), rtol=1e-6)
    assert abs((out == 0).mean() - p) < 0.05


def test_source_transpose_of_a_strided_view(rng):
    big = rng.standard_normal((80, 70)).astype(np.float32)
    x = big[::2]
    out = np.full((70, 40), np.nan, np.float32)
    _transpose[vg.cdiv(40, 16), vg.cdiv(70, 16)](x, out, B=16)
    np.testing.assert_array_equal(out, x.T)


def test_row_statistics_in_variables_on_the_cpu_backend(rng):
    """Several rows per block, each row minus its mean kept in a (R, 1) variable, padded
    columns past n (the kernel the GPU keeps the mean where its reduction made it)."""
    from tests.test_tile_codegen import center_rows

    x = rng.standard_normal((12, 1000)).astype(np.float32) + 3
    out = np.full_like(x, np.nan)
    center_rows[3](x, out, 1000, R=4, C=1024)
    np.testing.assert_allclose(out, x - x.astype(np.float64).mean(1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_masked_scatters_skip_their_masked_elements(rng):
    from test_tile_codegen import masked_histogram, reverse_scatter

    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    reverse_scatter[cdiv(1000, 128)](x, out, B=128)  # the last tile's 24 lanes past the end
    np.testing.assert_array_equal(out, x[::-1])
    values = rng.integers(-5, 60, 1000).astype(np.int32)
    counts = np.zeros(37, np.int32)
    masked_histogram[cdiv(1000, 300)](values, counts, 37, BLOCK=300)
    np.testing.assert_array_equal(counts, np.bincount(values[(values >= 0) & (values < 37)],
                                                      minlength=37))


def test_an_unmasked_element_outside_the_array_names_its_place_in_the_tile(rng):
    n, block = 128, 32
    indices = rng.permutation(n)
    indices[66], indices[70] = -4, n + 3  # block 2: element 2 is masked off, element 6 is not

    def body(a, ix, out, block):
        keep = tmap("ne", ix, splat(const(-4, i64), [block]), dtype=b1)
        return [t.Scatter(LOC, out, (ix,), load(a, [bid()], [block]), mask=keep)]
    with pytest.raises(BoundsError, match=r"out\[131\] .* \(tile element \(6,\)\)"):
        run_tile(_indexed(body, n, block), n // block,
                 {"a": np.zeros(n, np.float32), "idx": indices, "out": np.zeros(n, np.float32)})


# ----------------------------------------------------------------------------- Triton idioms


def test_new_axes_make_a_pairwise_tile(rng):
    from test_tile_codegen import pairwise

    x, y = rng.standard_normal(50).astype(np.float32), rng.standard_normal(70).astype(np.float32)
    out = np.full((50, 70), np.nan, np.float32)
    pairwise[cdiv(50, 16), cdiv(70, 32)](x, y, out, M=16, N=32)
    want = x.astype(np.float64)[:, None] - y.astype(np.float64)[None, :] * 2
    np.testing.assert_allclose(out, want, rtol=1e-6)


@tile.kernel
def _row_max(x, out, COLS: vg.constexpr):
    """Triton's attention tutorial's spelling of minus infinity."""
    r = tile.bid(0)
    m = tile.zeros((1, COLS), vg.float32) - float("inf")
    t = tile.load(x, index=(r, 0), shape=(1, COLS), padding=float("-inf"))
    tile.store(out, index=(r,), tile=tile.max(tile.maximum(m, t), axis=1))


def test_float_of_inf_strings_pads_and_starts_a_running_max(rng):
    x = -1 - np.abs(rng.standard_normal((5, 30))).astype(np.float32)  # a padding of 0 would win
    out = np.full(5, np.nan, np.float32)
    _row_max[5](x, out, COLS=32)
    np.testing.assert_array_equal(out, x.max(axis=1))


def test_mean_broadcast_to_and_clamp_of_centered_rows(rng):
    from test_tile_codegen import center_and_clamp

    x = (2 * rng.standard_normal((10, 64))).astype(np.float16)
    means = np.full(10, np.nan, np.float32)
    out = np.full_like(x, np.nan)
    center_and_clamp[cdiv(10, 4)](x, means, out, R=4, C=64)
    wide = x.astype(np.float64)
    np.testing.assert_allclose(means, wide.mean(axis=1), rtol=1e-6, atol=1e-6)
    want = np.clip(wide - wide.mean(axis=1, keepdims=True), -1, 1)
    np.testing.assert_allclose(out, want, rtol=2 ** -10, atol=2 ** -11)  # float16's rounding


@tile.kernel
def _int_means(x, overall, columns, B: vg.constexpr):
    t = tile.load(x, index=(0, 0), shape=(B, B))
    tile.store(overall, index=(0,), tile=tile.full((1,), t.mean(), vg.float32))
    tile.store(columns, index=(0,), tile=tile.mean(t, axis=0))


def test_the_mean_of_integers_is_float32(rng):
    x = rng.integers(-1000, 1000, (16, 16)).astype(np.int32)
    overall, columns = np.full(1, np.nan, np.float32), np.full(16, np.nan, np.float32)
    _int_means[1](x, overall, columns, B=16)
    np.testing.assert_allclose(overall, x.mean(), rtol=1e-6)
    np.testing.assert_allclose(columns, x.mean(axis=0), rtol=1e-6)


@tile.kernel
def _clamped(x, lo, hi, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.clamp(tile.load(x, index=(0,), shape=(B,)), lo, hi))


def test_clamp_is_clip_except_that_a_nan_gives_lo(rng):
    x = rng.standard_normal(64).astype(np.float32)
    x[::7] = np.nan
    out = np.full(64, 7.0, np.float32)
    _clamped[1](x, -0.5, 0.75, out, B=64)
    np.testing.assert_array_equal(out, np.where(np.isnan(x), -0.5, np.clip(x, -0.5, 0.75)))
    _clamped[1](x, 1.0, -1.0, out, B=64)
    np.testing.assert_array_equal(out, np.full(64, -1.0))  # lo > hi gives hi, as np.clip
