"""`vg.tfloat32`, the tile dtype of TF32 products (docs/api.md "Dtypes"): on the cpu backend
against float64 NumPy with TF32 rounding emulated by integer arithmetic (to nearest, ties
away from zero), conversions both ways and from other dtypes, the moves it allows, its
products (the same as `input_precision="tf32"`), the errors at the user's line for every
other use, its host spellings; and the PTX, assembled by ptxas: `cvt.rna.tf32.f32` for the
conversion and tf32 tensor-core instructions for the product.
`tests/gpu/test_tile_tfloat32_gpu.py` runs the same kernels on the GPU."""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris import types as T
from verdigris.errors import ArrayError, CompileError
from verdigris.ir import ArrayType

from located import assert_points_at

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 by integer arithmetic on sign and magnitude, apart from
    `types.tf32_rounded`: the magnitude's 13 dropped bits at or past half (0x1000) round it up
    (away from zero), below it down; NaN stays, a carry past the largest finite is infinity."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    rounded = (magnitude >> 13 << 13) + np.where(magnitude & 0x1FFF >= 0x1000, 0x2000, 0)
    rounded = np.minimum(rounded, 0x7F800000)
    out = (sign | rounded).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


def poisoned(shape) -> np.ndarray:
    return np.full(shape, np.nan, np.float32)


def _specials() -> np.ndarray:
    """Values whose TF32 rounding is an edge: exact halves (kept bit even and odd, both signs),
    one ulp either side, subnormals, the largest floats (which overflow), zeros, infinities."""
    halves = []
    for kept in (0x3F800000, 0x3F802000, 0x00002000, 0x7F7FC000):  # 1.0, 1 + 2**-10, ...
        for low in (0x0FFF, 0x1000, 0x1001):
            halves += [kept | low, 0x80000000 | kept | low]
    edges = [0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FE000, 0x00000001, 0x00001000, 0x80000000, 0,
             0x7F800000, 0xFF800000, 0x7FC00000]
    return np.array(halves + edges, np.uint32).view(np.float32)


# ----------------------------------------------------------------------------- kernels


@tile.kernel
def round_trip(x, out, back, B: vg.constexpr):
    """out and back = x as TF32, stored from the tfloat32 tile and from its float32
    conversion."""
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,)).astype(vg.tfloat32)
    tile.store(out, index=(i,), tile=t)
    tile.store(back, index=(i,), tile=t.astype(vg.float32))


@tile.kernel
def converted(x, out, B: vg.constexpr):
    """x (any dtype) -> tfloat32 -> out's dtype."""
    tile.store(out, index=(0,), tile=tile.load(x, index=(0,), shape=(B,)).astype(vg.tfloat32))


@tile.kernel
def made(out, v, B: vg.constexpr):
    """Rows: tile.full, tile.zeros, tile.arange and vg.tfloat32(t), all of dtype tfloat32."""
    rows = tile.cat((tile.full((1, B), v, vg.tfloat32), tile.zeros((1, B), vg.tf32),
                     tile.arange(B, dtype=vg.tfloat32).reshape((1, B)),
                     vg.tfloat32(tile.full((1, B), v * 3, vg.float32))), 0)
    tile.store(out, index=(0, 0), tile=rows)


