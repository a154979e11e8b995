"""Parts of tiles and tiles of parts (issue #26 item 3, docs/api.md "Tile track"): slices
with constant bounds (`t[2:6]`, `t[:, 0:8:2]`, `t[-4:]`), `tile.extract` (cuTile's: the
sub-tile at an index, the same `TileSlice`), `tile.cat` and `order=` on loads and stores.
Each runs on the cpu backend against NumPy (float64 references of the same elements), on
the GPU lowering run on the host (`host_jit`, every thread of a block, shared memory and
barriers included) against the cpu backend, and its PTX assembles with ptxas; the race
checker sees through them (racy kernels beside their fixed twins)."""
import re

import numpy as np
import pytest

import host_jit
import located
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.ir import ArrayType
from verdigris.ir import tiles as X
from verdigris.runtime import backend
from test_tile_vocabulary import _walk, compile_error, poisoned, typed_ir

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def on_cpu(kernel, grid, **arguments) -> dict:
    copies = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arguments.items()}
    backend.set_backend("cpu")
    kernel[grid](**copies)
    return copies


def lowered_on_host(kernel, grid, outputs, num_warps, **arguments):
    """The GPU lowering's outputs (run on the host) and the cpu backend's, both poisoned first."""
    for name in outputs:
        arguments[name] = poisoned(arguments[name].shape, arguments[name].dtype)
    want = on_cpu(kernel, grid, **arguments)
    assert host_jit.run(kernel, grid, num_warps=num_warps, **arguments) is None
    return [(arguments[name], want[name]) for name in outputs]


# ----------------------------------------------------------------------------- slices


@tile.kernel
def sliced_rows(x, out, R: vg.constexpr, C: vg.constexpr, A: vg.constexpr, B: vg.constexpr,
                S: vg.constexpr, D: vg.constexpr, E: vg.constexpr):
    t = tile.load(x, index=(tile.bid(0), 0), shape=(R, C))
    tile.store(out, index=(tile.bid(0), 0), tile=t[A:B:S, D:E] * 2)


SLICES = [(0, 8, 1, 0, 16), (2, 6, 1, 0, 16), (1, 8, 3, 4, 13), (7, 8, 1, 15, 16), (0, 7, 2, 1, 16),
          (-5, 100, 1, -3, 16)]


@pytest.mark.parametrize("a,b,s,d,e", SLICES)
def test_a_slice_is_numpys(a, b, s, d, e, rng):
    x = rng.standard_normal((3 * 8, 16)).astype(np.float32)
    want = np.concatenate([x[8 * i:8 * i + 8][a:b:s, d:e] for i in range(3)]).astype(np.float64) * 2
    out = poisoned(want.shape, np.float32)
    sliced_rows[3](x, out, R=8, C=16, A=a, B=b, S=s, D=d, E=e)
    np.testing.assert_array_equal(out, want)


