"""Linear layers, forward and backward, on the GEMM of `tile_gemm`: y = x @ w.T (+ bias),
y = gelu(x @ w.T + bias) fused, and y = residual + x @ w.T + bias fused (a layer added into
a residual stream), with the weight w stored (N, K) as torch.nn.Linear stores it.

Every product is `tile_gemm.gemm` (or its epilogues), its operands read as stored: the
forward reads w transposed (`B_ORDER="F"`), dx = dy @ w reads both as stored, and
dw = dy.T @ x reads dy transposed (`A_ORDER="F"`); a transposed operand is a view (the
tile loaded along the array's other axis), so no transposed copy is made, and on sm_90a
wgmma reads it from shared memory with its transpose flag set.

Kernels: `gemm_bias` (y = x @ w.T + bias), `gemm_bias_gelu_forward` (y = gelu(z), saving
the pre-activation z = x @ w.T + bias for the backward, which does not recompute the
product), `gemm_bias_residual` (y = residual + x @ w.T + bias: the residual read in the
epilogue, so the sum takes no pass of its own), `gelu_backward` (dz = dy * gelu'(z), with
each block's partial column sums of dz: the bias gradient's first pass),
`gemm_gelu_backward` (dz = (dy @ w) * gelu'(z) in the epilogue of the product that makes
the GELU's output gradient from the next layer's: an MLP's backward without a pass for
the GELU, `verdigris.ops.residual`), and
`split_sum_bias` / `split_sum_bias_gelu` / `split_sum_bias_residual` /
`split_sum_gelu_backward`, the second pass of the epilogues split along K. A residual's
gradient is dy itself: the backward has no kernel for it. Launchers: `launch_gemm`,
`launch_linear_forward`, `launch_linear_backward` (dx, dw and the bias gradient from dy),
`launch_gemm_bias_gelu_backward` (gelu_backward, then the same from dz) and
`launch_gemm_gelu_backward`.

Split-K (issue #29): a product whose output tiles leave multiprocessors idle (the weight
gradient dw = dy.T @ x of a long sequence: a small output, a long sum) is cut along K into
parts, `k_parts` choosing how many from the shape and the GPU's multiprocessor count.
Each launcher takes a workspace (`tile_gemm.workspace_shape`, float32) to mean split-K:
`gemm_split` sums each part into its own slice, then `split_sum` (or an epilogue's twin)
adds the slices in a fixed order. Bias gradients are column sums in a fixed order too
(per-block partials, then `tile_column_sums.column_sums`): every result the same bit for
bit from run to run, no float atomics.

Arithmetic in float32 (float64 for float64 inputs), each result rounded once to its array's
dtype; dz is rounded to dy's dtype before the products read it, as torch's is.
"""
from __future__ import annotations

import math

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples.tile_column_sums import (launch_column_sums, launch_two_pass_column_sums,
                                                 row_blocks)
from verdigris.examples.tile_gemm import (gelu, gemm, gemm_split, output_tile, plus_bias, slices_sum,
                                          split_sum, workspace_shape)

GEMM_TILES = dict(BM=128, BN=128, BK=64)
WIDE_TILES = dict(BM=64, BN=64, BK=32)  # float64: a 128x128x64 step's operands overflow shared memory
ROW_TILE = dict(BR=16, BC=256)  # the elementwise passes' tile
ROW_BLOCKS = 128  # row blocks of a column sum's first pass (bench/gpt_reductions.py, H100, 8192 rows:
# 15.0 / 26.5 / 32.1 us at 768 / 2304 / 3072 columns, against 24.7 / 32.8 / 37.6 at 32 row blocks and
# 15.1 / 28.4 / 34.1 at ~512 blocks in all; torch's dy.sum(0) 21.8 / 34.9 / 39.3)
SUM_TILE = dict(BM=32, BN=128)  # split-K's second pass (its BM divides the GEMM's)
WAVES = 2  # split-K cuts K until the output tiles, times the parts, fill this many waves
MIN_PART_K = 512  # ... but no part sums fewer than this many k: each part costs 8 bytes of
# workspace traffic per output element (float32, written then read) for 2 * K / parts flops


