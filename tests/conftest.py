"""Test backends: tests run on the cpu backend unless marked `gpu`; `gpu` tests run on the
cuda backend and are skipped where no GPU and driver are present."""
import numpy as np
import pytest

from verdigris.runtime import backend, driver


def pytest_collection_modifyitems(config, items):
    if driver.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _backend(request):
    """Each test runs on the backend its marks ask for, and leaves the choice as it was."""
    saved = backend._chosen
    backend.set_backend("cuda" if "gpu" in request.keywords else "cpu")
    yield
    backend._chosen = saved


@pytest.fixture
def rng():
    """Fresh random inputs every run; the seed is printed when a test fails."""
    seed = np.random.SeedSequence().entropy
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def uncompiled(monkeypatch):
    """Every kernel starts with no specialization and no launcher (and gets its own back
    after the test): what a test observes is specialized, proven or compiled in the test,
    whatever ran earlier in the process."""
    from verdigris.runtime import dispatch

    for kernel in list(dispatch._KERNELS):
        monkeypatch.setattr(kernel, "_specializations", {})
        monkeypatch.setattr(kernel, "_recorded", {})
        monkeypatch.setattr(kernel, "_launches", {})
