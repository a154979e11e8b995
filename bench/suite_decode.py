"""`verdigris bench` cases for decode (serving) kernels, issue #29 part 3: paged decode
attention and GEMV, both memory-bound, compared with the copy roofline.

Decode attention: Llama-3 8B's heads (32 query heads, 8 KV heads: groups of 4, head dim
128), bfloat16, one query token per sequence, every sequence CONTEXT keys long, over a
paged cache of PAGE-token pages shuffled in the pool (PAGE = 256, the page FlashAttention's
paged cache takes). Sizes (batch, context) for batch in {1, 16, 64, 256} and context in
{1k, 8k, 32k, 128k} where K and V fit KV_BUDGET (256 sequences of 128k keys would be
137 GB: the larger batches stop at 32k and 8k). Ours is `tile_decode_attention.
decode_attention` in the configurations of DECODE_CONFIGS (key tile, warps, and the split
count `decode_splits` picks for the GPU, or twice it); the peers are torch (what a user
without a paged kernel writes: the pages gathered through the block table, then
scaled_dot_product_attention with enable_gqa, in one call) and FlashAttention's
`flash_attn_with_kvcache` with the block table, where flash_attn is installed. Bytes per
call: the K and V read, plus q and the output (the block table and the split kernel's
float32 partials are not counted).

GEMV: y = x @ w.T, bfloat16, M in {1, 4, 16} rows at Llama-3 8B's (N, K) shapes
((4096, 4096) attention out, (14336, 4096) MLP up/gate, (4096, 14336) MLP down, (6144, 4096)
fused QKV). Ours is `tile_gemv.gemv` (the swapped product y^T = w @ x^T) in the tiles and
split counts of GEMV_CONFIGS; the peer torch.matmul (cuBLAS). Bytes per call: w, x and y.

Every implementation is checked before it is timed: relative Frobenius error at most 1e-2
against float32 (attention: float32 SDPA per sequence on its gathered keys and values).
Needs torch.
"""
from __future__ import annotations

import math

from verdigris.benchsuite import case, checked, has, returning

RTOL = 1e-2
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Llama-3 8B
PAGE = 256
KV_BUDGET = 8 << 30  # bytes of K and V one size may hold
KV_BYTES_PER_TOKEN = 2 * KV_HEADS * HEAD_DIM * 2  # K and V, bfloat16
DECODE_SIZES = [(batch, context) for batch in (1, 16, 64, 256) for context in (1024, 8192, 32768, 131072)
                if batch * context * KV_BYTES_PER_TOKEN <= KV_BUDGET]
# (key tile, warps, split count as a multiple of decode_splits')
DECODE_CONFIGS = [(64, 4, 1), (128, 4, 1), (128, 8, 1), (64, 4, 2)]
LLAMA3_8B = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
GEMV_SIZES = [(m, n, k) for m in (1, 4, 16) for n, k in LLAMA3_8B]
# (rows of w per tile, k per step, split-K: the heuristic's parts or none)
GEMV_CONFIGS = [(128, 64, True), (128, 64, False), (64, 64, True), (128, 128, True)]


def _decode_label(size) -> str:
    batch, context = size
    return f"B{batch} x {context // 1024}k"


def _decode_bytes(size) -> int:
    batch, context = size
    return batch * context * KV_BYTES_PER_TOKEN + 2 * batch * Q_HEADS * HEAD_DIM * 2


