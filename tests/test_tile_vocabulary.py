"""cuTile's spellings in the tile track (issue #26 item 3, docs/api.md "Tile track"):
`tile.arange(n, dtype=)`, `tile.num_tiles(array, axis, shape)`, `tile.transpose` (the
`Permute` that `t.T` and `t.permute` make), 0-d loads (`shape=()`: one element as a scalar,
`padding` outside) and `latency=` / `allow_tma=` hints on loads and stores (checked, not
used). Each runs on the cpu backend against a float64 NumPy reference, and its PTX assembles with ptxas."""
import re

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.ir import ArrayType
from verdigris.ir import tiles as X

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def poisoned(shape, dtype):
    out = np.empty(shape, dtype)
    out[...] = np.nan if np.dtype(dtype).kind == "f" else -7
    return out


def typed_ir(kernel, *args, **kwargs):
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        kernel[1](*args, **kwargs)
    return info.value


# ----------------------------------------------------------------------------- arange(dtype=)


@tile.kernel
def offsets(out, start, B: vg.constexpr, DT: vg.constexpr):
    i = tile.bid(0)
    o = tile.arange(B, dtype=DT)
    tile.store(out, index=(i,), tile=o * 3 + start)


@pytest.mark.parametrize("dtype", [np.int64, np.int16, np.uint8, np.float32, np.float16,
                                   np.float64])
def test_arange_of_a_dtype_is_numpys(dtype, rng):
    start = int(rng.integers(0, 50))
    out = poisoned(256, np.float64)
    offsets[2](out, start, B=128, DT=dtype)
    scaled = np.arange(128, dtype=dtype) * dtype(3)  # in DT, wrapping as the kernel does
    # an int argument is int64 (strong): integers add in int64, floats in their own dtype
    block = scaled + (dtype(start) if np.dtype(dtype).kind == "f" else np.int64(start))
    expected = np.concatenate([block] * 2)
    assert typed_ir(offsets, out, start, B=128, DT=dtype).locals  # it builds for each dtype
    np.testing.assert_array_equal(out, expected.astype(np.float64))


def test_arange_of_a_float16_rounds_past_2048_as_numpy_does():
    out = poisoned(4096, np.float64)
    offsets[1](out, 0, B=4096, DT=np.float16)
    np.testing.assert_array_equal(out, np.arange(4096, dtype=np.float16) * np.float16(3))


def test_arange_keeps_its_type_an_int64_operand_promotes_it(rng):
    k = typed_ir(offsets, poisoned(256, np.float64), 1, B=128, DT=np.int64)
    aranges = [e for e in _walk(k) if isinstance(e, X.Arange)]
    assert aranges and all(e.dtype is T.int32 for e in aranges)  # one Arange, converted


def _walk(node):
    seen = set()
    stack = [node]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for value in vars(e).values() if hasattr(e, "__dict__") else ():
            items = value if isinstance(value, (list, tuple)) else (value,)
            stack.extend(v for v in items if hasattr(v, "__dict__") and not isinstance(v, type))


@pytest.mark.parametrize("n, dtype, ok", [(128, np.int8, True), (129, np.int8, False),
                                          (256, np.uint8, True), (257, np.uint8, False),
                                          (2, np.bool_, False)])
def test_arange_refuses_a_dtype_that_cannot_hold_its_values(n, dtype, ok):
    out = poisoned(n, np.float64)
    if ok:
        offsets[1](out, 0, B=n, DT=dtype)
        np.testing.assert_array_equal(out, np.arange(n, dtype=dtype) * dtype(3))
        return
    err = compile_error(offsets, out, 0, B=n, DT=dtype)
    assert "cannot hold" in str(err)
    located.assert_points_at(err, "o = tile.arange(B, dtype=DT)", __file__)


# ----------------------------------------------------------------------------- num_tiles


@tile.kernel
def row_sums(x, out, BM: vg.constexpr, BK: vg.constexpr):
    i = tile.bid(0)
    acc = tile.zeros((BM, BK), np.float32)
    for k in range(tile.num_tiles(x, 1, (BM, BK))):
        acc += tile.load(x, index=(i, k), shape=(BM, BK))
    tile.store(out, index=(i,), tile=tile.sum(acc, axis=1))


@pytest.mark.parametrize("cols", [1, 63, 64, 65, 200])
def test_num_tiles_counts_the_partial_edge_tile(cols, rng):
    x = rng.standard_normal((37, cols)).astype(np.float32)
    out = poisoned(37, np.float32)
    row_sums[vg.cdiv(37, 8)](x, out, BM=8, BK=64)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


@tile.kernel
def counts(x, out, A0: vg.constexpr, A1: vg.constexpr):
    c = tile.full((4,), 0, np.int64)
    c = tile.where(tile.arange(4) == 0, tile.num_tiles(x, 0, (A0, A1)), c)
    c = tile.where(tile.arange(4) == 1, tile.num_tiles(x, -1, (A0, A1)), c)
    c = tile.where(tile.arange(4) == 2, tile.num_tiles(x, 1, ()), c)     # 1-element tiles
    c = tile.where(tile.arange(4) == 3, tile.num_tiles(x, axis=0, shape=(1, A1)), c)
    tile.store(out, index=(0,), tile=c)


