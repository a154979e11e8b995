"""SIMT cooperation on the cpu backend: shared memory, barriers, warps, shared atomics.

Each kernel runs on the cpu backend (IR straight from the frontend, through `run_simt`, so
these tests do not depend on the static checker) against a NumPy reference of the
semantics `ir.nodes` gives: shuffles read another lane's value (own value outside 0..31),
votes span the warp's existing lanes, shared arrays are one per block, atomics of one step
take effect in lane order. Then what a user gets wrong: a barrier or shuffle that part of
a block or warp skips, races in shared memory (VG211, VG212), reads of shared memory
nothing wrote (VG213), each at the user's line, and the frontend's refusals.
"""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.cpu import run_simt
from verdigris.errors import DivergenceError
from verdigris.ir import nodes as N

from located import assert_points_at


def _dims(value) -> tuple:
    dims = value if isinstance(value, tuple) else (value,)
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def build(k, block, *args, **kwargs):
    """The kernel's IR for these arguments and block (no static check), and the arguments
    by parameter name."""
    values = k.bind(args, kwargs)
    ir = k.build(k.spec_key(values, k.describe_args(values), _dims(block)))
    return ir, {p.name: v for p, v in zip(k.params, values) if not p.constexpr}


def run(k, grid, block, *args, shared_bytes=0, **kwargs):
    """The kernel's IR for these arguments (no static check), run by the cpu backend."""
    ir, named = build(k, block, *args, **kwargs)
    run_simt(ir, _dims(grid), _dims(block), named, shared_bytes=shared_bytes)


# ----------------------------------------------------------------------------- shared memory


@simt.kernel
def reverse_blocks(x, out):
    tile = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    tile[t] = x[i]
    simt.barrier()
    out[i] = tile[127 - t]


def test_shared_array_is_one_per_block(rng):
    x = rng.standard_normal(128 * 5).astype(np.float32)
    out = np.full_like(x, np.nan)
    run(reverse_blocks, 5, 128, x, out)
    np.testing.assert_array_equal(out, x.reshape(5, 128)[:, ::-1].ravel())


@simt.kernel
def tree_sum_2d(x, out, W: vg.constexpr, H: vg.constexpr):
    tile = simt.shared.array((H, W), vg.float64)
    tx, ty = simt.thread_id(0), simt.thread_id(1)
    tile[ty, tx] = vg.float64(x[simt.global_id(1), simt.global_id(0)])
    simt.barrier()
    s = W // 2
    while s > 0:  # a block-uniform loop: every thread meets every barrier
        if tx < s:
            tile[ty, tx] += tile[ty, tx + s]
        simt.barrier()
        s //= 2
    if tx == 0:
        out[simt.global_id(1), simt.block_id(0)] = tile[ty, 0]


def test_tree_reduction_in_a_2d_shared_array(rng):
    x = rng.standard_normal((6, 64 * 3)).astype(np.float32)
    out = np.full((6, 3), np.nan)
    run(tree_sum_2d, (3, 3), (64, 2), x, out, W=64, H=2)
    np.testing.assert_allclose(out, x.astype(np.float64).reshape(6, 3, 64).sum(axis=2), rtol=1e-12)


@simt.kernel
def dynamic_copy(x, out):
    buf = simt.shared.dynamic(vg.int32)
    t, threads, b = simt.thread_id(0), simt.block_dim(0), simt.block_id(0)
    n = buf.shape[0]  # shared_bytes // 4
    for k in range(t, n, threads):
        buf[k] = b * 1000 + k
    simt.barrier()
    for k in range(t, out.shape[1], threads):
        if k < n and k < x.shape[0]:
            out[b, k] = buf[n - 1 - k] + x[k]


def dynamic_reference(x, blocks, n, width):
    k = np.arange(width)
    return np.where(k < n, np.arange(blocks)[:, None] * 1000 + (n - 1 - k) + x[:width], 0)


