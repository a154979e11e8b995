"""Gathers and scatters that skip the lanes whose index lies outside the array
(`skip_out_of_bounds=True`, issue #26 item 7), on the cpu backend, in the GPU code run on
the host (`host_jit`) and through ptxas.

A skipped lane makes no access: a scatter writes nothing there (values against NumPy
references, outputs poisoned first), shadow memory records nothing there (padding indices
repeated across blocks are no race, a real slot written twice still is), the GPU code
touches no memory and records no fault there (`host_jit` raises for an access outside
every array), and the default stays a bounds fault. The racy kernels beside their fixed
twins are in the tile safety suite (`tests/safety/tile_pairs.py`, "skipping scatter ...");
the GPU runs are in `tests/gpu/test_tile_skip_gpu.py`.
"""
from __future__ import annotations

import numpy as np
import pytest

import host_jit
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.codegen import checks
from verdigris.ir.printer import format_kernel
from safety.test_tile_dynamic import run_on_cpu
from safety.tile_pairs import skipping_loaded_slots, skipping_loaded_slots_unsafe
from test_tile_codegen import arr, needs_ptxas
from tile_skip_kernels import (copy_rows_skipping, count_and_max_per_slot, gather_tokens,
                               reverse_faulting, reverse_skipping, slots_with_padding)


