"""Matrix products on tensor cores: GEMM (bfloat16, float16, fp8), batched GEMM, GEMM
with a fused bias + GELU epilogue, written as what one block does to its output tile,
GEMM on a persistent grid whose blocks walk the output tiles in grouped order, and split-K
GEMM for products of few output tiles and a long K (`gemm_split`: each part of K into its
own slice of a float32 workspace; `split_sum`: the slices added in a fixed order, so the
result is the same bit for bit from run to run; `docs/performance.md`, "Split-K").

Each block computes one BM x BN tile of C, accumulating A's row panel times B's column
panel BK at a time in float32 (`tile.mma`); the epilogue runs on the accumulator's
registers and stores once. On sm_90a the K loop streams A and B tiles through the copy
engine (TMA) into swizzled shared memory, several stages ahead, feeding wgmma: a producer
warp group issues the copies while the block's warp groups multiply (warp specialization),
one block per multiprocessor walks the tiles in grouped order (a persistent grid) and C
leaves through TMA stores, so the next tile's loads overlap this one's epilogue; on sm_80+
the K loop streams A and B by cp.async into the same swizzled layout, a few stages ahead,
for ldmatrix + mma.sync.

Every kernel's K loop is `output_tile`, which reads either operand as stored or transposed
(`A_ORDER` / `B_ORDER` "F": a view, no copy; wgmma's transpose flags, ldmatrix.trans): so
`gemm` computes a GEMM's backward too, dA = dC @ B.T and dB = A.T @ dC
(`tile_linear` builds linear layers on it).
"""
from __future__ import annotations

import math

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples import Result, on_backend
from verdigris.types import from_name

SQRT_HALF = 1 / math.sqrt(2)


def output_tile(a, b, i, j, BM, BN, BK, A_ORDER="C", B_ORDER="C", part=0, parts=1):
    """Tile (i, j) of op(a) @ op(b), BM x BN, accumulated BK at a time along K in float32
    (float64 for float64 operands). op(x) is x as stored ("C") or its transpose ("F"): the
    tile is loaded with `order="F"`, a view of the stored array (tile axis 0 runs along
    its axis 1), so no transposed copy is made; on the GPU the product reads it as an
    M-major (A) or K-major (B) operand (`docs/api.md`, "Transposed operands").
    With `parts` > 1, only part `part` of the sum along K: the K tiles part * T // parts
    up to (part + 1) * T // parts (of T), so parts differ by one tile at most and none is
    empty unless there are more parts than K tiles (an empty part is zeros)."""
    k_extent = a.shape[1] if A_ORDER == "C" else a.shape[0]
    k_tiles = (k_extent + BK - 1) // BK
    acc = tile.zeros((BM, BN), vg.float64 if a.dtype == vg.float64 else vg.float32)
    for k in range(part * k_tiles // parts, (part + 1) * k_tiles // parts):
        # the loads inline in the product: a transposed tile named first would be laid out
        # for itself (on sm_80, an fp8 one is converted through shared memory on its own)
        acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK), order=A_ORDER),
                       tile.load(b, index=(k, j), shape=(BK, BN), order=B_ORDER), acc)
    return acc


def plus_bias(acc, bias, j, BN):
    """acc + bias's tile j, broadcast down the rows, in acc's dtype: bias is (1, N)."""
    return acc + tile.load(bias, index=(0, j), shape=(1, BN)).astype(acc.dtype)


def gelu(h):
    """GELU, the erf form: h * Phi(h)."""
    return 0.5 * h * (1.0 + tile.erf(h * 0.7071067811865476))  # erf(h / sqrt(2))


@tile.kernel
def gemm(a, b, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128, BK: vg.constexpr = 64,
         A_ORDER: vg.constexpr = "C", B_ORDER: vg.constexpr = "C", C_ORDER: vg.constexpr = "C"):
    """c = op(a) @ op(b), any float dtypes tile.mma takes: a (M, K), b (K, N) as stored,
    or a stored (K, M) with A_ORDER="F" (c = a.T @ b), b stored (N, K) with B_ORDER="F"
    (c = a @ b.T). A GEMM's backward: dA = dC @ B.T is gemm(dC, B, dA, B_ORDER="F"), and
    dB = A.T @ dC is gemm(A, dC, dB, A_ORDER="F"). With C_ORDER="F" the product is stored
    transposed (c is (N, M)): swapped operands, c = (op(b).T @ op(a).T).T, so that a small
    M is the tile's N side (`tile_matmul_shapes`)."""
    i, j = tile.bid(0), tile.bid(1)
    acc = output_tile(a, b, i, j, BM, BN, BK, A_ORDER, B_ORDER)
    tile.store(c, index=(i, j), tile=acc.astype(c.dtype), order=C_ORDER)


