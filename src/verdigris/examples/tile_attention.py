"""Flash attention, forward and backward: softmax(Q K^T * scale) V and its gradients without
ever forming the score matrix.

One block owns BM query rows of one (batch, head); it walks the keys and values in tiles
of BN, keeping a running row maximum `m`, a running denominator `l` and the unnormalized
output `acc` (online softmax): each new tile of scores rescales what came before by
exp(m_old - m_new). The exponentials are powers of two (`tile.exp2`, one `ex2` instruction
on the GPU) of scores scaled by log2(e) too: the same values as `exp`, at a fraction of
its instructions; `fma=True` lets each score's scaling and shift run as one fused
multiply-add. `scale` must be positive. Causal attention stops at the block's last row,
runs the longest row blocks first, and masks only the tiles that cross the diagonal (or
the end). q and o are (batch, heads, seq, head_dim), k and v (batch, kv_heads, seq,
head_dim), each a view of any strides with a unit inner one: torch's (batch, heads, seq,
head_dim) views of a (batch, seq, heads, head_dim) tensor, or of GPT-2's packed (batch,
seq, 3 * heads * head_dim) q, k and v (`head_views`), are read and written where they lie,
without copies. The grid is (query tiles, heads, batch). Grouped-query attention:
`GROUP` = heads // kv_heads query heads per K/V head, query head h reads K/V head
h // GROUP (GROUP=1, the default, compiles to the same code as before it existed); both
products run on tensor cores, the second one from the probabilities in registers,
rounded to the inputs' dtype.
On sm_90a a producer warp group streams the K and V tiles by TMA several stages ahead, Q
is staged into shared memory once, P @ V takes P straight from the registers of Q @ K^T's
result, and the consumer warp groups issue their products in turns, so one group's
softmax runs while another's products occupy the tensor cores (the streamed tiles' tensor
maps are 4-d, strides as the views have them; views the copy engine cannot describe, a
stride not a multiple of 16 bytes, run a variant without it, `runtime.tensormap`). The
forward also writes each row's log-sum-exp `lse` (natural log, float32, (batch, heads,
seq); the launchers below and the torch op take it as (batch * heads, seq) and pass that
view): one store per row.

The backward is FlashAttention-2's, as in Triton's fused-attention tutorial: `attention_backward`
launches `attention_backward_delta` (delta = rowsum(dO * O)), `attention_backward_dkdv`
(one block per key tile and (batch, head), walking the query tiles: dK, dV) and
`attention_backward_dq` (one block per query tile: dQ). Both recompute the probabilities
from Q, K and `lse`; causal ones skip the tiles above the diagonal and mask those it crosses.
P and dS are rounded to the inputs' dtype before their products, which add in float32;
every gradient element is written by one block in a fixed order: no atomics, the same bits
from run to run.
"""
from __future__ import annotations

import math

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples import Result, on_backend
from verdigris.examples.tile_gemm import _narrow, available

LOG2E = 1 / math.log(2)
LN2 = math.log(2)