@tile.kernel
def moved(x, out, B: vg.constexpr):
    """A tfloat32 tile transposed, sliced, extracted, concatenated, broadcast, reshaped and
    carried through a loop: out = [x.T; x[:, ::-1 halves]] (2B x B), then reshaped."""
    t = tile.load(x, index=(0, 0), shape=(B, B)).astype(vg.tfloat32)
    carried = t
    for _ in range(2):
        carried = carried.T
    halves = tile.cat((tile.extract(carried, (0, 1), (B, B // 2)), carried[:, 0:B // 2]), 1)
    both = tile.cat((tile.transpose(t), tile.broadcast_to(halves.reshape((1, B, B)), (1, B, B))
                     .reshape((B, B))), 0)
    tile.store(out, index=(0, 0), tile=both.permute((0, 1)))


@tile.kernel
def tf32_gemm(a, b, c, BM: vg.constexpr, BN: vg.constexpr, BK: vg.constexpr):
    """c = a @ b of TF32 operands, a K loop accumulating in float32."""
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(tile.num_tiles(a, 1, (BM, BK))):
        x = tile.load(a, index=(i, k), shape=(BM, BK)).astype(vg.tfloat32)
        y = tile.load(b, index=(k, j), shape=(BK, BN)).astype(vg.tfloat32)
        acc = tile.mma(x, y, acc)
    tile.store(c, index=(i, j), tile=acc)


@tile.kernel
def precision_gemm(a, b, c, BM: vg.constexpr, BN: vg.constexpr, BK: vg.constexpr):
    """`tf32_gemm` written with input_precision="tf32" on float32 operands."""
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(tile.num_tiles(a, 1, (BM, BK))):
        x = tile.load(a, index=(i, k), shape=(BM, BK))
        y = tile.load(b, index=(k, j), shape=(BK, BN))
        acc = tile.mma(x, y, acc, input_precision="tf32")
    tile.store(c, index=(i, j), tile=acc)


@tile.kernel
def tf32_products(a, b, c, d, M: vg.constexpr, N: vg.constexpr, K: vg.constexpr):
    """c = a @ b.T (`@`, a transposed variable) and d = batched tile.dot with explicit
    precision flags, all of tfloat32 tiles."""
    x = tile.load(a, index=(0, 0, 0), shape=(2, M, K)).astype(vg.tfloat32)
    y = tile.load(b, index=(0, 0), shape=(N, K)).astype(vg.tfloat32)
    yt = y.T
    tile.store(c, index=(0, 0), tile=x[0:1].reshape((M, K)) @ yt)
    tile.store(d, index=(0, 0, 0), tile=tile.dot(x, yt, input_precision="tf32", allow_tf32=True))


# ----------------------------------------------------------------------------- cpu backend


def test_the_reference_rounding_agrees_with_the_backends_one(rng):
    x = np.concatenate([_specials(), rng.standard_normal(4096).astype(np.float32),
                        rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    want, got = tf32(x), T.tf32_rounded(x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(x)].view(np.uint32), want[~np.isnan(x)].view(np.uint32))


def test_ties_round_away_from_zero():
    one_and_half_ulp = np.array([0x3F801000, 0x3F803000, 0xBF801000, 0xBF803000],
                                np.uint32).view(np.float32)
    up = [1 + 2**-10, 1 + 2 * 2**-10, -(1 + 2**-10), -(1 + 2 * 2**-10)]  # even keeps would differ
    out, back = poisoned(16), poisoned(16)
    round_trip[1](np.resize(one_and_half_ulp, 16), out, back, B=16)
    assert out[:4].tolist() == up and back[:4].tolist() == up


def test_round_trip_and_specials(rng):
    x = np.concatenate([_specials(), rng.standard_normal(128 - len(_specials())).astype(np.float32)])
    out, back = poisoned(128), poisoned(128)
    round_trip[4](x, out, back, B=32)
    want = tf32(x)
    for got in (out, back):
        assert np.array_equal(np.isnan(got), np.isnan(want))
        assert np.array_equal(got[~np.isnan(x)].view(np.uint32), want[~np.isnan(x)].view(np.uint32))
    assert np.isinf(out[np.abs(x) == np.finfo(np.float32).max]).all()  # overflow: infinity


@pytest.mark.parametrize("source,target", [(np.float16, np.float32), (np.int32, np.float32),
                                           (np.float64, np.float32), (np.float32, np.float16),
                                           (np.float32, np.float64)])
def test_conversions_go_through_float32(rng, source, target):
    x = (rng.standard_normal(64) * 1000).astype(source)
    out = np.full(64, np.nan, target)
    converted[1](x, out, B=64)
    want = tf32(x.astype(np.float32)).astype(target)
    assert np.array_equal(out, want)


def test_tiles_made_as_tfloat32():
    out = np.full((4, 16), np.nan, np.float32)
    made[1](out, 1.1, B=16)
    want = tf32(np.array([[1.1] * 16, [0] * 16, range(16), [np.float32(1.1) * 3] * 16], np.float32))
    assert np.array_equal(out, want)


def test_moves_keep_the_rounded_values(rng):
    b = 16
    x = rng.standard_normal((b, b)).astype(np.float32)
    out = poisoned((2 * b, b))
    moved[1](x, out, B=b)
    r = tf32(x)
    halves = np.concatenate([r[:, b // 2:], r[:, :b // 2]], axis=1)
    assert np.array_equal(out, np.concatenate([r.T, halves]))


@pytest.mark.parametrize("sizes,tiles", [((64, 48, 96), (32, 16, 32)), ((37, 20, 50), (32, 16, 16))])
def test_product_is_the_tf32_product(rng, sizes, tiles):
    m, n, k = sizes
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c, via_precision = poisoned((m, n)), poisoned((m, n))
    grid = (vg.cdiv(m, tiles[0]), vg.cdiv(n, tiles[1]))
    tf32_gemm[grid](a, b, c, BM=tiles[0], BN=tiles[1], BK=tiles[2])
    precision_gemm[grid](a, b, via_precision, BM=tiles[0], BN=tiles[1], BK=tiles[2])
    want = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)  # sum |a_ik b_kj|
    assert (np.abs(c - want) <= 1e-6 * k * scale).all()  # float32 sums of exact TF32 products
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert (np.abs(c - exact) <= 2 ** -10 * scale).all() and np.abs(c - exact).max() > 1e-5 * scale.max()
    assert np.array_equal(c, via_precision)


def test_products_of_variables_batches_and_the_operator(rng):
    m, n, k = 16, 16, 32
    a = rng.standard_normal((2, m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    c, d = poisoned((m, n)), poisoned((2, m, n))
    tf32_products[1](a, b, c, d, M=m, N=n, K=k)
    want = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64).T
    np.testing.assert_allclose(c, want[0], rtol=1e-5, atol=1e-5 * k)
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5 * k)


def test_host_spellings():
    assert vg.tf32 is vg.tfloat32 is T.from_any("tf32") is T.from_any("tfloat32") is T.from_name("tfloat32")
    assert np.dtype(vg.tfloat32) == np.float32 and np.zeros(2, vg.tfloat32).dtype == np.float32
    assert T.from_numpy(np.float32) is vg.float32  # a float32 array stays float32
    scalar = vg.tfloat32(1 + 2**-11)  # a tie: away from zero
    assert type(scalar) is np.float32 and scalar == 1 + 2**-10
    assert vg.tfloat32(-(1 + 2**-11)) == -(1 + 2**-10)
    for make in (lambda: vg.empty(4, vg.tfloat32), lambda: vg.zeros(4, "tf32"),
                 lambda: vg.asarray(np.zeros(4, np.float32), vg.tfloat32)):
        with pytest.raises(ArrayError, match="tfloat32 is a dtype of tiles only"):
            make()
    from verdigris.runtime.signatures import SignatureError, parse_signature
    with pytest.raises(SignatureError, match="'tf32' is a dtype of tiles only"):
        parse_signature(round_trip, "tf32[::1], f32[::1], f32[::1], 256")


# ----------------------------------------------------------------------------- errors


def _f32(ndim=1):
    return ArrayType(T.float32, ndim)


@tile.kernel
def added(x, out):
    t = tile.load(x, index=(0,), shape=(16,)).astype(vg.tfloat32)
    tile.store(out, index=(0,), tile=t + 1)  # MARK-add


@tile.kernel
def summed(x, out):
    t = tile.load(x, index=(0,), shape=(16,)).astype(vg.tfloat32)
    tile.store(out, index=(0,), tile=tile.full((16,), tile.sum(t), vg.float32))  # MARK-sum


@tile.kernel
def compared(x, out):
    t = tile.load(x, index=(0,), shape=(16,)).astype(vg.tfloat32)
    tile.store(out, index=(0,), tile=tile.where(t > 0, 1.0, 0.0))  # MARK-cmp


@tile.kernel
def printed(x, out):
    t = tile.load(x, index=(0,), shape=(16,)).astype(vg.tfloat32)
    print(t)  # MARK-print


@tile.kernel
def mixed(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16)).astype(vg.tfloat32)
    y = tile.load(b, index=(0, 0), shape=(16, 16))
    tile.store(c, index=(0, 0), tile=tile.dot(x, y))  # MARK-mix


@tile.kernel
def contradicted(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16)).astype(vg.tfloat32)
    y = tile.load(b, index=(0, 0), shape=(16, 16)).astype(vg.tfloat32)
    tile.store(c, index=(0, 0), tile=tile.dot(x, y, input_precision="ieee"))  # MARK-ieee


@tile.kernel
def tf32_accumulator(a, b, c):
    x = tile.load(a, index=(0, 0), shape=(16, 16)).astype(vg.tfloat32)
    tile.store(c, index=(0, 0), tile=tile.mma(x, x, x))  # MARK-acc


@tile.kernel
def reassigned(x, out):
    t = tile.load(x, index=(0,), shape=(16,)).astype(vg.tfloat32)
    for _ in range(2):
        tile.store(out, index=(0,), tile=t)
        t = tile.load(x, index=(0,), shape=(16,))  # MARK-var


@tile.kernel
def scalar_tf32(x, out):
    tile.store(out, index=(0,), tile=tile.full((16,), vg.tfloat32(x[0]), vg.float32))  # MARK-scalar


@simt.kernel
def shared_tf32(x):
    buffer = simt.shared.array(32, vg.tfloat32)  # MARK-shared
    buffer[simt.thread_id()] = x[simt.thread_id()]


@pytest.mark.parametrize("kernel,arrays,marker,words", [
    (added, 2, "MARK-add", "an elementwise operation (arithmetic, comparison, math, tile.where) "
                           "does not take tfloat32 tiles"),
    (summed, 2, "MARK-sum", "tile.sum() does not take tfloat32 tiles"),
    (compared, 2, "MARK-cmp", "elementwise operation"),
    (printed, 2, "MARK-print", "print() does not take tfloat32 tiles"),
    (mixed, 3, "MARK-mix", "tfloat32 multiplies tfloat32 only"),
    (contradicted, 3, "MARK-ieee", "which input_precision='ieee' contradicts"),
    (tf32_accumulator, 3, "MARK-acc", "but acc is tfloat32"),
    (reassigned, 2, "MARK-var", "a loop-carried variable keeps its kind, dtype and shape"),
    (scalar_tf32, 2, "MARK-scalar", "tfloat32 is a dtype of tiles only"),
])
def test_other_uses_are_refused_at_the_users_line(kernel, arrays, marker, words):
    with pytest.raises(CompileError) as err:
        kernel.specialize_types(_specs(arrays))
    assert words in str(err.value), str(err.value)
    assert_points_at(err.value, marker, __file__)


def _specs(arrays: int) -> dict:
    names = {2: ("x", "out"), 3: ("a", "b", "c")}[arrays]
    ndim = 2 if arrays == 3 else 1
    return {name: _f32(ndim) for name in names}


def test_hints_name_the_conversions():
    with pytest.raises(CompileError) as err:
        mixed.specialize_types(_specs(3))
    assert "b.astype(vg.tfloat32)" in str(err.value) and ".astype(vg.float32)" in str(err.value)
    with pytest.raises(CompileError) as err:
        added.specialize_types(_specs(2))
    assert "t.astype(vg.float32)" in str(err.value)


def test_arrays_of_tfloat32_are_refused_in_kernels():
    with pytest.raises(CompileError) as err:
        shared_tf32.specialize_types(dict(x=_f32()))
    assert "an array holding TF32 values is a float32 array" in str(err.value)
    assert_points_at(err.value, "MARK-shared", __file__)


# ----------------------------------------------------------------------------- PTX


def _ptx(kernel, target, **sizes):
    specs = dict(a=_f32(2), b=_f32(2), c=_f32(2), **sizes)
    return codegen.compile_to_ptx(kernel.specialize_types(specs), target).ptx


@needs_ptxas
@pytest.mark.parametrize("target,instruction", [
    ("sm_80", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("sm_90a", "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32")])
def test_the_product_runs_on_tf32_tensor_cores(target, instruction):
    ptx = _ptx(tf32_gemm, target, BM=64, BN=64, BK=32)
    assert instruction in ptx and "cvt.rna.tf32.f32" in ptx
    codegen.assemble(ptx, target, optimize=False)
    same = _ptx(precision_gemm, target, BM=64, BN=64, BK=32)  # the same products
    assert re.findall(r"\b\w*mma\S*", ptx) == re.findall(r"\b\w*mma\S*", same)


@needs_ptxas
def test_the_conversion_is_cvt_rna():
    specs = dict(x=_f32(), out=_f32(), back=_f32(), B=256)
    ptx = codegen.compile_to_ptx(round_trip.specialize_types(specs), "sm_80").ptx
    assert "cvt.rna.tf32.f32" in ptx and "mma" not in ptx
    codegen.assemble(ptx, "sm_80", optimize=False)
    for kernel, specs in [(moved, dict(x=_f32(2), out=_f32(2), B=32)),
                          (made, dict(out=_f32(2), v=T.float64, B=64)),
                          (converted, dict(x=ArrayType(T.float64, 1), out=ArrayType(T.float16, 1), B=256)),
                          (converted, dict(x=ArrayType(T.int32, 1), out=_f32(), B=256))]:
        ptx = codegen.compile_to_ptx(kernel.specialize_types(specs), "sm_80").ptx
        assert "cvt.rna.tf32.f32" in ptx
        codegen.assemble(ptx, "sm_80", optimize=False)