@pytest.mark.parametrize("a0, a1", [(4, 8), (7, 3), (64, 1)])
def test_num_tiles_is_cdiv_along_the_axis(a0, a1, rng):
    rows, cols = (int(n) for n in rng.integers(1, 100, 2))
    out = np.full(4, -7, np.int64)
    counts[1](np.zeros((rows, cols), np.float32), out, A0=a0, A1=a1)
    assert out.tolist() == [-(-rows // a0), -(-cols // a1), cols, rows]


@tile.kernel
def num_tiles_of_another_rank(x, out, B: vg.constexpr):
    n = tile.num_tiles(x, 0, (B,))  # marker: rank
    tile.store(out, index=(0,), tile=tile.full((B,), n, np.int64))


def test_num_tiles_needs_a_size_per_array_axis():
    err = compile_error(num_tiles_of_another_rank, np.zeros((4, 4)), np.zeros(8, np.int64), B=8)
    assert "one size per array axis" in str(err)
    located.assert_points_at(err, "marker: rank", __file__)


# ----------------------------------------------------------------------------- transpose


@tile.kernel
def swapped(x, out, BM: vg.constexpr, BN: vg.constexpr, METHOD: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    t = tile.load(x, index=(i, j), shape=(BM, BN))
    u = t.transpose() if METHOD else tile.transpose(t)
    tile.store(out, index=(j, i), tile=u * 2)


@pytest.mark.parametrize("method", [False, True])
def test_transpose_of_a_2d_tile(method, rng):
    x = rng.standard_normal((50, 70)).astype(np.float32)
    out = poisoned((70, 50), np.float32)
    swapped[vg.cdiv(50, 16), vg.cdiv(70, 32)](x, out, BM=16, BN=32, METHOD=method)
    np.testing.assert_array_equal(out, (x.astype(np.float64) * 2).T)


def test_transpose_is_the_permute_of_t_T():
    k = typed_ir(swapped, np.zeros((50, 70), np.float32), np.zeros((70, 50), np.float32),
                 BM=16, BN=32, METHOD=False)
    permutes = [e for e in _walk(k) if isinstance(e, X.Permute)]
    assert len(permutes) == 1 and permutes[0].perm == (1, 0)


@tile.kernel
def swap_axes(x, out, A: vg.constexpr, B: vg.constexpr, C: vg.constexpr):
    t = tile.load(x, index=(0, 0, 0), shape=(A, B, C))
    tile.store(out, index=(0, 0, 0), tile=tile.transpose(t, 0, 2).transpose(axis0=-1, axis1=1))


def test_transpose_swaps_the_two_axes_named(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    out = poisoned((4, 2, 3), np.float32)
    swap_axes[1](x, out, A=2, B=3, C=4)
    np.testing.assert_array_equal(out, np.swapaxes(np.swapaxes(x, 0, 2), -1, 1))


@tile.kernel
def transpose_3d_without_axes(x, out):
    t = tile.load(x, index=(0, 0, 0), shape=(2, 2, 2))
    tile.store(out, index=(0, 0, 0), tile=tile.transpose(t))  # marker: 3d


def test_transpose_of_more_axes_names_them():
    err = compile_error(transpose_3d_without_axes, np.zeros((2, 2, 2)), np.zeros((2, 2, 2)))
    assert "needs the two axes to swap" in str(err)
    located.assert_points_at(err, "marker: 3d", __file__)


# ----------------------------------------------------------------------------- 0-d loads


@tile.kernel
def corner_scaled(x, scale, out, pad, B: vg.constexpr):
    i = tile.bid(0)
    s = tile.load(scale, index=(i, scale.shape[1] - 1 + i % 2), shape=(), padding=pad)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.store(out, index=(i,), tile=t * s)


def test_a_0d_load_is_one_element_with_padding_outside(rng):
    x = rng.standard_normal(6 * 32).astype(np.float32)
    scale = rng.standard_normal((4, 5)).astype(np.float32)  # rows 4, 5 are outside
    out = poisoned(6 * 32, np.float32)
    corner_scaled[6](x, scale, out, -2.5, B=32)
    s = np.array([scale[i, 4] if i < 4 and i % 2 == 0 else -2.5 for i in range(6)])
    np.testing.assert_array_equal(out, (x.reshape(6, 32) * s[:, None]).astype(np.float32).ravel())


@tile.kernel
def element_then_block(x, B: vg.constexpr):
    i = tile.bid(0)
    first = tile.load(x, index=(0,), shape=())         # every block reads x[0] ...
    tile.store(x, index=(i,), tile=tile.full((B,), first + 1, x.dtype))  # ... block 0 writes it


@tile.kernel
def element_then_other_block(x, out, B: vg.constexpr):
    i = tile.bid(0)
    first = tile.load(x, index=(0,), shape=())
    tile.store(out, index=(i,), tile=tile.full((B,), first + 1, x.dtype))


def test_a_0d_load_races_with_the_store_of_another_block_beside_its_fixed_twin(rng):
    x = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(vg.SafetyError) as info:
        element_then_block[2](x.copy(), B=32)
    assert info.value.code.startswith("VG2")
    assert re.search(r"block \d+ writes x\[0\] while block \d+ reads it", str(info.value))
    out = poisoned(64, np.float32)
    element_then_other_block[2](x, out, B=32)
    np.testing.assert_array_equal(out, np.full(64, x[0] + np.float32(1)))


def _element(a, k):  # a plain helper: the 0-d load inlined where it is called
    return tile.load(a, index=(k,), shape=(), padding=100)


@tile.kernel
def running_elements(x, w, out, B: vg.constexpr, STEPS: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    for k in range(STEPS):
        t = t + _element(w, i + k)  # past w's end: the padding
    tile.store(out, index=(i,), tile=t)


def test_0d_loads_in_a_loop_and_a_helper(rng):
    x = rng.standard_normal(4 * 16).astype(np.float32)
    w = rng.standard_normal(5).astype(np.float32)
    out = poisoned(4 * 16, np.float32)
    running_elements[4](x, w, out, B=16, STEPS=3)
    padded = np.concatenate([w, np.full(8, 100, np.float32)])
    expected = x.reshape(4, 16).copy()
    for i in range(4):
        for k in range(3):
            expected[i] += padded[i + k]  # in float32, in the kernel's order
    np.testing.assert_array_equal(out, expected.ravel())


# ----------------------------------------------------------------------------- latency=


@tile.kernel
def hinted(x, out, B: vg.constexpr, L: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,), latency=L)
    tile.store(out, index=(i,), tile=t + 1, latency=L)


@pytest.mark.parametrize("latency", [None, 1, 10])
def test_latency_hints_change_nothing(latency, rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = poisoned(100, np.float32)
    hinted[4](x, out, B=32, L=latency)
    np.testing.assert_array_equal(out, x + np.float32(1))


@pytest.mark.parametrize("latency", [0, 11, 2.5])
def test_a_latency_outside_1_to_10_is_refused(latency):
    err = compile_error(hinted, np.zeros(8, np.float32), np.zeros(8, np.float32), B=8, L=latency)
    assert "latency= takes None or a constant int from 1" in str(err)
    located.assert_points_at(err, "t = tile.load(x, index=(i,), shape=(B,), latency=L)", __file__)


# ----------------------------------------------------------------------------- allow_tma=


@tile.kernel
def tma_hinted(x, out, B: vg.constexpr, TMA: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,), allow_tma=TMA)
    tile.store(out, index=(i,), tile=t * 2, latency=3, allow_tma=TMA)


@pytest.mark.parametrize("allow_tma", [None, True, False])
def test_allow_tma_hints_change_nothing(allow_tma, rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = poisoned(100, np.float32)
    tma_hinted[4](x, out, B=32, TMA=allow_tma)
    np.testing.assert_array_equal(out, x * np.float32(2))


@pytest.mark.parametrize("allow_tma", [0, 1, "yes"])
def test_an_allow_tma_other_than_none_true_false_is_refused(allow_tma):
    err = compile_error(tma_hinted, np.zeros(8, np.float32), np.zeros(8, np.float32), B=8,
                        TMA=allow_tma)
    assert "allow_tma= takes None, True or False" in str(err)
    located.assert_points_at(err, "t = tile.load(x, index=(i,), shape=(B,), allow_tma=TMA)",
                             __file__)


# ----------------------------------------------------------------------------- PTX


def arr(dtype, ndim=1):
    return ArrayType(dtype, ndim, "global", True, True)


PTX_SPECS = {
    "arange_i64": (offsets, dict(out=arr(T.float64), start=T.int64, B=128, DT=T.int64)),
    "arange_f16": (offsets, dict(out=arr(T.float64), start=T.int64, B=128, DT=T.float16)),
    "num_tiles": (row_sums, dict(x=arr(T.float32, 2), out=arr(T.float32), BM=8, BK=64)),
    "transpose": (swapped, dict(x=arr(T.float32, 2), out=arr(T.float32, 2), BM=16, BN=32,
                                METHOD=False)),
    "load_0d": (corner_scaled, dict(x=arr(T.float32), scale=arr(T.float32, 2), out=arr(T.float32),
                                    pad=T.float32, B=32)),
    "latency": (hinted, dict(x=arr(T.float32), out=arr(T.float32), B=32, L=3)),
    "allow_tma": (tma_hinted, dict(x=arr(T.float32), out=arr(T.float32), B=32, TMA=False)),
    "load_0d_loop": (running_elements, dict(x=arr(T.float32), w=arr(T.float32), out=arr(T.float32),
                                            B=16, STEPS=3)),
}


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(PTX_SPECS))
def test_the_vocabulary_assembles(name, target):
    kernel_fn, specs = PTX_SPECS[name]
    codegen.assemble(codegen.compile_to_ptx(kernel_fn.specialize_types(specs), target).ptx,
                     target, optimize=False)