@tile.kernel
def gemm_bias(a, b, bias, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
              BK: vg.constexpr = 64, B_ORDER: vg.constexpr = "C"):
    """c = a @ op(b) + bias; bias is (1, N)."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(output_tile(a, b, i, j, BM, BN, BK, "C", B_ORDER), bias, j, BN)
    tile.store(c, index=(i, j), tile=h.astype(c.dtype))


def plus_residual(acc, residual, i, j, BM, BN):
    """acc + residual's tile (i, j), in acc's dtype: residual is shaped as the product."""
    return acc + tile.load(residual, index=(i, j), shape=(BM, BN)).astype(acc.dtype)


@tile.kernel
def gemm_bias_residual(a, b, bias, residual, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
                       BK: vg.constexpr = 64, B_ORDER: vg.constexpr = "C"):
    """c = residual + a @ op(b) + bias, summed in the accumulator and rounded once: a linear
    layer added into a residual stream, without a pass of its own for the sum."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(output_tile(a, b, i, j, BM, BN, BK, "C", B_ORDER), bias, j, BN)
    tile.store(c, index=(i, j), tile=plus_residual(h, residual, i, j, BM, BN).astype(c.dtype))


@tile.kernel
def gemm_bias_gelu_forward(a, b, bias, c, z, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
                           BK: vg.constexpr = 64, B_ORDER: vg.constexpr = "C"):
    """c = gelu(z), z = a @ op(b) + bias, saved (rounded to z's dtype) for the backward."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(output_tile(a, b, i, j, BM, BN, BK, "C", B_ORDER), bias, j, BN)
    tile.store(z, index=(i, j), tile=h.astype(z.dtype))
    tile.store(c, index=(i, j), tile=gelu(h).astype(c.dtype))


def gelu_slope(h):
    """gelu'(h) = Phi(h) + h * phi(h), the erf form's derivative, in h's dtype."""
    return 0.5 * (1.0 + tile.erf(h * 0.7071067811865476)) \
        + h * tile.exp(-0.5 * h * h) * 0.3989422804014327  # Phi(h) + h / sqrt(2 pi) e^(-h^2/2)