def test_dynamic_shared_memory_is_sized_by_the_launch(rng):
    x = rng.integers(-1000, 1000, 300).astype(np.int32)
    out = np.zeros((2, 90), np.int32)
    run(dynamic_copy, 2, 32, x, out, shared_bytes=75 * 4 + 3)  # a partial element is dropped
    np.testing.assert_array_equal(out, dynamic_reference(x, 2, 75, 90))


@simt.kernel
def dynamic_reverse(x, out):
    """Indexed by the int32 thread id, unguarded: its checks are kept (the launch states no
    condition on the dynamic array's extent, which no argument carries)."""
    buf = simt.shared.dynamic(vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i]
    simt.barrier()
    out[i] = buf[simt.block_dim(0) - 1 - t]


def test_dynamic_shared_memory_indexed_by_thread_ids(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    dynamic_reverse[2, 64](x, out, shared_bytes=64 * 4)  # the launch path, with its guard
    np.testing.assert_array_equal(out, x.reshape(2, 64)[:, ::-1].ravel())


# ----------------------------------------------------------------------------- warps

SHUFFLE_DTYPES = [np.int32, np.int64, np.uint8, np.float32, np.float64, np.float16, np.bool_]


@simt.kernel
def shuffles(x, arg, out):
    i = simt.global_id(0)
    v = x[i]
    a = arg[i]
    out[0, i] = simt.shfl_down(v, a)
    out[1, i] = simt.shfl_up(v, a)
    out[2, i] = simt.shfl_xor(v, a)
    out[3, i] = simt.shfl_idx(v, a)
    out[4, i] = simt.shfl_down(v, 3)
    out[5, i] = simt.shfl_xor(v, 16)
    for k in range(3):  # constant after unrolling, on the GPU
        v = simt.shfl_up(v, 1 << k)
    out[6, i] = v


def shuffle_reference(x, arg, block):
    """What each of `shuffles`' rows holds, by the IR's definition."""
    n = len(x)
    index = np.arange(n)
    lane = index % block % 32
    first = index - lane

    def read(values, source):
        inside = (source >= 0) & (source < 32)
        return values[np.where(inside, first + source, index)]

    a = arg.astype(np.int64)
    rows = [read(x, lane + a), read(x, lane - a), read(x, lane ^ a), read(x, a),
            read(x, lane + 3), read(x, lane ^ 16)]
    v = x
    for k in range(3):
        v = read(v, lane - (1 << k))
    return np.stack(rows + [v])


@pytest.mark.parametrize("dtype", SHUFFLE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_shuffles_read_the_lane_the_ir_says(rng, dtype):
    block, n = 64, 64 * 3
    x = (rng.integers(0, 2, n) if dtype is np.bool_ else rng.integers(-100, 100, n)
         if np.dtype(dtype).kind in "iu" else rng.standard_normal(n)).astype(dtype)
    # Arguments inside and outside 0..31, negative and past 32 included.
    arg = rng.choice([0, 1, 2, 5, 16, 31, 32, 33, -1, -7, 100, 2**31 - 1, -2**31], n).astype(np.int32)
    out = np.zeros((7, n), dtype)
    run(shuffles, 3, block, x, arg, out)
    np.testing.assert_array_equal(out, shuffle_reference(x, arg, block))


@simt.kernel
def votes(p, out):
    threads = simt.block_dim(0) * simt.block_dim(1)
    i = int(simt.block_id(0)) * threads + simt.thread_id(1) * simt.block_dim(0) + simt.thread_id(0)
    q = p[i] != 0
    out[0, i] = simt.ballot(q)
    out[1, i] = simt.any_(q)
    out[2, i] = simt.all_(q)
    out[3, i] = simt.lane_id() + simt.warp_size * 100


@pytest.mark.parametrize("block", [64, 48, (8, 6)])
def test_votes_span_the_warps_existing_lanes(rng, block):
    threads = int(np.prod(block))
    blocks = 3
    n = threads * blocks
    p = (rng.random(n) < 0.7).astype(np.int32)
    p[:threads][:32] = 1  # one warp where all() holds
    out = np.zeros((4, n), np.int64)
    grid = blocks if isinstance(block, int) else (blocks, 1)
    run(votes, grid, block, p, out)
    linear = np.arange(n) % threads
    warp = np.arange(n) // threads * 100 + linear // 32
    for w in np.unique(warp):
        lanes = np.flatnonzero(warp == w)
        bits = sum(int(p[k]) << j for j, k in enumerate(lanes))
        assert (out[0, lanes] == bits).all()
        assert (out[1, lanes] == p[lanes].any()).all() and (out[2, lanes] == p[lanes].all()).all()
    np.testing.assert_array_equal(out[3], linear % 32 + 3200)


@simt.kernel
def warp_in_select(x, out):
    i = simt.global_id(0)
    lane = simt.lane_id()
    # The shuffle sits in the lazy arm of a select and of `and`: every lane still takes
    # part, as the compiled code computes cheap arms on every lane.
    out[i] = x[i] if lane % 2 == 0 else simt.shfl_down(x[i] + 1, 1) * 1
    if lane > 0 and simt.any_(x[i] > 0):
        out[i] += 100


def test_warp_operations_in_lazy_operands_see_the_whole_warp(rng):
    x = rng.integers(-5, 5, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    with pytest.raises(DivergenceError):  # the arm reads memory: the GPU branches around it
        run(warp_in_select, 1, 64, x, out)


@simt.kernel
def warp_in_cheap_select(x, out):
    i = simt.global_id(0)
    v = x[i]
    lane = simt.lane_id()
    out[i] = v if lane % 2 == 0 else simt.shfl_down(v, 1)
    if lane > 0 and simt.any_(v > 0):
        out[i] += 100


def test_cheap_lazy_operands_with_warp_operations_run_on_every_lane(rng):
    x = rng.integers(-5, 5, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    run(warp_in_cheap_select, 1, 64, x, out)
    lane = np.arange(64) % 32
    down = np.where(lane < 31, np.roll(x, -1), x)
    want = np.where(lane % 2 == 0, x, down)
    any_positive = np.repeat((x.reshape(2, 32) > 0).any(axis=1), 32)
    np.testing.assert_array_equal(out, want + 100 * ((lane > 0) & any_positive))


# ----------------------------------------------------------------------------- shared atomics

OPS = {"add": 0, "sub": 1, "max": 2, "min": 3, "and": 4, "or": 5, "xor": 6, "exch": 7, "cas": 8}


@simt.kernel
def shared_atomics(init, index, values, compares, old, final, OP: vg.constexpr,
                   DT: vg.constexpr):
    cells = simt.shared.array(8, DT)
    t = simt.thread_id(0)
    if t < 8:
        cells[t] = init[t]
    simt.barrier()
    j, v = index[t], values[t]
    if OP == 0:
        old[t] = simt.atomic_add(cells, j, v)
    elif OP == 1:
        old[t] = simt.atomic_sub(cells, j, v)
    elif OP == 2:
        old[t] = simt.atomic_max(cells, j, v)
    elif OP == 3:
        old[t] = simt.atomic_min(cells, j, v)
    elif OP == 4:
        old[t] = simt.atomic_and(cells, j, v)
    elif OP == 5:
        old[t] = simt.atomic_or(cells, j, v)
    elif OP == 6:
        old[t] = simt.atomic_xor(cells, j, v)
    elif OP == 7:
        old[t] = simt.atomic_exch(cells, j, v)
    else:
        old[t] = simt.atomic_cas(cells, j, compares[t], v)
    simt.barrier()
    if t < 8:
        final[t] = cells[t]


_SERIAL = {"add": lambda c, v, k: c + v, "sub": lambda c, v, k: c - v,
           "max": lambda c, v, k: max(c, v), "min": lambda c, v, k: min(c, v),
           "and": lambda c, v, k: c & v, "or": lambda c, v, k: c | v,
           "xor": lambda c, v, k: c ^ v, "exch": lambda c, v, k: v,
           "cas": lambda c, v, k: v if c == k else c}
SHARED_ATOMIC_CASES = [(op, dt) for dt in (np.int32, np.int64, np.uint32, np.uint64, np.float32,
                                           np.float64) for op in OPS
                       if not (np.dtype(dt).kind == "f" and op in ("and", "or", "xor"))] + \
                      [("add", np.float16)]


@pytest.mark.parametrize("op,dtype", SHARED_ATOMIC_CASES, ids=lambda v: getattr(v, "__name__", v))
def test_shared_atomics_take_effect_in_lane_order(rng, op, dtype):
    threads = 64
    kind = np.dtype(dtype).kind
    draw = (lambda n: rng.integers(0, 7, n)) if kind == "u" else \
        (lambda n: rng.integers(-3, 4, n)) if kind == "i" else \
        (lambda n: rng.choice([-2.5, -1.0, 0.0, 0.5, 3.0], n))
    init, values = draw(8).astype(dtype), draw(threads).astype(dtype)
    compares = np.where(rng.random(threads) < 0.5, init[rng.integers(0, 8, threads)],
                        values).astype(dtype)
    index = rng.integers(0, 8, threads).astype(np.int32)
    old, final = np.zeros(threads, dtype), np.zeros(8, dtype)
    run(shared_atomics, 1, threads, init, index, values, compares, old, final, OP=OPS[op],
        DT=getattr(vg, np.dtype(dtype).name))
    cells, want_old = [x for x in init.tolist()], []
    with np.errstate(all="ignore"):
        for t in range(threads):
            want_old.append(cells[index[t]])
            cells[index[t]] = dtype(_SERIAL[op](dtype(cells[index[t]]), values[t], compares[t]))
    np.testing.assert_array_equal(old, np.array(want_old, dtype))
    np.testing.assert_array_equal(final, np.array(cells, dtype))


# ----------------------------------------------------------------------------- narrow floats


@simt.kernel
def narrow_math(h, b, out_h, out_b, out_f):
    i = simt.global_id(0)
    if i < h.shape[0]:
        x = h[i] * vg.float16(1.5) + h[i]  # float16 arithmetic, rounded at each step
        y = b[i] / vg.bfloat16(3) - vg.bfloat16(0.25)
        out_h[i] = x
        out_b[i] = y
        out_f[i] = vg.float32(x) + vg.float32(y) + vg.float32(vg.float16(b[i]))


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as raw bits."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_float16_and_bfloat16_arithmetic_and_conversions(rng):
    n = 257
    f16, bf16, f32 = (N.ArrayType(d, 1, "global", True) for d in (vg.float16, vg.bfloat16,
                                                                    vg.float32))
    ir = narrow_math.specialize_types(dict(h=f16, b=bf16, out_h=f16, out_b=bf16, out_f=f32),
                                      block=(128, 1, 1))
    h = rng.standard_normal(n).astype(np.float16)
    b = _bf16_bits(rng.standard_normal(n))  # bfloat16 arrays as raw bits
    out_h, out_b, out_f = np.zeros(n, np.float16), np.zeros(n, np.uint16), np.zeros(n, np.float32)
    run_simt(ir, (3, 1, 1), (128, 1, 1), dict(h=h, b=b, out_h=out_h, out_b=out_b, out_f=out_f))
    x = (h * np.float16(1.5)) + h  # NumPy float16 rounds each operation
    y = _bf16_value(_bf16_bits(_bf16_value(_bf16_bits(_bf16_value(b) / np.float32(3))) - 0.25))
    np.testing.assert_array_equal(out_h, x)
    np.testing.assert_array_equal(_bf16_value(out_b), y)
    want_f = x.astype(np.float32) + y + _bf16_value(b).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out_f, want_f)


# ----------------------------------------------------------------------------- divergence


@simt.kernel
def guarded_barrier(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    if i < x.shape[0]:
        tile[t] = x[i]
        simt.barrier()  # threads past the end never get here
        out[i] = tile[63 - t]


def test_a_barrier_part_of_a_block_skips_is_a_divergence_error(rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = np.zeros(100, np.float32)
    with pytest.raises(DivergenceError) as info:
        run(guarded_barrier, 2, 64, x, out)
    err = info.value
    assert isinstance(err, vg.KernelError) and isinstance(err, vg.SafetyError)
    assert err.code == "VG210" and "block (1, 0, 0)" in err.message
    assert "thread (36, 0, 0)" in err.message  # the first thread that did not arrive
    assert_points_at(err, "simt.barrier()  # threads past the end", __file__)
    full = np.zeros(128, np.float32)
    run(guarded_barrier, 2, 64, np.ones(128, np.float32), full)  # every thread arrives: fine
    np.testing.assert_array_equal(full, 1)


@simt.kernel
def data_dependent_loop_barrier(counts, out):
    tile = simt.shared.array(32, vg.int32)
    t = simt.thread_id(0)
    for k in range(counts[t]):
        tile[t] = k
        simt.barrier()
    out[t] = 1


def test_a_barrier_in_a_loop_whose_trip_count_differs_is_caught():
    counts = np.full(32, 3, np.int32)
    out = np.zeros(32, np.int32)
    run(data_dependent_loop_barrier, 1, 32, counts, out)  # the same count everywhere: fine
    counts[7] = 4
    with pytest.raises(DivergenceError, match="barrier divergence"):
        run(data_dependent_loop_barrier, 1, 32, counts, out)


@simt.kernel
def early_exit_shuffle(x, out):
    i = simt.global_id(0)
    if i >= x.shape[0]:
        return
    out[i] = simt.shfl_down(x[i], 1)


def test_a_shuffle_that_lanes_of_the_warp_left_is_a_divergence_error(rng):
    x = rng.standard_normal(40).astype(np.float32)
    out = np.zeros(40, np.float32)
    with pytest.raises(DivergenceError, match=r"thread \(32, 0, 0\) \(lane 0\) reached shfl_down\(\), but lane 8") as info:
        run(early_exit_shuffle, 1, 64, x, out)
    assert info.value.code == "VG214"
    assert_points_at(info.value, "out[i] = simt.shfl_down(x[i], 1)", __file__)


@simt.kernel
def shuffle_partial_warp(x, out):
    i = simt.global_id(0)
    out[i] = simt.shfl_down(x[i], 4)


def test_a_shuffle_from_a_lane_the_block_lacks_is_a_kernel_error(rng):
    x = rng.standard_normal(48).astype(np.float32)
    out = np.zeros(48, np.float32)
    with pytest.raises(vg.KernelError, match="reads lane 16 of its warp with shfl_down.*only 16 "
                                             "lanes") as info:
        run(shuffle_partial_warp, 1, 48, x, out)
    assert not isinstance(info.value, vg.SafetyError)


@simt.kernel
def divergent_syncwarp(x, out):
    i = simt.global_id(0)
    if simt.lane_id() < 16:
        simt.syncwarp()
    out[i] = x[i]


def test_a_syncwarp_half_a_warp_skips_is_a_divergence_error():
    x = np.ones(32, np.float32)
    with pytest.raises(DivergenceError, match=r"syncwarp\(\)"):
        run(divergent_syncwarp, 1, 32, x, np.zeros(32, np.float32))


# ----------------------------------------------------------------------------- shared races


@simt.kernel
def reverse_without_barrier(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    tile[t] = x[i]
    out[i] = tile[63 - t]  # another thread's element, no barrier between


@simt.kernel
def rotate_in_warp(x, out, SYNC: vg.constexpr):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[t]
    if SYNC:
        simt.syncwarp()
    out[t] = buf[t // 32 * 32 + (t + 1) % 32]  # a lane of the same warp


@simt.kernel
def half_written(x, out):
    tile = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    if t < 32:
        tile[t] = x[t]
    simt.barrier()
    out[t] = tile[t]


@simt.kernel
def flag_by_everyone(x, out, ONE: vg.constexpr):
    flag = simt.shared.array(1, vg.int32)
    t = simt.thread_id(0)
    if t == 0 or not ONE:
        flag[0] = 1
    simt.barrier()
    out[t] = x[t] * flag[0]


@simt.kernel
def mixed_atomic_plain(out):
    counts = simt.shared.array(4, vg.int32)
    t = simt.thread_id(0)
    if t < 4:
        counts[t] = 0
    simt.barrier()
    simt.atomic_add(counts, t % 4, 1)
    out[t] = counts[t % 4]  # plain read while other threads add


def test_a_shared_element_another_warp_writes_needs_a_barrier(rng):
    x = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(vg.SafetyError) as info:
        run(reverse_without_barrier, 1, 64, x, np.zeros(64, np.float32))
    err = info.value
    assert err.code == "VG211", str(err)
    assert "with no barrier() between them" in err.message and "tile[" in err.message
    assert_points_at(err, "tile[63 - t]  # another thread", __file__)


def test_lanes_of_one_warp_need_syncwarp_not_lock_step(rng):
    x = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(vg.SafetyError) as info:
        run(rotate_in_warp, 1, 64, x, np.zeros(64, np.float32), SYNC=False)
    assert info.value.code == "VG212" and "syncwarp()" in info.value.message
    out = np.zeros(64, np.float32)
    run(rotate_in_warp, 1, 64, x, out, SYNC=True)
    t = np.arange(64)
    np.testing.assert_array_equal(out, x[t // 32 * 32 + (t + 1) % 32])


def test_reading_shared_memory_nothing_wrote_is_reported(rng):
    x = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(vg.SafetyError) as info:
        run(half_written, 1, 64, x, np.zeros(64, np.float32))
    err = info.value
    assert err.code == "VG213" and "thread (block 0, thread 32) reads tile[32]" in err.message
    assert_points_at(err, "out[t] = tile[t]", __file__)


def test_a_shared_flag_written_by_every_thread_races():
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(vg.SafetyError, match="both write flag") as info:
        run(flag_by_everyone, 1, 64, x, np.zeros(64, np.float32), ONE=False)
    assert info.value.code in ("VG211", "VG212")
    out = np.zeros(64, np.float32)
    run(flag_by_everyone, 1, 64, x, out, ONE=True)
    np.testing.assert_array_equal(out, x)


def test_atomic_and_plain_access_of_a_shared_element_in_one_interval():
    with pytest.raises(vg.SafetyError) as info:
        run(mixed_atomic_plain, 1, 64, np.zeros(64, np.int32))
    assert info.value.code == "VG204" and "atomically" in info.value.message


def test_unsafe_shared_accesses_are_not_reported(rng):
    @simt.kernel
    def racy_but_unsafe(x, out):
        tile = simt.shared.array(64, vg.float32)
        t = simt.thread_id(0)
        tile[t] = x[t]
        with vg.unsafe():
            out[t] = tile[63 - t]

    x = rng.standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    run(racy_but_unsafe, 1, 64, x, out)
    np.testing.assert_array_equal(out, x[::-1])  # lock step happens to give this


@simt.kernel
def global_across_barrier(x, out, log):
    t = simt.thread_id(0)
    i = simt.global_id(0)
    log[i] = x[i]
    simt.barrier()  # orders the block's threads, for global memory too
    out[i] = log[simt.block_id(0) * 64 + 63 - t]


def test_barriers_order_global_memory_within_a_block_but_not_across_blocks(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out, log = np.zeros(128, np.float32), np.zeros(128, np.float32)
    run(global_across_barrier, 2, 64, x, out, log)
    np.testing.assert_array_equal(out, x.reshape(2, 64)[:, ::-1].ravel())


# ----------------------------------------------------------------------------- frontend errors

def _k_nonconstant_shape(x, n):
    tile = simt.shared.array(n, vg.float32)
    tile[0] = x[0]


def _k_no_dtype(x):
    tile = simt.shared.array(16, 4)
    tile[0] = x[0]


@vg.func
def _make_tile():
    tile = simt.shared.array(16, vg.float32)
    return tile


def _k_returns_shared(x):
    tile = _make_tile()
    tile[0] = x[0]


def _k_shuffle_array(x, out):
    out[0] = simt.shfl_down(x, 1)


def _k_shuffle_float_lane(x, out):
    out[0] = simt.shfl_idx(x[0], 1.5)


def _k_two_dynamic(x):
    a = simt.shared.dynamic(vg.float32)
    b = simt.shared.dynamic(vg.int32)
    a[0] = x[0]


def _k_too_much_static(x):
    a = simt.shared.array((128, 64), vg.float32)
    b = simt.shared.array(3072, vg.float64)
    a[0, 0] = x[0]


def _k_barrier_args(x):
    simt.barrier(1)


def _k_constexpr_name(x, n):
    N: vg.constexpr = n
    x[0] = N


@pytest.mark.parametrize("fn,marker,message", [
    (_k_nonconstant_shape, "simt.shared.array(n,", "needs a constant shape"),
    (_k_no_dtype, "simt.shared.array(16, 4)", "needs a dtype"),
    (_k_returns_shared, "return tile", "returns an array"),
    (_k_shuffle_array, "simt.shfl_down(x, 1)", "not an array"),
    (_k_shuffle_float_lane, "simt.shfl_idx(x[0], 1.5)", "must be an integer"),
    (_k_two_dynamic, "b = simt.shared.dynamic(vg.int32)", "one dynamic shared array"),
    (_k_too_much_static, "simt.shared.array(3072, vg.float64)", "more than the 49152"),
    (_k_barrier_args, "simt.barrier(1)", "takes no arguments"),
    (_k_constexpr_name, "N: vg.constexpr = n", "not known while compiling"),
], ids=lambda v: getattr(v, "__name__", None))
def test_misuse_is_a_compile_error_at_the_line(fn, marker, message):
    k = simt.kernel(fn)
    args = [np.zeros(4, np.float32)] + ([np.zeros(4, np.float32)] if "out" in
                                        k.params[-1].name else [5] if len(k.params) > 1 else [])
    with pytest.raises(vg.CompileError, match=message) as info:
        build(k, 32, *args)
    assert_points_at(info.value, marker, __file__)


# ----------------------------------------------------------------------------- launches


def test_dynamic_shared_memory_through_the_launch_keyword(rng):
    x = rng.integers(-1000, 1000, 300).astype(np.int32)
    out = np.zeros((3, 40), np.int32)
    dynamic_copy[3, 32](x, out, shared_bytes=40 * 4)
    np.testing.assert_array_equal(out, dynamic_reference(x, 3, 40, 40))


@simt.kernel
def dynamic_extent(out):
    buf = simt.shared.dynamic(vg.float64)
    t = simt.thread_id(0)
    for k in range(t, buf.shape[0], simt.block_dim(0)):
        buf[k] = 1.0
    simt.barrier()
    if t == 0:
        out[simt.block_id(0)] = buf.shape[0]


def test_shared_bytes_is_checked_at_the_launch():
    out = np.zeros(3, np.int64)
    dynamic_extent[3, 32](out, shared_bytes=8 * 100 + 7)
    np.testing.assert_array_equal(out, 100)
    with pytest.raises(vg.LaunchError, match="uses simt.shared.dynamic, but the launch gives 0 "
                                             "bytes"):
        dynamic_extent[3, 32](out)
    with pytest.raises(vg.LaunchError, match="shared_bytes must be an int >= 0"):
        dynamic_extent[3, 32](out, shared_bytes=-8)
    with pytest.raises(vg.LaunchError, match="more than the 232448"):
        dynamic_extent[3, 32](out, shared_bytes=300 * 1024)
