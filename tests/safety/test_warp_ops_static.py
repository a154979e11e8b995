"""The static checker on the newer warp operations (tests/safety/warp_pairs.py holds their
racy/fixed pairs): a shuffle within segments (`width=`) reads only its segment, so a
partial warp made of whole segments is fine and one that is not is refused with the lane
read; matches and reductions give every lane one value (conditions on them are
warp-uniform) and must be reached by the whole warp; `activemask()` is no collective (it
may sit anywhere, and its value differs between lanes).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.safety import diagnose

from .test_shared_static import F32, analyze, marked_line
from .test_static import fresh

@simt.kernel
def segment_sums(x, out, W: vg.constexpr):
    """Each segment of W lanes adds up its x, on its first lane."""
    i = simt.global_id(0)
    v = x[i]
    d = W // 2
    while d > 0:
        v += simt.shfl_down(v, d, width=W)  # refused here
        d //= 2
    if simt.lane_id() % W == 0:
        out[i // W] = v


@pytest.mark.parametrize("block,width", [(48, 16), (40, 8), (64, 32), (44, 4)])
def test_segments_a_partial_warp_has_are_accepted(rng, block, width):
    n = block * 2
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n // width, -7, np.float32)
    fresh(segment_sums)[2, block](x, out, W=width)
    np.testing.assert_allclose(out, x.reshape(-1, width).astype(np.float64).sum(axis=1), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("block,width,lanes", [(48, 32, 16), (40, 16, 8)])
def test_a_segment_past_the_end_of_a_partial_warp_is_refused(rng, block, width, lanes):
    x = rng.standard_normal(block).astype(np.float32)
    out = np.full(2, -7, np.float32)
    with pytest.raises(vg.SafetyError) as info:
        fresh(segment_sums)[1, block](x, out, W=width)
    err = info.value
    assert (err.code, err.loc.line) == ("VG214", marked_line(segment_sums)), str(err)
    assert f"last warp, which has {lanes} lanes" in err.message
    assert err.hint == diagnose.HINTS["VG214 partial"]
    thread = int(re.search(r"thread \(block 0, thread (\d+)\)", err.message)[1])
    read = int(re.search(r"reads lane (\d+) with shfl_down\(\)", err.message)[1])
    lane = thread % 32
    assert lanes <= read < 32 and read // width == lane // width and read > lane, err.message
    np.testing.assert_array_equal(out, -7)


@simt.kernel
def butterfly(x, out, M: vg.constexpr, W: vg.constexpr):
    i = simt.global_id(0)
    out[i] = simt.shfl_xor(x[i], M, width=W)


@pytest.mark.parametrize("mask,width,refused", [(5, 32, True), (5, 8, True), (6, 16, True),
                                                (3, 4, False)])
def test_a_butterfly_by_a_constant_names_the_lane_it_reads(mask, width, refused):
    """`lane ^ 5` is modelled bit by bit: the lane the message names is the lane read. In
    a block of 44 threads the last warp has lanes 0..11: a butterfly within segments of 4
    stays there."""
    errors = analyze(butterfly, F32, F32, M=mask, W=width, block=(44, 1, 1)).errors
    assert [e.code for e in errors] == (["VG214"] if refused else []), errors
    for error in errors:
        thread = int(re.search(r"thread \(block 0, thread (\d+)\)", error.message)[1])
        read = int(re.search(r"reads lane (\d+)", error.message)[1])
        position = thread % 32 % width
        assert read == thread % 32 - position + (position ^ mask) >= 12, error.message


@simt.kernel
def conditions_from_the_warp(x, out):
    i = simt.global_id(0)
    v = x[i]
    if simt.reduce_max(v) > 0.0:  # the same on every lane
        v = simt.shfl_down(v, 1)
    if simt.match_all(v > 0.0) != 0:
        v = simt.shfl_down(v, 2)
    if simt.match_any(simt.block_id(0)) != 0:  # of a uniform value: every lane matches
        v = simt.shfl_down(v, 4)
    if simt.reduce_add(vg.int32(v > 0.0)) > 16:
        simt.syncwarp()
    out[i] = v


@simt.kernel
def condition_from_activemask(x, out):
    i = simt.global_id(0)
    v = x[i]
    if simt.activemask() == 0xFFFFFFFF:  # lanes may be counted or not: not uniform
        v = simt.shfl_down(v, 1)  # refused here
    out[i] = v


@simt.kernel
def condition_from_match_any(x, out):
    i = simt.global_id(0)
    v = x[i]
    if simt.match_any(v > 0.0) == 0xFFFFFFFF:  # differs between lanes that disagree
        v = simt.shfl_down(v, 1)  # refused here
    out[i] = v


def test_what_every_lane_gets_alike_is_warp_uniform():
    assert not analyze(conditions_from_the_warp, F32, F32).errors
    for kernel in (condition_from_activemask, condition_from_match_any):
        errors = analyze(kernel, F32, F32).errors
        assert [(e.code, e.loc.line) for e in errors] == [("VG214", marked_line(kernel))], errors


@simt.kernel
def loops_over_data(x, out, COLLECTIVE: vg.constexpr):
    i = simt.global_id(0)
    v = x[i]
    count = vg.uint32(0)
    while v > 1.0:  # a different number of trips per lane
        v *= 0.5
        if COLLECTIVE:
            count += vg.uint32(simt.reduce_add(1))  # refused here
        else:
            count += simt.activemask() & 1
    out[i] = v + vg.float32(count)


def test_activemask_is_no_collective():
    assert not analyze(loops_over_data, F32, F32, COLLECTIVE=False).errors
    errors = analyze(loops_over_data, F32, F32, COLLECTIVE=True).errors
    assert [(e.code, e.loc.line) for e in errors] == [("VG214", marked_line(loops_over_data))], errors
