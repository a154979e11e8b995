"""Attention forwards beside `tile_attention.attention` (which takes grouped-query attention
itself, `GROUP`): variable-length batches, and fp8 e4m3 inputs. Both are its online softmax
(running maximum `m`, denominator `l`, unnormalized output `acc`, powers of two), both take
`GROUP` query heads per K/V head (query head h reads K/V head h // GROUP, no copy), and both
write each row's log-sum-exp (natural log, float32).

`attention_varlen`: sequences of different lengths packed one after another, no padding.
q and o are (total_tokens, q_heads * head_dim), k and v (total_tokens, kv_heads * head_dim):
packed (total_tokens, heads, head_dim) arrays viewed with their heads side by side, so that
a head's tile of rows is a 2-d box the copy engine streams (sm_90a); lse is (q_heads,
total_tokens); sequence b is rows cu_seqlens[b]:cu_seqlens[b + 1] (int32,
batch + 1 entries, cu_seqlens[0] = 0, non-decreasing, the last = total_tokens), and attends
within itself only (causal: to its own earlier tokens). One block owns BM consecutive packed
rows of one query head, as the dense kernel's blocks own BM rows: its rows may belong to
several sequences. It finds them (a binary search of cu_seqlens for its first row, then the
sequences that start among its rows: scalar code that a producer warp group can run again
before it streams K and V), walks the key tiles from the first one's start to the
last one's end (causal: to its last row), and masks each score whose key lies outside its
row's sequence (or after the row), only in the tiles where some row's sequence starts or ends
(or the diagonal crosses). Where a block writes depends on its ids alone, so the race proof
needs nothing of cu_seqlens' values, and every read it steers is a checked load (outside
the array: padding): a wrong cu_seqlens gives wrong numbers, never a wrong access. A block
that crosses a sequence boundary walks both sequences' keys (at most one extra walk per
boundary), and no grid axis is sized by the longest sequence (FlashAttention's max_seqlen).

`attention_fp8`: q, k, v float8_e4m3fn with FlashAttention-3's per-tensor descales (a
tensor's real values are its stored ones times its descale): `scale` is the softmax scale
times descale_q times descale_k (the host folds them), the probabilities are rounded to e4m3
before P @ V (as FlashAttention-3 rounds them), and o (bfloat16) is the normalized P @ V
times `descale_v`. Both products are fp8 on sm_90a's tensor cores, which read K-major
operands only: V (batch * kv_heads, seq, head_dim) is transposed on its way into shared
memory; with V_TRANSPOSED=True the kernel reads V stored transposed, (batch * kv_heads,
head_dim, seq), and both products stream their operands by TMA. As in the bfloat16 kernel,
a producer warp group streams K and V, the two consumer warp groups take turns at the
tensor cores, and P @ V takes P from the registers of Q @ K^T's result: each pair of
probabilities is rounded by one `cvt.rn.satfinite.e4m3x2` and the lanes of a quad
exchange them into wgmma's k32 fragments (`tile.register_a`). The exponentials flush
subnormal results to zero (one `ex2.approx.ftz` each, not four instructions): e4m3 rounds
such probabilities to zero anyway. (It ran at 0.44x the bfloat16 kernel on an H100 while
P went through shared memory, rounded to e4m3 in software three times per element, with
both consumer warp groups meeting at a barrier twice per product: 2,718 SASS
instructions an iteration of 128 keys against 542 now; bfloat16's take 472 for 64.)
"""
from __future__ import annotations

import math

import verdigris as vg
from verdigris import tile
from verdigris.examples.tile_attention import LN2, LOG2E


