"""Decode kernels (issue #29 part 3) on the cpu backend: paged flash-decoding attention
(`examples.tile_decode_attention`) against float64 NumPy over shuffled pages, GQA groups of 1,
4 and 8 query heads per KV head, ragged sequences (one token, lengths no multiple of the page,
shorter than the splits), several query tokens per sequence (causal among them), key tiles
smaller than the page, one part and more parts than tiles, a sequence of length 0, sequences longer than their block table, a page outside the
pool; GEMV (`examples.tile_gemv`) for M = 1 ... 16 in one kernel and split-K. Every output
is NaN first. Beside them the racy twin of the split kernel (every part storing into one
slot), refused, while the kernels are proven; a product of operand tiles at indices read
from memory in its loop (as the pages are), streamed ahead (TMA, cp.async) unless the kernel
writes the index array; and the kernels' PTX for sm_80 and sm_90a at the benchmarks'
specializations, assembled by ptxas. The GPU: tests/gpu/test_decode_gpu.py."""
import math
import re

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples import tile_decode_attention as da
from verdigris.examples import tile_gemv
from verdigris.examples.tile_gemm import gemm, workspace_shape
from verdigris.ir import ArrayType

from test_tile_mma import _ptxas_report

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
# relative to the reference's largest value: the probabilities are rounded to the cache's
# dtype before they multiply V, and the output is float32
TOLERANCE = {"float16": 2e-3, "bfloat16": 8e-3}


def storage(name):
    return np.dtype(np.float16) if name == "float16" else np.dtype(vg.bfloat16)


def relative_error(got, want) -> float:
    assert np.isfinite(got).all(), "NaN left in the output"
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("q_heads, kv_heads", [(3, 3), (8, 2), (16, 2)], ids=["mha", "gqa4", "gqa8"])
def test_paged_attention_matches_float64(rng, name, q_heads, kv_heads):
    seq_lens = (1, 13, 48, 70)  # one token; 13 and 70 no multiple of the page (16)
    inputs = da.paged_inputs(rng, len(seq_lens), q_heads, kv_heads, 32, 16, seq_lens, name)
    got = da.run_decode(*inputs, 0.2, splits=3)
    assert relative_error(got, da.reference(*inputs, 0.2)) < TOLERANCE[name]


@pytest.mark.parametrize("page, key_tile, splits", [(16, 8, 5), (8, 8, 1), (32, 16, 7)])
def test_key_tiles_within_pages_and_split_counts(rng, page, key_tile, splits):
    """Several key tiles per page; one part; more parts than a short sequence has tiles
    (its empty parts write 0 and -inf, which the merge weighs 0)."""
    seq_lens = (5, 33, 100)
    inputs = da.paged_inputs(rng, len(seq_lens), 8, 2, 16, page, seq_lens, "float16")
    got = da.run_decode(*inputs, 0.25, splits=splits, key_tile=key_tile)
    assert relative_error(got, da.reference(*inputs, 0.25)) < TOLERANCE["float16"]


def test_output_in_the_inputs_dtype_and_the_parts(rng):
    """A bfloat16 output is the float32 merge rounded once; the parts and their log-sum-exp
    are each part's own softmax over its keys."""
    seq_lens, d, splits = (40, 9), 16, 2
    inputs = q, k_cache, v_cache, table, lens = da.paged_inputs(rng, 2, 4, 4, d, 8, seq_lens, "bfloat16")
    got = da.run_decode(*inputs, 0.3, splits=splits, out_dtype=vg.bfloat16)
    want = da.reference(*inputs, 0.3)
    assert got.dtype == vg.bfloat16 and relative_error(got, want) < TOLERANCE["bfloat16"]
    part_out, part_lse = (np.full(s, np.nan, np.float32) for s in da.partial_shapes(q.shape, splits))
    da.decode_attention(q, k_cache, v_cache, table, lens, np.empty(q.shape, np.float32), part_out,
                        part_lse, 0.3)
    # sequence 0: 5 tiles of 8 keys, parts of 2 and 3 tiles
    keys = k_cache[table[0, :5]].reshape(-1, 4, d)[:40].astype(np.float64)
    for h in range(4):
        s = keys[:, h] @ q[0, h].astype(np.float64) * 0.3
        for part, (lo, hi) in enumerate(((0, 16), (16, 40))):
            top = s[lo:hi].max()
            assert abs(part_lse[0, 0, h, part] - (top + np.log(np.exp(s[lo:hi] - top).sum()))) < 1e-4
    # sequence 1: 2 tiles, one per part
    assert np.isfinite(part_lse[1]).all()


