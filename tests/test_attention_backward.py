"""Flash attention backward (issue #28) on the cpu backend: the forward's row log-sum-exp
and the backward's dQ, dK and dV (`examples.tile_attention.attention_backward`) against
float64 NumPy gradients of softmax attention, for float16 and bfloat16 inputs, head dims 64
and 16, causal and not, on a sequence that is no multiple of any tile; every output starts
as NaN; the gradients are the same bit for bit from run to run; q, k, v, o, dO and the
gradients as (batch, heads, seq, head_dim) views of packed (batch, seq, parts * heads *
head_dim) arrays (GPT-2's layout), read and written where they lie. Beside them the way of
computing dQ in the dK/dV kernel without atomics that races (every key block storing the
same dQ tile), and grouped-query dK stored into the shared K/V head by each query head,
refused with two blocks named, and one gradient view passed as both dK and dV refused at
the launch, while the kernels the op uses are proven; and the kernels' PTX for sm_90a (Q,
dO and K streamed by TMA, 4-d tensor maps), assembled by ptxas. The torch op
is tested in tests/test_torch_attention.py, the GPU in tests/gpu/test_attention_backward_gpu.py."""
import math
import re

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples import tile_attention as ta
from verdigris.ir import ArrayType
from verdigris.tile import matmul

from test_norm_backward import relative_error, storage
from test_tile_mma import _ptxas_report

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
# relative to the reference's largest value: P and dS are rounded to the inputs' dtype before
# their products (as the forward rounds P), and the gradients once more when stored
TOLERANCE = {"float16": 4e-3, "bfloat16": 1.6e-2}


def forward_backward(q, k, v, do, scale, causal, tiles=(32, 16),
                     backward=(dict(BM=16, BN=32), dict(BM=32, BN=16))):
    """o, lse (the forward) and dq, dk, dv (the backward) of (batch, heads, seq, head_dim)
    arrays, from NaN-filled outputs."""
    batch, heads, seq, d = q.shape
    o, lse = np.full(q.shape, np.nan, q.dtype), np.full((batch, heads, seq), np.nan, np.float32)
    ta.attention[vg.cdiv(seq, tiles[0]), heads, batch](q, k, v, o, lse, scale, CAUSAL=causal, BM=tiles[0],
                                                       BN=tiles[1], D=d)
    dq, dk, dv = (np.full(q.shape, np.nan, q.dtype) for _ in range(3))
    ta.attention_backward(q, k, v, o, lse, do, dq, dk, dv, np.full(lse.shape, np.nan, np.float32),
                          scale, causal, *backward)
    return o, lse.reshape(batch, heads, seq), dq, dk, dv


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 16])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_match_float64(rng, name, d, causal):
    q, k, v, do = (rng.standard_normal((2, 1, 100, d)).astype(storage(name)) for _ in range(4))
    scale = 1 / math.sqrt(d)
    o, lse, *grads = forward_backward(q, k, v, do, scale, causal)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    assert relative_error(o, ta.reference(q64, k64, v64, scale, causal)) < TOLERANCE[name]
    assert relative_error(lse, ta.reference_lse(q64, k64, scale, causal)) < 1e-5
    for label, got, want in zip("qkv", grads, ta.reference_backward(q, k, v, do, scale, causal)):
        assert relative_error(got, want) < TOLERANCE[name], f"d{label}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_views_of_packed_arrays_read_and_written_where_they_lie(rng, causal):
    """GPT-2's layout: q, k and v the (batch, heads, seq, head_dim) views of one (batch,
    seq, 3 * heads * head_dim) array (`head_views`), o and dO of (batch, seq, heads *
    head_dim) ones, and dQ, dK and dV written into the three parts of one packed gradient
    (dK and dV, interleaved, by one launch: the alias check finds they share no element).
    Every element of the packed outputs is written (they start as NaN)."""
    batch, heads, seq, d = 2, 3, 45, 16
    qkv, do = (rng.standard_normal((batch, seq, parts * heads * d)).astype(np.float16) for parts in (3, 1))
    o = np.full(do.shape, np.nan, np.float16)
    lse = np.full((batch, heads, seq), np.nan, np.float32)
    q, k, v = ta.head_views(qkv, heads, 3)
    assert q.strides[1:] == (d * 2, 3 * heads * d * 2, 2)  # bytes: heads, seq, head_dim
    ta.attention[vg.cdiv(seq, 16), heads, batch](q, k, v, *ta.head_views(o, heads, 1), lse, 0.25,
                                                 CAUSAL=causal, BM=16, BN=16, D=d)
    dqkv = np.full(qkv.shape, np.nan, np.float16)
    ta.attention_backward(q, k, v, *ta.head_views(o, heads, 1), lse, *ta.head_views(do, heads, 1),
                          *ta.head_views(dqkv, heads, 3), np.full(lse.shape, np.nan, np.float32), 0.25, causal,
                          dict(BM=16, BN=32), dict(BM=32, BN=16))
    q64, k64, v64, do64 = (t.astype(np.float64) for t in (q, k, v, *ta.head_views(do, heads, 1)))
    assert relative_error(ta.head_views(o, heads, 1)[0], ta.reference(q64, k64, v64, 0.25, causal)) < 4e-3
    assert relative_error(lse.reshape(batch, heads, seq), ta.reference_lse(q64, k64, 0.25, causal)) < 1e-5
    for got, want in zip(ta.head_views(dqkv, heads, 3), ta.reference_backward(q64, k64, v64, do64, 0.25, causal)):
        assert relative_error(got, want) < 4e-3


