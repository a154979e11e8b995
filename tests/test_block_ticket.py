"""`simt.block_ticket(counter)`: blocks numbered in the order they arrive.

What it promises: every thread of a block gets the same ticket, the tickets of one launch
are 0, 1, 2, ... (one per block that calls it, counting from the counter's value), a
persistent loop that takes tickets until they run out does every tile once, and the race
checker knows that two blocks hold different tickets (so stores indexed by tickets are
proven, and a store two blocks' tickets can reach anyway is refused with the tickets
named). Misuse is refused at the user's line: a counter of the wrong kind, a write of the
counter that could repeat a ticket, a ticket some threads of a block skip. The GPU twin of
the launch tests is in tests/gpu/test_simt_coop.py; the racy/fixed pair is in
tests/safety/pairs.py.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, safety, simt

from located import assert_points_at

BLOCK = 64


@simt.kernel
def record_tickets(tickets, out):
    """out[ticket, t] = the ticket thread t of that block saw, and out[ticket, BLOCK] = its
    block id."""
    ticket = int(simt.block_ticket(tickets))
    t = simt.thread_id(0)
    out[ticket, t] = ticket
    if t == 0:
        out[ticket, BLOCK] = simt.block_id(0)


@simt.kernel
def persistent_copy(x, out, tickets):
    """Blocks take tiles of BLOCK elements by ticket until the tiles run out."""
    tiles = (x.shape[0] + BLOCK - 1) // BLOCK
    while True:
        tile = int(simt.block_ticket(tickets))
        if tile >= tiles:
            break
        i = tile * BLOCK + simt.thread_id(0)
        if i < x.shape[0]:
            out[i] = x[i] + 1


def ticket_table(blocks: int, start: int = 0):
    out = np.full((blocks, BLOCK + 1), -1, np.int64)
    record_tickets[blocks, BLOCK](np.array([start], np.int32), out)
    return out


def check_ticket_table(out, blocks):
    """Every block's threads saw one ticket, and the tickets are a permutation of the blocks."""
    np.testing.assert_array_equal(out[:, :BLOCK], np.arange(blocks)[:, None].repeat(BLOCK, 1))
    assert sorted(out[:, BLOCK]) == list(range(blocks))


def test_every_block_gets_its_own_ticket_shared_by_its_threads():
    check_ticket_table(ticket_table(9), 9)


def test_a_persistent_loop_of_tickets_does_every_tile_once(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full_like(x, np.nan)
    tickets = np.zeros(1, np.int32)
    persistent_copy[4, BLOCK](x, out, tickets)
    np.testing.assert_array_equal(out, x + 1)
    assert tickets[0] == 16 + 4  # 16 tiles, then one ticket per block that finds none left


def test_the_checker_proves_stores_indexed_by_tickets():
    for kernel, args in ((record_tickets, (np.zeros(1, np.int32), np.zeros((4, BLOCK + 1), np.int64))),
                         (persistent_copy, (np.zeros(8, np.float32),) * 2 + (np.zeros(1, np.uint32),))):
        analysis = safety.analyze(kernel.specialize(*args, block=(BLOCK,)))
        assert not analysis.errors, analysis.errors[0]


@simt.kernel
def wrapped_tickets(tickets, out):
    t = simt.thread_id(0)
    out[int(simt.block_ticket(tickets)) % 4 * BLOCK + t] = t  # wrapped


def test_a_store_two_blocks_reach_despite_tickets_names_the_tickets():
    with pytest.raises(vg.SafetyError) as info:
        wrapped_tickets[8, BLOCK](np.zeros(1, np.int32), np.zeros(8 * BLOCK, np.int32))
    err = info.value
    assert err.code == "VG202"
    tickets = [int(v) for v in re.findall(r"ticket (\d+), thread", str(err))]
    assert len(tickets) == 2 and tickets[0] != tickets[1] and tickets[0] % 4 == tickets[1] % 4, str(err)
    assert_points_at(err, "# wrapped", __file__)


def _k_float_counter(counter, out):
    out[simt.block_ticket(counter)] = 1.0


def _k_counter_reset(counter, out):
    t = simt.block_ticket(counter)
    counter[0] = 0
    out[t] = 1.0


def _k_counter_exchanged(counter, out):
    t = simt.block_ticket(counter)
    simt.atomic_exch(counter, 0, 5)
    out[t] = 1.0


def _k_no_counter(counter, out):
    out[simt.block_ticket()] = 1.0


@pytest.mark.parametrize("fn,counter,marker,message", [
    (_k_float_counter, np.zeros(1, np.float32), "simt.block_ticket(counter)]", "int32, uint32"),
    (_k_counter_reset, np.zeros(1, np.int32), "counter[0] = 0", "only by atomic_add of 1"),
    (_k_counter_exchanged, np.zeros(1, np.int64), "simt.atomic_exch(counter, 0, 5)",
     "only by atomic_add of 1"),
    (_k_no_counter, np.zeros(1, np.int32), "simt.block_ticket()]", "takes one argument"),
], ids=lambda v: getattr(v, "__name__", None))
def test_misuse_is_a_compile_error_at_the_line(fn, counter, marker, message):
    with pytest.raises(vg.CompileError, match=message) as info:
        simt.kernel(fn)[2, 32](counter, np.zeros(8, np.float32))
    assert_points_at(info.value, marker, __file__)


@simt.kernel
def ticket_for_half_the_block(tickets, out):
    t = simt.thread_id(0)
    if t < 32:
        out[int(simt.block_ticket(tickets)) * BLOCK + t] = t  # skipped by half


def test_a_ticket_part_of_the_block_skips_is_a_divergence():
    with pytest.raises(vg.SafetyError) as info:
        ticket_for_half_the_block[2, BLOCK](np.zeros(1, np.int32), np.zeros(2 * BLOCK, np.int32))
    assert info.value.code == "VG210" and "block_ticket()" in str(info.value)
    assert_points_at(info.value, "# skipped by half", __file__)


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_ticket_is_one_atomic_add_between_two_barriers(target):
    ir = record_tickets.specialize(np.zeros(1, np.int32), np.zeros((4, BLOCK + 1), np.int64),
                                   block=(BLOCK,))
    ptx = codegen.compile_to_ptx(ir, target).ptx
    assert ptx.count("atom.global.add.u32") == 1 and ptx.count("bar.sync") == 2, ptx
    assert codegen.assemble(ptx, target, optimize=False)[:4] == b"\x7fELF"
