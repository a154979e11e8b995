"""SIMT cooperation in PTX: shared arrays, barriers, shuffles, votes and atomics lower to
the instructions they should, and assemble with ptxas for sm_80 and sm_90a."""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt
from verdigris.ir import nodes as N

import test_simt_coop as coop

TARGETS = ["sm_80", "sm_90a"]
F32 = N.ArrayType(vg.float32, 1, "global", True, True)


def ptx(kernel, specs: dict, target: str, block=(64, 1, 1)) -> str:
    ir = kernel.specialize_types(specs, block=block)
    compiled = codegen.compile_to_ptx(ir, target)
    if codegen.ptxas_available():
        assert codegen.assemble(compiled.ptx, target, optimize=False)[:4] == b"\x7fELF"
    return compiled.ptx


def arrays(dtype, *ndims) -> list:
    return [N.ArrayType(dtype, n, "global", True, True) for n in ndims]


@pytest.mark.parametrize("target", TARGETS)
def test_shared_arrays_and_barriers(target):
    text = ptx(coop.reverse_blocks, dict(x=F32, out=F32), target, (128, 1, 1))
    assert re.search(r"\.shared \.align 16 \.b8 vg_shared0_tile\[512\]", text)
    assert "bar.sync \t0;" in text and "st.shared.b32" in text and "ld.shared.b32" in text


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_shared_memory_is_extern_and_sized_at_launch(target):
    text = ptx(coop.dynamic_copy, dict(x=arrays(vg.int32, 1)[0], out=arrays(vg.int32, 2)[0]),
               target, (32, 1, 1))
    assert re.search(r"\.extern \.shared \.align 16 \.b8 vg_shared0_buf\[\];", text)
    assert "%dynamic_smem_size" in text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [vg.int32, vg.float32, vg.float64, vg.int64, vg.bool_, vg.float16,
                                   vg.bfloat16, vg.uint8])
def test_shuffles_of_every_register_type(target, dtype):
    x, out = arrays(dtype, 1, 2)
    text = ptx(coop.shuffles, dict(x=x, arg=arrays(vg.int32, 1)[0], out=out), target)
    # Constant arguments in 0..31 use PTX's own modes; others go through idx.
    assert re.search(r"shfl\.sync\.down\.b32\s+%r\d+, %r\d+, 3, 31, -1;", text)
    assert re.search(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, 16, 31, -1;", text)
    for delta in (1, 2, 4):  # the unrolled loop's `1 << k`
        assert re.search(rf"shfl\.sync\.up\.b32\s+%r\d+, %r\d+, {delta}, 0, -1;", text)
    assert re.search(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, %r\d+, 31, -1;", text)
    words = 2 if dtype.bits == 64 else 1
    assert len(re.findall(r"shfl\.sync\.", text)) == 9 * words


@pytest.mark.parametrize("target", TARGETS)
def test_votes_and_lane_id(target):
    p, out = arrays(vg.int32, 1)[0], arrays(vg.int64, 2)[0]
    text = ptx(coop.votes, dict(p=p, out=out), target, (64, 1, 1))
    for vote in ("ballot.b32", "any.pred", "all.pred"):
        assert re.search(rf"vote\.sync\.{vote}\s+%\w+, %p\d+, -1;", text), vote
    assert "%laneid" in text
    partial = ptx(coop.votes, dict(p=p, out=out), target, (48, 1, 1))  # a partial last warp
    assert not re.search(r"vote\.sync\.\w+(\.\w+)?\s+%\w+, %p\d+, -1;", partial)


@pytest.mark.parametrize("target", TARGETS)
def test_syncwarp(target):
    text = ptx(coop.rotate_in_warp, dict(x=F32, out=F32, SYNC=True), target)
    assert "bar.warp.sync \t-1;" in text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op,dtype", coop.SHARED_ATOMIC_CASES + [("add", np.dtype("V2"))],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_shared_atomics(target, op, dtype):
    dt = vg.bfloat16 if np.dtype(dtype).kind == "V" else getattr(vg, np.dtype(dtype).name)
    a = arrays(dt, 1)[0]
    specs = dict(init=a, index=arrays(vg.int32, 1)[0], values=a, compares=a, old=a, final=a,
                 OP=coop.OPS[op], DT=dt)
    text = ptx(coop.shared_atomics, specs, target)
    assert re.search(r"atom\.shared\.|atom\.relaxed\.\w+\.shared\.", text) or dt.bits == 16, text


@simt.kernel
def global_half_adds(h, b, x):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(h, i % 7, vg.float16(x[i]))
        if i < 500:
            simt.atomic_add(b, i % 5, vg.bfloat16(x[i]))


@pytest.mark.parametrize("target", TARGETS)
def test_float16_and_bfloat16_atomic_adds_on_global_memory(target):
    h, b = arrays(vg.float16, 1)[0], arrays(vg.bfloat16, 1)[0]
    text = ptx(global_half_adds, dict(h=h, b=b, x=F32), target)
    assert re.search(r"atom\.(\w+\.)*global\.add\.noftz\.f16", text)
    if target == "sm_90a":  # bf16 atomics are native from sm_90 on
        assert re.search(r"atom\.(\w+\.)*global\.add\.noftz\.bf16", text)
