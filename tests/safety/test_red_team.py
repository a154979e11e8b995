"""Kernels a red team wrote to get unsafe code past the static checker (2026-12-01).

Each kernel is unsafe and must be refused; each docstring says why, and what fixed it. (They
were strict xfail tests until fixed: a known gap is kept that way, asserting the refusal
owed, so that the fix turns it into a regression test.)
"""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt, tile
from verdigris.runtime.dispatch import KernelFunction, _dims


def verdict(kernel, grid, block, *args) -> list:
    """The static checker's findings for `kernel` launched so (a fresh specialization)."""
    fresh = KernelFunction(kernel.fn, kernel.track)
    values = fresh.bind(args, {})
    key = fresh.spec_key(values, fresh.describe_args(values),
                         None if block is None else _dims(block, "block", fresh.__name__),
                         _dims(grid, "grid", fresh.__name__))
    return [e.code for e in safety.analyze(fresh.build(key)).errors]


# ----------------------------------------------------------------------------- warp operations, abs, tiles


@simt.kernel
def shfl_idx_past_the_warp(x, out):
    """A lane outside 0..31 gives each lane its own value: not one value for the warp, so
    the shuffle under it is reached by lanes 0-15 only."""
    t = simt.thread_id(0)
    u = simt.shfl_idx(t, 32)
    if u < 16:
        out[t] = simt.shfl_down(x[t], 1)


@simt.kernel
def shfl_up_by_a_negative_delta(x, out):
    """shfl_up(v, -4) reads lane + 4: lane 4 of a warp of 8 lanes reads lane 8."""
    i = simt.thread_id(0)
    out[i] = simt.shfl_up(x[i], -4)


