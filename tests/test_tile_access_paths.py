"""The two paths of the tile lowering's loads and stores (`tile.memory`), run on the host CPU
through `host_jit` against the cpu backend:
- the vector path, taken where every vector of a tile lies wholly inside the array or
  wholly outside it: full tiles, and edge tiles whose rows start at multiples of the vector
  width and whose last extent is one too (each vector predicated on its first element);
- the rolled path, taken where a row or the extent splits a vector: one vector's elements
  at a time in a loop, through a local array (loads and stores, one- and two-dimensional).
And a statement whose loads feed reductions (lowered once per path, the shared buffers'
turn the same after either), followed by more reductions. The PTX side: the predicated
vector accesses and the rolled loop assemble, and the benchmark kernels keep their register
budgets (`test_tile_codegen`)."""
from __future__ import annotations

import numpy as np
import pytest

import host_jit
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.ir import ArrayType
from test_tile_codegen import block_2d
from test_tile_hostjit import both, close


@tile.kernel
def centre_rows(x, out, n, C: vg.constexpr):
    """One statement with two loads and a reduction between them, then two more reductions."""
    i = tile.bid(0)
    tile.store(out, index=(i, 0), tile=tile.load(x, index=(i, 0), shape=(1, C))
               - tile.sum(tile.load(x, index=(i, 0), shape=(1, C))) / n)
    t = tile.load(out, index=(i, 0), shape=(1, C))
    tile.store(out, index=(i, 0), tile=t * (1.0 / (tile.max(t) - tile.min(t) + 1.0)))


def rows(rng, shape, dtype):
    return (rng.standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
@pytest.mark.parametrize("shape", [(37, 200), (37, 201), (5, 64), (16, 8)])
def test_two_dimensional_tiles_on_both_paths(rng, dtype, shape):
    """(37, 200): edge tiles with whole vectors (vector path); (37, 201): every row splits
    vectors (rolled path, loads and stores); (5, 64), (16, 8): rows past the array."""
    x = rows(rng, shape, dtype)
    out = np.full(shape, 7, dtype)
    got, want = both(block_2d, (vg.cdiv(shape[0], 8), vg.cdiv(shape[1], 64)), x=x, out=out, R=8, C=64)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_an_extent_that_splits_the_last_vector_of_aligned_rows(rng):
    """Rows 208 elements apart (whole vectors) but 203 wide: the tiles holding column 200
    take the rolled path, the others the vector path."""
    big = rows(rng, (21, 208), np.float16)
    x = big[:, :203]
    out = np.zeros((21, 203), np.float16)
    got, want = both(block_2d, (vg.cdiv(21, 8), vg.cdiv(203, 64)), x=x, out=out, R=8, C=64)
    np.testing.assert_array_equal(got["out"], want["out"])


@pytest.mark.parametrize("cols,warps", [(1000, 2), (1001, 2), (998, 1), (1024, 4)])
def test_a_statement_lowered_on_both_paths_with_reductions_inside(rng, cols, warps):
    x = rows(rng, (3, cols), np.float16)
    args = dict(x=x, out=np.zeros_like(x), n=cols, C=1024)
    want = dict(args, out=args["out"].copy())
    from test_tile_hostjit import on_cpu

    want = on_cpu(centre_rows, 3, **want)
    assert host_jit.run(centre_rows, 3, num_warps=warps, **args) is None
    close(args["out"], want["out"], 2e-3)


def test_bfloat16_words_through_the_rolled_path(rng):
    """Odd rows of bfloat16: the rolled path packs two elements per word, as the vector
    path does, and rounds once."""
    from test_tile_hostjit import bfloat16_bits
    from verdigris.examples.tile_vector_add import add

    n = 3 * 512 + 5
    a, b = (bfloat16_bits(rng.standard_normal(n)) for _ in range(2))
    widen = lambda bits: (bits.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
    for offset in (0, 1):  # aligned (vector path, then the edge tile), unaligned start
        out = np.zeros(n - offset, np.uint16)
        host_jit.run(add, vg.cdiv(n - offset, 512), dtypes={k: T.bfloat16 for k in ("a", "b", "out")},
                     a=a[offset:], b=b[offset:], out=out, BLOCK=512)
        np.testing.assert_array_equal(out, bfloat16_bits(widen(a[offset:]) + widen(b[offset:])))


needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_predicated_vectors_and_rolled_loops_assemble(target):
    arr = lambda dtype, ndim: ArrayType(dtype, ndim, "global", True, True)  # noqa: E731
    for dtype in (T.float16, T.float32, T.int8, T.float64):
        ptx = codegen.compile_to_ptx(block_2d.specialize_types(dict(x=arr(dtype, 2), out=arr(dtype, 2), R=8, C=64)),
                                     target).ptx
        assert "@%p" in ptx and "ld.global.nc" in ptx and "st.local" in ptx
        codegen.assemble(ptx, target, optimize=False)