@pytest.mark.parametrize("tokens, key_tile", [(4, 16), (3, 8)])
def test_several_query_tokens_each_seeing_the_keys_up_to_its_own(rng, tokens, key_tile):
    """The last `tokens` positions of each sequence: a sequence shorter than them (its first
    tokens see no key: 0), a last key tile that the first token sees none of (97 keys in
    tiles of 16, 4 tokens: token 0 sees keys 0 ... 93) alone in its part (13 parts: one
    tile each at most), groups of 4 (tokens x group rows: 16 and 12)."""
    seq_lens = (2, 97, 40)
    inputs = da.paged_inputs(rng, len(seq_lens), 8, 2, 16, 16, seq_lens, "float16", tokens)
    got = da.run_decode(*inputs, 0.25, splits=13, key_tile=key_tile)
    want = da.reference(*inputs, 0.25)
    assert got.shape == (3, tokens, 8, 16)
    assert np.array_equal(got[0, :tokens - 2], np.zeros_like(got[0, :tokens - 2]))
    assert relative_error(got, want) < TOLERANCE["float16"]


def test_empty_sequences_long_sequences_and_pages_outside_the_pool(rng):
    """A sequence of length 0 gives 0; keys past the block table's pages are not attended;
    a table entry outside the pool reads no memory: its keys and values read as zeros."""
    seq_lens = (0, 20, 24)
    q, k_cache, v_cache, table, lens = da.paged_inputs(rng, 3, 4, 2, 16, 8, seq_lens, "float16")
    got = da.run_decode(q, k_cache, v_cache, table, np.array([0, 20, 1000], np.int32), 0.5, splits=4)
    assert np.array_equal(got[0], np.zeros_like(got[0]))
    assert relative_error(got[1:], da.reference(q, k_cache, v_cache, table, lens, 0.5)[1:]) < 2e-3
    outside = table.copy()
    outside[1, 1] = k_cache.shape[0] + 7  # tokens 8 ... 15 of sequence 1
    got = da.run_decode(q, k_cache, v_cache, outside, lens, 0.5, splits=2)
    zeroed = [np.concatenate([c, np.zeros((1,) + c.shape[1:], c.dtype)]) for c in (k_cache, v_cache)]
    outside[1, 1] = k_cache.shape[0]  # the zero page appended
    assert relative_error(got[1], da.reference(q, *zeroed, outside, lens, 0.5)[1]) < 2e-3


def test_the_same_bits_from_run_to_run(rng):
    inputs = da.paged_inputs(rng, 2, 8, 2, 16, 8, (30, 61), "bfloat16")
    first, again = (da.run_decode(*inputs, 0.25, splits=3) for _ in range(2))
    assert np.array_equal(first.view(np.uint8), again.view(np.uint8))


def test_group_and_head_count_checks(rng):
    inputs = da.paged_inputs(rng, 1, 6, 4, 16, 8, (9,), "float16")
    with pytest.raises(ValueError, match="6 query heads do not form groups over 4 KV heads"):
        da.run_decode(*inputs, 0.25, splits=1)
    inputs = da.paged_inputs(rng, 1, 4, 2, 16, 24, (9,), "float16")
    with pytest.raises(ValueError, match="a key tile of 16 does not divide the page of 24"):
        da.run_decode(*inputs, 0.25, splits=1, key_tile=16)


def test_split_counts():
    assert da.decode_splits(1, 8, 131072, 132) == 33  # two waves of 132 multiprocessors
    assert da.decode_splits(1, 8, 1024, 132) == 4  # no part shorter than 256 keys
    assert da.decode_splits(64, 8, 32768, 132) == 1  # 512 blocks fill two waves already
    assert da.decode_splits(4, 8, 100, 132) == 1
    assert da.decode_splits(4, 8, 1 << 20, 0) == 1  # the cpu backend


# Every part of a sequence storing its result in slot 0: the parts of one (sequence, KV
# head) race (the racy twin of `decode_split`, which stores part s in slot s)

