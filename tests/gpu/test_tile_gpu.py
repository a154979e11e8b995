"""Tile kernels on the GPU against the cpu backend on the same inputs: bit for bit for
elementwise integer and float arithmetic, loads and stores; float32 reductions within
1e-6 relative; libdevice math (exp, rsqrt, sigmoid) within a few ulp. Shapes that are not
multiples of the tile (edge tiles), strided views, non-power-of-two tiles, several warps."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris.runtime import backend
from test_tile_codegen import (add, block_2d, elementwise, layernorm, loop_max, outer, positions,
                               rmsnorm, row_stats, row_sum, softmax, transpose)

pytestmark = pytest.mark.gpu


def run_both(kernel, grid, args: dict, outputs: tuple, **options):
    """Outputs (poisoned first) of one launch on the GPU and one on the cpu backend."""
    results = []
    for where in ("cuda", "cpu"):
        backend.set_backend(where)
        values = {}
        for name, v in args.items():
            if isinstance(v, np.ndarray):
                v = np.full_like(v, -7) if name in outputs else v
                values[name] = vg.asarray(v) if where == "cuda" else v.copy()
            else:
                values[name] = v
        kernel[grid](**values, **options)
        results.append({n: values[n].numpy() if where == "cuda" else values[n] for n in outputs})
    return results


def close(got, want, rtol):
    got, want = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.nanmax(np.abs(want)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("n,block", [(1 << 20, 4096), (100_003, 1024), (77, 128)])
def test_vector_add_is_bitwise(rng, dtype, n, block):
    a, b = ((rng.standard_normal(n) * 100).astype(dtype) for _ in range(2))
    gpu, cpu = run_both(add, vg.cdiv(n, block), dict(a=a, b=b, out=a.copy(), BLOCK=block), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


def test_vector_add_bfloat16_and_num_warps(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    n = 3 * 4096 + 5
    a, b = (rng.standard_normal(n).astype(ml_dtypes.bfloat16) for _ in range(2))
    for warps in (None, 1, 4):
        options = {} if warps is None else {"num_warps": warps}
        gpu, cpu = run_both(add, vg.cdiv(n, 4096), dict(a=a, b=b, out=a.copy(), BLOCK=4096),
                            ("out",), **options)
        np.testing.assert_array_equal(gpu["out"].view(np.uint16), cpu["out"].view(np.uint16))


def test_elementwise_ops_and_integer_semantics(rng):
    n = 5000
    x, y = (rng.standard_normal(n).astype(np.float32) * 4 for _ in range(2))
    args = dict(x=x, y=y, out=x.copy(), flags=np.zeros(n, np.int32), scale=np.float32(0.5), BLOCK=300)
    gpu, cpu = run_both(elementwise, vg.cdiv(n, 300), args, ("out", "flags"))
    np.testing.assert_array_equal(gpu["flags"], cpu["flags"])
    close(gpu["out"], cpu["out"], 1e-6)  # sigmoid through libdevice's expf


def test_strided_view_with_edge_tiles(rng):
    big = rng.standard_normal((70, 300)).astype(np.float16)
    x = big[::2, 1:]
    out = np.zeros((35, 299), np.float16)
    gpu, cpu = run_both(block_2d, (vg.cdiv(35, 8), vg.cdiv(299, 64)), dict(x=x, out=out, R=8, C=64),
                        ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])


@pytest.mark.parametrize("rows,cols,tile_cols", [(64, 4096, 4096), (33, 1000, 1000), (5, 50, 64)])
def test_softmax(rng, rows, cols, tile_cols):
    x = (3 * rng.standard_normal((rows, cols))).astype(np.float32)
    gpu, cpu = run_both(softmax, rows, dict(x=x, out=x.copy(), COLS=tile_cols), ("out",))
    close(gpu["out"], cpu["out"], 2e-6)


@pytest.mark.parametrize("cols,tile_cols", [(8192, 8192), (1000, 1000), (700, 1024)])
def test_layernorm_and_rmsnorm_bfloat16(rng, cols, tile_cols):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    rows = 16
    x = (rng.standard_normal((rows, cols)) + 0.5).astype(bf)
    w, b = (rng.standard_normal(cols).astype(bf) for _ in range(2))
    args = dict(x=x, w=w, b=b, out=x.copy(), n=cols, eps=np.float32(1e-5), COLS=tile_cols)
    gpu, cpu = run_both(layernorm, rows, args, ("out",))
    close(gpu["out"], cpu["out"], 1e-2)  # one bfloat16 rounding apart at most
    args.pop("b")
    gpu, cpu = run_both(rmsnorm, rows, args, ("out",))
    close(gpu["out"], cpu["out"], 1e-2)


def test_row_reductions_with_keepdims_and_several_rows_per_tile(rng):
    x = rng.standard_normal((30, 100)).astype(np.float32)
    args = dict(x=x, sums=np.zeros(30, np.float32), maxes=x.copy(), R=4, C=100)
    gpu, cpu = run_both(row_stats, vg.cdiv(30, 4), args, ("sums", "maxes"))
    close(gpu["sums"], cpu["sums"], 1e-6)
    np.testing.assert_array_equal(gpu["maxes"], cpu["maxes"])


def test_loop_carried_row_sum(rng):
    x = rng.standard_normal((40, 10_000)).astype(np.float32)
    gpu, cpu = run_both(row_sum, 40, dict(x=x, out=np.zeros(40, np.float32), COLS=4096), ("out",))
    close(gpu["out"], cpu["out"], 1e-5)


def test_reductions_in_a_loop_reuse_shared_memory(rng):
    x = rng.standard_normal((9, 5000)).astype(np.float32)
    gpu, cpu = run_both(loop_max, 9, dict(x=x, out=np.zeros(9, np.float32), COLS=512), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
    np.testing.assert_array_equal(cpu["out"], x.max(1))


def test_argmax_argmin_and_an_if_on_a_reduced_scalar(rng):
    x = rng.standard_normal((22, 48)).astype(np.float32)
    x[3, 7] = x[3, 9] = 50  # ties: the first wins
    x[5, :] = -1  # all equal, max <= 0
    x[6, 2] = np.nan
    args = dict(x=x, amax=np.zeros(22, np.int32), amin=np.zeros(22, np.int32),
                best=np.zeros(6, np.int32), R=4, C=48)
    gpu, cpu = run_both(positions, vg.cdiv(22, 4), args, ("amax", "amin", "best"))
    for name in ("amax", "amin", "best"):
        np.testing.assert_array_equal(gpu[name], cpu[name])


def test_broadcast_through_shared_memory_and_transpose(rng):
    x, y = rng.standard_normal(40).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    gpu, cpu = run_both(outer, vg.cdiv(40, 16), dict(x=x, y=y, out=np.zeros((40, 64), np.float32),
                                                     M=16, N=64), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
    x = rng.standard_normal((100, 70)).astype(np.float32)
    gpu, cpu = run_both(transpose, (vg.cdiv(100, 32), vg.cdiv(70, 32)),
                        dict(x=x, out=np.zeros((70, 100), np.float32), B=32), ("out",))
    np.testing.assert_array_equal(gpu["out"], cpu["out"])
