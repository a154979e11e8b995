"""Every tile example on the GPU at larger sizes than its own (several full tiles, edge
tiles, 64K-wide online softmax rows) against NumPy; at its own sizes, against NumPy and the
cpu backend, it runs in `test_examples_gpu.py`."""
import importlib

import pytest

from verdigris import examples

pytestmark = pytest.mark.gpu

LARGER = {
    "tile_vector_add": dict(n=(1 << 22) + 3, block=4096),
    "tile_bias_gelu": dict(rows=1000, cols=3000),
    "tile_softmax": dict(rows=512, cols=4096, wide=65536, block=4096),
    "tile_layernorm": dict(rows=256, cols=8192, tile_cols=8192, train=(1001, 8192)),
    "tile_rmsnorm": dict(rows=256, cols=8192, tile_cols=8192, train=(1001, 8192)),
    "tile_row_reduce": dict(rows=300, cols=20_000, tile_cols=4096),
    "tile_cumsum": dict(rows=64, cols=10_000, tile_cols=1024),
    "tile_transpose": dict(rows=1000, cols=777, b=64),
    "tile_dropout": dict(n=1 << 22, block=4096),
    "tile_column_sums": dict(rows=300, cols=10_000),
}


@pytest.mark.parametrize("name", examples.TILE_EXAMPLES)
def test_tile_example_on_gpu_at_larger_sizes(name, rng):
    module = importlib.import_module(f"verdigris.examples.{name}")
    for r in module.check(rng, **LARGER[name]):
        assert r.ok, f"{r.name}: GPU error {r.error:.3e} over {r.rtol:.0e}"
