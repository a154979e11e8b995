"""The sm_80 K-loop pipeline (`tile.cpasync`): which loops stream, how many stages the
target's shared memory holds, and the PTX: 16-byte cp.async copies with a src-size operand
(edge tiles zero-filled), one commit per iteration, `wait_group stages - 2` and a barrier
before a stage is read, no mbarrier, TMA or wgmma, assembled by ptxas. The GPU runs the
same kernels as sm_80 code in `tests/gpu/test_tile_mma.py` (its `target` fixture)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples import tile_attention
from verdigris.examples.tile_gemm import batched_gemm, gemm, gemm_bias_gelu, gemm_nt
from verdigris.ir import ArrayType
from verdigris.tile import matmul, pipeline
from verdigris.tile.sharedmem import shared_per_block

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def _a(dtype, ndim=2, aligned=True):
    return ArrayType(dtype, ndim, "global", True, aligned)


def _gemm(dtype, bm=128, bn=128, bk=64):
    return gemm.specialize_types(dict(a=_a(dtype), b=_a(dtype), c=_a(dtype), BM=bm, BN=bn, BK=bk))


STREAMED = {
    "gemm_bf16": lambda: _gemm(T.bfloat16),
    "gemm_f16": lambda: _gemm(T.float16, 64, 64, 32),
    "batched": lambda: batched_gemm.specialize_types(dict(a=_a(T.float16, 3), b=_a(T.float16, 3),
                                                          c=_a(T.float16, 3), BM=64, BN=64, BK=32)),
    "bias_gelu": lambda: gemm_bias_gelu.specialize_types(dict(a=_a(T.bfloat16), b=_a(T.bfloat16),
                                                              bias=_a(T.bfloat16), c=_a(T.bfloat16),
                                                              BM=128, BN=128, BK=64)),
    "attention": lambda: tile_attention.attention.specialize_types(dict(
        q=_a(T.bfloat16, 4), k=_a(T.bfloat16, 4), v=_a(T.bfloat16, 4), o=_a(T.bfloat16, 4),
        lse=_a(T.float32, 3), scale=T.float32, CAUSAL=True, BM=128, BN=64, D=128)),
}
COPY = re.compile(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;")


@needs_ptxas
@pytest.mark.parametrize("name", sorted(STREAMED))
def test_sm80_streams_the_k_loop_through_cp_async(name):
    kernel = STREAMED[name]()
    plan = matmul.plan(kernel, "sm_80")
    (pipe,) = plan.pipelines.values()
    assert pipe.engine == "mma.sync" and 2 <= pipe.stages <= pipeline.MAX_STAGES["mma.sync"]
    assert not plan.tensor_maps and plan.specialized is None
    assert plan.dynamic_shared <= shared_per_block("sm_80")
    ptx = codegen.compile_to_ptx(kernel, "sm_80").ptx
    copies = COPY.findall(ptx)
    assert copies and len(copies) == ptx.count("cp.async.cg")  # every copy bounded by its src-size
    assert "cp.async.commit_group;" in ptx
    assert re.findall(r"cp\.async\.wait_group (\d+);", ptx) == [str(pipe.stages - 2)]
    assert "mma.sync.aligned" in ptx and "ldmatrix.sync.aligned" in ptx
    assert "mbarrier" not in ptx and "cp.async.bulk" not in ptx and "wgmma" not in ptx
    codegen.assemble(ptx, "sm_80", optimize=False)


def test_both_operands_stream_and_attention_stages_q_once():
    (pipe,) = matmul.plan(STREAMED["gemm_bf16"](), "sm_80").pipelines.values()
    assert sorted(op.load.array.name for op in pipe.operands) == ["a", "b"] and pipe.accumulating
    (pipe,) = matmul.plan(STREAMED["attention"](), "sm_80").pipelines.values()
    assert sorted(op.load.array.name for op in pipe.operands) == ["k", "v"]
    assert len(pipe.invariants) == 1  # Q, staged into shared memory before the loop


def test_stages_follow_each_targets_shared_memory():
    big = _gemm(T.bfloat16, 128, 256, 64)  # 48 KiB a stage
    stages = {t: matmul.plan(big, t).pipelines for t in ("sm_80", "sm_89", "sm_90")}
    assert [p.stages for p in stages["sm_80"].values()] == [3]  # 163 KiB
    assert [p.stages for p in stages["sm_89"].values()] == [2]  # 99 KiB
    assert [p.stages for p in stages["sm_90"].values()] == [4]  # 227 KiB, capped
    for t in ("sm_80", "sm_89"):
        assert matmul.plan(big, t).dynamic_shared <= shared_per_block(t)
    huge = _gemm(T.bfloat16, 128, 256, 128)  # 96 KiB a stage: two fit on sm_90 only
    plan = matmul.plan(huge, "sm_80")  # operands through registers, as without streaming
    assert not plan.pipelines and plan.dynamic_shared <= shared_per_block("sm_80")
    assert [p.stages for p in matmul.plan(huge, "sm_90").pipelines.values()] == [2]


@tile.kernel
def load_after_use(a, b, c):
    acc = tile.zeros((64, 64), vg.float32)
    x = tile.load(a, index=(0, 0), shape=(64, 32))
    for k in range(4):
        y = tile.load(b, index=(k, 0), shape=(32, 64))
        acc = tile.mma(x, y, acc)
        x = tile.load(a, index=(0, k + 1), shape=(64, 32))
    tile.store(c, index=(0, 0), tile=acc)


def test_what_does_not_stream_on_sm80():
    # fp8 goes to shared memory as float16: through registers, as before
    fp8 = gemm_nt.specialize_types(dict(a=_a(T.float8_e4m3fn), bt=_a(T.float8_e4m3fn), c=_a(T.bfloat16),
                                        scale=T.float32, BM=128, BN=128, BK=128))
    assert not matmul.plan(fp8, "sm_80").pipelines
    assert "cp.async" not in codegen.compile_to_ptx(fp8, "sm_80").ptx
    # arrays not known 16-byte aligned: no 16-byte copies
    loose = gemm.specialize_types(dict(a=_a(T.float16, aligned=False), b=_a(T.float16, aligned=False),
                                       c=_a(T.float16), BM=64, BN=64, BK=32))
    assert not matmul.plan(loose, "sm_80").pipelines
    # x holds the previous pass's tile: only y streams
    plan = matmul.plan(load_after_use.specialize_types(dict(a=_a(T.float16), b=_a(T.float16),
                                                            c=_a(T.float32))), "sm_80")
    (pipe,) = plan.pipelines.values()
    assert [op.load.array.name for op in pipe.operands] == ["b"] and not pipe.accumulating


@tile.kernel
def scores_each_step(q, k, out, BM: vg.constexpr = 64, BN: vg.constexpr = 64, D: vg.constexpr = 64):
    i = tile.bid(0)
    qt = tile.load(q, index=(i, 0), shape=(BM, D))
    for j in range(k.shape[0] // BN):
        s = tile.dot(qt, tile.load(k, index=(j, 0), shape=(BN, D)).T)
        tile.store(out, index=(i, j), tile=s)


@needs_ptxas
def test_a_store_inside_a_streamed_loop_keeps_off_the_stages(monkeypatch):
    """Without warp specialization, a store through shared memory starts at offset 0, in
    the stages: inside a streamed loop, with copies in flight, the store goes directly."""
    kernel = scores_each_step.specialize_types(dict(q=_a(T.bfloat16), k=_a(T.bfloat16),
                                                    out=_a(T.float32), BM=64, BN=64, D=64))
    plan = matmul.plan(kernel, "sm_80")
    assert plan.pipelines and plan.through_offset == 0
    inside = []
    through = matmul.MmaLowering._through_shared

    def spy(self, *args):
        inside.append(bool(self.streams))
        return through(self, *args)

    monkeypatch.setattr(matmul.MmaLowering, "_through_shared", spy)
    codegen.assemble(codegen.compile_to_ptx(kernel, "sm_80").ptx, "sm_80", optimize=False)
    assert True not in inside


def test_a_store_inside_a_streamed_loop_computes_the_scores(rng):
    q = rng.standard_normal((128, 64)).astype(np.float32)
    k = rng.standard_normal((192, 64)).astype(np.float32)
    out = np.full((128, 192), np.nan, np.float32)
    scores_each_step[2](q, k, out)
    np.testing.assert_allclose(out, q.astype(np.float64) @ k.T.astype(np.float64), rtol=1e-4, atol=1e-4)