@tile.kernel
def parts_into_one_slot(k_cache, block_table, part_lse, BN: vg.constexpr):
    s, b = tile.bid(0), tile.bid(1)
    page = tile.load(block_table, index=(b, s), shape=())
    kt = tile.load(k_cache, index=(page, 0), shape=(1, BN))
    tile.store(part_lse, index=(b, 0), tile=tile.max(kt, axis=1, keepdims=True))  # slot 0 for every part


def test_parts_storing_into_one_slot_are_refused(rng):
    k_cache = rng.standard_normal((6, 8)).astype(np.float32)
    table = rng.permutation(6).reshape(2, 3).astype(np.int32)
    with pytest.raises(vg.SafetyError) as info:
        parts_into_one_slot[3, 2](k_cache, table, np.full((2, 3), np.nan, np.float32), BN=8)
    assert info.value.code == "VG202" and "part_lse" in str(info.value)
    located.assert_points_at(info.value, "# slot 0 for every part", __file__)


def test_the_decode_kernels_are_proven():
    from verdigris.safety.scan import check_paths

    report = check_paths([da.__file__, tile_gemv.__file__])
    assert report.status == 0, report.format()
    verdicts = dict(re.findall(r"kernel '(\w+)': (\w+)", report.format()))
    assert verdicts == {"decode_split": "proven", "decode_combine": "proven"}


# ----------------------------------------------------------------------------- GEMV


@pytest.mark.parametrize("m", [1, 7, 16])
@pytest.mark.parametrize("parts", [1, 4])
def test_gemv_matches_float64(rng, m, parts):
    n, k = 136, 520
    x = rng.standard_normal((m, k)).astype(vg.bfloat16)
    w = rng.standard_normal((n, k)).astype(vg.bfloat16)
    y = np.full((m, n), np.nan, vg.bfloat16)
    tiles = dict(tile_gemv.GEMV_TILES, BM=64)
    workspace = None if parts == 1 else np.full(workspace_shape(n, m, parts, tiles), np.nan, np.float32)
    tile_gemv.gemv(x, w, y, tiles, workspace)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    assert relative_error(y, want) < 4e-3  # one rounding to bfloat16


def test_gemv_workspace_and_row_limit(rng):
    assert tile_gemv.gemv_workspace(1, 4096, 4096, 132) == workspace_shape(4096, 1, 8, tile_gemv.GEMV_TILES)
    assert tile_gemv.gemv_workspace(16, 14336, 4096, 132) == workspace_shape(14336, 16, 3, tile_gemv.GEMV_TILES)
    assert tile_gemv.gemv_workspace(16, 4096, 4096, 0) is None
    x = np.zeros((17, 64), np.float16)
    with pytest.raises(ValueError, match="at most 16 rows"):
        tile_gemv.gemv(x, np.zeros((64, 64), np.float16), np.zeros((17, 64), np.float16))


# ----------------------------------------------------------------------------- streaming
# A product's operand tiles at an index read from memory in the loop (a page of the block
# table): the stream computes the index for the iteration it copies ahead.

@tile.kernel
def product_of_listed_tiles(a, b, tiles, c, BM: vg.constexpr, BN: vg.constexpr, BK: vg.constexpr):
    """c = sum over k of a's column tile tiles[k] times b's row tile tiles[k]: a @ b, for
    a list that holds every tile once."""
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(tiles.shape[0]):
        listed = tile.load(tiles, index=(k,), shape=())
        acc = tile.mma(tile.load(a, index=(0, listed), shape=(BM, BK)),
                       tile.load(b, index=(listed, 0), shape=(BK, BN)), acc)
    tile.store(c, index=(0, 0), tile=acc)


@tile.kernel
def product_of_listed_tiles_relisted(a, b, tiles, c, BM: vg.constexpr, BN: vg.constexpr,
                                     BK: vg.constexpr):
    """The same, but each step copies its entry into the next one: not streamed (a copy
    running ahead would read the next entry before the step rewrites it)."""
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(tiles.shape[0]):
        listed = tile.load(tiles, index=(k,), shape=())
        acc = tile.mma(tile.load(a, index=(0, listed), shape=(BM, BK)),
                       tile.load(b, index=(listed, 0), shape=(BK, BN)), acc)
        tile.store(tiles, index=(k + 1,), tile=tile.full((1,), listed, vg.int32))
    tile.store(c, index=(0, 0), tile=acc)


