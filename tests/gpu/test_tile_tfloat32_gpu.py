"""`vg.tfloat32` (tests/test_tile_tfloat32.py) on the GPU against the cpu backend on the same
inputs: the conversion (`cvt.rna.tf32.f32`) bit for bit on edge values (ties, overflow,
subnormals, NaN), conversions through float32, tiles made and moved as tfloat32; and the
TF32 products, on the device's own target (wgmma on an H100/H200) and on sm_80 code
(mma.sync), against float64 NumPy of the rounded operands and bit for bit against the same
product written with input_precision="tf32"."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from tests.gpu.test_tile_gpu import run_both, same_bits
from tests.gpu.test_tile_mma import target  # noqa: F401 -- the fixture: native and sm_80
from test_tile_tfloat32 import (_specials, converted, made, moved, precision_gemm, round_trip, tf32,
                                tf32_gemm, tf32_products)

pytestmark = pytest.mark.gpu


def test_round_trip_bit_for_bit(rng):
    x = np.concatenate([_specials(), rng.standard_normal(4 * 256 - len(_specials())).astype(np.float32)])
    got, want = run_both(round_trip, 4, dict(x=x, out=np.zeros_like(x), back=np.zeros_like(x), B=256),
                         ("out", "back"))
    for name in ("out", "back"):
        same_bits(got[name], want[name])
        same_bits(got[name], tf32(x))


@pytest.mark.parametrize("source,target_dtype", [(np.float16, np.float32), (np.int32, np.float32),
                                                 (np.float64, np.float32), (np.float32, np.float16)])
def test_conversions(rng, source, target_dtype):
    x = (rng.standard_normal(256) * 1000).astype(source)
    got, want = run_both(converted, 1, dict(x=x, out=np.zeros(256, target_dtype), B=256), ("out",))
    same_bits(got["out"], want["out"])


def test_made_and_moved(rng):
    got, want = run_both(made, 1, dict(out=np.zeros((4, 64), np.float32), v=1.1, B=64), ("out",))
    same_bits(got["out"], want["out"])
    x = rng.standard_normal((32, 32)).astype(np.float32)
    got, want = run_both(moved, 1, dict(x=x, out=np.zeros((64, 32), np.float32), B=32), ("out",))
    same_bits(got["out"], want["out"])


@pytest.mark.parametrize("sizes,tiles", [((256, 192, 320), (128, 64, 32)), ((200, 136, 272), (64, 64, 32)),
                                         ((37, 20, 50), (32, 16, 16))])
def test_product(rng, target, sizes, tiles):  # noqa: F811 -- `target` is the imported fixture
    m, n, k = sizes
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    grid = (vg.cdiv(m, tiles[0]), vg.cdiv(n, tiles[1]))
    args = dict(a=a, b=b, c=np.zeros((m, n), np.float32), BM=tiles[0], BN=tiles[1], BK=tiles[2])
    got, _ = run_both(tf32_gemm, grid, args, ("c",))
    via_precision, _ = run_both(precision_gemm, grid, args, ("c",))
    want = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert (np.abs(got["c"] - want) <= 1e-6 * k * scale).all()
    same_bits(got["c"], via_precision["c"])  # one product, whichever way it is asked for


def test_products_of_variables_batches_and_the_operator(rng, target):  # noqa: F811
    m, n, k = 16, 16, 32
    a = rng.standard_normal((2, m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    got, _ = run_both(tf32_products, 1, dict(a=a, b=b, c=np.zeros((m, n), np.float32),
                                             d=np.zeros((2, m, n), np.float32), M=m, N=n, K=k), ("c", "d"))
    want = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64).T
    np.testing.assert_allclose(got["c"], want[0], rtol=1e-5, atol=1e-5 * k)
    np.testing.assert_allclose(got["d"], want, rtol=1e-5, atol=1e-5 * k)