@tile.kernel(fma=True)
def attention_varlen(q, k, v, o, lse, cu_seqlens, scale, CAUSAL: vg.constexpr = False,
                     BM: vg.constexpr = 128, BN: vg.constexpr = 64, D: vg.constexpr = 64,
                     GROUP: vg.constexpr = 1):
    m_block, h = tile.bid(0), tile.bid(1)
    first_row = m_block * BM
    last_row = min(first_row + BM, q.shape[0]) - 1
    # The sequence of the first row: cu_seqlens[lo] <= first_row < cu_seqlens[hi].
    lo, hi = 0, cu_seqlens.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tile.load(cu_seqlens, index=(mid,), shape=()) <= first_row:
            lo = mid
        else:
            hi = mid
    # The last row's sequence, `last`: the sequences from lo on that start by the last row.
    last, end = lo, tile.load(cu_seqlens, index=(lo + 1,), shape=())
    while end <= last_row and last + 1 < cu_seqlens.shape[0] - 1:
        last += 1
        end = tile.load(cu_seqlens, index=(last + 1,), shape=())
    keys_from = tile.load(cu_seqlens, index=(lo,), shape=())
    keys_to = end  # the end of the last row's sequence
    if CAUSAL:
        keys_to = min(end, last_row + 1)
    # Each row's sequence, [row_start, row_end): rows past the last sequence see no keys.
    rows = first_row + tile.arange(BM).reshape((BM, 1))
    row_start = tile.full((BM, 1), keys_from)
    row_end = tile.full((BM, 1), keys_from)
    for b in range(lo, last + 1):
        start = tile.load(cu_seqlens, index=(b,), shape=())
        inside = (rows >= start) & (rows < tile.load(cu_seqlens, index=(b + 1,), shape=()))
        row_start = tile.where(inside, start, row_start)
        row_end = tile.where(inside, tile.load(cu_seqlens, index=(b + 1,), shape=()), row_end)
    last_start = tile.load(cu_seqlens, index=(last,), shape=())
    first_end = tile.load(cu_seqlens, index=(lo + 1,), shape=())
    scale2 = scale * LOG2E  # exp(x * scale) == exp2(x * scale2)
    qt = tile.load(q, index=(m_block, h), shape=(BM, D))
    m_i = tile.full((BM, 1), -math.inf, vg.float32)
    l_i = tile.zeros((BM, 1), vg.float32)
    acc = tile.zeros((BM, D), vg.float32)
    for j in range(keys_from // BN, (keys_to + BN - 1) // BN):
        kt = tile.load(k, index=(j, h // GROUP), shape=(BN, D))
        s = tile.dot(qt, kt.T)
        # Every row sees every key of tiles inside [last_start, first_end) (and, causal, at
        # or before the first row): the others are masked.
        if j * BN < last_start or (j + 1) * BN > first_end or (CAUSAL and (j + 1) * BN > first_row + 1):
            cols = j * BN + tile.arange(BN).reshape((1, BN))
            seen = (cols >= row_start) & (cols < row_end)
            if CAUSAL:
                seen = seen & (cols <= rows)
            s = tile.where(seen, s, -math.inf)
        m_new = tile.maximum(m_i, tile.max(s, axis=1, keepdims=True) * scale2)
        # A row whose sequence starts in a later tile has seen no key yet (m_new = -inf):
        # shifting by 0 keeps its p and alpha 0, not NaN.
        shift = tile.where(m_new == -math.inf, 0.0, m_new)
        p = tile.exp2(s * scale2 - shift)
        alpha = tile.exp2(m_i - shift)
        l_i = l_i * alpha + tile.sum(p, axis=1, keepdims=True)
        vt = tile.load(v, index=(j, h // GROUP), shape=(BN, D))
        acc = tile.mma(p.astype(v.dtype), vt, acc * alpha)
        m_i = m_new
    out = acc * (1.0 / l_i)
    tile.store(o, index=(m_block, h), tile=out.astype(o.dtype))
    tile.store(lse, index=(h, m_block), tile=((m_i + tile.log2(l_i)) * LN2).reshape((1, BM)))


# fp8's tiles on the GPU by head dimension: keys in tiles of 128 where 256 x 128 bytes of K
# and V fit their stages beside Q (ptxas, sm_90a, V transposed: no spills; V as stored,
# staged through registers, spills at head dims 128 and 256).
FP8_LAUNCH = {64: dict(BM=128, BN=128), 128: dict(BM=128, BN=128), 256: dict(BM=128, BN=64)}


@tile.kernel(fma=True)
def attention_fp8(q, k, v, o, lse, scale, descale_v, CAUSAL: vg.constexpr = False,
                  BM: vg.constexpr = 128, BN: vg.constexpr = 64, D: vg.constexpr = 64,
                  GROUP: vg.constexpr = 1, V_TRANSPOSED: vg.constexpr = False):
    # The bfloat16 kernel's walk, written out: it takes no descale_v (its code stays as it
    # was), and a body shared through a helper is an inlined region, after which the
    # consumer warp groups meet at one more barrier (sm_90a).
    m_block, bh = tile.bid(0), tile.bid(1)
    if CAUSAL:  # the longest row blocks first, as the bfloat16 kernel
        m_block = tile.num_blocks(0) - 1 - m_block
    seq = q.shape[1]
    scale2 = scale * LOG2E
    qt = tile.load(q, index=(bh, m_block, 0), shape=(1, BM, D)).reshape((BM, D))
    m_i = tile.full((BM, 1), -math.inf, vg.float32)
    l_i = tile.zeros((BM, 1), vg.float32)
    acc = tile.zeros((BM, D), vg.float32)
    rows = m_block * BM + tile.arange(BM).reshape((BM, 1))
    end = (seq + BN - 1) // BN
    if CAUSAL:
        end = min(end, ((m_block + 1) * BM + BN - 1) // BN)
    for j in range(end):
        kt = tile.load(k, index=(bh // GROUP, j, 0), shape=(1, BN, D)).reshape((BN, D))
        s = tile.dot(qt, kt.T)
        if (j + 1) * BN > seq or (CAUSAL and (j + 1) * BN > m_block * BM + 1):
            cols = j * BN + tile.arange(BN).reshape((1, BN))
            seen = cols < seq
            if CAUSAL:
                seen = seen & (cols <= rows)
            s = tile.where(seen, s, -math.inf)
        m_new = tile.maximum(m_i, tile.max(s, axis=1, keepdims=True) * scale2)
        # ex2.approx.ftz: one instruction, where subnormal results take four; e4m3 rounds
        # them to zero anyway, and beside the sum (at least 1) they vanish too.
        p = tile.exp2(s * scale2 - m_new, flush_to_zero=True)
        alpha = tile.exp2(m_i - m_new, flush_to_zero=True)
        l_i = l_i * alpha + tile.sum(p, axis=1, keepdims=True)
        if V_TRANSPOSED:
            vt = tile.load(v, index=(bh // GROUP, 0, j), shape=(1, D, BN)).reshape((D, BN)).T
        else:
            vt = tile.load(v, index=(bh // GROUP, j, 0), shape=(1, BN, D)).reshape((BN, D))
        acc = tile.mma(p.astype(v.dtype), vt, acc * alpha)
        m_i = m_new
    out = acc * (descale_v / l_i)
    tile.store(o, index=(bh, m_block, 0), tile=out.astype(o.dtype).reshape((1, BM, D)))
    tile.store(lse, index=(bh, m_block), tile=((m_i + tile.log2(l_i)) * LN2).reshape((1, BM)))
