"""Warp operations in PTX: segment shuffles carry their width in the clamp operand,
reductions of 32-bit and narrower integers are one `redux.sync`, other reductions a tree of
`shfl.sync.down` (clamped to a partial warp's lanes), matches `match.any/all.sync` of 32 or
64 bits, `activemask.b32`, and the fences `fence.sc.cta/gpu/sys`; every kernel assembles
with ptxas for sm_80 and sm_90a."""
from __future__ import annotations

import re

import pytest

import verdigris as vg

import test_simt_warp_ops as ops
from test_simt_coop_ptx import TARGETS, arrays, ptx

F32 = arrays(vg.float32, 1)[0]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("width", [2, 8, 16, 32])
def test_segment_shuffles_put_the_width_in_the_clamp(target, width):
    x, arg, out = arrays(vg.int32, 1, 1, 2)
    text = ptx(ops.segment_shuffles, dict(x=x, arg=arg, out=out, W=width), target)
    segment = (32 - width) << 8  # bits 8..12: the lanes that pick a segment
    if width >= 4:
        assert re.search(rf"shfl\.sync\.down\.b32\s+%r\d+, %r\d+, 3, {segment | 31}, -1;", text)
    assert re.search(rf"shfl\.sync\.up\.b32\s+%r\d+, %r\d+, 1, {segment}, -1;", text)
    assert re.search(rf"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, 1, {segment | 31}, -1;", text)
    assert re.search(rf"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, {width - 1}, {segment | 31}, -1;", text)
    # run-time arguments (and the constant 3 past a segment of 2): the source lane computed,
    # read by a whole-warp idx
    general = re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, %r\d+, 31, -1;", text)
    assert len(general) == 4 + (width < 4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,kind", [(vg.int32, "s32"), (vg.uint32, "u32"), (vg.int8, "s32"),
                                        (vg.uint16, "u32")], ids=str)
def test_reductions_of_narrow_integers_are_one_redux(target, dtype, kind):
    x, out = arrays(dtype, 1, 2)
    text = ptx(ops.reductions, dict(x=x, out=out, INTS=True), target)
    for op in ("add", "min", "max"):
        suffix = "s32" if op == "add" else kind
        assert re.search(rf"redux\.sync\.{op}\.{suffix}\s+%r\d+, %r\d+, (-1|%r\d+);", text), op
    for op in ("and", "or", "xor"):
        assert re.search(rf"redux\.sync\.{op}\.b32\s", text), op
    assert "shfl.sync" not in text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [vg.float32, vg.float64, vg.int64, vg.float16], ids=str)
def test_other_reductions_are_a_shuffle_tree(target, dtype):
    x, out = arrays(dtype, 1, 2)
    words = 2 if dtype.bits == 64 else 1
    reductions = 6 if dtype.is_int else 3
    text = ptx(ops.reductions, dict(x=x, out=out, INTS=dtype.is_int), target)
    for d in (16, 8, 4, 2, 1):
        found = re.findall(rf"shfl\.sync\.down\.b32\s+%r\d+, %r\d+, {d}, 31, -1;", text)
        assert len(found) == words * reductions, d
    broadcasts = re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, 0, 31, -1;", text)
    assert len(broadcasts) == words * reductions
    partial = ptx(ops.reductions, dict(x=x, out=out, INTS=dtype.is_int), target, (48, 1, 1))
    # a partial warp: the clamp is its last lane, the member mask its lanes (registers)
    assert re.search(r"shfl\.sync\.down\.b32\s+%r\d+, %r\d+, 16, %r\d+, %r\d+;", partial)
    assert "popc.b32" in partial and "redux" not in partial


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,bits", [(vg.int32, 32), (vg.float32, 32), (vg.bool_, 32),
                                        (vg.int16, 32), (vg.int64, 64), (vg.float64, 64)], ids=str)
def test_matches(target, dtype, bits):
    x, out = arrays(dtype, 1)[0], arrays(vg.uint32, 2)[0]
    text = ptx(ops.matches, dict(x=x, out=out), target)
    assert re.search(rf"match\.any\.sync\.b{bits}\s+%r\d+, %(r|rd)\d+, -1;", text)
    assert re.search(rf"match\.all\.sync\.b{bits}\s+%r\d+\|%p\d+, %(r|rd)\d+, -1;", text)
    partial = ptx(ops.matches, dict(x=x, out=out), target, (48, 1, 1))
    assert re.search(rf"match\.any\.sync\.b{bits}\s+%r\d+, %(r|rd)\d+, %r\d+;", partial)


@pytest.mark.parametrize("target", TARGETS)
def test_activemask_and_fences(target):
    text = ptx(ops.active_lanes, dict(out=arrays(vg.uint32, 2)[0]), target)
    assert len(re.findall(r"activemask\.b32\s+%r\d+;", text)) == 2
    text = ptx(ops.fenced_copy, dict(x=F32, out=F32), target)
    fences = re.findall(r"fence\.sc\.(cta|gpu|sys);", text)
    assert fences[:3] == ["cta", "gpu", "sys"], fences
    # no store moves across them: the first store comes before, the second after
    body = text[text.index("fence.sc.cta"):text.index("fence.sc.sys")]
    assert "st.global" not in body
    before, after = text.split("fence.sc.cta", 1)[0], text.split("fence.sc.sys", 1)[1]
    assert "st.global" in before and "st.global" in after


@pytest.mark.parametrize("target", TARGETS)
def test_the_fixed_pairs_assemble(target):
    """The warp-aggregated counts and the last-block sum (tests/safety/warp_pairs.py)."""
    from safety import warp_pairs

    keys, counts = arrays(vg.int32, 1, 1)
    text = ptx(warp_pairs.aggregated_counts, dict(keys=keys, counts=counts), target)
    assert "match.any.sync.b32" in text and re.search(r"atom\.(\w+\.)*global\.add\.u32", text)
    f64 = arrays(vg.float64, 1)[0]
    specs = dict(x=f64, partial=f64, out=f64, tickets=arrays(vg.int32, 1)[0])
    text = ptx(warp_pairs.last_block_reads_atomic_sums, specs, target)
    assert text.count("fence.sc.gpu;") == 2 and "atom.global.exch.b64" in text