def test_tiles_of_other_shapes_and_a_scale_not_one_over_root_d(rng):
    """Key tiles larger than query tiles and the reverse, in both kernels, causal (the first
    query tile a key block sees starts inside it), a sequence shorter than one tile."""
    for seq, backward in ((70, (dict(BM=32, BN=64), dict(BM=16, BN=32))),
                          (20, (dict(BM=64, BN=32), dict(BM=32, BN=64)))):
        q, k, v, do = (rng.standard_normal((1, 3, seq, 32)).astype(np.float16) for _ in range(4))
        *_, dq, dk, dv = forward_backward(q, k, v, do, 0.3, True, backward=backward)
        for got, want in zip((dq, dk, dv), ta.reference_backward(q, k, v, do, 0.3, True)):
            assert relative_error(got, want) < TOLERANCE["float16"]


def test_the_gradients_are_the_same_bit_for_bit(rng):
    q, k, v, do = (rng.standard_normal((2, 1, 50, 16)).astype(np.float16) for _ in range(4))
    first = forward_backward(q, k, v, do, 0.25, True)
    again = forward_backward(q, k, v, do, 0.25, True)
    for a, b in zip(first, again):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


# dQ summed by the dK/dV kernel's blocks without atomics: every key block stores its share
# of each dQ tile over the others' (the racy twin of the separate dQ kernel above)

