"""Decode attention over a paged KV cache (flash decoding, grouped-query heads): one query
token per sequence (or its last few) against its cached keys and values, which sit in pages
of a shared pool that a block table lists (vLLM's layout; `docs/decode.md` states it in full).

q is (B, Hq, D), or (B, Sq, Hq, D) for the last Sq tokens (each seeing the keys up to its
own); the caches are (num_blocks, page, Hkv, D); block_table (B, max_pages) and seq_lens (B,)
are int32; the output is q's shape. Query head h reads KV head h // (Hq // Hkv): the group
of query heads sharing a KV head is computed by one block, so every key and value is read
once, and nothing is copied.

Two kernels. `decode_split` (grid: splits, B, Hkv) walks one part of a sequence's key tiles
with flash attention's online softmax and writes that part's normalized output and
log-sum-exp (float32); `decode_combine` (grid: Hq, Sq, B) merges the parts by their
log-sum-exp. The group's query rows (tokens x heads), padded with zeros to 16 rows at least,
are the right operand of S^T = K Q^T, so the keys fill a tensor-core product's rows (wgmma
on sm_90a, mma.sync on sm_80) however small the group; the values' product is
O^T += V^T P^T. Each key tile's page is read from the block table in the loop, and the key
and value tiles at that page stream into shared memory several steps ahead (the copy engine
on sm_90a, cp.async on sm_80; `tile.pipeline`'s index prefix); a tile's load reads nothing
outside the cache (a page outside it reads as zeros). `decode_attention` launches both,
`decode_splits` chooses the number of parts.
"""
from __future__ import annotations

import math

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples import Result, on_backend
from verdigris.examples.tile_attention import LN2, LOG2E
from verdigris.examples.tile_gemm import _narrow, available

PRODUCT_ROWS = 16  # the query rows a group is padded to: the smallest tensor-core product
KEY_TILE = 64  # keys per step (BN), or the page where that is smaller
WAVES = 2  # the splits aim at this many waves of blocks on the GPU ...
MIN_SPLIT_KEYS = 256  # ... but no part shorter than this: each part costs a partial output


