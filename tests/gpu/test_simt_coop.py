"""SIMT cooperation on the GPU: shared memory, barriers, shuffles, votes, shared atomics and
dynamic shared memory give what the IR defines (the references of tests/test_simt_coop.py,
which the cpu backend meets too). The examples run on the GPU in test_examples_gpu.py."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt

import test_simt_coop as coop

pytestmark = pytest.mark.gpu


def on_gpu(*arrays):
    return [vg.asarray(a) for a in arrays]


def test_shared_arrays_and_barriers(rng):
    x = rng.standard_normal(128 * 40).astype(np.float32)
    gx, gout = on_gpu(x, np.full_like(x, np.nan))
    coop.reverse_blocks[40, 128](gx, gout)
    np.testing.assert_array_equal(np.asarray(gout), x.reshape(40, 128)[:, ::-1].ravel())
    x2 = rng.standard_normal((6, 64 * 3)).astype(np.float32)
    gx2, gout2 = on_gpu(x2, np.full((6, 3), np.nan))
    coop.tree_sum_2d[(3, 3), (64, 2)](gx2, gout2, W=64, H=2)
    np.testing.assert_allclose(np.asarray(gout2), x2.astype(np.float64).reshape(6, 3, 64).sum(axis=2),
                               rtol=1e-12)


@pytest.mark.parametrize("dtype", coop.SHUFFLE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_shuffles(rng, dtype):
    block, n = 64, 64 * 5
    x = (rng.integers(0, 2, n) if dtype is np.bool_ else rng.integers(-100, 100, n)
         if np.dtype(dtype).kind in "iu" else rng.standard_normal(n)).astype(dtype)
    arg = rng.choice([0, 1, 2, 5, 16, 31, 32, 33, -1, -7, 100, 2**31 - 1, -2**31], n).astype(np.int32)
    gx, garg, gout = on_gpu(x, arg, np.zeros((7, n), dtype))
    coop.shuffles[5, block](gx, garg, gout)
    np.testing.assert_array_equal(np.asarray(gout), coop.shuffle_reference(x, arg, block))


@pytest.mark.parametrize("block", [64, 48, (8, 6)])
def test_votes_and_lane_id(rng, block):
    threads = int(np.prod(block))
    n = threads * 3
    p = (rng.random(n) < 0.7).astype(np.int32)
    p[:32] = 1
    gp, gout = on_gpu(p, np.zeros((4, n), np.int64))
    coop.votes[3 if isinstance(block, int) else (3, 1), block](gp, gout)
    want = np.zeros((4, n), np.int64)
    cpu_out = want.copy()
    coop.run(coop.votes, 3 if isinstance(block, int) else (3, 1), block, p, cpu_out)
    np.testing.assert_array_equal(np.asarray(gout), cpu_out)


@simt.kernel
def block_atomics(init, index, values, compares, old, final, OP: vg.constexpr,
                  DT: vg.constexpr):
    """Every block updates its own 8 shared cells with its threads' atomics."""
    cells = simt.shared.array(8, DT)
    t = simt.thread_id(0)
    b = simt.block_id(0)
    i = simt.global_id(0)
    if t < 8:
        cells[t] = init[b, t]
    simt.barrier()
    j, v = index[i], values[i]
    if OP == 0:
        old[i] = simt.atomic_add(cells, j, v)
    elif OP == 2:
        old[i] = simt.atomic_max(cells, j, v)
    elif OP == 3:
        old[i] = simt.atomic_min(cells, j, v)
    elif OP == 4:
        old[i] = simt.atomic_and(cells, j, v)
    elif OP == 5:
        old[i] = simt.atomic_or(cells, j, v)
    elif OP == 6:
        old[i] = simt.atomic_xor(cells, j, v)
    elif OP == 7:
        old[i] = simt.atomic_exch(cells, j, v)
    else:
        old[i] = simt.atomic_cas(cells, j, compares[i], v)
    simt.barrier()
    if t < 8:
        final[b, t] = cells[t]


_COMBINE = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
            "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("op,dtype", [(op, dt) for op, dt in coop.SHARED_ATOMIC_CASES
                                      if op != "sub"], ids=lambda v: getattr(v, "__name__", v))
