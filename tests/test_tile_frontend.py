"""Tile-track frontend: the typed IR of `@tile.kernel`s, and the errors users get."""
import math

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import simt, tile
from verdigris.frontend import walk
from verdigris.ir import nodes as N
from verdigris.ir import tiles as X
from verdigris.ir.printer import format_kernel
from verdigris.ir.tiles import TileType


def typed_ir(kernel, *args, **kwargs) -> N.Kernel:
    """The frontend's IR for these arguments, before any safety check."""
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        typed_ir(kernel, *args, **kwargs)
    return info.value


def assert_points_at(err: vg.Error, marker: str):
    located.assert_points_at(err, marker, __file__)


def nodes(kernel, cls) -> list:
    return [n for n in walk(kernel.body) if isinstance(n, cls)]


def check_tile_invariants(kernel: N.Kernel) -> None:
    """What ir/tiles.py promises the backends, for every tile node of `kernel`."""
    for e in walk(kernel.body):
        if isinstance(e, X.TileExpr) and not isinstance(e, X.TileReduce):
            assert e.shape and all(isinstance(n, int) and n > 0 for n in e.shape), e
        if isinstance(e, X.TileMap):
            assert all(getattr(a, "shape", None) == e.shape for a in e.args), e
            same = {"cast": [], "where": e.args[1:], "lshift": e.args[:1], "rshift": e.args[:1]}
            operands = same.get(e.op, e.args)
            assert len({a.dtype for a in operands}) <= 1, e
            if e.op == "where":
                assert e.args[0].dtype is vg.bool_ and e.args[1].dtype is e.dtype
        elif isinstance(e, X.Broadcast):
            assert len(e.value.shape) == len(e.shape)
            assert all(a in (1, b) for a, b in zip(e.value.shape, e.shape))
        elif isinstance(e, X.Splat):
            assert getattr(e.value, "shape", ()) == ()
        elif isinstance(e, (X.TileStore, X.TileAtomic)):
            assert e.value.dtype is e.array.dtype and len(e.value.shape) == e.array.type.ndim
        elif isinstance(e, (X.Gather, X.Scatter)):
            shape = e.shape if isinstance(e, X.Gather) else e.value.shape
            assert all(i.shape == shape and i.dtype is vg.int64 for i in e.indices)
    for name, t in kernel.locals.items():
        assert isinstance(t, (vg.DType, TileType)), name


F32 = np.zeros(1000, np.float32)
M32 = np.zeros((7, 100), np.float32)


# ----------------------------------------------------------------------------- programs


