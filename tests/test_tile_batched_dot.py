"""Batched (3-d) tile.dot / tile.mma (issue #26 item 3, docs/api.md "Tile track"): NumPy's
matmul of a batch, the batch axis broadcast (a 2-d operand, or a batch of one, shared by
every product); the accumulator broadcast to the result. On the cpu backend against
float64 NumPy, the refusals at the user's line, the IR (one TileDot per batch element),
and the PTX on sm_80 and sm_90a assembled by ptxas. tests/gpu/test_tile_batched_dot_gpu.py
runs the same kernels on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.ir import ArrayType
from verdigris.frontend import walk
from verdigris.ir import tiles as X
from test_tile_vocabulary import _walk, compile_error, poisoned, typed_ir

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


@tile.kernel
def batched(a, b, c, out, BA: vg.constexpr, BB: vg.constexpr, BC: vg.constexpr,
            M: vg.constexpr, N: vg.constexpr, K: vg.constexpr, ACC: vg.constexpr):
    """out = a @ b (+ c): operands of batch BA / BB (0: a 2-d operand), acc of batch BC."""
    x = tile.load(a, index=(0, 0, 0), shape=(BA, M, K)) if BA else tile.load(a, index=(0, 0), shape=(M, K))
    y = tile.load(b, index=(0, 0, 0), shape=(BB, K, N)) if BB else tile.load(b, index=(0, 0), shape=(K, N))
    if ACC:
        z = tile.mma(x, y, tile.load(c, index=(0, 0, 0), shape=(BC, M, N)))
    else:
        z = x @ y
    tile.store(out, index=(0, 0, 0), tile=z)


def operands(rng, ba, bb, m, n, k, dtype):
    a = rng.standard_normal((ba, m, k) if ba else (m, k)).astype(dtype)
    b = rng.standard_normal((bb, k, n) if bb else (k, n)).astype(dtype)
    return a, b


SHAPES = [(3, 0), (0, 3), (2, 2), (1, 4), (4, 1), (3, 3)]


@pytest.mark.parametrize("ba,bb", SHAPES)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_batch_is_numpys_matmul(ba, bb, dtype, rng):
    m, n, k = 16, 24, 40
    a, b = operands(rng, ba, bb, m, n, k, dtype)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    acc_dtype = np.float64 if dtype == "float64" else np.float32
    out = poisoned(want.shape, acc_dtype)
    batched[1](a, b, np.zeros((1, m, n), acc_dtype), out, BA=ba, BB=bb, BC=1, M=m, N=n, K=k, ACC=False)
    np.testing.assert_allclose(out, want, rtol=1e-5 if dtype != "float64" else 1e-12, atol=1e-4)


@pytest.mark.parametrize("bc", [1, 3])
def test_the_accumulator_broadcasts_over_the_batch(bc, rng):
    m, n, k = 32, 16, 16
    a, b = operands(rng, 3, 0, m, n, k, "float16")
    c = rng.standard_normal((bc, m, n)).astype(np.float32)
    out = poisoned((3, m, n), np.float32)
    batched[1](a, b, c, out, BA=3, BB=0, BC=bc, M=m, N=n, K=k, ACC=True)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)) + c
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_a_batch_is_one_product_per_element():
    k = typed_ir(batched, np.zeros((3, 16, 32), np.float16), np.zeros((32, 16), np.float16),
                 np.zeros((1, 16, 16), np.float32), np.zeros((3, 16, 16), np.float32),
                 BA=3, BB=0, BC=1, M=16, N=16, K=32, ACC=True)
    dots = [e for e in _walk(k) if isinstance(e, X.TileDot)]
    assert len(dots) == 3 and all(d.shape == (16, 16) and d.a.shape == (16, 32) for d in dots)
    (cat,) = [e for e in _walk(k) if isinstance(e, X.Cat)]
    assert cat.shape == (3, 16, 16) and cat.axis == 0
    tiles = [id(n) for n in walk(k.body) if isinstance(n, X.TileExpr)]
    assert len(tiles) == len(set(tiles))  # the products share no node: each operand computed once


@pytest.mark.parametrize("ba,bb,bc,acc,words", [
    (2, 3, 1, False, "of batches of shapes (2, 16, 16) and (3, 16, 16): the batch sizes differ"),
    (2, 2, 3, True, "acc has shape (3, 16, 16), but a @ b has shape (2, 16, 16)"),
])
def test_batches_that_do_not_broadcast_are_refused(ba, bb, bc, acc, words):
    a, b = np.zeros((ba, 16, 16), np.float16), np.zeros((bb, 16, 16), np.float16)
    err = compile_error(batched, a, b, np.zeros((bc, 16, 16), np.float32),
                        np.zeros((3, 16, 16), np.float32), BA=ba, BB=bb, BC=bc, M=16, N=16, K=16,
                        ACC=acc)
    assert words in str(err), str(err)
    line = "z = tile.mma(x, y, tile.load(c" if acc else "z = x @ y"
    located.assert_points_at(err, line, __file__)


@tile.kernel
def four_axes(a, out, B: vg.constexpr):
    x = tile.load(a, index=(0, 0, 0, 0), shape=(2, 2, B, B))
    tile.store(out, index=(0, 0, 0, 0), tile=tile.dot(x, x))


def test_a_4d_operand_is_refused():
    a = np.zeros((2, 2, 16, 16), np.float16)
    err = compile_error(four_axes, a, a.astype(np.float32), B=16)
    assert "tile.dot() multiplies 2-d tiles (or batches of them, 3-d), but a has shape (2, 2, 16, 16)" \
        in str(err), str(err)
    located.assert_points_at(err, "tile=tile.dot(x, x))", __file__)


@tile.kernel
def batched_k_loop(a, b, out, BT: vg.constexpr, M: vg.constexpr, N: vg.constexpr, BK: vg.constexpr):
    """Block i: out[i*BT:(i+1)*BT] = a[i*BT:(i+1)*BT] @ b, the batch's accumulator carried
    over the K loop (on the GPU in the products' own registers)."""
    i = tile.bid(0)
    acc = tile.zeros((BT, M, N), vg.float32)
    for k in range(tile.num_tiles(a, 2, (BT, M, BK))):
        x = tile.load(a, index=(i, 0, k), shape=(BT, M, BK))
        acc = tile.mma(x, tile.load(b, index=(k, 0), shape=(BK, N)), acc)
    tile.store(out, index=(i, 0, 0), tile=acc)


def test_a_batch_accumulates_over_a_k_loop(rng):
    a = rng.standard_normal((6, 32, 100)).astype(np.float16)
    b = rng.standard_normal((100, 16)).astype(np.float16)
    out = poisoned((6, 32, 16), np.float32)
    batched_k_loop[3](a, b, out, BT=2, M=32, N=16, BK=32)
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-5, atol=1e-4)


