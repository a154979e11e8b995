"""Every tile example on the GPU: matches NumPy at the example's sizes and at larger ones
(several full tiles, edge tiles, 64K-wide online softmax rows), and matches the cpu backend
on the same inputs."""
import importlib

import numpy as np
import pytest

from verdigris import examples
from verdigris.runtime import backend

pytestmark = pytest.mark.gpu

LARGER = {
    "tile_vector_add": dict(n=(1 << 22) + 3, block=4096),
    "tile_bias_gelu": dict(rows=1000, cols=3000),
    "tile_softmax": dict(rows=512, cols=4096, wide=65536, block=4096),
    "tile_layernorm": dict(rows=256, cols=8192, tile_cols=8192),
    "tile_rmsnorm": dict(rows=256, cols=8192, tile_cols=8192),
    "tile_row_reduce": dict(rows=300, cols=20_000, tile_cols=4096),
    "tile_cumsum": dict(rows=64, cols=10_000, tile_cols=1024),
    "tile_transpose": dict(rows=1000, cols=777, b=64),
    "tile_dropout": dict(n=1 << 22, block=4096),
}


@pytest.mark.parametrize("name", examples.TILE_EXAMPLES)
def test_tile_example_on_gpu_matches_numpy_and_cpu(name):
    module = importlib.import_module(f"verdigris.examples.{name}")
    seed = np.random.SeedSequence().entropy
    gpu = module.check(np.random.default_rng(seed))
    backend.set_backend("cpu")
    cpu = module.check(np.random.default_rng(seed))
    for g, c in zip(gpu, cpu, strict=True):
        assert g.ok, f"{g.name} (seed {seed}): GPU error {g.error:.3e} over {g.rtol:.0e}"
        np.testing.assert_array_equal(g.want, c.want)  # the same inputs reached both
        scale = max(float(np.max(np.abs(c.got.astype(np.float64)), initial=0)), 1e-30)
        diff = float(np.max(np.abs(g.got.astype(np.float64) - c.got), initial=0)) / scale
        assert diff <= 2 * g.rtol, f"{g.name} (seed {seed}): GPU and cpu differ by {diff:.3e}"


@pytest.mark.parametrize("name", examples.TILE_EXAMPLES)
def test_tile_example_on_gpu_at_larger_sizes(name, rng):
    module = importlib.import_module(f"verdigris.examples.{name}")
    for r in module.check(rng, **LARGER[name]):
        assert r.ok, f"{r.name}: GPU error {r.error:.3e} over {r.rtol:.0e}"