@tile.kernel
def add(a, b, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    x = tile.load(a, index=(i,), shape=(BLOCK,))   # index counts tiles, not elements
    y = tile.load(b, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=x + y)        # edge tiles are masked


def test_design_add_example():
    k = typed_ir(add, F32, F32, F32, BLOCK=1024)
    assert k.track == "tile" and k.reads == {"a", "b"} and k.writes == {"out"}
    assert k.locals["x"] == TileType(vg.float32, (1024,)) and k.locals["i"] is vg.int32
    loads = nodes(k, X.TileLoad)
    assert [ld.array.name for ld in loads] == ["a", "b"] and loads[0].shape == (1024,)
    assert loads[0].index[0].dtype is vg.int64 and loads[0].padding.value == 0.0
    (store,) = nodes(k, X.TileStore)
    assert store.value.op == "add" and store.value.shape == (1024,)
    assert isinstance(store.value.args[0], X.TileVar) and store.value.args[0].name == "x"
    text = format_kernel(k)
    assert "out@[int64(i)] = add:f32[1024](x, y)" in text
    assert "x: tile<float32[1024]>" in text
    assert format_kernel(typed_ir(add, F32, F32, F32, BLOCK=1024)) == text
    assert "load:f32[96]" in format_kernel(typed_ir(add, F32, F32, F32, BLOCK=96))
    check_tile_invariants(k)


@tile.kernel
def row_softmax(x, out, N: vg.constexpr):
    r = tile.bid(0)
    row = tile.load(x, index=(r, 0), shape=(1, N), padding=-math.inf)
    z = row - tile.max(row, axis=1, keepdims=True)
    num = tile.exp(z)
    tile.store(out, index=(r, 0), tile=num / num.sum(axis=1, keepdims=True))


def test_row_softmax():
    k = typed_ir(row_softmax, M32, M32, N=100)
    (load,) = nodes(k, X.TileLoad)
    assert load.shape == (1, 100) and load.padding.value == -math.inf
    reduces = nodes(k, X.TileReduce)
    assert [(r.op, r.axis, r.shape) for r in reduces] == [("max", 1, (1,)), ("sum", 1, (1,))]
    (store,) = nodes(k, X.TileStore)
    assert store.value.op == "truediv" and store.value.shape == (1, 100)
    assert [m.op for m in nodes(k, X.TileMap)] == ["sub", "exp", "truediv"]
    check_tile_invariants(k)


@tile.kernel
def layer_norm(x, w, b, out, eps, N: vg.constexpr):
    r = tile.bid(0)
    row = tile.load(x, index=(r, 0), shape=(1, N)).astype(vg.float32)
    mean = tile.sum(row) / N
    centered = row - mean
    var = tile.sum(centered * centered) / N
    y = centered * vg.math.rsqrt(var + eps)
    y = y * tile.load(w, index=(0,), shape=(N,)) + tile.load(b, index=(0,), shape=(N,))
    tile.store(out, index=(r, 0), tile=y)


def test_layer_norm_reductions_give_scalars():
    h = np.zeros((5, 48), np.float16)
    k = typed_ir(layer_norm, h, np.zeros(48, np.float16), np.zeros(48, np.float16), h, 1e-5, N=48)
    sums = nodes(k, X.TileReduce)
    assert all(s.axis is None and s.shape == () and s.dtype is vg.float32 for s in sums)
    assert k.locals["mean"] is vg.float32 and k.locals["var"] is vg.float32
    assert k.locals["y"] == TileType(vg.float32, (1, 48))
    rsqrt = next(e for e in walk(k.body) if isinstance(e, N.MathCall))
    assert rsqrt.func == "rsqrt" and rsqrt.dtype is vg.float32  # scalar: computed once
    (store,) = nodes(k, X.TileStore)
    assert store.value.op == "cast" and store.value.dtype is vg.float16
    check_tile_invariants(k)


@tile.kernel
def outer_sum(col, row, out, M: vg.constexpr, N: vg.constexpr):
    c = tile.load(col, index=(0, 0), shape=(M, 1))
    r = tile.load(row, index=(0,), shape=(N,))
    tile.store(out, index=(0, 0), tile=c + r)


def test_broadcasting_row_and_column_to_a_matrix():
    k = typed_ir(outer_sum, np.zeros((6, 1), np.float32), np.zeros(10, np.int32),
                 np.zeros((6, 10), np.float32), M=6, N=10)
    (store,) = nodes(k, X.TileStore)
    total = store.value
    assert total.op == "add" and total.shape == (6, 10) and total.dtype is vg.float32
    left, right = total.args
    assert isinstance(left, X.Broadcast) and left.value.shape == (6, 1)
    # the int32 row is cast, given a leading axis, then stretched
    assert isinstance(right, X.Broadcast) and isinstance(right.value, X.Reshape)
    assert right.value.shape == (1, 10) and right.value.value.op == "cast"
    check_tile_invariants(k)


@tile.kernel
def promotions(a, h, out):
    x = tile.load(a, index=(0,), shape=(8,))
    y = tile.load(h, index=(0,), shape=(8,))
    tile.store(out, index=(0,), tile=(y * 2.0).astype(vg.float32) + x / 2 + (x > 3) * y)


def test_promotion_follows_scalar_rules_with_weak_literals():
    k = typed_ir(promotions, np.zeros(8, np.int32), np.zeros(8, np.float16), np.zeros(8, np.float32))
    doubled = next(m for m in nodes(k, X.TileMap) if m.op == "mul" and m.args[0].name == "y")
    assert doubled.dtype is vg.float16 and doubled.args[1].value.dtype is vg.float16  # weak 2.0
    half = next(m for m in nodes(k, X.TileMap) if m.op == "truediv")
    assert half.dtype is vg.float64  # int32 / int -> float64, as in NumPy
    gt = next(m for m in nodes(k, X.TileMap) if m.op == "gt")
    assert gt.dtype is vg.bool_ and isinstance(gt.args[1], X.Splat) and gt.args[1].value.dtype is vg.int32
    check_tile_invariants(k)


@tile.kernel
def running_sum(x, out, B: vg.constexpr):
    acc = tile.zeros((B,), vg.float32)
    k = 0
    while k < x.shape[0] // B:
        acc += tile.load(x, index=(k,), shape=(B,))
        k += 1
    for j in range(3):
        acc = acc * 0.5
    tile.store(out, index=(0,), tile=acc)


def test_loops_carry_an_accumulator_tile():
    k = typed_ir(running_sum, np.zeros(640, np.float16), np.zeros(64, np.float32), B=64)
    assert k.locals["acc"] == TileType(vg.float32, (64,))
    (loop,) = nodes(k, N.While)
    (update,) = [s for s in loop.body if isinstance(s, N.Assign) and s.name == "acc"]
    assert update.value.op == "add" and update.value.args[1].op == "cast"  # float16 -> float32
    assert nodes(k, N.For)[0].body[0].value.shape == (64,)
    check_tile_invariants(k)


@tile.kernel
def transpose(a, out, BM: vg.constexpr, BN: vg.constexpr):
    t = tile.load(a, index=(tile.bid(0), tile.bid(1)), shape=(BM, BN))
    flat = t.reshape((BM * BN,)).reshape(BN, BM)
    back = flat.reshape((BM, BN)).permute(1, 0)
    tile.store(out, index=(tile.bid(1), tile.bid(0)), tile=t.T + back + tile.permute(t, (1, 0)))


def test_reshape_permute_and_T():
    k = typed_ir(transpose, np.zeros((30, 20), np.float32), np.zeros((20, 30), np.float32), BM=6, BN=4)
    assert sorted(r.shape for r in nodes(k, X.Reshape)) == [(4, 6), (6, 4), (24,)]
    perms = nodes(k, X.Permute)
    assert len(perms) == 3 and all(p.perm == (1, 0) and p.shape == (4, 6) for p in perms)
    check_tile_invariants(k)


@tile.kernel
def clamp_where(a, out, B: vg.constexpr):
    x = tile.load(a, index=(tile.bid(0),), shape=(B,))
    tile.store(out, index=(tile.bid(0),), tile=tile.where(x > 0, x, 0))


def test_where():
    k = typed_ir(clamp_where, F32, F32, B=128)
    (w,) = [m for m in nodes(k, X.TileMap) if m.op == "where"]
    assert w.dtype is vg.float32 and isinstance(w.args[2], X.Splat) and w.args[2].value.value == 0.0
    check_tile_invariants(k)


@tile.kernel
def dropout(x, out, seed, p, B: vg.constexpr):
    i = tile.bid(0)
    offsets = i * B + tile.arange(B)
    keep = tile.rand(seed, offsets) > p
    v = tile.load(x, index=(i,), shape=(B,))
    tile.store(out, index=(i,), tile=tile.where(keep, v / (1 - p), 0.0))


def test_rand():
    k = typed_ir(dropout, F32, F32, 7, 0.25, B=256)
    (rand,) = nodes(k, X.Rand)
    assert rand.dtype is vg.float32 and rand.shape == (256,)
    assert rand.seed.dtype is vg.int64 and rand.offsets.dtype is vg.int32
    assert nodes(k, X.Arange)[0].shape == (256,)
    check_tile_invariants(k)


@tile.kernel
def permute_rows(src, perm, out, hist, M: vg.constexpr, N: vg.constexpr):
    rows = tile.load(perm, index=(0,), shape=(M,))
    cols = tile.arange(N)
    block = tile.gather(src, (rows.reshape((M, 1)), cols), padding=-1.0)
    tile.scatter(out, (tile.arange(M).reshape((M, 1)), cols), block)
    tile.scatter_add(hist, rows, tile.full((M,), 1, vg.int32))


def test_gather_and_scatter():
    k = typed_ir(permute_rows, np.zeros((8, 5), np.float32), np.zeros(8, np.int64),
                 np.zeros((8, 5), np.float32), np.zeros(8, np.int32), M=8, N=5)
    assert k.reads == {"src", "perm"} and k.writes == {"out", "hist"}
    (g,) = nodes(k, X.Gather)
    assert g.shape == (8, 5) and g.padding.value == -1.0
    plain, counted = nodes(k, X.Scatter)
    assert not plain.atomic and plain.value.shape == (8, 5)
    assert counted.atomic == "add" and counted.indices[0].shape == (8,)
    check_tile_invariants(k)


@tile.kernel
def box(a, out, SHAPE: vg.constexpr):
    t = tile.load(a, index=(tile.bid(0), 0), shape=SHAPE)
    tile.store(out, index=(tile.bid(0), 0), tile=tile.full(SHAPE, tile.max(t), vg.float32))
    tile.atomic_add(out, (0, 0), tile.zeros(t.shape, vg.float32) + t.shape[1])


def test_constexpr_tile_shapes_and_scalar_fills():
    k = typed_ir(box, M32, M32, SHAPE=(3, 24))
    assert nodes(k, X.TileLoad)[0].shape == (3, 24)
    fill = nodes(k, X.TileStore)[0].value
    assert isinstance(fill, X.Splat) and isinstance(fill.value, X.TileReduce)
    (atomic,) = nodes(k, X.TileAtomic)
    assert atomic.value.shape == (3, 24) and "out" in k.writes
    check_tile_invariants(k)


@vg.func
def gelu(x):
    return 0.5 * x * (1.0 + tile.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


@tile.kernel
def bias_gelu(a, bias, out, B: vg.constexpr):
    x = tile.load(a, index=(tile.bid(0),), shape=(B,)) + tile.load(bias, index=(0,), shape=(B,))
    tile.store(out, index=(tile.bid(0),), tile=gelu(x) + tile.sigmoid(x) + math.exp(x.sum()))


def test_func_helpers_on_tiles_and_math_spellings():
    k = typed_ir(bias_gelu, F32, F32, F32, B=128)
    ret = next(t for name, t in k.locals.items() if name.endswith("return0"))
    assert ret == TileType(vg.float32, (128,))
    ops = [m.op for m in nodes(k, X.TileMap)]
    assert "tanh" in ops and "sigmoid" in ops and ops.count("mul") >= 5
    assert any(isinstance(e, N.MathCall) and e.func == "exp" for e in walk(k.body))  # of a scalar
    check_tile_invariants(k)


@tile.kernel
def reductions(a, idx, tot, B: vg.constexpr):
    t = tile.load(a, index=(0, 0), shape=(B, B))
    tile.store(idx, index=(0,), tile=tile.argmax(t, axis=-1))
    tile.store(tot, index=(0,), tile=t.cumsum(1).sum(0) + tile.num_blocks(0))


def test_reduction_and_scan_types():
    k = typed_ir(reductions, np.zeros((4, 4), np.int8), np.zeros(4, np.int32), np.zeros(4, np.int32), B=4)
    arg, total = nodes(k, X.TileReduce)
    assert arg.op == "argmax" and arg.axis == 1 and arg.dtype is vg.int32 and arg.shape == (4,)
    assert total.op == "sum" and total.axis == 0 and total.dtype is vg.int32
    (scan,) = nodes(k, X.TileScan)
    assert scan.axis == 1 and scan.dtype is vg.int32  # int8 accumulates in int32
    assert any(isinstance(e, N.Special) and e.kind == "grid_dim" for e in walk(k.body))
    check_tile_invariants(k)


def test_safety_check_accepts_tile_kernels_for_now():
    from verdigris import safety

    k = typed_ir(add, F32, F32, F32, BLOCK=128)
    assert safety.check(k).errors == []


def test_intrinsics_raise_on_the_host():
    with pytest.raises(vg.CompileError, match="inside a verdigris kernel"):
        tile.load(F32, index=(0,), shape=(4,))
    assert tile.exp is vg.math.exp and tile.maximum is vg.math.max


# ----------------------------------------------------------------------------- errors


@tile.kernel
def mismatched(a, out):
    x = tile.load(a, index=(0,), shape=(128,))
    y = tile.load(a, index=(0,), shape=(64,))
    tile.store(out, index=(0,), tile=x + y)  # marker: mismatched


def test_broadcast_mismatch_names_both_shapes():
    err = compile_error(mismatched, F32, F32)
    assert "(128,)" in err.message and "(64,)" in err.message and "broadcast" in err.message
    assert_points_at(err, "marker: mismatched")


@tile.kernel
def tile_set_in_one_arm(a, out):
    if tile.bid(0) > 0:
        t = tile.load(a, index=(tile.bid(0),), shape=(128,))
    tile.store(out, index=(tile.bid(0),), tile=t)  # marker: one arm


@tile.kernel
def tile_set_in_both_arms(a, out):
    if tile.bid(0) > 0:
        t = tile.load(a, index=(tile.bid(0),), shape=(128,))
    else:
        t = tile.zeros((128,), vg.float32)
    tile.store(out, index=(tile.bid(0),), tile=t)


def test_a_tile_assigned_in_one_arm_only_is_refused_at_its_read():
    err = compile_error(tile_set_in_one_arm, F32, F32)
    assert err.message.startswith("variable 't' may be used before it is assigned")
    assert_points_at(err, "marker: one arm")
    assert typed_ir(tile_set_in_both_arms, F32, F32).body


@tile.kernel
def misspelled(a, out):
    tile.store(out, index=(0,), tile=tile.expp(tile.load(a, index=(0,), shape=(128,))))  # marker: misspelled


def test_a_misspelled_tile_function_is_named_with_the_closest_ones():
    err = compile_error(misspelled, F32, F32)
    assert err.message == "module 'verdigris.tile' has no attribute 'expp'"
    assert err.hint == "did you mean exp or exp2 or expm1?"
    assert_points_at(err, "marker: misspelled")


@tile.kernel
def bad_reshape(a, out):
    x = tile.load(a, index=(0,), shape=(128,))
    tile.store(out, index=(0,), tile=x.reshape((64, 4)))  # marker: bad reshape


def test_reshape_to_another_size():
    err = compile_error(bad_reshape, F32, M32)
    assert "(128,)" in err.message and "(64, 4)" in err.message
    assert_points_at(err, "marker: bad reshape")


@tile.kernel
def bad_axis(a, out):
    x = tile.load(a, index=(0, 0), shape=(4, 8))
    tile.store(out, index=(0,), tile=tile.sum(x, axis=2))  # marker: bad axis


def test_axis_out_of_range():
    err = compile_error(bad_axis, M32, F32)
    assert "axis 2" in err.message and "(4, 8)" in err.message
    assert_points_at(err, "marker: bad axis")


@tile.kernel
def bad_store_rank(a, out):
    x = tile.load(a, index=(0, 0), shape=(4, 8))
    tile.store(out, index=(0,), tile=x)  # marker: store rank


def test_store_of_another_rank():
    err = compile_error(bad_store_rank, M32, F32)
    assert "(4, 8)" in err.message and "1-d" in err.message
    assert_points_at(err, "marker: store rank")


@tile.kernel
def shape_changes_in_loop(a, out):
    acc = tile.zeros((64,), vg.float32)
    for k in range(4):
        acc = acc.reshape((8, 8))  # marker: loop shape
    tile.store(out, index=(0,), tile=acc)


def test_a_tile_variable_keeps_its_shape():
    err = compile_error(shape_changes_in_loop, F32, F32)
    assert "(64,)" in err.message and "(8, 8)" in err.message and "'acc'" in err.message
    assert_points_at(err, "marker: loop shape")


@tile.kernel
def dtype_widens_in_loop(a, out):
    acc = tile.zeros((64,), vg.int32)
    for k in range(4):
        acc += tile.load(a, index=(k,), shape=(64,))  # marker: loop dtype
    tile.store(out, index=(0,), tile=acc)


def test_a_tile_variable_keeps_its_dtype():
    err = compile_error(dtype_widens_in_loop, F32, np.zeros(64, np.int32))
    assert "int32" in err.message and "float32" in err.message and "astype" in err.hint
    assert_points_at(err, "marker: loop dtype")


@tile.kernel
def uses_thread_id(a, out):
    t = simt.thread_id(0)  # marker: simt in tile
    tile.store(out, index=(t,), tile=tile.load(a, index=(t,), shape=(4,)))


@simt.kernel
def uses_tile_load(a, out):
    x = tile.load(a, index=(0,), shape=(4,))  # marker: tile in simt
    out[0] = 0.0


def test_intrinsics_of_the_other_track_are_refused():
    err = compile_error(uses_thread_id, F32, F32)
    assert "simt.thread_id() belongs to the simt track" in err.message and "tile kernel" in err.message
    assert_points_at(err, "marker: simt in tile")
    err = compile_error(uses_tile_load, F32, F32)
    assert "tile.load() belongs to the tile track" in err.message and "simt kernel" in err.message
    assert_points_at(err, "marker: tile in simt")


@tile.kernel
def tile_as_scalar(a, out):
    x = tile.load(a, index=(0,), shape=(16,))
    if x > 0:  # marker: tile condition
        tile.store(out, index=(0,), tile=x)


@tile.kernel
def runtime_shape(a, out, n):
    x = tile.load(a, index=(0,), shape=(n,))  # marker: runtime shape
    tile.store(out, index=(0,), tile=x)


@tile.kernel
def load_rank(a, out):
    x = tile.load(a, index=(0,), shape=(4, 4))  # marker: load rank
    tile.store(out, index=(0,), tile=x)


@tile.kernel
def element_store(a, out):
    out[0] = tile.load(a, index=(0,), shape=(4,))  # marker: element store


@pytest.mark.parametrize("kernel, args, marker, words", [
    (tile_as_scalar, (F32, F32), "marker: tile condition", ["(16,)", "scalar"]),
    (runtime_shape, (F32, F32, 4), "marker: runtime shape", ["constant"]),
    (load_rank, (F32, F32), "marker: load rank", ["(4, 4)", "1-d"]),
    (element_store, (F32, F32), "marker: element store", ["(4,)", "tile.store"]),
])
def test_other_misuses(kernel, args, marker, words):
    err = compile_error(kernel, *args)
    assert all(w in str(err) for w in words), str(err)
    assert_points_at(err, marker)


# ----------------------------------------------------------------------------- runs (cpu)


def test_run_add_with_a_partial_edge_tile(rng):
    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    add[vg.cdiv(n, 96)](a, b, out, BLOCK=96)
    np.testing.assert_allclose(out, a.astype(np.float64) + b, rtol=1e-6)


def test_run_softmax_and_layer_norm(rng):
    x = (rng.standard_normal((7, 100)) * 4).astype(np.float32)
    out = np.full_like(x, np.nan)
    row_softmax[7](x, out, N=100)
    e = np.exp(x - x.max(1, keepdims=True).astype(np.float64))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

    h = rng.standard_normal((5, 48)).astype(np.float16)
    w, b = (rng.standard_normal(48).astype(np.float16) for _ in range(2))
    out = np.full_like(h, np.nan)
    layer_norm[5](h, w, b, out, 1e-5, N=48)
    hf = h.astype(np.float64)
    ref = (hf - hf.mean(1, keepdims=True)) / np.sqrt(hf.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=4e-3, atol=4e-3)


def test_run_broadcasting_and_a_loop_carried_tile(rng):
    col, row = rng.standard_normal((6, 1)).astype(np.float32), rng.integers(-50, 50, 10, np.int32)
    out = np.full((6, 10), np.nan, np.float32)
    outer_sum[1](col, row, out, M=6, N=10)
    np.testing.assert_allclose(out, col.astype(np.float64) + row, rtol=1e-6)

    x = rng.standard_normal(640).astype(np.float16)
    acc = np.full(64, np.nan, np.float32)
    running_sum[1](x, acc, B=64)
    ref = x.astype(np.float64).reshape(10, 64).sum(0) * 0.125
    np.testing.assert_allclose(acc, ref, rtol=1e-5, atol=1e-5)


def test_run_transpose_and_gather_scatter(rng):
    a = rng.standard_normal((30, 20)).astype(np.float32)
    out = np.full((20, 30), np.nan, np.float32)
    transpose[5, 5](a, out, BM=6, BN=4)
    np.testing.assert_allclose(out, 3.0 * a.T.astype(np.float64), rtol=1e-6)

    src = rng.standard_normal((8, 5)).astype(np.float32)
    perm = rng.permutation(8).astype(np.int64)
    out, hist = np.full((8, 5), np.nan, np.float32), np.zeros(8, np.int32)
    permute_rows[1](src, perm, out, hist, M=8, N=5)
    np.testing.assert_array_equal(out, src[perm])
    np.testing.assert_array_equal(hist, np.ones(8, np.int32))


@tile.kernel
def masks(a, out, B: vg.constexpr):
    x = tile.load(a, index=(0,), shape=(B,))
    inside = (x > -1.0) & (x < 1.0)
    tile.store(out, index=(0,), tile=tile.where(~inside, tile.full((B,), 2.0), x))


def test_bool_tile_masks():
    k = typed_ir(masks, F32, F32, B=16)
    ops = [m.op for m in nodes(k, X.TileMap)]
    assert "not" in ops and "and" in ops and k.locals["inside"] == TileType(vg.bool_, (16,))
    check_tile_invariants(k)


@tile.kernel
def bad_permute(a, out):
    x = tile.load(a, index=(0, 0), shape=(4, 8))
    tile.store(out, index=(0, 0), tile=x.permute(0, 0))  # marker: bad permute


def test_permute_needs_a_permutation():
    err = compile_error(bad_permute, M32, M32)
    assert "(0, 0)" in err.message and "(4, 8)" in err.message
    assert_points_at(err, "marker: bad permute")


@tile.kernel
def matmul_operator(a, b, c, B: vg.constexpr):
    x = tile.load(a, index=(0, 0), shape=(B, B))
    y = tile.load(b, index=(0, 0), shape=(B, B))
    tile.store(c, index=(tile.bid(0), 0), tile=x @ y.T)


def test_the_matmul_operator_is_tile_dot(rng):
    a, b = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    c = np.full((16, 16), np.nan, np.float32)
    matmul_operator[1](a, b, c, B=16)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-5)
    ir = matmul_operator.specialize(a, b, c, B=16)
    assert any(isinstance(n, X.TileDot) for n in walk(ir.body))


@tile.kernel
def oversized(a, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(a, index=(i,), shape=(BLOCK,)))  # MARK-huge


def test_a_tile_past_the_limit_is_refused_at_its_line():
    x = np.zeros(8, np.float32)
    with pytest.raises(vg.CompileError, match=r"2,097,152 elements, more than the 1,048,576") as info:
        oversized.specialize(x, x, BLOCK=1 << 21)
    assert_points_at(info.value, "MARK-huge")
    oversized.specialize(x, x, BLOCK=1 << 20)  # at the limit: accepted


@tile.kernel
def shapes_from_names(x, out, B: vg.constexpr):
    i = tile.bid(0)
    half = B // 2
    t = tile.load(x, index=(i, 0), shape=(1, half * 2))
    rows, cols = t.shape
    width = 16
    flat = t.reshape((cols,)) + tile.arange(width * (cols // width)).astype(vg.float32)
    tile.store(out, index=(i,), tile=flat.reshape((rows * cols,)))


@tile.kernel
def shape_from_a_reassigned_name(x, out, B: vg.constexpr):
    n = B
    if tile.bid(0) > 0:
        n = 2 * B
    tile.store(out, index=(tile.bid(0),), tile=tile.arange(n).astype(vg.float32))  # MARK-varying


def test_names_bound_once_to_ints_are_tile_shapes(rng):
    x = rng.standard_normal((3, 32)).astype(np.float32)
    out = np.full(96, np.nan, np.float32)
    shapes_from_names[3](x, out, B=32)
    np.testing.assert_array_equal(out, (x + np.arange(32, dtype=np.float32)).ravel())
    with pytest.raises(vg.CompileError, match="a tile shape must be a constant") as info:
        shape_from_a_reassigned_name.specialize(x, out, B=32)
    assert_points_at(info.value, "MARK-varying")


@tile.kernel
def by_dtype(x, out, B: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    if x.dtype == vg.float64:
        t = t * 2.0
    acc = tile.zeros((B,), out.dtype if out.dtype == vg.float64 else vg.float32)
    tile.store(out, index=(i,), tile=acc + t)


@pytest.mark.parametrize("dtype, scale", [(np.float64, 2.0), (np.float32, 1.0)])
def test_dtype_comparisons_choose_while_compiling(rng, dtype, scale):
    x = rng.standard_normal(100).astype(dtype)
    out = np.full(100, np.nan, dtype)
    by_dtype[vg.cdiv(100, 32)](x, out, B=32)
    np.testing.assert_array_equal(out, x.astype(np.float64) * scale)
    locals_ = typed_ir(by_dtype, x, out, B=32).locals
    assert locals_["acc"] == TileType(vg.float64 if dtype is np.float64 else vg.float32, (32,))


@tile.kernel
def new_axes(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    outer = t[:, None] * t[None, :]
    tile.store(out, index=(0, 0), tile=outer + t[..., None] + t[None][0, ...])  # marker: new axes


def test_none_subscripts_add_axes_as_reshapes():
    err = compile_error(new_axes, F32, M32, B=8)
    assert "indexed only with slices of constant bounds" in err.message and "t[i:i + 1]" in err.hint
    assert_points_at(err, "marker: new axes")


@tile.kernel
def outer_by_new_axes(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0, 0), tile=t[:, None] * t[None, :] + t[..., None] + t[None][:, ...])


def test_new_axes_reshape_without_moving_data():
    k = typed_ir(outer_by_new_axes, F32, M32, B=8)
    shapes = sorted(r.shape for r in nodes(k, X.Reshape))
    assert shapes == [(1, 8), (1, 8), (8, 1), (8, 1)]
    check_tile_invariants(k)


@tile.kernel
def too_many_axes(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0, 0), tile=t[:, :, None])  # marker: too many


@tile.kernel
def assigns_an_element(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    t[0] = 1.0  # marker: element assignment
    tile.store(out, index=(0,), tile=t)


@pytest.mark.parametrize("kernel, args, marker, words", [
    (too_many_axes, (F32, M32), "marker: too many", ["(8,) has 1 axis", "2 slices"]),
    (assigns_an_element, (F32, F32), "marker: element assignment", ["element by element",
                                                                    "tile.where"]),
])
def test_other_tile_subscripts_are_refused(kernel, args, marker, words):
    err = compile_error(kernel, *args, B=8)
    assert all(w in str(err) for w in words), str(err)
    assert_points_at(err, marker)


@tile.kernel
def and_of_tiles(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=tile.where((t > 0) and (t < 1), t, 0.0))  # marker: and


@tile.kernel
def scalar_or_tile(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=tile.where(tile.bid(0) > 0 or t > 0, t, 0.0))  # marker: or


@tile.kernel
def chained_on_tiles(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=tile.where(0.0 < t < 1.0, t, 0.0))  # marker: chained


@pytest.mark.parametrize("kernel, marker, what", [
    (and_of_tiles, "marker: and", "Python's `and`"),
    (scalar_or_tile, "marker: or", "Python's `or`"),
    (chained_on_tiles, "marker: chained", "a chained comparison"),
])
def test_and_or_and_chained_comparisons_of_tiles_point_to_the_elementwise_operators(
        kernel, marker, what):
    err = compile_error(kernel, F32, F32, B=4)
    assert err.message.startswith(what) and "cannot work elementwise" in err.message
    assert "(4,)" in err.message and "(t > 0) & (t < 1)" in err.hint
    assert_points_at(err, marker)


@tile.kernel
def in_open_interval(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=tile.where((0.0 < t) & (t < 1.0) | ~(t == t), t, -1.0))


def test_elementwise_operators_combine_the_comparisons(rng):
    x = rng.uniform(-1, 2, 64).astype(np.float32)
    x[:3] = np.nan
    out = np.full(64, 7.0, np.float32)
    in_open_interval[1](x, out, B=64)
    np.testing.assert_array_equal(out, np.where((0 < x) & (x < 1) | np.isnan(x), x, -1.0))


@tile.kernel
def conveniences(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    m = t.mean()
    rows = tile.broadcast_to(t, (2, B))
    c = tile.clamp(t, 0, 1)
    tile.store(out, index=(0,), tile=(rows.sum(axis=0) + c + m).to(vg.float32))


@pytest.mark.parametrize("dtype, mean, summed, clamped", [
    (np.float16, vg.float16, vg.float32, vg.float16),
    (np.float64, vg.float64, vg.float64, vg.float64),
    (np.int8, vg.float32, vg.float32, vg.int8),
])
def test_mean_broadcast_to_clamp_and_to_types(dtype, mean, summed, clamped):
    k = typed_ir(conveniences, np.zeros(64, dtype), F32, B=64)
    assert k.locals["m"] is mean and k.locals["c"] == TileType(clamped, (64,))
    assert k.locals["rows"].shape == (2, 64)
    means = [r for r in nodes(k, X.TileReduce) if r.shape == ()]
    assert [r.dtype for r in means] == [summed]
    check_tile_invariants(k)


@tile.kernel
def broadcast_to_fewer_axes(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0, 0), shape=(2, B))
    tile.store(out, index=(0,), tile=tile.broadcast_to(t, (B,)))  # marker: drops an axis


@tile.kernel
def broadcast_to_another_size(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0, 0), tile=tile.broadcast_to(t, (2, 3)))  # marker: another size


@tile.kernel
def mean_of_a_scalar(x, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.full((B,), tile.mean(tile.bid(0))))  # marker: mean


@pytest.mark.parametrize("kernel, args, marker, words", [
    (broadcast_to_fewer_axes, (M32, F32), "marker: drops an axis", ["(2, 4)", "(4,)", "drops"]),
    (broadcast_to_another_size, (F32, M32), "marker: another size", ["(4,)", "(2, 3)"]),
    (mean_of_a_scalar, (F32, F32), "marker: mean", ["tile.mean() needs a tile"]),
])
def test_conveniences_refuse_misuses_at_their_line(kernel, args, marker, words):
    err = compile_error(kernel, *args, B=4)
    assert all(w in str(err) for w in words), str(err)
    assert_points_at(err, marker)
