"""The tile lowering's straight-line parts run on `block_emulator` (every thread of a block
in lock step, shuffles and shared memory included), against NumPy and the cpu backend:
cumsum along every axis of blocked and permuted layouts (register, lane and warp steps),
Philox bit for bit against `cpu.philox`, reductions, and the slices and concatenations
that only pick or stack registers. No GPU needed."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from llvmlite import ir

from block_emulator import V, Block
from verdigris import types as T
from verdigris.codegen.dtypes import reg_type
from verdigris.cpu import philox
from verdigris.ir import nodes as N
from verdigris.ir import tiles as X
from verdigris.tile import layout as L
from verdigris.tile import pieces, random, reduce, scan

LAYOUTS = [((4, 1024), 8, 4), ((64, 64), 8, 4), ((128,), 4, 4), ((8, 32), 2, 4), ((1, 4096), 8, 4),
           ((16, 16), 4, 4), ((2, 2), 4, 4), ((32, 8, 4), 4, 2)]


def _layouts():
    for shape, warps, vec in LAYOUTS:
        base = L.blocked(shape, warps, vec)
        yield pytest.param(base, warps, id=f"{shape}-w{warps}")
        flipped = base.permuted(tuple(reversed(range(len(shape)))))
        yield pytest.param(flipped, warps, id=f"{shape}-w{warps}-T")


LAYOUT_PARAMS = list(_layouts())


def held(block: Block, layout, array: np.ndarray, dtype: T.DType):
    node = X.TileVar(None, "t", dtype, layout.shape)
    block.inputs[id(node)] = block.tile_value(layout, array, dtype, reg_type(dtype))
    return node


@pytest.mark.parametrize("layout,warps", LAYOUT_PARAMS)
@pytest.mark.parametrize("dtype", [T.int32, T.int64])
def test_integer_cumsum_is_exact_along_every_axis(rng, layout, warps, dtype):
    for axis in range(layout.rank):
        block = Block(warps)
        x = rng.integers(-1000, 1000, layout.shape).astype(dtype.np)
        source = held(block, layout, x, dtype)
        got = block.gather(scan.scan(block, X.TileScan(None, "cumsum", source, axis, dtype, layout.shape)),
                           layout.shape)
        np.testing.assert_array_equal(got.astype(np.int64).astype(dtype.np), np.cumsum(x, axis))
        crosses_warps = any(basis[axis] for basis in layout.warps)
        assert block.barriers == int(crosses_warps)  # all warp bits in one step


def test_integer_cumsum_wraps(rng):
    layout = L.blocked((256,), 2, 4)
    block = Block(2)
    x = rng.integers(2**30, 2**31 - 1, 256).astype(np.int32)
    source = held(block, layout, x, T.int32)
    got = block.gather(scan.scan(block, X.TileScan(None, "cumsum", source, 0, T.int32, (256,))), (256,))
    np.testing.assert_array_equal(got.astype(np.int64).astype(np.uint32).view(np.int32),
                                  np.cumsum(x, dtype=np.int32))


@pytest.mark.parametrize("layout,warps", LAYOUT_PARAMS)
def test_float_cumsum_matches_float64(rng, layout, warps):
    axis = layout.rank - 1
    block = Block(warps)
    x = rng.standard_normal(layout.shape).astype(np.float32)
    source = held(block, layout, x, T.float32)
    got = block.gather(scan.scan(block, X.TileScan(None, "cumsum", source, axis, T.float32, layout.shape)),
                       layout.shape)
    want = np.cumsum(x.astype(np.float64), axis)
    scale = np.cumsum(np.abs(x.astype(np.float64)), axis)
    assert np.all(np.abs(got - want) <= 1e-6 * scale + 1e-30)


@pytest.mark.parametrize("dtype", [T.int32, T.int64, T.uint32, T.uint64, T.int8])
def test_rand_is_philox_bit_for_bit(rng, dtype):
    layout = L.blocked((2048,), 4, 4)
    block = Block(4)
    info = np.iinfo(dtype.np)
    offsets = rng.integers(info.min, info.max, 2048, dtype=dtype.np, endpoint=True)
    offsets[:4] = [0, 1, info.max, info.min]
    node = held(block, layout, offsets, dtype)
    for seed in (0, 12345, -1, int(rng.integers(-2**63, 2**63 - 1))):
        seed_node = N.Var(None, "seed", T.int64)
        block.inputs[id(seed_node)] = V(np.full(block.threads, seed, np.int64).view(np.uint64), ir.IntType(64))
        got = block.gather(random.rand(block, X.Rand(None, seed_node, node, T.float32, (2048,)), None), (2048,))
        want = philox.uniform(np.int64(seed), offsets)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        assert 0 <= got.min() and got.max() < 1


@pytest.mark.parametrize("op", ["sum", "max", "argmax", "argmin"])
@pytest.mark.parametrize("layout,warps", LAYOUT_PARAMS)
def test_reductions_agree_across_threads(rng, monkeypatch, op, layout, warps):
    # the one-stage exchange at any partial count: the emulator runs straight-line code
    # (the two-stage one, a branch for the combining warps, runs in test_tile_hostjit)
    monkeypatch.setattr(reduce, "TWO_STAGE_AFTER", 1 << 30)
    axis = 0 if layout.rank > 1 else None  # a 1-D tile reduces to a scalar
    block = Block(warps)
    x = rng.integers(-50, 50, layout.shape).astype(np.int32)
    source = held(block, layout, x, T.int32)
    shape = () if axis is None else layout.shape[1:]
    got = reduce.reduce(block, X.TileReduce(None, op, source, axis, T.int32, shape))
    want = getattr(np, op)(x, axis=axis)
    if not shape:  # a scalar: every thread holds it
        got_values = block.b.v(got).data.astype(np.int32)
        assert (got_values == want).all()
    else:
        np.testing.assert_array_equal(block.gather(got, shape).astype(np.int32), want)


@pytest.mark.parametrize("start,extent", [(2, 1), (0, 2), (3, 1), (1, 2)])
def test_a_slice_along_register_axes_picks_registers(rng, start, extent):
    layout = L.blocked((4, 8, 32), 1, 4)  # axis 0 is register bits only
    assert not any(basis[0] for basis in layout.lanes + layout.warps)
    block = Block(1)
    x = rng.integers(-99, 99, layout.shape).astype(np.int32)
    source = held(block, layout, x, T.int32)
    node = X.TileSlice(None, source, (start, 0, 0), (1, 1, 1), T.int32, (extent, 8, 32))
    got = pieces.tile_slice(block, node, None)
    np.testing.assert_array_equal(block.gather(got, node.shape).astype(np.int32), x[start:start + extent])
    assert block.barriers == 0


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_a_cat_of_parts_of_one_layout_stacks_registers(rng, parts):
    layout = L.blocked((1, 16, 64), 2, 4)
    block = Block(2)
    xs = [rng.integers(-99, 99, layout.shape).astype(np.int32) for _ in range(parts)]
    nodes = [held(block, layout, x, T.int32) for x in xs]
    node = X.Cat(None, tuple(nodes), 0, T.int32, (parts, 16, 64))
    got = pieces.cat(block, node, None)
    np.testing.assert_array_equal(block.gather(got, node.shape).astype(np.int32), np.concatenate(xs))
    assert block.barriers == 0


@pytest.mark.parametrize("kind", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_register_a_words_are_the_instruction_fragments(rng, kind):
    """P @ V with P from registers on sm_90a: the accumulator's pairs, rounded to fp8 and
    exchanged within quads, are wgmma's A fragments as CUTLASS lays them out
    (ALayout_64x32: word v1 + 2 * v2, byte v0 of lane l in warp w of a group is row
    16 * w + l / 4 + 8 * v1, column 4 * (l % 4) + v0 + 16 * v2 of each k32 step)."""
    import ml_dtypes

    from verdigris.tile import mma_layout, register_a

    fp8 = getattr(ml_dtypes, kind)
    pv = mma_layout.GroupGeometry(128, 128, 8)  # P (128 x 128 keys) @ V, two warp groups
    layout = mma_layout.a_layout(pv, 128, 32)
    assert layout == mma_layout.GroupGeometry(128, 128, 8).layout()  # Q @ K^T's accumulator
    probabilities = rng.uniform(0, 1, layout.shape).astype(np.float32)
    probabilities[::7, ::5] *= 2.0 ** -12  # e4m3's subnormals and zeros
    probabilities[3, :8] = [500.0, -1000.0, 0.0, -0.0, 448.0, -3.0, 1e-30, 240.0]  # saturates
    block = Block(8)
    value = block.tile_value(layout, probabilities, T.float32, reg_type(T.float32))
    fragments = mma_layout.a_fragments(layout, pv, 128, 32)
    words = register_a.words(block, kind, [[value.regs[r] for r in regs] for regs in fragments])
    largest = float(ml_dtypes.finfo(fp8).max)
    want = np.clip(probabilities, -largest, largest).astype(fp8).view(np.uint8)
    thread = np.arange(256)
    warp, lane = thread // 32, thread % 32
    for ks, fragment in enumerate(words):
        assert len(fragment) == 4
        for v2, v1, v0 in itertools.product((0, 1), (0, 1), range(4)):
            row = 16 * warp + lane // 4 + 8 * v1  # warp group 1's rows follow group 0's
            col = 32 * ks + 4 * (lane % 4) + v0 + 16 * v2
            got = (block.b.v(fragment[v1 + 2 * v2]).data >> np.uint64(8 * v0)) & np.uint64(0xFF)
            np.testing.assert_array_equal(got, want[row, col], err_msg=f"k step {ks}, word {v1 + 2 * v2}, byte {v0}")
