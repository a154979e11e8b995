"""Attention forward variants (issue #29 part 1) on the cpu backend against float64 NumPy:
grouped-query attention (`tile_attention.attention`'s GROUP: 1, 2 and 4 query heads per K/V
head; the backward's kernels too, with 3), head dims 64, 128 and 256, variable-length batches (`attention_varlen`: ragged
sequences of 0 to 200 tokens packed without padding, GQA too) and fp8 e4m3
(`attention_fp8`, V as stored and transposed, against a reference that rounds the
probabilities to e4m3 as the kernel does), causal and not, every output NaN first. Beside
them: the new kernels are proven by `verdigris check`, and their PTX assembles for sm_80
and, at the launches the benchmarks use, for sm_90a, where K and V stream by TMA (fp8's V
stored transposed) and nothing spills (head dim 256 included). The GPU twin is tests/gpu/test_attention_variants_gpu.py."""
import math
import re

import ml_dtypes
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen
from verdigris import types as T
from verdigris.examples import tile_attention as ta
from verdigris.examples import tile_attention_variants as tv
from verdigris.ir import ArrayType
from verdigris.ir import tiles as X
from verdigris.tile import matmul, mma_plan

from test_norm_backward import relative_error
from test_tile_mma import _ptxas_report

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
# relative to the reference's largest value: P rounded to bfloat16 before P @ V, o once more
TOLERANCE = 1.6e-2


