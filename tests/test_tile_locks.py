"""Compare-and-swap, exchange and locks in tile kernels (issue #26 item 6): `tile.atomic_cas`,
`tile.atomic_xchg` and `with tile.lock(locks, index):`, on the cpu backend, in the race
checker, in the GPU code run on the host (`host_jit`) and through ptxas.

The LayerNorm backward of Triton's tutorial 05 (per-group partial sums of dw and db under a
lock per group) against a float64 reference, outputs poisoned first; its racy twins refused
before memory is touched, naming two blocks: no lock, a lock per row around the update of
a group's row, locks of two arrays around one row, a read of the row outside the lock, and
a spin lock written by hand (with a hint to `tile.lock`); the misuses the frontend refuses.
The GPU runs are in `tests/gpu/test_tile_locks_gpu.py`.
"""
from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

import host_jit
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from safety.test_tile_static import analyze, fresh
from test_tile_codegen import arr, needs_ptxas
import tile_lock_kernels as K
from tile_lock_kernels import (accumulate_as_triton_does, gemm_stored_under_a_lock, split_k_locked, accumulate_lock_per_row, accumulate_locked,
                               accumulate_persistent, count_read_outside_the_lock,
                               accumulate_read_outside, accumulate_spin_by_hand,
                               accumulate_two_lock_arrays, accumulate_unlocked, exchange_chain,
                               first_claim, layer_norm_bwd_dwdb, layer_norm_bwd_dx_fused,
                               layer_norm_reference, layer_norm_setup, swap_then_read)

ROWS, COLS, N, GROUP = 37, 50, 64, 4  # 37 rows: groups of 10 and 9 blocks; 50 of 64 columns


def layer_norm_backward(rng, run=lambda k, grid, *args, **kw: k[grid](*args, **kw)):
    """dx, dw, db of the two kernels (with `run` launching them) and the float64 reference."""
    x, w, dy, mean, rstd = layer_norm_setup(rng, ROWS, COLS)
    dx = np.full_like(x, np.nan)
    dw_partial, db_partial = (np.full((GROUP, N), np.nan, np.float32) for _ in range(2))
    locks, count = np.zeros(GROUP, np.int32), np.zeros(GROUP, np.int32)
    run(layer_norm_bwd_dx_fused, ROWS, dx, dy, dw_partial, db_partial, x, w, mean, rstd, locks,
        count, N=N, GROUP=GROUP)
    assert not locks.any() and (count == 1).all()
    dw, db = np.full(COLS, np.nan, np.float32), np.full(COLS, np.nan, np.float32)
    run(layer_norm_bwd_dwdb, vg.cdiv(COLS, 16), dw_partial, db_partial, dw, db, GROUP=GROUP, BN=16)
    return (dx, dw, db), layer_norm_reference(x, w, dy, mean, rstd)


def test_layer_norm_backward_adds_partial_sums_under_a_lock_per_group(rng):
    got, want = layer_norm_backward(rng)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def accumulate_args(rng, rows=ROWS, locks=GROUP):
    dy = rng.standard_normal((rows, COLS)).astype(np.float32)
    return dy, np.full((GROUP, N), np.nan, np.float32), np.zeros(GROUP, np.int32), \
        np.zeros(locks, np.int32)


def test_the_locked_accumulation_is_proven_and_right(rng):
    dy, partial, count, locks = accumulate_args(rng)
    assert not analyze(accumulate_locked, dy, partial, count, locks, N=N, GROUP=GROUP).errors
    accumulate_locked[ROWS](dy, partial, count, locks, N=N, GROUP=GROUP)
    groups = np.arange(ROWS) % GROUP
    for g in range(GROUP):
        np.testing.assert_allclose(partial[g, :COLS], dy[groups == g].astype(np.float64).sum(axis=0),
                                   rtol=1e-5, atol=1e-5)
    assert not locks.any()


def test_a_persistent_loop_takes_the_lock_of_each_row_s_group(rng):
    dy, partial, _, locks = accumulate_args(rng)
    partial[:] = 0
    accumulate_persistent[5](dy, partial, locks, N=N, GROUP=GROUP)
    groups = np.arange(ROWS) % GROUP
    for g in range(GROUP):
        np.testing.assert_allclose(partial[g, :COLS], dy[groups == g].astype(np.float64).sum(axis=0),
                                   rtol=1e-5, atol=1e-5)