def _float32_reference(q, k_cache, v_cache, table, context, scale):
    """Float32 SDPA of each sequence over its gathered keys and values (one at a time: the
    whole batch in float32 would double the cache)."""
    import torch
    import torch.nn.functional as F

    out = torch.empty(q.shape, device="cuda")
    for b in range(q.shape[0]):
        k, v = (c[table[b].long()].reshape(context, KV_HEADS, HEAD_DIM).transpose(0, 1).float()
                .repeat_interleave(Q_HEADS // KV_HEADS, 0) for c in (k_cache, v_cache))
        out[b] = F.scaled_dot_product_attention(q[b, :, None].float(), k, v, scale=scale)[:, 0]
    return out


@case("decode attention paged bf16", kind="memory", sizes=DECODE_SIZES,
      quick=[(1, 8192), (64, 8192)], work=_decode_bytes, requires=["torch"], plot="decode",
      size_label=_decode_label)
def bench_decode_attention(size):
    import torch
    import torch.nn.functional as F

    from verdigris.examples.tile_decode_attention import decode_attention, decode_splits, partial_shapes

    batch, context = size
    pages = context // PAGE
    scale = 1 / math.sqrt(HEAD_DIM)
    q = torch.randn(batch, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = (torch.randn(batch * pages, PAGE, KV_HEADS, HEAD_DIM, device="cuda",
                                    dtype=torch.bfloat16) for _ in range(2))
    table = torch.randperm(batch * pages, device="cuda").to(torch.int32).view(batch, pages)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    want = _float32_reference(q, k_cache, v_cache, table, context, scale)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    heuristic = decode_splits(batch, KV_HEADS, context, sms)

    def ours(key_tile, warps, splits):
        part_out, part_lse = (torch.empty(shape, device="cuda")
                              for shape in partial_shapes(q.shape, splits))
        return checked(lambda: decode_attention(q, k_cache, v_cache, table, seq_lens, out, part_out,
                                                part_lse, scale, key_tile=key_tile, num_warps=warps),
                       out, want, RTOL)

    def gathered_sdpa():  # the pages gathered into (batch, KV heads, context, head dim)
        k, v = (c[table].view(batch, context, KV_HEADS, HEAD_DIM).transpose(1, 2) for c in (k_cache, v_cache))
        return F.scaled_dot_product_attention(q[:, :, None], k, v, scale=scale, enable_gqa=True)[:, :, 0]

    impls = {
        "verdigris": {f"{key_tile} keys, {warps} warps, {heuristic * times} parts":
                      ours(key_tile, warps, heuristic * times)
                      for key_tile, warps, times in DECODE_CONFIGS},
        "torch": returning(gathered_sdpa, want, RTOL),
    }
    if has("flash_attn"):
        from flash_attn import flash_attn_with_kvcache

        impls["flash_attn"] = returning(
            lambda: flash_attn_with_kvcache(q[:, None], k_cache, v_cache, cache_seqlens=seq_lens,
                                            block_table=table, softmax_scale=scale)[:, 0], want, RTOL)
    return impls


def _gemv_label(size) -> str:
    m, n, k = size
    return f"M{m} {n}x{k}"


@case("GEMV bf16", kind="memory", sizes=GEMV_SIZES, quick=[(1, 4096, 14336), (16, 4096, 4096)],
      work=lambda s: 2 * (s[1] * s[2] + s[0] * s[2] + s[0] * s[1]), requires=["torch"], plot="decode",
      size_label=_gemv_label)
def bench_gemv(size):
    import torch

    from verdigris.examples.tile_gemv import MAX_ROWS, gemv, gemv_workspace

    m, n, k = size
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    want = x.float() @ w.float().T
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def ours(rows, k_step, split):
        tiles = dict(BM=rows, BN=MAX_ROWS, BK=k_step)
        shape = gemv_workspace(m, n, k, sms, tiles) if split else None
        workspace = None if shape is None else torch.empty(shape, device="cuda")
        label = f"{rows}x{k_step} tiles, " + (f"{shape[0] // (math.ceil(n / rows) * rows)} parts"
                                              if shape else "one kernel")
        return label, checked(lambda: gemv(x, w, y, tiles, workspace), y, want, RTOL)

    return {"verdigris": dict(ours(*config) for config in GEMV_CONFIGS),
            "torch": checked(lambda: torch.matmul(x, w.T, out=y), y, want, RTOL)}