@tile.kernel
def literal_slices(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    u = t[2:6][None, :] + t[-4:][:, None]          # a 4 x 4 outer sum
    tile.store(out, index=(0, 0), tile=u[..., ::2])  # every other column


def test_literal_bounds_new_axes_and_ellipsis(rng):
    x = rng.standard_normal(10).astype(np.float32)
    out = poisoned((4, 2), np.float32)
    literal_slices[1](x, out, B=10)
    want = (x[2:6].astype(np.float64)[None, :] + x[-4:][:, None])[..., ::2]
    np.testing.assert_array_equal(out, want.astype(np.float32))


def test_a_whole_axis_slice_is_no_node():
    k = typed_ir(sliced_rows, np.zeros((8, 16), np.float32), np.zeros((8, 16), np.float32),
                 R=8, C=16, A=0, B=8, S=1, D=0, E=16)
    assert not [e for e in _walk(k) if isinstance(e, X.TileSlice)]


@tile.kernel
def step_slice(x, out, B: vg.constexpr, S: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=t[::S])


@tile.kernel
def empty_slice(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=t[5:2])


@tile.kernel
def element_index(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=t[3])


@tile.kernel
def running_bound(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    n = tile.bid(0)
    tile.store(out, index=(0,), tile=t[n:])


@pytest.mark.parametrize("kernel,extra,words,line", [
    (step_slice, dict(S=-1), "step must be positive, not -1", "tile=t[::S])"),
    (step_slice, dict(S=0), "step must be positive, not 0", "tile=t[::S])"),
    (empty_slice, {}, "the slice 5:2 of an axis of extent 8 holds no element", "tile=t[5:2])"),
    (element_index, {}, "a tile is indexed only with slices of constant bounds", "tile=t[3])"),
    (running_bound, {}, "a tile slice's bound must be a constant int", "tile=t[n:])"),
])
def test_slices_refused_name_what_is_wrong(kernel, extra, words, line):
    x = np.zeros(8, np.float32)
    err = compile_error(kernel, x, x.copy(), B=8, **extra)
    assert words in str(err), str(err)
    located.assert_points_at(err, line, __file__)


# ----------------------------------------------------------------------------- extract


@tile.kernel
def extracted(x, out, R: vg.constexpr, C: vg.constexpr, I: vg.constexpr, J: vg.constexpr,
              SR: vg.constexpr, SC: vg.constexpr, METHOD: vg.constexpr):
    t = tile.load(x, index=(0, 0), shape=(R, C))
    part = t.extract((I, J), (SR, SC)) if METHOD else tile.extract(t, (I, J), shape=(SR, SC))
    tile.store(out, index=(0, 0), tile=part)


@pytest.mark.parametrize("method", [False, True])
def test_extract_is_the_sub_tile_at_an_index(method, rng):
    x = rng.standard_normal((8, 12)).astype(np.float32)
    for i in range(4):
        for j in range(3):
            out = poisoned((2, 4), np.float32)
            extracted[1](x, out, R=8, C=12, I=i, J=j, SR=2, SC=4, METHOD=method)
            np.testing.assert_array_equal(out, x[2 * i:2 * i + 2, 4 * j:4 * j + 4])


@pytest.mark.parametrize("i,j,sr,sc,words", [
    (4, 0, 2, 4, "the sub-tile 4 of extent 2 along axis 0 (elements 8 to 9) is not inside"),
    (0, 1, 2, 8, "the sub-tile 1 of extent 8 along axis 1 (elements 8 to 15) is not inside"),
    (-1, 0, 2, 4, "the sub-tile -1 of extent 2 along axis 0"),
])
def test_an_extract_outside_the_tile_is_refused(i, j, sr, sc, words):
    x = np.zeros((8, 12), np.float32)
    err = compile_error(extracted, x, x.copy(), R=8, C=12, I=i, J=j, SR=sr, SC=sc, METHOD=False)
    assert words in str(err), str(err)
    located.assert_points_at(err, "part = t.extract((I, J), (SR, SC)) if METHOD", __file__)


# ----------------------------------------------------------------------------- cat


@tile.kernel
def joined(x, y, out, R: vg.constexpr, CX: vg.constexpr, CY: vg.constexpr, AXIS: vg.constexpr):
    a = tile.load(x, index=(0, 0), shape=(R, CX))
    b = tile.load(y, index=(0, 0), shape=(R, CY))
    c = tile.cat((a, b), AXIS) if AXIS == 1 else tile.cat((a.T, b.T), axis=0).T
    tile.store(out, index=(0, 0), tile=c)


@pytest.mark.parametrize("r,cx,cy", [(4, 8, 8), (5, 3, 6), (16, 32, 1), (3, 1, 1), (64, 48, 80)])
@pytest.mark.parametrize("axis", [0, 1])
def test_cat_is_concatenate(r, cx, cy, axis, rng):
    x = rng.standard_normal((r, cx)).astype(np.float32)
    y = rng.standard_normal((r, cy)).astype(np.float32)
    out = poisoned((r, cx + cy), np.float32)
    joined[1](x, y, out, R=r, CX=cx, CY=cy, AXIS=axis)
    np.testing.assert_array_equal(out, np.concatenate([x.astype(np.float64), y], 1))


@tile.kernel
def three_masks(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    m = tile.cat((t[:3] > 0, t[3:4] < 0, t[4:] > 1), -1)
    tile.store(out, index=(0,), tile=tile.where(m, 1, 0).astype(out.dtype))


def test_cat_of_three_bool_tiles(rng):
    x = rng.standard_normal(11).astype(np.float32) * 2
    out = poisoned(11, np.int32)
    three_masks[1](x, out, B=11)
    want = np.concatenate([x[:3] > 0, x[3:4] < 0, x[4:] > 1]).astype(np.int32)
    np.testing.assert_array_equal(out, want)


@tile.kernel
def mixed_cat(x, y, out, B: vg.constexpr):
    a = tile.load(x, index=(0,), shape=(B,))
    b = tile.load(y, index=(0, 0), shape=(1, B))
    tile.store(out, index=(0,), tile=tile.cat((a, b.reshape((B,)).astype(vg.float64)), 0))


@tile.kernel
def unlike_cat(x, y, out, B: vg.constexpr):
    a = tile.load(x, index=(0,), shape=(B,))
    b = tile.load(y, index=(0, 0), shape=(1, B))
    tile.store(out, index=(0,), tile=tile.cat((a, b), 0))


@tile.kernel
def lone_cat(x, y, out, B: vg.constexpr):
    a = tile.load(x, index=(0,), shape=(B,))
    tile.store(out, index=(0,), tile=tile.cat(a, 0))


@pytest.mark.parametrize("kernel,words,line", [
    (mixed_cat, "tile.cat() of a float32 tile and a float64 one", "tile=tile.cat((a, b.reshape"),
    (unlike_cat, "tile.cat() along axis 0 of tiles of shapes (4,) and (1, 4)", "tile=tile.cat((a, b), 0))"),
    (lone_cat, "takes a tuple of two or more tiles", "tile=tile.cat(a, 0))"),
])
def test_cat_refusals_name_the_tiles(kernel, words, line):
    err = compile_error(kernel, np.zeros(4, np.float32), np.zeros((1, 4), np.float32),
                        np.zeros(8, np.float32), B=4)
    assert words in str(err), str(err)
    located.assert_points_at(err, line, __file__)


# ----------------------------------------------------------------------------- order=


@tile.kernel
def loaded_in_order(x, out, BM: vg.constexpr, BN: vg.constexpr, ORDER: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    t = tile.load(x, index=(j, i), shape=(BN, BM), order=ORDER)  # t[y, c] = x[i*BM + c, j*BN + y]
    tile.store(out, index=(j, i), tile=t)


@tile.kernel
def stored_in_order(x, out, BM: vg.constexpr, BN: vg.constexpr, ORDER: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    tile.store(out, index=(i, j), tile=tile.load(x, index=(i, j), shape=(BM, BN)), order=ORDER)


@pytest.mark.parametrize("kernel", [loaded_in_order, stored_in_order])
@pytest.mark.parametrize("order", [(1, 0), "F"])
def test_order_reads_or_writes_the_tile_transposed(kernel, order, rng):
    x = rng.standard_normal((37, 50)).astype(np.float32)
    out = poisoned((50, 37), np.float32)
    kernel[(vg.cdiv(37, 8), vg.cdiv(50, 16))](x, out, BM=8, BN=16, ORDER=order)
    np.testing.assert_array_equal(out, x.T.astype(np.float64))


@tile.kernel
def batched_order(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0, 0, 0), shape=(B, 2, 3), order=(2, 0, 1))  # t[a, b, c] = x[b, c, a]
    tile.store(out, index=(0, 0, 0), tile=t)


def test_order_of_three_axes(rng):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    out = poisoned((5, 2, 3), np.float32)
    batched_order[1](x, out, B=5)
    np.testing.assert_array_equal(out, np.transpose(x, (2, 0, 1)))


def test_an_ordered_load_is_a_load_along_the_arrays_axes_relabelled():
    k = typed_ir(loaded_in_order, np.zeros((16, 32), np.float32), np.zeros((32, 16), np.float32),
                 BM=8, BN=16, ORDER=(1, 0))
    (load,) = [e for e in _walk(k) if isinstance(e, X.TileLoad)]
    (permute,) = [e for e in _walk(k) if isinstance(e, X.Permute)]
    assert load.shape == (8, 16) and permute.value is load and permute.perm == (1, 0)


@tile.kernel
def rows_in_place(x, B: vg.constexpr, ORDER: vg.constexpr):
    """Block i adds 1 to x's rows B*i to B*i + B-1, read as a (4B, B) tile along the rows
    (order=(1, 0)); without the order the same call reads a strip of columns, which every
    block writes."""
    i = tile.bid(0)
    t = tile.load(x, index=(0, i), shape=(4 * B, B), order=ORDER)  # race
    tile.store(x, index=(i, 0), tile=t.T + 1)


def test_an_ordered_load_reads_the_elements_it_names_beside_its_racy_twin(rng):
    x = rng.standard_normal((32, 32)).astype(np.float32)
    racy = x.copy()
    with pytest.raises(vg.SafetyError) as info:
        rows_in_place[4](racy, B=8, ORDER="C")
    assert info.value.code == "VG203" and "# race" in str(info.value), str(info.value)
    np.testing.assert_array_equal(racy, x)
    fixed = x.copy()
    rows_in_place[4](fixed, B=8, ORDER=(1, 0))
    np.testing.assert_array_equal(fixed, (x.astype(np.float64) + 1).astype(np.float32))


@tile.kernel
def element_in_order(x, out, ORDER: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.full((1,), tile.load(x, index=(1, 2), shape=(), order=ORDER),
                                               vg.float32))


@pytest.mark.parametrize("order,element", [("C", (1, 2)), ((1, 0), (2, 1))])
def test_a_0d_load_takes_its_index_in_the_tiles_order(order, element, rng):
    x = rng.standard_normal((4, 4)).astype(np.float32)
    out = poisoned(1, np.float32)
    element_in_order[1](x, out, ORDER=order)
    assert out[0] == x[element]


@pytest.mark.parametrize("order", [(0, 0), (0, 1, 2), "G", (1,)])
def test_an_order_that_is_no_permutation_is_refused(order):
    x = np.zeros((16, 32), np.float32)
    err = compile_error(loaded_in_order, x, x.T.copy(), BM=8, BN=16, ORDER=order)
    assert "order= takes 'C', 'F' or a permutation of the array's 2 axes" in str(err), str(err)
    located.assert_points_at(err, "t = tile.load(x, index=(j, i), shape=(BN, BM), order=ORDER)",
                             __file__)


# ----------------------------------------------------------------------------- the race checker


@tile.kernel
def every_other(x, out, B: vg.constexpr, S: vg.constexpr):
    """Block i writes out[i*S + 2j]: its tile's own elements when S = 2B."""
    i = int(tile.bid(0))
    where = (i * S + tile.arange(2 * B))[::2]
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def rotated(x, out, B: vg.constexpr, H: vg.constexpr, K: vg.constexpr):
    """Block i writes its tile rotated by H within its B elements (K = 0: a permutation),
    or positions K to K + H - 1 twice (K = H)."""
    i = int(tile.bid(0))
    a = tile.arange(B)
    where = tile.cat((a[H:], a[K:K + H]), 0) + i * B
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(B,)))  # race


@tile.kernel
def columns(x, out, B: vg.constexpr, S: vg.constexpr, K: vg.constexpr):
    """Block i writes column K of i*S + arange(2B) seen as B rows of two: out[i*S + 2j + K],
    its own elements when S = 2B."""
    i = int(tile.bid(0))
    where = tile.extract((i * S + tile.arange(2 * B)).reshape((B, 2)), (0, K), (B, 1))
    tile.scatter(out, where.reshape((B,)), tile.load(x, index=(i,), shape=(B,)))  # race


RACES = [
    (every_other, dict(B=8, S=8), dict(B=8, S=16),
     lambda x: np.stack([x, np.zeros(32, np.float32)], 1).ravel()),
    (rotated, dict(B=8, H=3, K=3), dict(B=8, H=3, K=0),
     lambda x: np.concatenate([np.roll(t, 3) for t in x.reshape(4, 8)])),
    (columns, dict(B=8, S=8, K=1), dict(B=8, S=16, K=1),
     lambda x: np.stack([np.zeros(32, np.float32), x], 1).ravel()),
]


@pytest.mark.parametrize("kernel,racy,fixed,reference", RACES, ids=lambda v: getattr(v, "__name__", ""))
def test_racy_scatter_through_pieces_beside_its_fixed_twin(kernel, racy, fixed, reference, rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = np.zeros(64, np.float32)  # room for every element the racy twins write
    with pytest.raises(vg.SafetyError) as info:
        kernel[4](x, out, **racy)
    assert info.value.code == "VG202", str(info.value)
    assert "# race" in str(info.value) and re.search(r"out\[\d+\]", str(info.value)), str(info.value)
    assert not out.any()  # refused before memory is touched
    want = reference(x)
    kernel[4](x, out, **fixed)
    np.testing.assert_array_equal(out[:len(want)], want)
    assert not out[len(want):].any()


# ----------------------------------------------------------------------------- the GPU lowering, on the host


@pytest.mark.parametrize("warps", [1, 2])
@pytest.mark.parametrize("a,b,s,d,e", SLICES[1:])
def test_slices_lowered_for_the_gpu(a, b, s, d, e, warps, rng):
    x = rng.standard_normal((3 * 8, 16)).astype(np.float32)
    rows = len(range(*slice(a, b, s).indices(8)))
    cols = len(range(*slice(d, e).indices(16)))
    (got, want), = lowered_on_host(sliced_rows, 3, ("out",), warps, x=x, out=np.zeros((3 * rows, cols), np.float32),
                                   R=8, C=16, A=a, B=b, S=s, D=d, E=e)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("warps", [1, 2])
@pytest.mark.parametrize("r,cx,cy", [(5, 3, 6), (16, 32, 1), (3, 1, 1), (8, 24, 40)])
@pytest.mark.parametrize("axis", [0, 1])
def test_cat_lowered_for_the_gpu(r, cx, cy, axis, warps, rng):
    x = rng.standard_normal((r, cx)).astype(np.float32)
    y = rng.standard_normal((r, cy)).astype(np.float32)
    (got, want), = lowered_on_host(joined, 1, ("out",), warps, x=x, y=y, out=np.zeros((r, cx + cy), np.float32),
                                   R=r, CX=cx, CY=cy, AXIS=axis)
    np.testing.assert_array_equal(got, want)


def test_bool_cat_and_extract_lowered_for_the_gpu(rng):
    x = rng.standard_normal(11).astype(np.float32) * 2
    (got, want), = lowered_on_host(three_masks, 1, ("out",), 1, x=x, out=np.zeros(11, np.int32), B=11)
    np.testing.assert_array_equal(got, want)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    (got, want), = lowered_on_host(extracted, 1, ("out",), 2, x=x, out=np.zeros((2, 4), np.float32),
                                   R=8, C=12, I=3, J=2, SR=2, SC=4, METHOD=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", [loaded_in_order, stored_in_order])
def test_order_lowered_for_the_gpu(kernel, rng):
    x = rng.standard_normal((37, 50)).astype(np.float32)
    (got, want), = lowered_on_host(kernel, (vg.cdiv(37, 8), vg.cdiv(50, 16)), ("out",), 1, x=x,
                                   out=np.zeros((50, 37), np.float32), BM=8, BN=16, ORDER=(1, 0))
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- PTX


def arr(dtype, ndim=1):
    return ArrayType(dtype, ndim, "global", True, True)


PTX_SPECS = {
    "slice": (sliced_rows, dict(x=arr(T.float32, 2), out=arr(T.float32, 2), R=8, C=16, A=1, B=8, S=3,
                                D=4, E=13)),
    "literal_slices": (literal_slices, dict(x=arr(T.float32), out=arr(T.float32, 2), B=10)),
    "extract": (extracted, dict(x=arr(T.float16, 2), out=arr(T.float16, 2), R=64, C=64, I=1, J=3,
                                SR=32, SC=16, METHOD=False)),
    "cat": (joined, dict(x=arr(T.bfloat16, 2), y=arr(T.bfloat16, 2), out=arr(T.bfloat16, 2), R=16,
                         CX=24, CY=40, AXIS=1)),
    "cat_bool": (three_masks, dict(x=arr(T.float32), out=arr(T.int32), B=11)),
    "order": (loaded_in_order, dict(x=arr(T.float32, 2), out=arr(T.float32, 2), BM=32, BN=64,
                                    ORDER=(1, 0))),
}


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(PTX_SPECS))
def test_the_pieces_assemble(name, target):
    kernel_fn, specs = PTX_SPECS[name]
    codegen.assemble(codegen.compile_to_ptx(kernel_fn.specialize_types(specs), target).ptx,
                     target, optimize=False)