def refused(kernel, args, grid=ROWS, **kwargs) -> vg.SafetyError:
    """The launch's refusal; the arguments are untouched (refused before anything ran)."""
    before = [a.copy() for a in args]
    with pytest.raises(vg.SafetyError) as info:
        fresh(kernel)[grid](*args, N=N, GROUP=GROUP, **kwargs)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
    return info.value


def two_blocks_of_one_group(err) -> tuple:
    first, second = map(int, re.findall(r"block (\d+)", err.message)[:2])
    assert first != second and first % GROUP == second % GROUP, err.message
    return first, second


def test_the_accumulation_without_the_lock_is_refused_naming_two_blocks(rng):
    dy, partial, count, _ = accumulate_args(rng)
    err = refused(accumulate_unlocked, (dy, partial, count))
    assert err.code == "VG202" and "tile.lock" not in err.message
    two_blocks_of_one_group(err)


def test_a_lock_per_row_around_a_group_s_row_is_refused(rng):
    dy, partial, count, locks = accumulate_args(rng, locks=ROWS)
    err = refused(accumulate_lock_per_row, (dy, partial, count, locks))
    assert err.code == "VG202" and "each holding its own element of locks" in err.message
    assert "index the lock by what the body updates" in err.hint
    two_blocks_of_one_group(err)


def test_locks_of_two_arrays_around_one_row_are_refused(rng):
    dy, partial, _, locks = accumulate_args(rng)
    err = refused(accumulate_two_lock_arrays, (dy, partial, locks, locks.copy()))
    assert err.code in ("VG202", "VG203")
    assert "holding locks of different arrays (locks, other_locks)" in err.message
    two_blocks_of_one_group(err)


def test_a_read_of_the_locked_row_outside_the_lock_is_refused(rng):
    dy, partial, _, locks = accumulate_args(rng)
    err = refused(accumulate_read_outside, (dy, partial, np.zeros_like(dy), locks))
    assert err.code == "VG203" and "one of them outside every tile.lock" in err.message
    assert "put every access of dw_partial that other blocks may meet inside" in err.hint
    two_blocks_of_one_group(err)


def test_a_spin_lock_by_hand_is_refused_with_a_hint_to_tile_lock(rng):
    dy, partial, _, locks = accumulate_args(rng)
    err = refused(accumulate_spin_by_hand, (dy, partial, locks))
    assert err.code == "VG202" and "with tile.lock(locks, index):" in err.hint
    two_blocks_of_one_group(err)


def test_within_one_block_the_lock_orders_nothing(rng):
    """The body's load and store of the group's row, and its read and write of `count`, may
    meet within the block: the checker's facts still name both pairs for the lowering to
    order (the lock's facts apply between blocks only)."""
    dy, partial, count, locks = accumulate_args(rng)
    analysis = analyze(accumulate_locked, dy, partial, count, locks, N=N, GROUP=GROUP)
    assert not analysis.errors and len(analysis.facts["block_meets"]) == 2


def test_triton_s_accumulation_word_for_word_with_count_beside_the_locks(rng):
    """Count read plainly and set with atomic_xchg under the lock, in the second half of the
    lock buffer (a view: disjoint from the locks, so the launch's alias check passes)."""
    dy, partial, _, _ = accumulate_args(rng)
    buffer = np.zeros(2 * GROUP, np.int32)
    assert not analyze(accumulate_as_triton_does, dy, partial, buffer[:GROUP], buffer[GROUP:], N=N,
                       GROUP=GROUP).errors
    accumulate_as_triton_does[ROWS](dy, partial, buffer[:GROUP], buffer[GROUP:], N=N, GROUP=GROUP)
    assert buffer.tolist() == [0] * GROUP + [1] * GROUP
    groups = np.arange(ROWS) % GROUP
    for g in range(GROUP):
        np.testing.assert_allclose(partial[g, :COLS], dy[groups == g].astype(np.float64).sum(axis=0),
                                   rtol=1e-5, atol=1e-5)


def test_the_count_read_outside_the_lock_is_refused(rng):
    dy, partial, count, locks = accumulate_args(rng)
    err = refused(count_read_outside_the_lock, (dy, partial, locks, count))
    assert err.code == "VG204" and "one of them outside every tile.lock" in err.message
    two_blocks_of_one_group(err)