@tile.kernel
def gemm_split(a, b, workspace, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
               BK: vg.constexpr = 64, A_ORDER: vg.constexpr = "C", B_ORDER: vg.constexpr = "C"):
    """Split-K, first pass: on a grid (T = tiles of M, tiles of N, S), block (i, j, s) sums
    the s-th of S parts of K (`output_tile`) into tile (s * T + i, j) of the workspace
    (S * T * BM, N): slice s is its rows s * T * BM ... , M of them used, unrounded, in
    float32 (float64 for float64 operands). Each block writes its own tile, so no atomic
    is needed; `split_sum` adds the slices up. (Two-dimensional, so that on sm_90a the
    tiles leave by TMA stores, overlapping the next tile's product.)"""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = output_tile(a, b, i, j, BM, BN, BK, A_ORDER, B_ORDER, s, tile.num_blocks(2))
    tile.store(workspace, index=(int(s) * int(tile.num_blocks(0)) + int(i), j), tile=acc)


def workspace_shape(m: int, n: int, parts: int, tiles: dict) -> tuple:
    """The shape of `gemm_split`'s workspace for an (m, n) result in `parts` parts: one
    slice of whole BM-row tiles per part (tiles: BM, BN, BK)."""
    return parts * vg.cdiv(m, tiles["BM"]) * tiles["BM"], n


def slices_sum(workspace, i, j, parts, BM, BN):
    """Tile (i, j) of the sum of the workspace's `parts` slices (`gemm_split`), added in
    order 0, 1, ... (the same bit for bit from run to run), in the workspace's dtype."""
    per_slice = workspace.shape[0] // (parts * BM)  # tiles: BM divides gemm_split's
    acc = tile.zeros((BM, BN), workspace.dtype)
    for s in range(parts):
        acc += tile.load(workspace, index=(s * per_slice + i, j), shape=(BM, BN))
    return acc


@tile.kernel
def split_sum(workspace, c, parts, BM: vg.constexpr = 32, BN: vg.constexpr = 128,
              C_ORDER: vg.constexpr = "C"):
    """Split-K, second pass: c = the sum of the workspace's `parts` slices, rounded once
    (stored transposed with C_ORDER="F", as `gemm`'s)."""
    i, j = tile.bid(0), tile.bid(1)
    tile.store(c, index=(i, j), tile=slices_sum(workspace, i, j, parts, BM, BN).astype(c.dtype),
               order=C_ORDER)


@tile.kernel
def gemm_nt(a, bt, c, scale, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
         BK: vg.constexpr = 64):
    """c = scale * (a @ bt.T): bt (N, K) is B stored K-major (a weight matrix, or the
    layout fp8 products read); `scale` multiplies once, in the epilogue."""
    i, j = tile.bid(0), tile.bid(1)
    acc = output_tile(a, bt, i, j, BM, BN, BK, "C", "F")
    tile.store(c, index=(i, j), tile=(acc * scale).astype(c.dtype))