def arr(dtype, ndim):
    return ArrayType(dtype, ndim, "global", True, True)


PTX_SPECS = {
    "a_batch_b_shared": dict(a=arr(T.float16, 3), b=arr(T.float16, 2), c=arr(T.float32, 3),
                             out=arr(T.float32, 3), BA=3, BB=0, BC=1, M=64, N=64, K=32, ACC=True),
    "both_batches": dict(a=arr(T.bfloat16, 3), b=arr(T.bfloat16, 3), c=arr(T.float32, 3),
                         out=arr(T.float32, 3), BA=2, BB=2, BC=2, M=64, N=32, K=64, ACC=True),
    "float32": dict(a=arr(T.float32, 2), b=arr(T.float32, 3), c=arr(T.float32, 3),
                    out=arr(T.float32, 3), BA=0, BB=4, BC=1, M=16, N=16, K=16, ACC=False),
}


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(PTX_SPECS))
def test_batched_products_assemble(name, target):
    kernel = batched.specialize_types(PTX_SPECS[name])
    codegen.assemble(codegen.compile_to_ptx(kernel, target).ptx, target, optimize=False)


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_batched_k_loop_assembles(target):
    kernel = batched_k_loop.specialize_types(dict(a=arr(T.float16, 3), b=arr(T.float16, 2),
                                                  out=arr(T.float32, 3), BT=2, M=64, N=64, BK=32))
    codegen.assemble(codegen.compile_to_ptx(kernel, target).ptx, target, optimize=False)