def test_shared_atomics(rng, op, dtype):
    blocks, threads = 6, 128
    n = blocks * threads
    kind = np.dtype(dtype).kind
    draw = (lambda *s: rng.integers(0, 7, s)) if kind == "u" else \
        (lambda *s: rng.integers(-3, 4, s)) if kind == "i" else \
        (lambda *s: rng.choice([-2.0, -1.0, 0.5, 1.0, 3.0], s))  # sums exact in any order
    init, values = draw(blocks, 8).astype(dtype), draw(n).astype(dtype)
    index = rng.integers(0, 8, n).astype(np.int32)
    compares = np.where(rng.random(n) < 0.5, init[np.arange(n) // threads, index], values
                        ).astype(dtype)
    g = on_gpu(init, index, values, compares, np.zeros(n, dtype), np.zeros((blocks, 8), dtype))
    block_atomics[blocks, threads](*g, OP=coop.OPS[op], DT=getattr(vg, np.dtype(dtype).name))
    old, final = np.asarray(g[4]), np.asarray(g[5])
    for b in range(blocks):
        lanes = np.arange(b * threads, (b + 1) * threads)
        for cell in range(8):
            mine = lanes[index[lanes] == cell]
            start = init[b, cell]
            if op in _COMBINE:  # order-free: the result, and each old value a partial result
                with np.errstate(all="ignore"):
                    assert final[b, cell] == _COMBINE[op].reduce(
                        np.concatenate([[start], values[mine]]).astype(dtype))
            elif op == "exch":  # some order: the olds and the final are a permutation
                got = sorted(np.concatenate([old[mine], [final[b, cell]]]).tolist())
                assert got == sorted(np.concatenate([[start], values[mine]]).tolist())
            else:  # cas, in some order: every value seen was the start or a lane's value
                seen = set(np.concatenate([[start], values[mine]]).tolist())
                assert set(old[mine].tolist()) <= seen and final[b, cell] in seen


def test_float16_and_bfloat16_atomic_adds_on_global_memory(rng):
    import torch

    from test_simt_coop_ptx import global_half_adds

    # Small integers whose partial sums, in any order, stay exact: |sum| <= 1429 in
    # float16 (11 bits), <= 200 in bfloat16 (8 bits; its adds take the first 500 only).
    xs = rng.integers(-1, 2, 10_000)
    xs[:500] = rng.integers(-2, 3, 500)
    x = torch.tensor(xs, dtype=torch.float32, device="cuda")
    h = torch.zeros(7, dtype=torch.float16, device="cuda")
    b = torch.zeros(5, dtype=torch.bfloat16, device="cuda")
    global_half_adds[vg.cdiv(10_000, 256), 256](h, b, x)
    want_h = np.bincount(np.arange(10_000) % 7, weights=xs, minlength=7)
    want_b = np.bincount(np.arange(500) % 5, weights=xs[:500], minlength=5)
    np.testing.assert_array_equal(h.float().cpu().numpy(), want_h)
    np.testing.assert_array_equal(b.float().cpu().numpy(), want_b)


@pytest.mark.parametrize("nbytes", [8 * 100 + 7, 100 * 1024])
def test_dynamic_shared_memory(nbytes):
    out = vg.asarray(np.zeros(4, np.int64))
    coop.dynamic_extent[4, 64](out, shared_bytes=nbytes)
    np.testing.assert_array_equal(np.asarray(out), nbytes // 8)


def test_barriers_order_global_memory_within_a_block(rng):
    x = rng.standard_normal(64 * 30).astype(np.float32)
    gx, gout, glog = on_gpu(x, np.zeros_like(x), np.zeros_like(x))
    coop.global_across_barrier[30, 64](gx, gout, glog)
    np.testing.assert_array_equal(np.asarray(gout), x.reshape(30, 64)[:, ::-1].ravel())


def test_block_tickets_number_the_blocks_as_they_arrive(rng):
    import test_block_ticket as tickets

    blocks = 600  # more than the card runs at once: later blocks take later tickets
    counter, out = on_gpu(np.zeros(1, np.int32), np.full((blocks, tickets.BLOCK + 1), -1, np.int64))
    tickets.record_tickets[blocks, tickets.BLOCK](counter, out)
    tickets.check_ticket_table(np.asarray(out), blocks)
    x = rng.standard_normal(100_003).astype(np.float32)
    gx, gout, counter = on_gpu(x, np.full_like(x, np.nan), np.zeros(1, np.uint32))
    tickets.persistent_copy[132, tickets.BLOCK](gx, gout, counter)
    np.testing.assert_array_equal(np.asarray(gout), x + 1)
    assert int(np.asarray(counter)[0]) == vg.cdiv(x.size, tickets.BLOCK) + 132