@tile.kernel
def gemm_bias_gelu(a, b, bias, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
         BK: vg.constexpr = 64, B_ORDER: vg.constexpr = "C"):
    """c = gelu(a @ op(b) + bias) (the erf form), fused: the product never leaves registers."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(output_tile(a, b, i, j, BM, BN, BK, "C", B_ORDER), bias, j, BN)
    tile.store(c, index=(i, j), tile=gelu(h).astype(c.dtype))


@tile.kernel
def batched_gemm(a, b, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
         BK: vg.constexpr = 64):
    """c[z] = a[z] @ b[z] for a (Z, M, K), b (Z, K, N): grid axis 2 is the batch."""
    i, j, z = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range((a.shape[2] + BK - 1) // BK):
        x = tile.load(a, index=(z, i, k), shape=(1, BM, BK)).reshape((BM, BK))
        y = tile.load(b, index=(z, k, j), shape=(1, BK, BN)).reshape((BK, BN))
        acc = tile.mma(x, y, acc)
    tile.store(c, index=(z, i, j), tile=acc.astype(c.dtype).reshape((1, BM, BN)))


@tile.kernel
def gemm_grouped(a, b, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
                 BK: vg.constexpr = 64, GROUP: vg.constexpr = 8):
    """c = a @ b on a persistent grid (any number of blocks, e.g. one per multiprocessor):
    each block takes every num_blocks-th output tile in grouped order, GROUP block rows at
    a time, column by column (cuTile's samples' order), so that the blocks at work together
    share A's row panels and B's column panels in L2. The race checker proves that no two
    blocks store one tile (`docs/safety.md`, "Block orders")."""
    rows = (c.shape[0] + BM - 1) // BM
    cols = (c.shape[1] + BN - 1) // BN
    in_group = GROUP * cols
    for t in range(tile.bid(0), rows * cols, tile.num_blocks(0)):
        first_row = (t // in_group) * GROUP
        group_rows = min(rows - first_row, GROUP)  # the last group may have fewer rows
        i = first_row + t % group_rows
        j = (t % in_group) // group_rows
        tile.store(c, index=(i, j), tile=output_tile(a, b, i, j, BM, BN, BK).astype(c.dtype))


def _gelu(x):
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x * SQRT_HALF))


def available(dtype_name: str) -> bool:
    """Whether NumPy can hold this dtype (bfloat16 and fp8 need the ml_dtypes package)."""
    return from_name(dtype_name).np.name == dtype_name


def _narrow(rng, shape, dtype_name: str, scale: float = 1.0):
    """Random values of a float dtype, and their float64."""
    values = (rng.standard_normal(shape) * scale).astype(np.float32).astype(from_name(dtype_name).np)
    return values, values.astype(np.float64)


def run(kernel, grid, *args, **constexprs):
    """Launch on the current backend (arrays copied to the GPU and back on cuda)."""
    return on_backend(kernel[grid], *args, **constexprs)


def check(rng, sizes=(200, 136, 272), tiles=(64, 64, 32)) -> list:
    m, n, k = sizes
    bm, bn, bk = tiles
    grid = (vg.cdiv(m, bm), vg.cdiv(n, bn))
    results = []
    for name in [d for d in ("float16", "bfloat16") if available(d)]:
        a, a64 = _narrow(rng, (m, k), name)
        b, b64 = _narrow(rng, (k, n), name)
        c = np.full((m, n), np.nan, np.float32)
        c = run(gemm, grid, a, b, c, BM=bm, BN=bn, BK=bk)[2]
        results.append(Result(f"gemm {name} {m}x{n}x{k}", c, a64 @ b64, 1e-5))
    half = "bfloat16" if available("bfloat16") else "float16"
    a, a64 = _narrow(rng, (m, k), half)
    b, b64 = _narrow(rng, (k, n), half)
    bias, bias64 = _narrow(rng, (1, n), half)
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm_bias_gelu, grid, a, b, bias, c, BM=bm, BN=bn, BK=bk)[3]
    results.append(Result(f"gemm + bias + gelu {half}", c, _gelu(a64 @ b64 + bias64), 1e-5))
    if available("float8_e4m3fn"):
        a, a64 = _narrow(rng, (m, k), "float8_e4m3fn")
        bt, bt64 = _narrow(rng, (n, k), "float8_e4m3fn")
        c = np.full((m, n), np.nan, np.float32)
        c = run(gemm_nt, grid, a, bt, c, 0.5, BM=bm, BN=bn, BK=bk)[2]
        # On sm_90a wgmma adds fp8 products in the tensor cores' narrower accumulator
        # (5e-4 relative here on the H200; `tile.matmul`'s precision note); elsewhere float32.
        results.append(Result("gemm fp8 e4m3 (B K-major), scaled", c, 0.5 * (a64 @ bt64.T), 2e-3))
    a, a64 = _narrow(rng, (m, k), "float16")
    b, b64 = _narrow(rng, (k, n), "float16")
    c = np.full((m, n), np.nan, np.float32)
    c = run(gemm_grouped, 5, a, b, c, BM=bm, BN=bn, BK=bk, GROUP=3)[2]
    results.append(Result("gemm float16, grouped order on a persistent grid", c, a64 @ b64, 1e-5))
    parts = 4  # of 9 K tiles: 2 or 3 each
    a, a64 = _narrow(rng, (m, k), half)
    b, b64 = _narrow(rng, (k, n), half)
    workspace = np.full(workspace_shape(m, n, parts, dict(BM=bm)), np.nan, np.float32)
    workspace = run(gemm_split, (*grid, parts), a, b, workspace, BM=bm, BN=bn, BK=bk)[2]
    c = np.full((m, n), np.nan, np.float32)
    c = run(split_sum, (vg.cdiv(m, 32), vg.cdiv(n, 64)), workspace, c, parts, BM=32, BN=64)[1]
    results.append(Result(f"gemm {half}, split-K in {parts} parts", c, a64 @ b64, 1e-5))
    z = 3
    a, a64 = _narrow(rng, (z, m, k), "float16")
    b, b64 = _narrow(rng, (z, k, n), "float16")
    c = np.full((z, m, n), np.nan, np.float32)
    c = run(batched_gemm, (*grid, z), a, b, c, BM=bm, BN=bn, BK=bk)[2]
    results.append(Result(f"batched gemm float16 x{z}", c, a64 @ b64, 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