def listed_tiles_inputs(rng, tiles=5, size=64):
    a = rng.standard_normal((size, tiles * size)).astype(vg.bfloat16)
    b = rng.standard_normal((tiles * size, size)).astype(vg.bfloat16)
    order = rng.permutation(tiles).astype(np.int32)
    return a, b, order, a.astype(np.float64) @ b.astype(np.float64)


def test_a_product_of_tiles_listed_in_memory(rng):
    a, b, order, want = listed_tiles_inputs(rng)
    c = np.full((64, 64), np.nan, np.float32)
    product_of_listed_tiles[1](a, b, order, c, BM=64, BN=64, BK=64)
    assert relative_error(c, want) < 1e-5


def _listed(kernel, unit=True):
    bf = T.bfloat16
    return kernel.specialize_types(dict(a=_a(bf, 2), b=_a(bf, 2), tiles=_a(T.int32, 1), c=_a(T.float32, 2),
                                        BM=64, BN=64, BK=64))


@needs_ptxas
@pytest.mark.parametrize("target, copies", [("sm_90a", "cp.async.bulk.tensor"), ("sm_80", "cp.async.cg")])
def test_tiles_at_an_index_read_in_the_loop_stream(target, copies):
    """Both operands stream (TMA on sm_90a, without a producer warp group: the producer
    would need the body's statements; cp.async on sm_80); not where the kernel writes the
    array the index is read from."""
    ptx = codegen.compile_to_ptx(_listed(product_of_listed_tiles), target).ptx
    assert copies in ptx and "setmaxnreg" not in ptx
    assert codegen.assemble(ptx, target, optimize=False)[:4] == b"\x7fELF"
    assert copies not in codegen.compile_to_ptx(_listed(product_of_listed_tiles_relisted), target).ptx


# ----------------------------------------------------------------------------- PTX


def _a(dtype, ndim, unit=True):
    return ArrayType(dtype, ndim, "global", unit, True)


def _decode_split(group, key_tile, page=256, d=128):
    bf = T.bfloat16
    return da.decode_split.specialize_types(dict(
        q=_a(bf, 4), k_cache=_a(bf, 3), v_cache=_a(bf, 3), block_table=_a(T.int32, 2),
        seq_lens=_a(T.int32, 1), part_out=_a(T.float32, 5), part_lse=_a(T.float32, 4),
        scale=T.float32, GROUP=group, ROWS=max(da.PRODUCT_ROWS, group), PAGE=page, BN=key_tile, D=d))


@needs_ptxas
@pytest.mark.parametrize("target, product, group", [("sm_80", "mma.sync", 4), ("sm_90a", "wgmma", 32)])
def test_decode_split_runs_on_tensor_cores_and_assembles(target, product, group):
    """Groups padded to 16 query rows (4) and groups of 16 or more (32, no padding), the key
    and value tiles streamed at their pages (TMA on sm_90a, cp.async on sm_80); the
    no-spill test below assembles group 4 on sm_90a."""
    compiled = codegen.compile_to_ptx(_decode_split(group, da.KEY_TILE), target)
    assert product in compiled.ptx
    assert ("cp.async.bulk.tensor" if target == "sm_90a" else "cp.async.cg") in compiled.ptx
    assert codegen.assemble(compiled.ptx, target, optimize=False)[:4] == b"\x7fELF"


@needs_ptxas
def test_decode_split_and_combine_do_not_spill_on_sm90a():
    for kernel in (_decode_split(4, da.KEY_TILE), da.decode_combine.specialize_types(dict(
            part_out=_a(T.float32, 5), part_lse=_a(T.float32, 4), out=_a(T.bfloat16, 4), SPLITS=33, D=128))):
        report = _ptxas_report(codegen.compile_to_ptx(kernel, "sm_90a").ptx)
        assert "0 bytes spill stores" in report, report


@needs_ptxas
def test_gemv_streams_the_weights_by_tma_on_sm90a():
    """y.T is a view (no unit inner stride): the weights still stream by the copy engine
    into warp-specialized wgmma, and the product's 16 columns are x's rows."""
    bf = T.bfloat16
    kernel = gemm.specialize_types(dict(a=_a(bf, 2), b=_a(bf, 2), c=_a(bf, 2, unit=False),
                                                  B_ORDER="F", **tile_gemv.GEMV_TILES))
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    assert "cp.async.bulk.tensor" in ptx and "wgmma" in ptx and "setmaxnreg" in ptx
    assert codegen.assemble(ptx, "sm_90a", optimize=False)[:4] == b"\x7fELF"
