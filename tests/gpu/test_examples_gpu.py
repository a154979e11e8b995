"""Every example (SIMT and tile) on the GPU: matches NumPy, and matches the cpu backend on the
same inputs."""
import importlib

import numpy as np
import pytest

from verdigris import examples
from verdigris.runtime import backend

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", examples.SIMT_EXAMPLES + examples.TILE_EXAMPLES)
def test_example_on_gpu_matches_numpy_and_cpu(name):
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
