"""Decode kernels on the GPU (issue #29 part 3), with CUDA tensors: paged decode attention
(`examples.tile_decode_attention`) against torch's scaled_dot_product_attention in float32
over each sequence's gathered keys and values (GQA groups of 1, 4 and 8, pages of 16 and
256 shuffled in the pool, ragged lengths from 1 token up, the split count the heuristic
picks for this GPU and one part; several query tokens per sequence against SDPA with the
causal mask aligned to the end), and GEMV (`examples.tile_gemv`) against torch.matmul in
float32, for M = 1, 4, 16 at Llama-3 8B shapes, in one kernel and split-K; a product of
tiles at indices read in its loop (the key and value tiles' streaming at their pages,
alone). Outputs are NaN first; errors are relative Frobenius norms. The examples' own
checks (cpu sizes, float64 references) run here too. The cpu backend: tests/test_decode.py."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

F = torch.nn.functional
# the probabilities are rounded to bfloat16 before they multiply V (SDPA's flash backend
# rounds them too); the output is rounded once
ATTENTION_TOLERANCE = 1e-2
GEMV_TOLERANCE = 4e-3  # one rounding to bfloat16 over float32 sums


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def paged(batch, q_heads, kv_heads, d, page, seq_lens, generator):
    """q, the caches (a shuffled pool with spare pages), the block table and seq_lens, bf16."""
    pages = [math.ceil(n / page) for n in seq_lens]
    max_pages, num_blocks = max(pages), sum(pages) + 5
    order = torch.randperm(num_blocks, device="cuda", generator=generator).to(torch.int32)
    table = torch.full((batch, max_pages), -1, dtype=torch.int32, device="cuda")
    start = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[start:start + n]
        start += n
    q = torch.randn(batch, q_heads, d, device="cuda", generator=generator, dtype=torch.bfloat16)
    k_cache, v_cache = (torch.randn(num_blocks, page, kv_heads, d, device="cuda", generator=generator,
                                    dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    return q, k_cache, v_cache, table, lens


def sdpa_reference(q, k_cache, v_cache, table, seq_lens, scale):
    """Each sequence's keys and values gathered through its pages, KV heads repeated over
    their groups, float32 SDPA."""
    batch, q_heads, d = q.shape
    page, kv_heads = k_cache.shape[1:3]
    out = torch.empty(q.shape, dtype=torch.float32, device="cuda")
    for b, n in enumerate(seq_lens.tolist()):
        pages = table[b, :math.ceil(n / page)].long()
        k, v = (c[pages].reshape(-1, kv_heads, d)[:n].transpose(0, 1).float()
                .repeat_interleave(q_heads // kv_heads, 0) for c in (k_cache, v_cache))
        out[b] = F.scaled_dot_product_attention(q[b, :, None].float(), k, v, scale=scale)[:, 0]
    return out


def decode(q, k_cache, v_cache, table, lens, splits, **options):
    from verdigris.examples.tile_decode_attention import decode_attention, partial_shapes

    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device="cuda")
    part_out, part_lse = (torch.full(shape, float("nan"), device="cuda") for shape in partial_shapes(q.shape, splits))
    decode_attention(q, k_cache, v_cache, table, lens, out, part_out, part_lse, 1 / math.sqrt(q.shape[-1]),
                     **options)
    return out


@pytest.mark.parametrize("q_heads, kv_heads", [(8, 8), (32, 8), (64, 8)], ids=["mha", "gqa4", "gqa8"])
@pytest.mark.parametrize("page", [16, 256])
@pytest.mark.parametrize("d", [64, 128])
def test_paged_decode_attention_against_sdpa(q_heads, kv_heads, page, d):
    from verdigris.examples.tile_decode_attention import decode_splits

    g = torch.Generator(device="cuda").manual_seed(q_heads * 7 + page + d)
    seq_lens = [1, 100, 4096, 3001]
    inputs = paged(len(seq_lens), q_heads, kv_heads, d, page, seq_lens, g)
    want = sdpa_reference(*inputs, 1 / math.sqrt(d))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for splits in (1, decode_splits(len(seq_lens), kv_heads, max(seq_lens), sms)):
        got = decode(*inputs, splits)
        assert torch.isfinite(got).all()
        assert rel_err(got, want) < ATTENTION_TOLERANCE, f"{splits} parts"


def test_several_query_tokens_against_causal_sdpa():
    """4 query tokens per sequence (speculative decoding), groups of 4: each token sees the
    keys up to its own position, as SDPA's causal mask aligned to the end (the keys' last
    4 are the tokens' own)."""
    g = torch.Generator(device="cuda").manual_seed(4)
    batch, tokens, q_heads, kv_heads, d = 3, 4, 32, 8, 128
    seq_lens = [4, 1000, 2049]
    q, k_cache, v_cache, table, lens = paged(batch, q_heads, kv_heads, d, 16, seq_lens, g)
    q = torch.randn(batch, tokens, q_heads, d, device="cuda", generator=g, dtype=torch.bfloat16)
    want = torch.empty(q.shape, device="cuda")
    for b, n in enumerate(seq_lens):
        pages = table[b, :math.ceil(n / 16)].long()
        k, v = (c[pages].reshape(-1, kv_heads, d)[:n].transpose(0, 1).float()
                .repeat_interleave(q_heads // kv_heads, 0) for c in (k_cache, v_cache))
        mask = torch.arange(n, device="cuda")[None] <= torch.arange(n - tokens, n, device="cuda")[:, None]
        want[b] = F.scaled_dot_product_attention(q[b].transpose(0, 1).float(), k, v, attn_mask=mask,
                                                 scale=1 / math.sqrt(d)).transpose(0, 1)
    for splits in (1, 6):
        assert rel_err(decode(q, k_cache, v_cache, table, lens, splits), want) < ATTENTION_TOLERANCE


@pytest.mark.parametrize("num_warps", [4, 8])
def test_the_bench_configurations_agree(num_warps):
    """Key tiles of 64 and 128 (the benchmark's), on 4 and 8 warps, batch 16 at 8k keys."""
    g = torch.Generator(device="cuda").manual_seed(num_warps)
    inputs = paged(16, 32, 8, 128, 256, [8192] * 15 + [77], g)
    want = sdpa_reference(*inputs, 1 / math.sqrt(128))
    for key_tile in (64, 128):
        assert rel_err(decode(*inputs, 4, key_tile=key_tile, num_warps=num_warps), want) < ATTENTION_TOLERANCE


@pytest.mark.parametrize("m", [1, 4, 16])
@pytest.mark.parametrize("n, k", [(4096, 4096), (14336, 4096), (4096, 14336)])
def test_gemv_against_torch(m, n, k):
    from verdigris.examples.tile_gemv import gemv, gemv_workspace

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16)
    want = x.float() @ w.float().T
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shape = gemv_workspace(m, n, k, sms)
    for workspace in (None, None if shape is None else torch.empty(shape, device="cuda")):
        y = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        gemv(x, w, y, workspace=workspace)
        assert rel_err(y, want) < GEMV_TOLERANCE


def test_a_product_of_tiles_listed_in_memory():
    """The stream's index prefix alone (tests/test_decode.py): operand tiles at indices read
    in the loop, 9 of them, more than the stages, so that stages are refilled ahead."""
    from test_decode import listed_tiles_inputs, product_of_listed_tiles

    from verdigris.examples import on_backend

    a, b, order, want = listed_tiles_inputs(np.random.default_rng(), tiles=9)
    c = np.full((64, 64), np.nan, np.float32)
    c = on_backend(product_of_listed_tiles[1], a, b, order, c, BM=64, BN=64, BK=64)[3]
    assert np.abs(c - want).max() < 1e-5 * np.abs(want).max()


def test_the_examples_check_themselves_on_the_gpu():
    from verdigris.examples import tile_decode_attention, tile_gemv

    rng = np.random.default_rng()
    for module in (tile_decode_attention, tile_gemv):
        for r in module.check(rng):
            assert r.ok, f"{r.name}: error {r.error:.3e} over tolerance {r.rtol:.0e}"