@simt.kernel
def abs_of_int_min(x, out, u):
    """abs(INT_MIN) is INT_MIN on the hardware: w is -1 for every thread, and threads 0 and
    1 both write out[0] (the model without the wrap had w = 1: elements 16 apart)."""
    t = simt.thread_id(0)
    w = abs(u) >> 31
    out[t // 2 + 16 * w * (w + 1)] = x[t]


@tile.kernel
def reverse_in_place(x, B: vg.constexpr):
    """Thread t reads element B-1-t, which another thread of the block may already have
    stored: the block's threads were not ordered between the gather and the store (fixed
    by the 2026-12-06 decision: one block's statements run in program order, the lowering
    putting a barrier between the gather and the store; `tests/test_tile_order.py` runs it
    thread by thread in two orders)."""
    i = int(tile.bid(0))
    tile.store(x, index=(i,), tile=tile.gather(x, i * B + (B - 1 - tile.arange(B))))


@tile.kernel
def reverse_into_out(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(i,), tile=tile.gather(x, i * B + (B - 1 - tile.arange(B))))


def test_unsafe_warp_operations_and_wrapped_abs_are_refused():
    x, out = np.ones(64, np.float32), np.zeros(64, np.float32)
    assert "VG214" in verdict(shfl_idx_past_the_warp, (1,), (32,), x, out)
    assert "VG214" in verdict(shfl_up_by_a_negative_delta, (1,), (40,), x, out)
    assert "VG202" in verdict(abs_of_int_min, (1,), (32,), x, out, np.int32(-2**31))


def test_a_gather_of_what_the_block_stores_is_ordered_and_its_twin_needs_no_order():
    from verdigris import codegen

    x, out = np.ones(256, np.float32), np.zeros(256, np.float32)
    assert verdict(reverse_in_place, (4,), None, x, 64) == []
    assert verdict(reverse_into_out, (4,), None, x, out, 64) == []
    barriers = []
    for kernel, args in ((reverse_in_place, (x, 64)), (reverse_into_out, (x, out, 64))):
        fresh = KernelFunction(kernel.fn, kernel.track)
        values = fresh.bind(args, {})
        ir = fresh.build(fresh.spec_key(values, fresh.describe_args(values), None, _dims((4,), "grid", "k")))
        safety.check(ir)
        barriers.append(codegen.compile_to_ptx(ir, "sm_90").ptx.count("bar.sync"))
    assert barriers == [1, 0]


# ----------------------------------------------------------------------------- gaps fixed later


@simt.kernel
def ticket_counter_that_wraps(x, counter, out):
    """Each block adds 2**30 - 1 to the counter besides its ticket's 1: the int32 counter
    wraps after 4 blocks, so blocks 0 and 4 both hold ticket 0 and write out[0..31]
    (fixed: a ticket counter may change only by adds of 1)."""
    t = simt.thread_id(0)
    ticket = simt.block_ticket(counter)
    if t == 0:
        simt.atomic_add(counter, 0, 1073741823)
    if ticket < 4:
        out[ticket * 32 + t] = x[t]


@simt.kernel
def while_step_that_wraps(x, out):
    """uint32 i steps by 2**31: at c == 2 it is t again, and every thread writes out[0]
    (fixed: only a 64-bit variable stepped by a while loop is a progression)."""
    t = simt.thread_id(0)
    i = vg.uint32(t)
    c = 0
    while c < 3:
        if c == 2 and i < vg.uint32(64):
            out[0] = x[t]
        c += 1
        i += vg.uint32(2147483648)


@simt.kernel
def loop_past_a_sequence_that_ends(x, out, n):
    """Every thread writes buf[0] at k == 15; the enumeration stopped where s reaches 0
    (fixed: a loop with a variable that changes without bound is not cut short)."""
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[t]
    simt.barrier()
    s = 48
    for k in range(n):
        if k == 15:
            buf[0] = x[t]
        s //= 2
    simt.barrier()
    out[t] = buf[0] + vg.float32(s)


@simt.kernel
def read_in_the_failing_loop_check(x, out):
    """The last, failing check of the loop reads buf[4], which thread 40 writes meanwhile
    (fixed: a while condition that loads is evaluated once more after the loop)."""
    buf = simt.shared.array(64, vg.int32)
    t = simt.thread_id(0)
    buf[t] = x[t]
    simt.barrier()
    i = 0
    while i + 0 * buf[i] < 4:
        i += 1
    if t == 40:
        buf[4] = 7
    simt.barrier()
    out[t] = buf[t]


def test_a_ticket_counter_that_wraps_is_refused():
    x, counter, out = np.ones(32, np.float32), np.zeros(1, np.int32), np.zeros(128, np.float32)
    with pytest.raises(vg.CompileError, match="only by atomic_add of 1"):
        verdict(ticket_counter_that_wraps, (5,), (32,), x, counter, out)


def test_a_while_induction_that_wraps_is_refused():
    assert verdict(while_step_that_wraps, (1,), (64,), np.ones(64, np.float32), np.zeros(64, np.float32))


def test_a_loop_running_past_a_sequence_that_ends_is_refused():
    x, out = np.ones(64, np.float32), np.zeros(64, np.float32)
    assert verdict(loop_past_a_sequence_that_ends, (1,), (64,), x, out, np.int64(20))


def test_a_read_in_the_failing_loop_check_is_refused():
    x, out = np.arange(64, dtype=np.int32), np.zeros(64, np.int32)
    assert verdict(read_in_the_failing_loop_check, (1,), (64,), x, out)


@simt.kernel
def previous_element_in_uint64(x, out):
    t = vg.uint64(simt.thread_id(0))
    if t > vg.uint64(0):
        out[t] = x[t - vg.uint64(1)]


def test_uint64_arithmetic_is_modelled_without_wrap_around_not_a_crash():
    """64-bit wrap-around is outside the model: `t - 1` in uint64 made a wrap atom of an
    unbounded modulus, and the bounds prover raised a z3 parser error from inside."""
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    assert verdict(previous_element_in_uint64, (1,), (64,), x, out) == []
    previous_element_in_uint64[1, 64](x, out)
    np.testing.assert_array_equal(out[1:], x[:-1])


@simt.kernel
def grid_stride_in_int32(x, out):
    i = simt.block_id(0) * simt.block_dim(0) + simt.thread_id(0)
    while i < out.shape[0]:
        out[i] = x[i] * 2.0
        i += simt.grid_dim(0) * simt.block_dim(0)


def test_an_int32_variable_a_while_loop_steps_is_refused_with_how_to_widen_it():
    x, out = np.ones(1000, np.float32), np.zeros(1000, np.float32)
    with pytest.raises(vg.SafetyError, match=r"depends on i \(int32, stepped by the loop: it "
                                             r"may wrap; make it 64-bit, e.g. from simt.global_id\)"):
        grid_stride_in_int32[4, 128](x, out)