@pytest.mark.parametrize("name, grid, proven", [
    ("half_locked", 12, False),  # odd blocks update their group's row without the lock
    ("loaded_group", 12, True),  # the lock and the row: one loaded value
    ("reloaded_group", 12, False),  # the row: another loaded value than the lock's
    ("neighbour_row", 12, False),  # the next group's row under this group's lock
    ("grid_2d", (12, 4), True),  # a lock per row group, shared by the columns' blocks
])
def test_what_a_lock_covers(name, grid, proven, rng):
    kernel = getattr(K, name)
    dy = rng.standard_normal((12, 64)).astype(np.float32)
    p, locks = np.zeros((4, 64), np.float32), np.zeros(4, np.int32)
    groups = rng.integers(0, 4, 13)
    args = (dy, groups, p, locks) if "loaded" in name else (dy, p, locks)
    constexprs = dict(N=64) if "loaded" in name else dict(N=16 if name == "grid_2d" else 64, G=4)
    errors = analyze(kernel, *args, grid=grid, **constexprs).errors
    assert not errors if proven else errors[0].code in ("VG202", "VG203", "VG205"), errors
    if proven:
        fresh(kernel)[grid](*args, **constexprs)
        rows = groups[:12] if "loaded" in name else np.arange(12) % 4
        want = np.zeros((4, 64))
        np.add.at(want, rows, dy.astype(np.float64))  # (grid_2d: block (i, j) adds columns 16j...)
        np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- atomic_cas, atomic_xchg


def test_atomic_cas_gives_every_block_the_old_value(rng):
    blocks = int(rng.integers(5, 40))
    slot, claims = np.array([-1], np.int32), np.full(blocks, -5, np.int32)
    first_claim[blocks](slot, claims)
    winner = int(slot[0])
    assert 0 <= winner < blocks and claims[winner] == -1
    assert (np.delete(claims, winner) == winner).all()


@pytest.mark.parametrize("dtype", [vg.int32, vg.int64, vg.uint32, vg.float32, vg.float64])
def test_atomic_xchg_hands_each_value_on_once(dtype, rng):
    blocks = int(rng.integers(3, 30))
    start = np.array([100, 200], dtype.dtype)
    cell, old = start.copy(), np.full(blocks, 7, dtype.dtype)
    exchange_chain[blocks](cell, old, DT=dtype)
    for parity in (0, 1):  # what each cell held, in turn, is its start and the ids put in
        mine = np.arange(parity, blocks, 2)
        assert sorted(np.append(old[mine], cell[parity]).tolist()) == sorted([start[parity], *mine])


def test_one_element_atomics_keep_the_block_s_program_order(rng):
    """Beside a plain read of the same element by the same block, an atomic_xchg is ordered
    as a store (tile atomics there are VG204); between blocks the elements differ."""
    blocks = 40
    cells = rng.standard_normal(blocks).astype(np.float32)
    start = cells.copy()
    before, after = np.full(blocks, np.nan, np.float32), np.full(blocks, np.nan, np.float32)
    swap_then_read[blocks](cells, before, after)
    np.testing.assert_array_equal(before, start)
    np.testing.assert_array_equal(after, np.arange(blocks, dtype=np.float32) * 2 + 1)
    cells, before, after = start.copy(), before * np.nan, after * np.nan
    assert host_jit.run(swap_then_read, blocks, cells=cells, before=before, after=after) is None
    np.testing.assert_array_equal(after, np.arange(blocks, dtype=np.float32) * 2 + 1)


def test_atomic_cas_compares_bits(rng):
    @tile.kernel
    def swap_if(cell, old, compare, value):
        old[0] = tile.atomic_cas(cell, 0, compare, value)

    cell, old = np.array([-0.0], np.float32), np.zeros(1, np.float32)
    swap_if[1](cell, old, 0.0, 1.5)  # -0.0 is not 0.0 bit for bit
    assert cell[0] == 0 and np.signbit(cell[0]) and np.signbit(old[0])
    swap_if[1](cell, old, -0.0, 1.5)
    assert cell[0] == 1.5


