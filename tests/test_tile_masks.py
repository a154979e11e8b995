"""Masks `tile.arange(n) <op> bound` with a 64-bit bound: the GPU lowering compares in 32
bits against the bound clamped once (`TileLowering._arange_compare`); run on the host CPU
(`host_jit`) against the cpu backend for bounds inside, at the ends of and far outside the
32-bit range, signed and unsigned, every comparison, the arange on either side; and
LayerNorm's mask compares 32-bit registers."""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import tile
from test_tile_hostjit import both


@tile.kernel
def masks(out, n, B: vg.constexpr):
    i = tile.bid(0)
    flags = (tile.arange(B) < n).astype(vg.int32) + 2 * (tile.arange(B) <= n).astype(vg.int32) \
        + 4 * (n > tile.arange(B)).astype(vg.int32) + 8 * (tile.arange(B) == n).astype(vg.int32) \
        + 16 * (n != tile.arange(B)).astype(vg.int32) + 32 * (tile.arange(B) >= n).astype(vg.int32) \
        + 64 * (n <= tile.arange(B)).astype(vg.int32)
    tile.store(out, index=(i,), tile=flags + i)


@tile.kernel
def unsigned_masks(out, n, B: vg.constexpr):
    i = tile.bid(0)
    flags = (tile.arange(B).astype(vg.uint64) < n).astype(vg.int32) \
        + 2 * (n >= tile.arange(B).astype(vg.uint64)).astype(vg.int32) \
        + 4 * (tile.arange(B).astype(vg.uint64) == n).astype(vg.int32) \
        + 8 * (tile.arange(B).astype(vg.uint64) > n).astype(vg.int32)
    tile.store(out, index=(i,), tile=flags + i)


@pytest.mark.parametrize("n", [0, 1, 37, 255, 256, -1, -300, 2**31 - 1, 2**31, 2**40, -2**40, 2**63 - 1, -2**63])
def test_signed_bounds(n):
    got, want = both(masks, 2, out=np.zeros(512, np.int32), n=np.int64(n), B=256)
    np.testing.assert_array_equal(got["out"], want["out"])


@pytest.mark.parametrize("n", [0, 100, 2**31 - 1, 2**31, 2**64 - 1])
def test_unsigned_bounds(n):
    got, want = both(unsigned_masks, 2, out=np.zeros(512, np.int32), n=np.uint64(n), B=256)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_layernorms_mask_compares_32_bit_registers():
    """`tile.where(tile.arange(COLS) < n, t - mean, 0.0)`: one 32-bit comparison per element
    of the 8192 / 256 a thread holds (a 64-bit one is two instructions), each against a
    constant (`c < n - tc`: no subtraction per element)."""
    from test_tile_codegen import ptx_of

    ptx = ptx_of("layernorm", "sm_90a")
    assert len(re.findall(r"setp\.gt\.s32\s+%p\d+, %r\d+, \d+;", ptx)) >= 32