@tile.kernel(fma=True)
def decode_split(q, k_cache, v_cache, block_table, seq_lens, part_out, part_lse, scale,
                 TOKENS: vg.constexpr = 1, GROUP: vg.constexpr = 1, ROWS: vg.constexpr = 16,
                 PAGE: vg.constexpr = 16, BN: vg.constexpr = 16, D: vg.constexpr = 128):
    """Part s of sequence b's keys for the TOKENS x GROUP query rows of KV head g (block
    (s, b, g)): q is (B, TOKENS, Hq, D), token j of sequence b at position
    seq_lens[b] - TOKENS + j, seeing the keys up to its own. The caches are
    (num_blocks, PAGE, Hkv * D) views; BN divides PAGE; ROWS is TOKENS * GROUP padded to 16
    rows at least. part_out (B, TOKENS, Hq, splits, D) gets the part's output divided by its
    own denominator, part_lse (B, TOKENS, Hq, splits) its log-sum-exp (natural log) of the
    scaled scores: 0 and -inf for a row that sees no key of the part."""
    s, b, g = tile.bid(0), tile.bid(1), tile.bid(2)
    tiles_per_page = PAGE // BN
    # keys past the block table's pages have no page: they are not attended
    seq = min(tile.load(seq_lens, index=(b,), shape=()), block_table.shape[1] * PAGE)
    tiles = (seq + BN - 1) // BN
    first = s * tiles // tile.num_blocks(0)
    last = (s + 1) * tiles // tile.num_blocks(0)
    scale2 = scale * LOG2E  # exp(x * scale) == exp2(x * scale2)
    qt = tile.load(q, index=(b, 0, g, 0), shape=(1, TOKENS, GROUP, D)).reshape((TOKENS * GROUP, D))
    if ROWS > TOKENS * GROUP:
        qt = tile.cat((qt, tile.zeros((ROWS - TOKENS * GROUP, D), q.dtype)), 0)
    # one column per query row (the scores are transposed, keys down the rows); row r is
    # token r // GROUP, which sees the keys before `visible` (padding rows: every key)
    visible = seq - TOKENS + 1 + tile.arange(ROWS).reshape((1, ROWS)) // GROUP
    m_i = tile.full((1, ROWS), -math.inf, vg.float32)
    l_i = tile.zeros((1, ROWS), vg.float32)
    acc = tile.zeros((D, ROWS), vg.float32)
    for t in range(first, last):
        page = tile.load(block_table, index=(b, t // tiles_per_page), shape=())
        kt = tile.load(k_cache, index=(page, t % tiles_per_page, g), shape=(1, BN, D)).reshape((BN, D))
        vt = tile.load(v_cache, index=(page, t % tiles_per_page, g), shape=(1, BN, D)).reshape((BN, D))
        st = tile.dot(kt, qt.T)
        if (t + 1) * BN > seq - TOKENS + 1:  # keys past the first token's own: masked
            keys = t * BN + tile.arange(BN).reshape((BN, 1))
            st = tile.where((keys < visible) & (keys < seq), st, -math.inf)
        m_new = tile.maximum(m_i, tile.max(st, axis=0, keepdims=True) * scale2)
        # a row that has seen no key yet stays at -inf: its exponents count from 0 instead
        shift = tile.where(m_new == -math.inf, 0.0, m_new)
        pt = tile.exp2(st * scale2 - shift)
        alpha = tile.exp2(m_i - shift)
        l_i = l_i * alpha + tile.sum(pt, axis=0, keepdims=True)
        acc = tile.mma(vt.T, pt.astype(v_cache.dtype), acc * alpha)
        m_i = m_new
    out = tile.where(l_i > 0, acc * (1.0 / l_i), 0.0).T  # a row without keys: l_i is 0
    tile.store(part_out, index=(b, 0, g, s, 0),
               tile=out[0:TOKENS * GROUP].reshape((1, TOKENS, GROUP, 1, D)))
    # m_i and log2(l_i) count powers of two: the natural log-sum-exp is their sum times ln 2
    lse = ((m_i + tile.log2(l_i)) * LN2).T
    tile.store(part_lse, index=(b, 0, g, s), tile=lse[0:TOKENS * GROUP].reshape((1, TOKENS, GROUP, 1)))


@tile.kernel
def decode_combine(part_out, part_lse, out, SPLITS: vg.constexpr = 1, D: vg.constexpr = 128):
    """out[b, j, h] = the parts of (b, j, h) merged by their log-sum-exp (block (h, j, b)),
    in float32, rounded once; 0 where no part has a key for it."""
    h, j, b = tile.bid(0), tile.bid(1), tile.bid(2)
    lse = tile.load(part_lse, index=(b, j, h, 0), shape=(1, 1, 1, SPLITS)).reshape((SPLITS, 1))
    top = tile.max(lse, axis=0, keepdims=True)
    top = tile.where(top == -math.inf, 0.0, top)  # every part empty: every weight 0
    weights = tile.exp2((lse - top) * LOG2E)
    parts = tile.load(part_out, index=(b, j, h, 0, 0), shape=(1, 1, 1, SPLITS, D)).reshape((SPLITS, D))
    total = tile.sum(weights, axis=0, keepdims=True)
    merged = tile.where(total > 0, tile.sum(parts * weights, axis=0, keepdims=True) / total, 0.0)
    tile.store(out, index=(b, j, h, 0), tile=merged.astype(out.dtype).reshape((1, 1, 1, D)))


def decode_splits(batch: int, kv_heads: int, max_seq_len: int, multiprocessors: int) -> int:
    """How many parts `decode_split` cuts each sequence into: enough blocks for WAVES waves
    of `multiprocessors`, but no part shorter than MIN_SPLIT_KEYS keys (1 on the cpu
    backend: multiprocessors 0)."""
    blocks = batch * kv_heads
    if not blocks or blocks >= WAVES * multiprocessors:
        return 1
    return max(1, min(vg.cdiv(WAVES * multiprocessors, blocks), max_seq_len // MIN_SPLIT_KEYS))


def partial_shapes(q_shape: tuple, splits: int) -> tuple:
    """The shapes of `part_out` and `part_lse` (both float32) for queries of `q_shape`
    ((B, Hq, D) or (B, tokens, Hq, D)) in `splits` parts."""
    batch, *tokens, q_heads, head_dim = q_shape
    rows = (batch, tokens[0] if tokens else 1, q_heads, splits)
    return (*rows, head_dim), rows


def with_tokens(a):
    """a (B, Hq, D) as (B, 1, Hq, D), a view of the same memory (NumPy and torch views
    always; a verdigris array's reshape is a view or an error); (B, tokens, Hq, D) as it is."""
    if a.ndim == 4:
        return a
    return a.reshape(a.shape[0], 1, *a.shape[1:]) if isinstance(a, vg.Array) else a[:, None]


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, out, part_out, part_lse, scale,
                     key_tile: int = KEY_TILE, **launch):
    """out = softmax(q K^T * scale) V per sequence, query token and head, over the paged
    caches (`docs/decode.md`): `decode_split` on part_out.shape[-2] parts, then
    `decode_combine`. q and out are (B, Hq, D), or (B, tokens, Hq, D) for several query
    tokens, the last `tokens` of each sequence (each seeing the keys up to its own).
    key_tile: the keys of one step (the page where it is smaller; it must divide the page);
    launch: the split kernel's launch options (num_warps)."""
    num_blocks, page, kv_heads, d = k_cache.shape
    q, out = with_tokens(q), with_tokens(out)
    batch, tokens, q_heads = q.shape[:3]
    if q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads do not form groups over {kv_heads} KV heads")
    tile_keys = min(key_tile, page)
    if page % tile_keys:
        raise ValueError(f"a key tile of {tile_keys} does not divide the page of {page}")
    group = q_heads // kv_heads
    splits = part_out.shape[-2]
    decode_split[splits, batch, kv_heads](
        q, k_cache.reshape(num_blocks, page, kv_heads * d), v_cache.reshape(num_blocks, page, kv_heads * d),
        block_table, seq_lens, part_out, part_lse, scale, TOKENS=tokens, GROUP=group,
        ROWS=max(PRODUCT_ROWS, tokens * group), PAGE=page, BN=tile_keys, D=d, **launch)
    decode_combine[q_heads, tokens, batch](part_out, part_lse, out, SPLITS=splits, D=d)


def reference(q, k_cache, v_cache, block_table, seq_lens, scale: float) -> np.ndarray:
    """The attention of every sequence's query tokens over its gathered keys and values
    (each token the keys up to its own position), float64, in q's shape."""
    q4 = with_tokens(q)
    batch, tokens, q_heads, d = q4.shape
    page, kv_heads = k_cache.shape[1:3]
    group = q_heads // kv_heads
    out = np.zeros(q4.shape)
    for b in range(batch):
        n = min(int(seq_lens[b]), block_table.shape[1] * page)
        pages = block_table[b, :vg.cdiv(n, page)]
        keys = k_cache[pages].reshape(-1, kv_heads, d)[:n].astype(np.float64)
        values = v_cache[pages].reshape(-1, kv_heads, d)[:n].astype(np.float64)
        for j in range(tokens):
            seen = n - tokens + 1 + j  # the keys before this token's own, and it
            if seen <= 0:
                continue
            for h in range(q_heads):
                s = keys[:seen, h // group] @ q4[b, j, h].astype(np.float64) * scale
                p = np.exp(s - s.max())
                out[b, j, h] = p @ values[:seen, h // group] / p.sum()
    return out.reshape(q.shape)


def paged_inputs(rng, batch: int, q_heads: int, kv_heads: int, d: int, page: int, seq_lens,
                 dtype_name: str, tokens: int | None = None, spare_pages: int = 3) -> tuple:
    """Random q ((batch, q_heads, d), or (batch, tokens, q_heads, d)) and caches of a dtype,
    and a block table of shuffled pages (each sequence its own, in random order; entries
    past a sequence's pages are -1, never read), with `spare_pages` pages no sequence uses."""
    max_pages = max(vg.cdiv(int(n), page) for n in seq_lens) or 1
    used = [vg.cdiv(int(n), page) for n in seq_lens]
    num_blocks = sum(used) + spare_pages
    order = rng.permutation(num_blocks)
    block_table = np.full((batch, max_pages), -1, np.int32)
    start = 0
    for b, n in enumerate(used):
        block_table[b, :n] = order[start:start + n]
        start += n
    q = _narrow(rng, (batch, *([tokens] if tokens else []), q_heads, d), dtype_name)[0]
    k_cache, v_cache = (_narrow(rng, (num_blocks, page, kv_heads, d), dtype_name)[0] for _ in range(2))
    return q, k_cache, v_cache, block_table, np.asarray(seq_lens, np.int32)


def run_decode(q, k_cache, v_cache, block_table, seq_lens, scale, splits, out_dtype=np.float32,
               **options) -> np.ndarray:
    """The output of `decode_attention` on the current backend, every output NaN first."""
    out = np.full(q.shape, np.nan, out_dtype)
    part_out, part_lse = (np.full(shape, np.nan, np.float32) for shape in partial_shapes(q.shape, splits))
    return on_backend(decode_attention, q, k_cache, v_cache, block_table, seq_lens, out, part_out,
                      part_lse, scale, **options)[5]


def check(rng, d=64, page=16, seq_lens=(1, 37, 64, 100)) -> list:
    """bf16 (else float16) paged decode attention, GQA groups of 1, 4 and 8, ragged
    sequences (a single token, lengths no multiple of the page), one query token and 3, in
    3 parts, against float64."""
    dtype = "bfloat16" if available("bfloat16") else "float16"
    results = []
    for q_heads, kv_heads, tokens in ((2, 2, None), (8, 2, None), (8, 1, None), (8, 2, 3)):
        inputs = paged_inputs(rng, len(seq_lens), q_heads, kv_heads, d, page, seq_lens, dtype, tokens)
        scale = 1 / math.sqrt(d)
        got = run_decode(*inputs, scale, splits=3)
        # the probabilities are rounded to the cache's dtype before they multiply V
        results.append(Result(f"decode attention {dtype} Hq={q_heads} Hkv={kv_heads} "
                              f"{tokens or 1} token(s)", got, reference(*inputs, scale), 5e-3))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