@tile.kernel
def dq_from_key_blocks(q, k, dq, BM: vg.constexpr, BN: vg.constexpr, D: vg.constexpr):
    n_block, bh = tile.bid(0), tile.bid(1)
    kt = tile.load(k, index=(bh, n_block, 0), shape=(1, BN, D)).reshape((BN, D))
    for m in range((q.shape[1] + BM - 1) // BM):
        qt = tile.load(q, index=(bh, m, 0), shape=(1, BM, D)).reshape((BM, D))
        ds = tile.dot(qt, kt.T)
        tile.store(dq, index=(bh, m, 0), tile=tile.dot(ds, kt).reshape((1, BM, D)))  # every key block


def test_dq_stored_by_every_key_block_is_refused(rng):
    q, k = (rng.standard_normal((2, 64, 16)).astype(np.float32) for _ in range(2))
    with pytest.raises(vg.SafetyError) as info:
        dq_from_key_blocks[4, 2](q, k, np.full(q.shape, np.nan, np.float32), BM=16, BN=16, D=16)
    assert info.value.code == "VG202" and "dq" in str(info.value)
    blocks = re.findall(r"block \(?(\d+)", str(info.value))
    assert len(blocks) >= 2, str(info.value)
    located.assert_points_at(info.value, "# every key block", __file__)


# dK of grouped-query attention stored straight into the K/V head by each query head of
# its group (the kernel stores each query head's share; the caller sums them)

@tile.kernel
def dk_into_the_kv_head(k, dk, BN: vg.constexpr, D: vg.constexpr, GROUP: vg.constexpr):
    n_block, head, batch = tile.bid(0), tile.bid(1), tile.bid(2)
    kt = tile.load(k, index=(batch, head // GROUP, n_block, 0), shape=(1, 1, BN, D))
    tile.store(dk, index=(batch, head // GROUP, n_block, 0), tile=kt * 2.0)  # each head of a group


def test_grouped_gradients_stored_into_the_shared_head_are_refused(rng):
    k = rng.standard_normal((2, 2, 32, 16)).astype(np.float32)
    with pytest.raises(vg.SafetyError) as info:
        dk_into_the_kv_head[2, 4, 2](k, np.full(k.shape, np.nan, np.float32), BN=16, D=16, GROUP=2)
    assert info.value.code == "VG202" and "dk" in str(info.value)
    located.assert_points_at(info.value, "# each head of a group", __file__)


def test_one_gradient_view_passed_as_both_dk_and_dv_is_refused(rng):
    """The two parts of a packed gradient that the dK/dV kernel writes share no element
    (`test_views_of_packed_arrays_read_and_written_where_they_lie`); one part given as both
    is refused before the launch."""
    batch, heads, seq, d = 1, 2, 32, 16
    qkv = rng.standard_normal((batch, seq, 3 * heads * d)).astype(np.float16)
    q, k, v = ta.head_views(qkv, heads, 3)
    lse = np.zeros((batch, heads, seq), np.float32)
    dk = ta.head_views(np.full(qkv.shape, np.nan, np.float16), heads, 3)[1]
    with pytest.raises(vg.AliasError) as info:
        ta.attention_backward_dkdv[2, heads, batch](q, k, v, q, lse, lse, dk, dk, 0.25, BM=16, BN=16, D=d)
    assert info.value.code == "VG201"


def test_the_attention_kernels_are_proven():
    from verdigris.safety.scan import check_paths

    report = check_paths([ta.__file__])
    assert report.status == 0, report.format()
    verdicts = dict(re.findall(r"kernel '(\w+)': (\w+)", report.format()))
    assert verdicts == {name: "proven" for name in ("attention", "attention_backward_delta",
                                                    "attention_backward_dkdv", "attention_backward_dq")}


# ----------------------------------------------------------------------------- PTX


def _a(dtype, ndim=4):
    return ArrayType(dtype, ndim, "global", True, True)


def _specialized(name, d, causal, dtype=T.bfloat16):
    """The kernel as `attention_backward` launches it by default."""
    inputs = dict(q=_a(dtype), k=_a(dtype), v=_a(dtype), do=_a(dtype), lse=_a(T.float32, 3),
                  delta=_a(T.float32, 3), scale=T.float32, CAUSAL=causal, D=d)
    dkdv, dq = ta.backward_launches(d)
    kernel, launch, outputs = ((ta.attention_backward_dkdv, dkdv, dict(dk=_a(dtype), dv=_a(dtype)))
                               if name == "dkdv" else (ta.attention_backward_dq, dq, dict(dq=_a(dtype))))
    launch = dict(launch)
    block = (32 * launch.pop("num_warps"),) if "num_warps" in launch else None
    return kernel.specialize_types(dict(inputs, **outputs, **launch), block=block)


@needs_ptxas
@pytest.mark.parametrize("name, d, causal, dtype", [("dkdv", 128, True, T.bfloat16),
                                                    ("dkdv", 64, False, T.float16),
                                                    ("dq", 128, True, T.bfloat16),
                                                    ("dq", 64, False, T.float16)])
def test_sm90a_streams_the_walked_tiles_by_tma_and_assembles(name, d, causal, dtype):
    """Each product's operand from the walked tiles streams (Q's and dO's into two products
    each in dK/dV, K's in dQ: each tile copied once, both products reading it from shared
    memory), the block's own tiles are staged once, two consumer warp groups and a
    producer; at head dim 128 ptxas does not serialize the products, and spills no more
    than the 60 bytes BACKWARD_LAUNCH's measured-faster dK/dV tiles are known to (dQ none)."""
    kernel = _specialized(name, d, causal, dtype)
    plan = matmul.plan(kernel, "sm_90a")
    (pipe,) = plan.pipelines.values()
    streamed = sorted(op.load.array.name for op in pipe.operands)
    staged = sorted(inv.node.name for inv in pipe.invariants)
    copied = sorted(op.load.array.name for op in pipe.copies)
    if name == "dkdv":
        assert streamed == ["do", "do", "q", "q"] and copied == ["do", "q"] and staged == ["kt", "vt"]
    else:
        assert streamed == ["k", "k", "v"] and copied == ["k", "v"] and staged == ["dot", "qt"]
    assert len(plan.tensor_maps) == len(copied)
    assert pipe.stage_bytes == pipe.stage_bytes_used == sum(op.stored.nbytes for op in pipe.copies)
    assert pipe.specialized and plan.block_threads == 384
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in ptx and "wgmma.mma_async" in ptx
    assert [m.box for m in plan.tensor_maps][0][:2] == (1, 1)  # (batch, heads, rows, a panel)
    if d == 128:  # where registers are tightest: optimized by ptxas, and reported
        report = _ptxas_report(ptx)
        spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
        assert spilled <= (60 if name == "dkdv" else 0) and not re.search(r"C75\d\d", report), report
    else:
        codegen.assemble(ptx, "sm_90a", optimize=False)


@needs_ptxas
def test_sm90a_delta_assembles():
    kernel = ta.attention_backward_delta.specialize_types(dict(o=_a(T.bfloat16), do=_a(T.bfloat16),
                                                               delta=_a(T.float32, 3), BM=128, D=128))
    codegen.assemble(codegen.compile_to_ptx(kernel, "sm_90a").ptx, "sm_90a", optimize=False)
