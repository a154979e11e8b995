"""Flash attention forward: softmax(Q K^T * scale) V without ever forming the score matrix.

One block owns BM query rows of one (batch, head); it walks the keys and values in tiles
of BN, keeping a running row maximum `m`, a running denominator `l` and the unnormalized
output `acc` (online softmax): each new tile of scores rescales what came before by
exp(m_old - m_new). The exponentials are powers of two (`tile.exp2`, one `ex2` instruction
on the GPU) of scores scaled by log2(e) too: the same values as `exp`, at a fraction of
its instructions; `fma=True` lets each score's scaling and shift run as one fused
multiply-add. `scale` must be positive. Causal attention stops at the block's last row,
runs the longest row blocks first, and masks only the tiles that cross the diagonal (or
the end). q, k, v, o are (batch * heads, seq, head_dim); both products run on tensor
cores, the second one from the probabilities in registers, rounded to the inputs' dtype.
On sm_90a a producer warp group streams the K and V tiles by TMA several stages ahead, Q
is staged into shared memory once, P @ V takes P straight from the registers of Q @ K^T's
result, and the consumer warp groups issue their products in turns, so one group's
softmax runs while another's products occupy the tensor cores.
"""
from __future__ import annotations

import math

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples import Result
from verdigris.examples.tile_gemm import _narrow, available, run


@tile.kernel(fma=True)
def attention(q, k, v, o, scale, CAUSAL: vg.constexpr = False, BM: vg.constexpr = 128,
              BN: vg.constexpr = 64, D: vg.constexpr = 64):
    m_block, bh = tile.bid(0), tile.bid(1)
    if CAUSAL:  # the longest row blocks first: the shortest start last, the grid ends evenly
        m_block = tile.num_blocks(0) - 1 - m_block
    seq = q.shape[1]
    scale2 = scale * 1.4426950408889634  # log2(e): exp(x * scale) == exp2(x * scale2)
    qt = tile.load(q, index=(bh, m_block, 0), shape=(1, BM, D)).reshape((BM, D))
    m_i = tile.full((BM, 1), -math.inf, vg.float32)
    l_i = tile.zeros((BM, 1), vg.float32)
    acc = tile.zeros((BM, D), vg.float32)
    rows = m_block * BM + tile.arange(BM).reshape((BM, 1))
    end = (seq + BN - 1) // BN
    if CAUSAL:
        end = min(end, ((m_block + 1) * BM + BN - 1) // BN)
    for j in range(end):
        kt = tile.load(k, index=(bh, j, 0), shape=(1, BN, D)).reshape((BN, D))
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
        vt = tile.load(v, index=(bh, j, 0), shape=(1, BN, D)).reshape((BN, D))
        acc = tile.mma(p.astype(v.dtype), vt, acc * alpha)
        m_i = m_new
    out = acc * (1.0 / l_i)  # one division per row, not per element
    tile.store(o, index=(bh, m_block, 0), tile=out.astype(o.dtype).reshape((1, BM, D)))


def reference(q, k, v, scale: float, causal: bool) -> np.ndarray:
    s = np.einsum("bqd,bkd->bqk", q, k) * scale
    if causal:
        n = q.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bqk,bkd->bqd", p / p.sum(axis=-1, keepdims=True), v)


def check(rng, batch_heads=3, seq=100, dims=(64,), tiles=(64, 32)) -> list:
    bm, bn = tiles
    dtype = "bfloat16" if available("bfloat16") else "float16"
    results = []
    for d in dims:
        scale = 1 / math.sqrt(d)
        q, q64 = _narrow(rng, (batch_heads, seq, d), dtype)
        k, k64 = _narrow(rng, (batch_heads, seq, d), dtype)
        v, v64 = _narrow(rng, (batch_heads, seq, d), dtype)
        for causal in (False, True):
            o = np.full((batch_heads, seq, d), np.nan, np.float32)
            o = run(attention, (vg.cdiv(seq, bm), batch_heads), q, k, v, o, scale,
                    CAUSAL=causal, BM=bm, BN=bn, D=d)[3]
            # The probabilities are rounded to the inputs' dtype before P @ V.
            results.append(Result(f"attention {dtype} d={d} {'causal' if causal else 'full'}",
                                  o, reference(q64, k64, v64, scale, causal), 1e-2))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