@tile.kernel(fma=True)
def attention(q, k, v, o, lse, scale, CAUSAL: vg.constexpr = False, BM: vg.constexpr = 128,
              BN: vg.constexpr = 64, D: vg.constexpr = 64, GROUP: vg.constexpr = 1):
    m_block, head, batch = tile.bid(0), tile.bid(1), tile.bid(2)
    if CAUSAL:  # the longest row blocks first: the shortest start last, the grid ends evenly
        m_block = tile.num_blocks(0) - 1 - m_block
    kv_head = head if GROUP == 1 else head // GROUP
    seq = q.shape[2]
    scale2 = scale * LOG2E  # exp(x * scale) == exp2(x * scale2)
    qt = tile.load(q, index=(batch, head, m_block, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    m_i = tile.full((BM, 1), -math.inf, vg.float32)
    l_i = tile.zeros((BM, 1), vg.float32)
    acc = tile.zeros((BM, D), vg.float32)
    rows = m_block * BM + tile.arange(BM).reshape((BM, 1))
    end = (seq + BN - 1) // BN
    if CAUSAL:
        end = min(end, ((m_block + 1) * BM + BN - 1) // BN)
    for j in range(end):
        kt = tile.load(k, index=(batch, kv_head, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
        s = tile.dot(qt, kt.T)
        # Masks only where a key lies past the end or past a row (the diagonal tiles).
        if (j + 1) * BN > seq or (CAUSAL and (j + 1) * BN > m_block * BM + 1):
            cols = j * BN + tile.arange(BN).reshape((1, BN))
            if CAUSAL:
                s = tile.where((cols < seq) & (cols <= rows), s, -math.inf)
            else:
                s = tile.where(cols < seq, s, -math.inf)
        # Scaling commutes with the maximum (scale > 0): one multiply per row, and one
        # fused multiply-add per score.
        m_new = tile.maximum(m_i, tile.max(s, axis=1, keepdims=True) * scale2)
        p = tile.exp2(s * scale2 - m_new)
        alpha = tile.exp2(m_i - m_new)
        l_i = l_i * alpha + tile.sum(p, axis=1, keepdims=True)
        vt = tile.load(v, index=(batch, kv_head, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))
        acc = tile.mma(p.astype(v.dtype), vt, acc * alpha)
        m_i = m_new
    out = acc * (1.0 / l_i)  # one division per row, not per element
    tile.store(o, index=(batch, head, m_block, 0), tile=out.astype(o.dtype).reshape((1, 1, BM, D)))
    # m_i and log2(l_i) count powers of two: the natural log-sum-exp is their sum times ln 2
    tile.store(lse, index=(batch, head, m_block), tile=((m_i + tile.log2(l_i)) * LN2).reshape((1, 1, BM)))


@tile.kernel
def attention_backward_delta(o, do, delta, BM: vg.constexpr = 128, D: vg.constexpr = 64):
    """delta = rowsum(dO * O) of BM query rows, float32: the backward's softmax term
    (sum_j P_ij dP_ij is this, as O = P V and dP = dO V^T)."""
    m_block, head, batch = tile.bid(0), tile.bid(1), tile.bid(2)
    ot = tile.load(o, index=(batch, head, m_block, 0), shape=(1, 1, BM, D)).astype(vg.float32)
    dot = tile.load(do, index=(batch, head, m_block, 0), shape=(1, 1, BM, D)).astype(vg.float32)
    tile.store(delta, index=(batch, head, m_block), tile=tile.sum(ot * dot, axis=3).reshape((1, 1, BM)))


@tile.kernel(fma=True)
def attention_backward_dkdv(q, k, v, do, lse, delta, dk, dv, scale, CAUSAL: vg.constexpr = False,
                            BM: vg.constexpr = 64, BN: vg.constexpr = 128, D: vg.constexpr = 64,
                            GROUP: vg.constexpr = 1):
    """dK and dV of BN keys: the block walks the query tiles (BM rows) that see its keys,
    recomputing the probabilities transposed, P^T = exp(K Q^T * scale - lse), from the
    forward's log-sum-exp: dV += P^T dO, dP^T = V dO^T, dS^T = P^T * (dP^T - delta),
    dK += dS^T Q (times scale once, at the end). With GROUP > 1 the block's keys are K/V
    head head // GROUP's and dK, dV query head `head`'s share of their gradients (the
    caller sums a group's shares)."""
    n_block, head, batch = tile.bid(0), tile.bid(1), tile.bid(2)
    kv_head = head if GROUP == 1 else head // GROUP
    seq = q.shape[2]
    scale2 = scale * LOG2E  # exp(x * scale - lse) == exp2(x * scale2 - lse * log2(e))
    kt = tile.load(k, index=(batch, kv_head, n_block, 0), shape=(1, 1, BN, D)).reshape((BN, D))
    vt = tile.load(v, index=(batch, kv_head, n_block, 0), shape=(1, 1, BN, D)).reshape((BN, D))
    dk_acc = tile.zeros((BN, D), vg.float32)
    dv_acc = tile.zeros((BN, D), vg.float32)
    keys = n_block * BN + tile.arange(BN).reshape((BN, 1))
    start = 0
    if CAUSAL:  # query tiles wholly above the block's first key see none of its keys
        start = n_block * BN // BM
    # Query rows past the end load as zeros (dO and delta too): they add nothing. Keys past
    # the end give rows of dK and dV that are not stored, so they need no mask either.
    # Q's and dO's tiles each feed two products (once transposed): on sm_90a each streams
    # into shared memory once and both products read it there.
    for m in range(start, (seq + BM - 1) // BM):
        qm = tile.load(q, index=(batch, head, m, 0), shape=(1, 1, BM, D)).reshape((BM, D))
        dom = tile.load(do, index=(batch, head, m, 0), shape=(1, 1, BM, D)).reshape((BM, D))
        lse2 = tile.load(lse, index=(batch, head, m), shape=(1, 1, BM)).reshape((1, BM)) * LOG2E
        pt = tile.exp2(tile.dot(kt, qm.T) * scale2 - lse2)
        if CAUSAL and m * BM < (n_block + 1) * BN - 1:  # a tile the diagonal crosses
            rows = m * BM + tile.arange(BM).reshape((1, BM))
            pt = tile.where(rows >= keys, pt, 0.0)
        dv_acc = tile.mma(pt.astype(do.dtype), dom, dv_acc)
        dpt = tile.dot(vt, dom.T)
        dst = pt * (dpt - tile.load(delta, index=(batch, head, m), shape=(1, 1, BM)).reshape((1, BM)))
        dk_acc = tile.mma(dst.astype(q.dtype), qm, dk_acc)
    tile.store(dv, index=(batch, head, n_block, 0), tile=dv_acc.astype(dv.dtype).reshape((1, 1, BN, D)))
    tile.store(dk, index=(batch, head, n_block, 0),
               tile=(dk_acc * scale).astype(dk.dtype).reshape((1, 1, BN, D)))


@tile.kernel(fma=True)
def attention_backward_dq(q, k, v, do, lse, delta, dq, scale, CAUSAL: vg.constexpr = False,
                          BM: vg.constexpr = 128, BN: vg.constexpr = 64, D: vg.constexpr = 64,
                          GROUP: vg.constexpr = 1):
    """dQ of BM query rows: the block walks the key tiles its rows see, recomputing
    P = exp(Q K^T * scale - lse): dP = dO V^T, dS = P * (dP - delta), dQ += dS K (times
    scale once, at the end). Causal: the longest row blocks first, as the forward."""
    m_block, head, batch = tile.bid(0), tile.bid(1), tile.bid(2)
    if CAUSAL:
        m_block = tile.num_blocks(0) - 1 - m_block
    kv_head = head if GROUP == 1 else head // GROUP
    seq = q.shape[2]
    scale2 = scale * LOG2E
    qt = tile.load(q, index=(batch, head, m_block, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    dot = tile.load(do, index=(batch, head, m_block, 0), shape=(1, 1, BM, D)).reshape((BM, D))
    lse2 = tile.load(lse, index=(batch, head, m_block), shape=(1, 1, BM)).reshape((BM, 1)) * LOG2E
    di = tile.load(delta, index=(batch, head, m_block), shape=(1, 1, BM)).reshape((BM, 1))
    dq_acc = tile.zeros((BM, D), vg.float32)
    rows = m_block * BM + tile.arange(BM).reshape((BM, 1))
    end = (seq + BN - 1) // BN
    if CAUSAL:
        end = min(end, ((m_block + 1) * BM + BN - 1) // BN)
    for j in range(end):
        kj = tile.load(k, index=(batch, kv_head, j, 0), shape=(1, 1, BN, D)).reshape((BN, D))  # streamed once
        s = tile.dot(qt, kj.T)
        # Keys past the end (zeros) would give exp(-lse), which may overflow: masked, with
        # the diagonal's tiles, as in the forward. The walk and its masks are the forward's,
        # written out: a helper is inlined as a region, which the matching of streamed loops
        # (TMA on sm_90a) does not see through.
        if (j + 1) * BN > seq or (CAUSAL and (j + 1) * BN > m_block * BM + 1):
            cols = j * BN + tile.arange(BN).reshape((1, BN))
            if CAUSAL:
                s = tile.where((cols < seq) & (cols <= rows), s, -math.inf)
            else:
                s = tile.where(cols < seq, s, -math.inf)
        p = tile.exp2(s * scale2 - lse2)
        dp = tile.dot(dot, tile.load(v, index=(batch, kv_head, j, 0), shape=(1, 1, BN, D)).reshape((BN, D)).T)
        dq_acc = tile.mma((p * (dp - di)).astype(k.dtype), kj, dq_acc)
    tile.store(dq, index=(batch, head, m_block, 0),
               tile=(dq_acc * scale).astype(dq.dtype).reshape((1, 1, BM, D)))


# The forward's tiles and warps on the GPU by head dimension: at 256, 128 rows need two
# consumer warp groups (8 warps; 4 hold a 128 x 256 accumulator in one group and spill) and
# keys in tiles of 32 (64 need more shared memory than a block has: Q, and K and V staged
# twice); ptxas, sm_90a, reports no spills for each.
FORWARD_LAUNCH = {64: dict(BM=128, BN=64), 128: dict(BM=128, BN=64), 256: dict(BM=128, BN=32, num_warps=8)}

# The backward kernels' launches on the GPU by head dimension, (dK/dV's, dQ's): the fastest
# of bench/attention_backward.py's sweep on an H100 (bf16; B8 H12 S1024 at 64, B4 H32 S4096
# at 128, causal and not). Two consumer warp groups share the block's keys (dK/dV) or rows
# (dQ). ptxas (sm_90a) reports 40 bytes of spills for dK/dV's 128 x 128 at head dim 64 and
# 60 for its 64 x 128 at 128, and none for the smaller tiles these beat by 1.3-1.5x
# (116 against 184 us, 4.2 against 6.1 ms). Other head dimensions take BACKWARD_LAUNCH[None].
BACKWARD_LAUNCH = {64: (dict(BM=128, BN=128, num_warps=8), dict(BM=128, BN=128, num_warps=8)),
                   128: (dict(BM=64, BN=128, num_warps=8), dict(BM=128, BN=128, num_warps=8)),
                   None: (dict(BM=32, BN=128, num_warps=8), dict(BM=128, BN=64))}


def backward_launches(d: int) -> tuple:
    """(dK/dV's launch, dQ's launch) for head dimension `d` (BACKWARD_LAUNCH)."""
    return BACKWARD_LAUNCH.get(d, BACKWARD_LAUNCH[None])


def attention_backward(q, k, v, o, lse, do, dq, dk, dv, delta, scale, causal: bool,
                       dkdv_launch=None, dq_launch=None):
    """dq, dk, dv from the forward's q, k, v, o and lse and the output's gradient do: q, o,
    do and the gradients (batch, heads, seq, head_dim), k and v (batch, kv_heads, seq,
    head_dim), views of any strides with a unit inner one; lse and delta (batch * heads,
    seq) float32 (delta is scratch the first kernel fills). With kv_heads < heads (grouped-query
    attention) dk and dv hold each query head's share of its K/V head's gradients, to be
    summed over the group. Three launches: delta, then dK and dV, then dQ, with the tiles
    (BM, BN) and launch options (num_warps) of `dkdv_launch` and `dq_launch` (None:
    `backward_launches` of the head dimension); each gradient
    element is written by one block, summed in a fixed order, so the results are the same
    bit for bit from run to run (no atomics: the only mode)."""
    batch, heads, seq, d = q.shape
    group = heads // k.shape[1]
    default_dkdv, default_dq = backward_launches(d)
    dkdv_launch, dq_launch = dkdv_launch or default_dkdv, dq_launch or default_dq
    lse, delta = by_head(lse, batch, heads), by_head(delta, batch, heads)
    attention_backward_delta[vg.cdiv(seq, dq_launch["BM"]), heads, batch](o, do, delta, BM=dq_launch["BM"], D=d)
    attention_backward_dkdv[vg.cdiv(seq, dkdv_launch["BN"]), heads, batch](
        q, k, v, do, lse, delta, dk, dv, scale, CAUSAL=causal, D=d, GROUP=group, **dkdv_launch)
    attention_backward_dq[vg.cdiv(seq, dq_launch["BM"]), heads, batch](
        q, k, v, do, lse, delta, dq, scale, CAUSAL=causal, D=d, GROUP=group, **dq_launch)


def by_head(rows, batch: int, heads: int):
    """A (batch * heads, seq) array as the kernels' (batch, heads, seq) view of it (one
    that already is passes as it is). The kernels index it by their block's batch and head:
    a row batch * heads + head would be a product of two block ids, which the race proof
    cannot always settle in its time limit."""
    return rows if rows.ndim == 3 else rows.reshape(batch, heads, rows.shape[-1])


def head_views(packed, heads: int, parts: int) -> list:
    """The `parts` (batch, heads, seq, head_dim) views of a C-order (batch, seq, parts *
    heads * head_dim) array (NumPy's or a `vg.Array`) that holds them one after another
    along its last axis, as GPT-2's c_attn lays out q, k and v: no copies, a seq stride of
    parts * heads * head_dim and a heads stride of head_dim."""
    batch, seq, width = packed.shape
    split = packed.reshape(batch, seq, parts, heads, width // (parts * heads))
    return [split[:, :, i].transpose(0, 2, 1, 3) for i in range(parts)]


def _probabilities(q, k, scale: float, causal: bool):
    """softmax(q k^T * scale) and each row's log-sum-exp, float64 (any leading axes)."""
    s = np.einsum("...qd,...kd->...qk", q, k) * scale
    if causal:
        n = q.shape[-2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / total, (top + np.log(total))[..., 0]


def reference(q, k, v, scale: float, causal: bool) -> np.ndarray:
    return np.einsum("...qk,...kd->...qd", _probabilities(q, k, scale, causal)[0], v)


def reference_lse(q, k, scale: float, causal: bool) -> np.ndarray:
    return _probabilities(q, k, scale, causal)[1]


def reference_backward(q, k, v, do, scale: float, causal: bool) -> tuple:
    """dq, dk, dv of softmax attention in float64 (the textbook formulas; any leading axes)."""
    q, k, v, do = (np.asarray(a, np.float64) for a in (q, k, v, do))
    p = _probabilities(q, k, scale, causal)[0]
    o = np.einsum("...qk,...kd->...qd", p, v)
    dv = np.einsum("...qk,...qd->...kd", p, do)
    dp = np.einsum("...qd,...kd->...qk", do, v)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    return (np.einsum("...qk,...kd->...qd", ds, k) * scale, np.einsum("...qk,...qd->...kd", ds, q) * scale, dv)


def _forward_packed(qkv, o, lse, scale, heads: int, causal: bool, tiles: tuple, d: int):
    """The forward on q, k, v of packed `qkv` into the heads of packed `o` (`head_views`)."""
    bm, bn = tiles
    attention[vg.cdiv(qkv.shape[1], bm), heads, qkv.shape[0]](
        *head_views(qkv, heads, 3), *head_views(o, heads, 1), by_head(lse, qkv.shape[0], heads), scale,
        CAUSAL=causal, BM=bm, BN=bn, D=d)


def _backward_packed(qkv, o, lse, do, dqkv, delta, scale, heads: int, causal: bool, launches: tuple):
    """The backward into the three parts of packed `dqkv`, one kernel writing two of them."""
    attention_backward(*head_views(qkv, heads, 3), *head_views(o, heads, 1), lse, *head_views(do, heads, 1),
                       *head_views(dqkv, heads, 3), delta, scale, causal, *launches)


def check(rng, batch=2, heads=3, seq=100, dims=(64,), tiles=(64, 32),
          backward=(dict(BM=32, BN=64), dict(BM=64, BN=32))) -> list:
    """The forward (output and log-sum-exp) and the backward, bf16 (else float16) inputs,
    causal and not, against float64, on arrays laid out as GPT-2's attention meets them: q,
    k and v the (batch, heads, seq, head_dim) views of one (batch, seq, 3 * heads *
    head_dim) array, the output, dO and the gradients likewise (`head_views`: strides that
    are not C order); `backward` are the dK/dV kernel's launch (BM, BN, num_warps) and the
    dQ kernel's (None: `backward_launches` of each head dimension)."""
    dtype = "bfloat16" if available("bfloat16") else "float16"
    results = []
    for d in dims:
        scale = 1 / math.sqrt(d)
        qkv, qkv64 = _narrow(rng, (batch, seq, 3 * heads * d), dtype)
        do, do64 = _narrow(rng, (batch, seq, heads * d), dtype)
        q64, k64, v64 = head_views(qkv64, heads, 3)
        (do_heads,) = head_views(do64, heads, 1)
        for causal in (False, True):
            name = f"attention {dtype} d={d} {'causal' if causal else 'full'}"
            o = np.full(do.shape, np.nan, qkv.dtype)
            lse = np.full((batch * heads, seq), np.nan, np.float32)
            o, lse = on_backend(_forward_packed, qkv, o, lse, scale, heads, causal, tiles, d)[1:3]
            # The probabilities are rounded to the inputs' dtype before P @ V, and o to its dtype.
            (o_heads,) = head_views(o, heads, 1)
            results.append(Result(name, o_heads, reference(q64, k64, v64, scale, causal), 1e-2))
            results.append(Result(f"{name} log-sum-exp", lse.reshape(batch, heads, seq),
                                  reference_lse(q64, k64, scale, causal), 1e-5))
            dqkv = np.full(qkv.shape, np.nan, qkv.dtype)
            delta = np.full(lse.shape, np.nan, np.float32)
            dqkv = on_backend(_backward_packed, qkv, o, lse, do, dqkv, delta, scale, heads, causal, backward)[4]
            # P and dS are rounded to the inputs' dtype before their products.
            for label, got, want in zip(("dq", "dk", "dv"), head_views(dqkv, heads, 3),
                                        reference_backward(q64, k64, v64, do_heads, scale, causal)):
                results.append(Result(f"{name} backward {label}", got, want, 1e-2))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