def test_a_skipping_scatter_writes_only_the_lanes_inside(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    reverse_skipping[vg.cdiv(1000, 128)](x, out, B=128)  # the last tile: 24 lanes below 0
    np.testing.assert_array_equal(out, x[::-1])


def test_without_the_option_a_lane_outside_is_still_a_bounds_error(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    with pytest.raises(vg.BoundsError, match=r"out\[-1\] with shape \(1000,\)") as seen:
        reverse_faulting[vg.cdiv(1000, 128)](x, out, B=128)
    assert seen.value.code == "VG302"
    assert "skip_out_of_bounds=True" in str(seen.value)  # the hint names the option


def test_a_2d_scatter_skips_rows_and_columns_past_the_array(rng):
    x = rng.standard_normal((50, 70)).astype(np.float32)
    out = np.full((50, 70), np.nan, np.float32)
    copy_rows_skipping[vg.cdiv(50, 8)](x, out, R=8, C=128)  # 6 rows and 58 columns past it
    np.testing.assert_array_equal(out, x)


def test_atomic_scatters_skip_tokens_without_a_slot(rng):
    tokens, slots = 1000, 37
    x = rng.standard_normal(tokens).astype(np.float32)
    chosen = rng.integers(-3, slots + 3, tokens)  # slots repeat; some lie outside
    counts, best = np.full(slots, 5, np.int32), np.full(slots, -np.inf, np.float32)
    count_and_max_per_slot[vg.cdiv(tokens, 300)](x, chosen, counts, best, B=300)
    inside = (chosen >= 0) & (chosen < slots)
    np.testing.assert_array_equal(counts, 5 + np.bincount(chosen[inside], minlength=slots))
    want = np.full(slots, -np.inf)
    np.maximum.at(want, chosen[inside], x[inside].astype(np.float64))
    np.testing.assert_array_equal(best, want.astype(np.float32))


def test_a_gather_gives_its_padding_outside_with_or_without_the_option(rng):
    tokens, slots = 500, 64
    x = rng.standard_normal(slots).astype(np.float32)
    chosen = slots_with_padding(rng, tokens, slots)
    out = np.full(tokens, np.nan, np.float32)
    gather_tokens[vg.cdiv(tokens, 128)](x, chosen, out, B=128)
    inside = (chosen >= 0) & (chosen < slots)
    np.testing.assert_array_equal(out, np.where(inside, x[np.clip(chosen, 0, slots - 1)], -1.0))


def test_padding_slots_repeated_across_blocks_are_no_race_while_running(rng):
    """Shadow memory records no access for a skipped lane: -1 and `slots` repeat in every
    block, and the run (no static check) raises nothing and writes each slot once."""
    tokens, slots = 24 * 5 - 7, 3 * 24
    x = rng.standard_normal(tokens).astype(np.float32)
    chosen = slots_with_padding(rng, tokens, slots)
    out = np.full(slots, np.nan, np.float32)
    run_on_cpu(skipping_loaded_slots, vg.cdiv(tokens, 24), (x, chosen, out), {"B": 24})
    want = np.full(slots, np.nan, np.float32)
    inside = (chosen >= 0) & (chosen < slots)
    want[chosen[inside]] = x[inside]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("where", ["two blocks", "one block"])
def test_a_slot_taken_twice_is_still_a_race_while_running(rng, where):
    tokens, slots = 24 * 5 - 7, 3 * 24
    chosen = slots_with_padding(rng, tokens, slots)
    first = int(np.flatnonzero((chosen >= 0) & (chosen < slots))[0])
    second = first + 24 if where == "two blocks" else first ^ 1
    chosen[second % tokens] = chosen[first]
    out = np.full(slots, np.nan, np.float32)
    with pytest.raises(vg.SafetyError) as seen:
        run_on_cpu(skipping_loaded_slots, vg.cdiv(tokens, 24),
                   (rng.standard_normal(tokens).astype(np.float32), chosen, out), {"B": 24})
    assert seen.value.code == "VG202"
    assert f"out[{chosen[first]}]" in str(seen.value)


# ----------------------------------------------------------------------------- the option


@tile.kernel
def gather_faulting(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, (i,), tile.gather(x, tile.load(idx, (i,), (B,)), skip_out_of_bounds=False))


@tile.kernel
def scatter_skipping_when(x, out, skip, B: vg.constexpr):
    i = tile.bid(0)
    tile.scatter(out, i * B + tile.arange(B), tile.load(x, (i,), (B,)), skip_out_of_bounds=skip)


def test_the_option_is_a_constant_and_a_gather_takes_only_true():
    x, idx = np.zeros(64, np.float32), np.zeros(64, np.int64)
    with pytest.raises(vg.CompileError, match="always skips") as seen:
        gather_faulting[1](x, idx, x.copy(), B=64)
    assert seen.value.loc.line == gather_faulting.fn.__code__.co_firstlineno + 3
    with pytest.raises(vg.CompileError, match="skip_out_of_bounds must be a constant True or False"):
        scatter_skipping_when[1](x, x.copy(), True, B=64)


@tile.kernel
def cutile_spelling(x, idx, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.scatter(out, tile.load(idx, (i,), (B,)), tile.load(x, (i,), (B,)), check_bounds=True)


def test_cutiles_check_bounds_is_refused_with_the_option_a_port_means():
    x, idx = np.zeros(64, np.float32), np.zeros(64, np.int64)
    with pytest.raises(vg.CompileError, match="not cuTile's check_bounds=") as seen:
        cutile_spelling[1](x, idx, x.copy(), B=64)
    assert "check_bounds=True (its default) is skip_out_of_bounds=True" in seen.value.hint
    assert seen.value.loc.line == cutile_spelling.fn.__code__.co_firstlineno + 3


def test_the_printed_ir_tells_a_skipping_scatter_apart():
    """Proofs and PTX are cached by the printed IR: the two must not share an entry."""
    specs = dict(x=arr(T.float32), out=arr(T.float32), B=128)
    skipping, faulting = (format_kernel(k.specialize_types(specs))
                          for k in (reverse_skipping, reverse_faulting))
    assert "skipping out of bounds" in skipping and "skipping out of bounds" not in faulting


# ----------------------------------------------------------------------------- ptxas


def ptx(kernel, **specs) -> str:
    return codegen.compile_to_ptx(kernel.specialize_types(specs), "sm_90").ptx


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_skipping_scatters_assemble(target):
    f32, i64 = arr(T.float32), arr(T.int64)
    for kernel, specs in [(reverse_skipping, dict(x=f32, out=f32, B=128)),
                          (copy_rows_skipping, dict(x=arr(T.float32, 2), out=arr(T.float32, 2), R=8, C=128)),
                          (count_and_max_per_slot, dict(x=f32, slots=i64, counts=arr(T.int32), best=f32,
                                                        B=300))]:
        codegen.assemble(codegen.compile_to_ptx(kernel.specialize_types(specs), target).ptx, target,
                         optimize=False)


def test_a_skipping_scatter_records_no_fault():
    """The faulting scatter claims the fault block with a compare-and-swap on its way to the
    record; the skipping one tests each lane and has no fault path."""
    specs = dict(x=arr(T.float32), out=arr(T.float32), B=128)
    skipping, faulting = ptx(reverse_skipping, **specs), ptx(reverse_faulting, **specs)
    assert "atom.relaxed.gpu.global.cas" in faulting
    assert "cas" not in skipping
    assert "st.global.b32" in skipping


# ----------------------------------------------------------------------------- the GPU code on the host


def test_the_gpu_code_skips_the_lanes_outside_and_records_no_fault(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    assert host_jit.run(reverse_skipping, vg.cdiv(1000, 128), x=x, out=out, B=128) is None
    np.testing.assert_array_equal(out, x[::-1])
    x = rng.standard_normal((50, 70)).astype(np.float32)
    out = np.full((50, 70), np.nan, np.float32)
    assert host_jit.run(copy_rows_skipping, vg.cdiv(50, 8), x=x, out=out, R=8, C=128) is None
    np.testing.assert_array_equal(out, x)


def test_the_gpu_code_of_atomic_and_loaded_slots(rng):
    tokens, slots = 1000, 37
    x = rng.standard_normal(tokens).astype(np.float32)
    chosen = rng.integers(-3, slots + 3, tokens)
    counts, best = np.zeros(slots, np.int32), np.full(slots, -np.inf, np.float32)
    assert host_jit.run(count_and_max_per_slot, vg.cdiv(tokens, 300), x=x, slots=chosen,
                        counts=counts, best=best, B=300) is None
    inside = (chosen >= 0) & (chosen < slots)
    np.testing.assert_array_equal(counts, np.bincount(chosen[inside], minlength=slots))
    want = np.full(slots, -np.inf)
    np.maximum.at(want, chosen[inside], x[inside].astype(np.float64))
    np.testing.assert_array_equal(best, want.astype(np.float32))
    chosen = slots_with_padding(rng, tokens, 300)
    out = np.full(300, np.nan, np.float32)
    assert host_jit.run(skipping_loaded_slots_unsafe, vg.cdiv(tokens, 128), x=x, slots=chosen,
                        out=out, B=128) is None
    inside = (chosen >= 0) & (chosen < 300)
    want = np.full(300, np.nan, np.float32)
    want[chosen[inside]] = x[inside]
    np.testing.assert_array_equal(out, want)


def test_the_gpu_code_without_the_option_still_records_a_fault(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    record = host_jit.run(reverse_faulting, vg.cdiv(1000, 128), x=x, out=out, B=128)
    assert record is not None and record[checks.RECORD_EXTENT] == 1000
    np.testing.assert_array_equal(out, x[::-1])  # the faulting lanes were skipped