def _inputs(rng, shape, dtype=BF16, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def _dense(q, k, v, scale, causal):
    """float64 attention of (..., heads, seq, d) q against K/V heads shared by groups."""
    group = q.shape[-3] // k.shape[-3]
    k64, v64 = (np.repeat(t.astype(np.float64), group, axis=-3) for t in (k, v))
    q64 = q.astype(np.float64)
    return ta.reference(q64, k64, v64, scale, causal), ta.reference_lse(q64, k64, scale, causal)


def _forward(q, k, v, causal, tiles, d, group):
    """o and lse ((batch, heads, seq)) of (batch, heads, seq, d) q and (batch, kv_heads,
    seq, d) k and v."""
    batch, heads, seq, _ = q.shape
    o = np.full(q.shape, np.nan, q.dtype)
    lse = np.full((batch, heads, seq), np.nan, np.float32)
    ta.attention[vg.cdiv(seq, tiles[0]), heads, batch](
        q, k, v, o, lse, 1 / math.sqrt(d), CAUSAL=causal, BM=tiles[0], BN=tiles[1], D=d, GROUP=group)
    return o, lse.reshape(batch, heads, seq)


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention(rng, group, causal):
    batch, kv_heads, seq, d = 2, 2, 77, 64
    q = _inputs(rng, (batch, kv_heads * group, seq, d))
    k, v = (_inputs(rng, (batch, kv_heads, seq, d)) for _ in range(2))
    o, lse = _forward(q, k, v, causal, (32, 16), d, group)
    want, want_lse = _dense(q, k, v, 1 / math.sqrt(d), causal)
    assert relative_error(o, want) < TOLERANCE
    assert relative_error(lse, want_lse) < 1e-5


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention_backward(rng, causal):
    """`attention_backward` on K/V heads shared by 3 query heads each: dK and dV per query
    head, which summed over each group are the K/V heads' gradients."""
    group, seq, d = 3, 45, 32
    q, do = (_inputs(rng, (1, 2 * group, seq, d)) for _ in range(2))
    k, v = (_inputs(rng, (1, 2, seq, d)) for _ in range(2))
    scale = 1 / math.sqrt(d)
    o, lse = _forward(q, k, v, causal, (16, 16), d, group)
    dq, dk, dv = (np.full(q.shape, np.nan, q.dtype) for _ in range(3))
    ta.attention_backward(q, k, v, o, lse.reshape(-1, seq), do, dq, dk, dv,
                          np.full((2 * group, seq), np.nan, np.float32), scale, causal,
                          dict(BM=16, BN=16), dict(BM=16, BN=16))
    want = ta.reference_backward(q, *(np.repeat(t, group, axis=1) for t in (k, v)), do, scale, causal)
    shares = [g.astype(np.float64).reshape(1, 2, group, seq, d).sum(2) for g in (dk, dv)]
    assert relative_error(dq, want[0]) < TOLERANCE
    for got, full in zip(shares, want[1:]):
        assert relative_error(got, full.reshape(1, 2, group, seq, d).sum(2)) < TOLERANCE


@pytest.mark.parametrize("d, tiles", [(128, (16, 16)), (256, (16, 32))])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dims(rng, d, tiles, causal):
    q, k, v = (_inputs(rng, (1, 2, 21, d)) for _ in range(3))
    o, lse = _forward(q, k, v, causal, tiles, d, 1)
    want, want_lse = _dense(q, k, v, 1 / math.sqrt(d), causal)
    assert relative_error(o, want) < TOLERANCE
    assert relative_error(lse, want_lse) < 1e-5


def _varlen(rng, lengths, q_heads, kv_heads, d, causal, tiles=(32, 16)):
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    total = int(cu[-1])
    q = _inputs(rng, (total, q_heads, d))
    k, v = (_inputs(rng, (total, kv_heads, d)) for _ in range(2))
    o = np.full(q.shape, np.nan, q.dtype)
    lse = np.full((q_heads, total), np.nan, np.float32)
    scale = 1 / math.sqrt(d)
    tv.attention_varlen[vg.cdiv(total, tiles[0]), q_heads](
        *(t.reshape(total, -1) for t in (q, k, v, o)), lse, cu, scale, CAUSAL=causal, BM=tiles[0], BN=tiles[1], D=d,
        GROUP=q_heads // kv_heads)
    for b in range(len(lengths)):  # each sequence alone, as a batch of one
        rows = slice(cu[b], cu[b + 1])
        if cu[b] == cu[b + 1]:
            continue
        want, want_lse = _dense(q[rows].transpose(1, 0, 2), k[rows].transpose(1, 0, 2),
                                v[rows].transpose(1, 0, 2), scale, causal)
        assert relative_error(o[rows].transpose(1, 0, 2), want) < TOLERANCE, f"sequence {b}"
        assert relative_error(lse[:, rows], want_lse) < 1e-5, f"sequence {b}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 1)], ids=["mha", "gqa4"])
def test_variable_length_batches(rng, causal, heads):
    """Lengths 1 to 200, an empty sequence, sequences shorter than a tile and several in one
    block's rows, a boundary on a tile's edge (32 + 64 + 32 = 128)."""
    lengths = [32, 64, 32, 1, 0, 200, 5, 3, int(rng.integers(1, 200))]
    _varlen(rng, lengths, *heads, 32, causal)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_variable_length_head_dims(rng, d):
    _varlen(rng, [7, 20, 1, 13], 2, 1, d, True, tiles=(16, 16))


def _fp8_reference(q, k, v, scale, descales, causal):
    """FlashAttention-3's fp8 forward in float64: the scores of the descaled inputs, the
    probabilities rounded to e4m3 before P @ V (one key tile: the kernel's running maximum
    is the row's), divided by the unrounded sum."""
    group = q.shape[0] // k.shape[0]
    dq, dk, dv = descales
    q64 = q.astype(np.float64) * dq
    k64, v64 = (np.repeat(t.astype(np.float64) * s, group, axis=0) for t, s in ((k, dk), (v, dv)))
    s = np.einsum("bqd,bkd->bqk", q64, k64) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    rounded = e.astype(np.float32).astype(E4M3).astype(np.float64)
    return np.einsum("bqk,bkd->bqd", rounded, v64) / e.sum(axis=-1, keepdims=True), \
        ta.reference_lse(q64, k64, scale, causal)


def _fp8(rng, causal, seq, tiles, transposed, group=2, d=64):
    q = _inputs(rng, (2 * group, seq, d), E4M3, 4.0)
    k, v = (_inputs(rng, (2, seq, d), E4M3, 4.0) for _ in range(2))
    descales, scale = (0.5, 0.25, 0.125), 1 / math.sqrt(d)
    o = np.full(q.shape, np.nan, BF16)
    lse = np.full(q.shape[:2], np.nan, np.float32)
    stored = np.ascontiguousarray(v.transpose(0, 2, 1)) if transposed else v
    tv.attention_fp8[vg.cdiv(seq, tiles[0]), q.shape[0]](
        q, k, stored, o, lse, scale * descales[0] * descales[1], descales[2], CAUSAL=causal,
        BM=tiles[0], BN=tiles[1], D=d, GROUP=group, V_TRANSPOSED=transposed)
    return o, lse, _fp8_reference(q, k, v, scale, descales, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("transposed", [False, True], ids=["v", "vt"])
def test_fp8_rounds_the_probabilities_as_flashattention3(rng, causal, transposed):
    o, lse, (want, want_lse) = _fp8(rng, causal, 50, (32, 64), transposed)
    assert relative_error(o, want) < 1e-2  # o's bfloat16 rounding, and P's rounding at a tie
    assert relative_error(lse, want_lse) < 1e-5


def test_fp8_over_several_key_tiles(rng):
    """The running maximum changes between key tiles: P is rounded relative to it, each
    element within e4m3's half ulp (2**-4) either way."""
    o, lse, (want, want_lse) = _fp8(rng, True, 90, (32, 16), True)
    assert relative_error(o, want) < 4e-2
    assert relative_error(lse, want_lse) < 1e-5


def test_the_variant_kernels_are_proven():
    from verdigris.safety.scan import check_paths

    report = check_paths([tv.__file__])
    assert report.status == 0, report.format()
    verdicts = dict(re.findall(r"kernel '(\w+)': (\w+)", report.format()))
    assert verdicts == {"attention_varlen": "proven", "attention_fp8": "proven"}


# ----------------------------------------------------------------------------- PTX


def _a(dtype, ndim=3):
    return ArrayType(dtype, ndim, "global", True, True)


def _specialized(name, d, causal, launch):
    launch = dict(launch)
    block = (32 * launch.pop("num_warps"),) if "num_warps" in launch else None
    common = dict(lse=_a(T.float32, 2 if name in ("fp8", "varlen") else 3), scale=T.float32, CAUSAL=causal, D=d,
                  **launch)
    if name == "fp8":
        f8 = T.float8_e4m3fn
        return tv.attention_fp8.specialize_types(dict(
            common, q=_a(f8), k=_a(f8), v=_a(f8), o=_a(T.bfloat16), descale_v=T.float32,
            V_TRANSPOSED=True), block=block)
    arrays = dict(q=_a(T.bfloat16, 4), k=_a(T.bfloat16, 4), v=_a(T.bfloat16, 4), o=_a(T.bfloat16, 4))
    if name == "varlen":
        flat = {name: _a(T.bfloat16, 2) for name in arrays}
        return tv.attention_varlen.specialize_types(dict(common, **flat, cu_seqlens=_a(T.int32, 1),
                                                         GROUP=4), block=block)
    return ta.attention.specialize_types(dict(common, **arrays, GROUP=4), block=block)


@needs_ptxas
@pytest.mark.parametrize("name, d, causal, launch", [
    ("gqa", 256, False, ta.FORWARD_LAUNCH[256]), ("varlen", 128, True, ta.FORWARD_LAUNCH[128]),
    ("fp8", 128, False, tv.FP8_LAUNCH[128])])
def test_sm90a_streams_both_operands_without_spilling(name, d, causal, launch):
    """K and V by TMA into wgmma, from a producer warp group (varlen's too: it runs the
    search of cu_seqlens again, `tile.specialize`)."""
    kernel = _specialized(name, d, causal, launch)
    (pipe,) = matmul.plan(kernel, "sm_90a").pipelines.values()
    assert sorted(op.load.array.name for op in pipe.operands) == ["k", "v"] and pipe.specialized
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    # varlen's (total_tokens, heads * head_dim): a 2-d box; (batch, heads, seq, head_dim): 4-d
    dims = {"varlen": 2, "gqa": 4, "fp8": 3}[name]
    assert f"cp.async.bulk.tensor.{dims}d.shared::cluster.global" in ptx and "wgmma.mma_async" in ptx
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report and not re.search(r"C75\d\d", report), report


@needs_ptxas
def test_sm90a_fp8_takes_p_from_registers():
    """fp8's P @ V as bfloat16's: P from registers, not staged through shared memory (which
    cost two barriers of both consumer warp groups a product), rounded to e4m3 by the
    hardware (two a `cvt.rn.satfinite`, not ~30 instructions each) and gathered into wgmma's
    k32 fragments within quads (two shuffles a row of each k step); its exponentials are
    one `ex2.approx.ftz` each (without ftz, four instructions)."""
    kernel = _specialized("fp8", 128, False, tv.FP8_LAUNCH[128])
    plan = matmul.plan(kernel, "sm_90a")
    (pv,) = [d for d in mma_plan.walk_nodes(kernel) if isinstance(d, X.TileDot) and id(d) in plan.register_a]
    assert pv.a.dtype == T.float8_e4m3fn and pv.b.name == "vt"
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    assert len(re.findall(r"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 \{[^}]*\}, "
                          r"\{%r\d+,%r\d+,%r\d+,%r\d+\}, %rd\d+, p, 1, 1;", ptx)) == 4  # 128 keys
    assert ptx.count("shfl.sync.idx") == 4 * 2 * 2  # k steps, rows, shuffles
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "cvt.rni" not in ptx  # no software rounding
    assert "ex2.approx.ftz.f32" in ptx and "ex2.approx.f32" not in ptx


@needs_ptxas
@pytest.mark.parametrize("name", ["varlen", "fp8"])
def test_sm80_assembles(name):
    kernel = _specialized(name, 64, True, dict(BM=64, BN=32))
    codegen.assemble(codegen.compile_to_ptx(kernel, "sm_80").ptx, "sm_80", optimize=False)
