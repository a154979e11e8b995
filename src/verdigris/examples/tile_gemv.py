"""GEMV-like products: y[M, N] = x[M, K] @ w[N, K]^T for a few rows (M = 1 ... 16: a decoding
batch's tokens through a linear layer, w stored as torch.nn.Linear stores it), whose cost
is reading w once.

They run as the transposed product y^T = w @ x^T on `tile_gemm`'s GEMM (through
`tile_linear.launch_gemm`): w's rows fill the product tile's rows (GEMV_TILES: 128 of them,
where wgmma wants 64 or more), x is its 16 columns read transposed (a view: `B_ORDER="F"`;
rows past M load as zeros and are not stored), and the result is stored into y.T, a view
of y. So w streams as any GEMM's A operand does: on sm_90a by the copy engine, several
tiles ahead of warp-specialized wgmma on a persistent grid; on sm_80 by cp.async. Where w
has too few row tiles to fill the GPU (N = 4096: 32 tiles for 132 multiprocessors) the sum
over K is split (`gemv_workspace`; `tile_linear.k_parts`), each part into its own float32
slice, added in a fixed order. Accumulation is float32, the result rounded once.
"""
from __future__ import annotations

import numpy as np

from verdigris.examples import Result, on_backend
from verdigris.examples.tile_gemm import _narrow, available, workspace_shape
from verdigris.examples.tile_linear import k_parts, launch_gemm

MAX_ROWS = 16  # x's rows: the product's 16 columns
GEMV_TILES = dict(BM=128, BN=MAX_ROWS, BK=64)


def gemv_workspace(m: int, n: int, k: int, multiprocessors: int, tiles=GEMV_TILES):
    """The shape of the split-K workspace (float32) for y = x @ w.T of these sizes on a GPU
    of `multiprocessors`, or None where one kernel fills it (and on the cpu backend:
    multiprocessors 0)."""
    parts = k_parts(n, m, k, tiles, multiprocessors) if multiprocessors else 1
    return None if parts == 1 else workspace_shape(n, m, parts, tiles)


def gemv(x, w, y, tiles=GEMV_TILES, workspace=None, **launch):
    """y = x @ w.T for x (M, K) with M <= MAX_ROWS, w (N, K), y (M, N): the GEMM of
    w @ x.T stored into y.T; split-K when a workspace is given (`gemv_workspace`)."""
    if x.shape[0] > MAX_ROWS:
        raise ValueError(f"gemv takes at most {MAX_ROWS} rows of x, not {x.shape[0]}: "
                         "use tile_linear.launch_linear_forward")
    launch_gemm(w, x, y.T, B_ORDER="F", tiles=tiles, workspace=workspace, **launch)


def check(rng, k=300, n=200, rows=(1, 5, 16)) -> list:
    """bf16 (else float16) GEMV for several row counts, in one kernel and split-K in 3
    parts, against float64."""
    dtype = "bfloat16" if available("bfloat16") else "float16"
    tiles = dict(BM=64, BN=MAX_ROWS, BK=64)
    results = []
    for m in rows:
        x, x64 = _narrow(rng, (m, k), dtype)
        w, w64 = _narrow(rng, (n, k), dtype)
        for parts in (1, 3):
            y = np.full((m, n), np.nan, np.float32)
            workspace = None if parts == 1 else np.full(workspace_shape(n, m, parts, tiles), np.nan, np.float32)
            y = on_backend(gemv, x, w, y, tiles, workspace)[2]
            results.append(Result(f"gemv {dtype} M={m} in {parts} part(s)", y, x64 @ w64.T, 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