@tile.kernel
def gelu_backward(dy, z, dz, partial, ROWS: vg.constexpr = 64, BR: vg.constexpr = 16,
                  BC: vg.constexpr = 256):
    """dz = dy * gelu'(z) over block (r, c)'s rows r*ROWS ... r*ROWS + ROWS - 1 (BR at a
    time) of columns tile c, and partial[r] = their column sums (the arithmetic in
    partial's dtype). Rows past the end load as zeros: dz 0 there."""
    r, c = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BR, BC), partial.dtype)
    for t in range(int(r) * (ROWS // BR), (int(r) + 1) * (ROWS // BR)):
        h = tile.load(z, index=(t, c), shape=(BR, BC)).astype(partial.dtype)
        g = tile.load(dy, index=(t, c), shape=(BR, BC)).astype(partial.dtype) * gelu_slope(h)
        tile.store(dz, index=(t, c), tile=g.astype(dz.dtype))
        acc += g
    tile.store(partial, index=(r, c), tile=tile.sum(acc, axis=0).reshape((1, BC)))


def times_gelu_slope(acc, z, i, j, BM, BN):
    """acc * gelu'(z's tile (i, j)), in acc's dtype: z is shaped as the product."""
    h = tile.load(z, index=(i, j), shape=(BM, BN)).astype(acc.dtype)  # a variable: in acc's registers
    return acc * gelu_slope(h)


@tile.kernel
def gemm_gelu_backward(a, b, z, dz, BM: vg.constexpr = 128, BN: vg.constexpr = 128,
                       BK: vg.constexpr = 64, B_ORDER: vg.constexpr = "C"):
    """dz = (a @ b) * gelu'(z), the product's tile multiplied in its epilogue and rounded
    once to dz's dtype: the gradient of a GELU's input z from the gradient a of the layer
    after it (b its weight as stored, (N, K): a @ b is that layer's dx), with no pass of
    its own over the activations. op(b) as in `gemm`."""
    i, j = tile.bid(0), tile.bid(1)
    g = times_gelu_slope(output_tile(a, b, i, j, BM, BN, BK, "C", B_ORDER), z, i, j, BM, BN)
    tile.store(dz, index=(i, j), tile=g.astype(dz.dtype))


@tile.kernel
def split_sum_bias(workspace, parts, bias, c, BM: vg.constexpr = 32, BN: vg.constexpr = 128):
    """Split-K's second pass (`tile_gemm.split_sum`) for gemm_bias: c = the slices' sum + bias."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(slices_sum(workspace, i, j, parts, BM, BN), bias, j, BN)
    tile.store(c, index=(i, j), tile=h.astype(c.dtype))


@tile.kernel
def split_sum_bias_residual(workspace, parts, bias, residual, c, BM: vg.constexpr = 32,
                            BN: vg.constexpr = 128):
    """Split-K's second pass for gemm_bias_residual: c = residual + the slices' sum + bias."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(slices_sum(workspace, i, j, parts, BM, BN), bias, j, BN)
    tile.store(c, index=(i, j), tile=plus_residual(h, residual, i, j, BM, BN).astype(c.dtype))


@tile.kernel
def split_sum_bias_gelu(workspace, parts, bias, c, z, BM: vg.constexpr = 32, BN: vg.constexpr = 128):
    """Split-K's second pass for gemm_bias_gelu_forward: z = the slices' sum + bias, c = gelu(z)."""
    i, j = tile.bid(0), tile.bid(1)
    h = plus_bias(slices_sum(workspace, i, j, parts, BM, BN), bias, j, BN)
    tile.store(z, index=(i, j), tile=h.astype(z.dtype))
    tile.store(c, index=(i, j), tile=gelu(h).astype(c.dtype))


@tile.kernel
def split_sum_gelu_backward(workspace, parts, z, dz, BM: vg.constexpr = 32, BN: vg.constexpr = 128):
    """Split-K's second pass for gemm_gelu_backward: dz = the slices' sum * gelu'(z)."""
    i, j = tile.bid(0), tile.bid(1)
    g = times_gelu_slope(slices_sum(workspace, i, j, parts, BM, BN), z, i, j, BM, BN)
    tile.store(dz, index=(i, j), tile=g.astype(dz.dtype))


def _grid(c, tiles: dict, C_ORDER="C") -> tuple:
    """One block per output tile of the product: c's, or c.T's with C_ORDER="F"."""
    rows, cols = c.shape if C_ORDER == "C" else c.shape[::-1]
    return vg.cdiv(rows, tiles["BM"]), vg.cdiv(cols, tiles["BN"])


def gemm_tiles(a) -> dict:
    """The tiles the launchers take by default for operands like `a` (a NumPy, torch or
    verdigris array)."""
    return WIDE_TILES if a.dtype.itemsize == 8 else GEMM_TILES


def k_parts(m: int, n: int, k: int, tiles: dict, multiprocessors: int) -> int:
    """How many parts split-K cuts the sum over k of an (m, n) product into, on a GPU of
    `multiprocessors`: 1 when its output tiles fill WAVES waves already (or no GPU: 0, or
    an empty output); else the fewest parts whose tiles do, but none shorter than
    MIN_PART_K."""
    output_tiles = vg.cdiv(m, tiles["BM"]) * vg.cdiv(n, tiles["BN"])
    if not output_tiles or output_tiles >= WAVES * multiprocessors:
        return 1
    return max(1, min(vg.cdiv(WAVES * multiprocessors, output_tiles), k // MIN_PART_K))


def split_workspace(m: int, n: int, k: int, tiles: dict, multiprocessors: int):
    """`workspace_shape` for the parts `k_parts` chooses, or None where it chooses one."""
    parts = k_parts(m, n, k, tiles, multiprocessors)
    return None if parts == 1 else workspace_shape(m, n, parts, tiles)


def _split_product(a, b, c, A_ORDER, B_ORDER, tiles, workspace, launch, C_ORDER="C") -> tuple:
    """Split-K's first pass for c = op(a) @ op(b) (c.T with C_ORDER="F") into the workspace
    (`gemm_split`): the number of parts (the workspace's slices), and the grid and tile of
    the second pass."""
    grid = _grid(c, tiles, C_ORDER)
    parts = workspace.shape[0] // (grid[0] * tiles["BM"])
    gemm_split[(*grid, parts)](a, b, workspace, A_ORDER=A_ORDER, B_ORDER=B_ORDER, **tiles, **launch)
    return (parts, *summing(c, tiles, C_ORDER))


def summing(c, tiles: dict, C_ORDER="C") -> tuple:
    """The grid and tile of split-K's second pass into c, after a first pass of `tiles`:
    SUM_TILE (its BM dividing the product's); for a product stored transposed (C_ORDER="F":
    swapped operands, few rows of c), the product's BM along c's columns, so that each row
    of c is stored in runs of BM, by at most 64 of c's rows."""
    if C_ORDER == "C":
        tile = dict(SUM_TILE, BM=min(SUM_TILE["BM"], tiles["BM"]))
    else:
        tile = dict(BM=tiles["BM"], BN=min(64, tiles["BN"]))
    return _grid(c, tile, C_ORDER), tile


def launch_gemm(a, b, c, A_ORDER="C", B_ORDER="C", tiles=None, workspace=None, C_ORDER="C",
                **launch):
    """c = op(a) @ op(b): `tile_gemm.gemm`, one block per output tile; or, given a
    workspace (`tile_gemm.workspace_shape`, float32 (float64 for float64)), split-K in as many
    parts as it has slices: `gemm_split`, then `split_sum` (deterministic: no atomics).
    C_ORDER="F": the product is c.T (swapped operands; the workspace is c.T's)."""
    tiles = tiles or gemm_tiles(a)
    if workspace is None:
        gemm[_grid(c, tiles, C_ORDER)](a, b, c, A_ORDER=A_ORDER, B_ORDER=B_ORDER,
                                       C_ORDER=C_ORDER, **tiles, **launch)
    else:
        parts, grid, tile = _split_product(a, b, c, A_ORDER, B_ORDER, tiles, workspace, launch,
                                           C_ORDER)
        split_sum[grid](workspace, c, parts, C_ORDER=C_ORDER, **tile, **launch)


def launch_linear_forward(x, w, y, bias=None, z=None, tiles=None, workspace=None, residual=None,
                          **launch):
    """y = x @ w.T, plus bias (1, N) when given, then GELU when z (the pre-activation's
    array) is given too, or plus residual (shaped as y; with a bias, and no z) when given;
    split-K when a workspace is given (`launch_gemm`)."""
    tiles = tiles or gemm_tiles(x)
    if bias is None:
        return launch_gemm(x, w, y, B_ORDER="F", tiles=tiles, workspace=workspace, **launch)
    if residual is not None:  # the epilogue's kernel, split-K's second pass, and their arrays after bias
        whole, second_pass, arrays = gemm_bias_residual, split_sum_bias_residual, (residual, y)
    elif z is not None:
        whole, second_pass, arrays = gemm_bias_gelu_forward, split_sum_bias_gelu, (y, z)
    else:
        whole, second_pass, arrays = gemm_bias, split_sum_bias, (y,)
    _with_epilogue(whole, second_pass, x, w, y, (bias, *arrays), "F", tiles, workspace, launch)


def _with_epilogue(whole, second_pass, a, b, c, arrays, B_ORDER, tiles, workspace, launch):
    """c = a @ op(b) through an epilogue taking `arrays` after the operands: `whole`, one
    block per output tile, or given a workspace split-K's first pass and `second_pass`
    (which takes the workspace and its number of parts before the arrays)."""
    if workspace is None:
        whole[_grid(c, tiles)](a, b, *arrays, B_ORDER=B_ORDER, **tiles, **launch)
    else:
        parts, grid, tile = _split_product(a, b, c, "C", B_ORDER, tiles, workspace, launch)
        second_pass[grid](workspace, parts, *arrays, **tile, **launch)


def partials(rows: int, cols: int, row_tile=None):
    """The rows per block of a bias gradient's first pass (about ROW_BLOCKS row blocks),
    and its partials' shape."""
    per_block = row_blocks(rows, (row_tile or ROW_TILE)["BR"], ROW_BLOCKS)
    return per_block, (vg.cdiv(rows, per_block), cols)


def launch_linear_backward(dy, x, w, dx, dw, db=None, partial=None, ROWS=None, tiles=None,
                           row_tile=None, workspaces=(None, None), **launch):
    """dx = dy @ w, dw = dy.T @ x (each split-K where `workspaces` gives it one:
    `launch_gemm`), and db = dy's column sums when db is given (through `partial`, ROWS
    rows per block: `partials`)."""
    launch_gemm(dy, w, dx, tiles=tiles, workspace=workspaces[0], **launch)
    launch_gemm(dy, x, dw, A_ORDER="F", tiles=tiles, workspace=workspaces[1], **launch)
    if db is not None:
        launch_two_pass_column_sums(dy, db, partial, ROWS, **(row_tile or ROW_TILE), **launch)


def launch_gemm_gelu_backward(dy, w, z, dz, tiles=None, workspace=None, **launch):
    """dz = (dy @ w) * gelu'(z), rounded once (w stored (N, K), as the layer after the GELU
    stores its weight): the product's epilogue, or split-K's second pass given a workspace."""
    _with_epilogue(gemm_gelu_backward, split_sum_gelu_backward, dy, w, dz, (z, dz), "C", tiles or gemm_tiles(dy),
                   workspace, launch)


def launch_gemm_bias_gelu_backward(dy, x, w, z, dz, dx, dw, db, partial, ROWS, tiles=None,
                                   row_tile=None, workspaces=(None, None), **launch):
    """The backward of y = gelu(x @ w.T + bias) from the saved pre-activation z: dz (in
    dy's dtype) and the bias gradient's partials in one pass, their column sums into db,
    then dx = dz @ w and dw = dz.T @ x."""
    row_tile = row_tile or ROW_TILE
    gelu_backward[partial.shape[0], vg.cdiv(dy.shape[1], row_tile["BC"])](
        dy, z, dz, partial, ROWS=ROWS, **row_tile, **launch)
    launch_column_sums(partial, db, **launch)
    launch_linear_backward(dz, x, w, dx, dw, tiles=tiles, workspaces=workspaces, **launch)


def reference_gelu_grad(z: np.ndarray) -> np.ndarray:
    """gelu'(z) in float64."""
    z = z.astype(np.float64)
    return 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2))) + z * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def reference(x, w, bias, dy):
    """y = gelu(x @ w.T + bias) and its gradients dx, dw, dbias, in float64."""
    x64, w64, dy64 = (v.astype(np.float64) for v in (x, w, dy))
    z = x64 @ w64.T + bias.astype(np.float64).reshape(1, -1)
    dz = dy64 * reference_gelu_grad(z)
    y = 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    return y, dz @ w64, dz.T @ x64, dz.sum(axis=0)


def check(rng, sizes=(200, 136, 72), tiles=dict(BM=64, BN=64, BK=32),
          row_tile=dict(BR=16, BC=64)) -> list:
    """GEMM + bias + GELU forward and backward, on shapes no tile divides."""
    from verdigris.examples import Result
    from verdigris.examples.tile_gemm import _narrow, available

    m, n, k = sizes
    half = "bfloat16" if available("bfloat16") else "float16"
    (x, _), (w, _), (bias, _), (dy, _) = (_narrow(rng, s, half) for s in ((m, k), (n, k), (1, n), (m, n)))
    y, z, dz, dx = (np.full(s, np.nan, x.dtype) for s in ((m, n), (m, n), (m, n), (m, k)))
    dw, db = np.full((n, k), np.nan, np.float32), np.full(n, np.nan, np.float32)
    launch_linear_forward(x, w, y, bias, z, tiles=tiles)
    per_block, shape = partials(m, n, row_tile)
    launch_gemm_bias_gelu_backward(dy, x, w, z, dz, dx, dw, db, np.full(shape, np.nan, np.float32),
                                   per_block, tiles=tiles, row_tile=row_tile)
    tol = 1.6e-2 if half == "bfloat16" else 2e-3  # one rounding of y, z and dz to `half`
    return [Result(f"{name} of gelu(x @ w.T + bias), {half} {m}x{n}x{k}", got, want, tol)
            for name, got, want in zip(("y", "dx", "dw", "dbias"), (y, dx, dw, db),
                                       reference(x, w, bias, dy))]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