def test_split_k_adds_each_product_under_its_tile_s_lock(rng):
    m, k, n = 96, 300, 80
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = rng.standard_normal((m, n)).astype(np.float32)
    start = c.astype(np.float64)
    grid = (vg.cdiv(m, 64), vg.cdiv(n, 64), 3)
    locks = np.zeros(grid[0] * grid[1], np.int32)
    split_k_locked[grid](a, b, c, locks, BM=64, BN=64, BK=32)
    np.testing.assert_allclose(c, start + a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert not locks.any()


# ----------------------------------------------------------------------------- misuse


def _compile_error(path, kernel_source: str, match: str):
    """The launch of kernel `k` of `kernel_source` (written to `path`: kernels have files)."""
    path.write_text("from verdigris import tile\n\n" + kernel_source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(vg.CompileError, match=match) as info:
        module.k[2](np.zeros((2, 8), np.float32), np.zeros(2, np.int32))
    assert info.value.loc is not None and info.value.loc.file == str(path)


@pytest.mark.parametrize("body, match", [
    ("    with tile.lock(locks, 0):\n        with tile.lock(locks, 1):\n            pass\n",
     "a tile.lock inside another"),
    ("    with tile.lock(locks, 0):\n        return\n", "would leave the lock held"),
    ("    for j in range(3):\n        with tile.lock(locks, 0):\n            break\n",
     "`break` or `continue` inside"),
    ("    with tile.lock(locks, 0):\n        locks[1] = 0\n", "nothing else in the kernel may access it"),
    ("    tile.atomic_xchg(locks, 0, 0)\n    with tile.lock(locks, 0):\n        pass\n",
     "nothing else in the kernel may access it"),
    ("    with tile.lock(x, 0):\n        pass\n", "needs an int32 array"),
    ("    with tile.lock(locks):\n        pass\n", "takes a lock array and the index"),
])
def test_misuses_of_tile_lock_are_compile_errors(body, match, tmp_path):
    _compile_error(tmp_path / "misuse.py", "@tile.kernel\ndef k(x, locks):\n" + body, match)


def test_a_loop_inside_the_lock_may_break_out_of_its_own_loop(rng):
    @tile.kernel
    def first_positive(x, out, locks):
        with tile.lock(locks, 0):
            for j in range(x.shape[0]):
                if x[j] > 0.0:
                    out[0] = x[j]
                    break

    x = rng.standard_normal(20).astype(np.float32)
    x[7] = 1.0
    out, locks = np.full(1, np.nan, np.float32), np.zeros(1, np.int32)
    first_positive[3](x, out, locks)
    assert out[0] == x[x > 0][0]


def test_a_lock_held_before_the_launch_is_a_kernel_error_on_the_cpu_backend(rng):
    dy, partial, count, locks = accumulate_args(rng)
    locks[2] = 1
    with pytest.raises(vg.KernelError, match=r"lock locks\[2\] holds 1 when block \(2, 0, 0\)"):
        accumulate_locked[ROWS](dy, partial, count, locks, N=N, GROUP=GROUP)


def test_tile_lock_belongs_to_the_tile_track():
    from verdigris import simt

    @simt.kernel
    def k(locks):
        with tile.lock(locks, 0):
            pass

    with pytest.raises(vg.CompileError, match="belongs to the tile track"):
        k[1, 32](np.zeros(1, np.int32))


# ----------------------------------------------------------------------------- the GPU code on the host


def test_the_gpu_code_of_the_layer_norm_backward(rng):
    def on_host(k, grid, *args, **constexprs):
        named = dict(zip([p for p in k.fn.__code__.co_varnames[:len(args)]], args))
        assert host_jit.run(k, grid, **named, **constexprs) is None

    got, want = layer_norm_backward(rng, on_host)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_the_gpu_code_of_cas_and_xchg_gives_every_thread_the_old_value(rng):
    slot, claims = np.array([-1], np.int32), np.full(9, -5, np.int32)
    assert host_jit.run(first_claim, 9, slot=slot, claims=claims) is None
    assert slot[0] == 0 and claims.tolist() == [-1] + [0] * 8  # blocks run in order here
    cell, old = np.array([100, 200], np.int64), np.full(6, 7, np.int64)
    assert host_jit.run(exchange_chain, 6, cell=cell, old=old, DT=vg.int64) is None
    assert cell.tolist() == [4, 5] and old.tolist() == [100, 200, 0, 1, 2, 3]


# ----------------------------------------------------------------------------- ptxas


def lock_ptx(target: str) -> str:
    specs = dict(dy=arr(T.float32, 2), dw_partial=arr(T.float32, 2), count=arr(T.int32),
                 locks=arr(T.int32), N=N, GROUP=GROUP)
    return codegen.compile_to_ptx(accumulate_locked.specialize_types(specs), target).ptx


def test_the_lock_acquires_with_a_cas_and_releases_after_a_fence():
    ptx = lock_ptx("sm_90")
    acquire = ptx.index("atom.acquire.gpu.global.cas.b32")
    release = ptx.index("atom.global.exch.b32")
    assert ptx.count("atom.acquire.gpu.global.cas.b32") == 1
    assert acquire < ptx.index("bar.sync", acquire) < release  # the block waits for the lock
    fence = ptx.rindex("fence.acq_rel.gpu", 0, release)
    assert ptx.rindex("bar.sync", 0, fence) > acquire  # every thread is done before the release


def test_cas_and_xchg_are_acquire_release():
    cas = codegen.compile_to_ptx(first_claim.specialize_types(dict(slot=arr(T.int32), claims=arr(T.int32))),
                                 "sm_90").ptx
    assert "atom.acq_rel.gpu.global.cas.b32" in cas
    xchg = codegen.compile_to_ptx(exchange_chain.specialize_types(
        dict(cell=arr(T.float64), old=arr(T.float64), DT=vg.float64)), "sm_90").ptx
    exch = xchg.index("atom.global.exch.b64")
    assert "fence.acq_rel.gpu" in xchg[:exch] and "fence.acq_rel.gpu" in xchg[exch:]


def test_a_lock_keeps_a_product_kernel_unspecialized():
    """On sm_90a the example gemm gets a producer warp group and stores C through the copy
    engine; with its store under a lock it gets neither (the lock takes thread 0 and the
    whole block's barrier, and a copy still in flight at the release would land after it)."""
    from verdigris.examples.tile_gemm import gemm

    specs = dict(a=arr(T.bfloat16, 2), b=arr(T.bfloat16, 2), c=arr(T.bfloat16, 2), BM=128, BN=256, BK=64)
    plain = codegen.compile_to_ptx(gemm.specialize_types(specs), "sm_90a").ptx
    assert "setmaxnreg" in plain and "bulk_group" in plain
    locked = codegen.compile_to_ptx(gemm_stored_under_a_lock.specialize_types(specs | dict(locks=arr(T.int32))),
                                    "sm_90a").ptx
    assert "wgmma.mma_async" in locked and "atom.acquire.gpu.global.cas.b32" in locked
    assert "setmaxnreg" not in locked and "bulk_group" not in locked
    if codegen.ptxas_available():
        codegen.assemble(locked, "sm_90a", optimize=False)


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_lock_kernels_assemble(target):
    codegen.assemble(lock_ptx(target), target, optimize=False)
    f16 = arr(T.float16, 2)
    for kernel, specs in [(first_claim, dict(slot=arr(T.int32), claims=arr(T.int32))),
                          (split_k_locked, dict(a=f16, b=f16, c=arr(T.float32, 2), locks=arr(T.int32),
                                                BM=64, BN=64, BK=32)),
                          (exchange_chain, dict(cell=arr(T.float32), old=arr(T.float32), DT=vg.float32))]:
        codegen.assemble(codegen.compile_to_ptx(kernel.specialize_types(specs), target).ptx, target,
                         optimize=False)


def test_a_lock_index_outside_the_lock_array_runs_no_body(rng):
    """Blocks of groups 2 and 3 find no lock element (2 locks): a bounds fault, and their
    bodies never run unheld, in the GPU code (run on the host) as on the cpu backend."""
    dy, partial, count, _ = accumulate_args(rng)
    locks = np.zeros(2, np.int32)
    record = host_jit.run(accumulate_locked, ROWS, dy=dy, dw_partial=partial, count=count, locks=locks,
                          N=N, GROUP=GROUP)
    assert record is not None  # the fault was recorded
    assert np.isnan(partial[2:]).all() and not count[2:].any() and (count[:2] == 1).all()
    groups = np.arange(ROWS) % GROUP
    for g in range(2):
        np.testing.assert_allclose(partial[g, :COLS], dy[groups == g].astype(np.float64).sum(axis=0),
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(vg.BoundsError, match=r"locks\[2\] with shape \(2,\)"):
        accumulate_locked[ROWS](dy, partial, count, locks, N=N, GROUP=GROUP)
