"""`vg.autotune` on the GPU: CUDA-event timing picks a config, prints one line, keeps the
choice in memory and on disk, and leaves the arguments as one launch of the winner would."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import tile
from verdigris.examples.tile_vector_add import add

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_tuned_vector_add_times_once_per_key(rng, capsys):
    tuned = vg.autotune(configs=[{"BLOCK": 1024}, {"BLOCK": 4096, "num_warps": 8},
                                 {"BLOCK": 2048, "num_warps": 2}], key=["a"])(add)
    for n in (1 << 20, 1 << 20, 12345):
        a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        out = vg.asarray(np.full(n, np.nan, np.float32))
        tuned[lambda meta: vg.cdiv(meta["a"].shape[0], meta["BLOCK"])](vg.asarray(a), vg.asarray(b), out)
        np.testing.assert_array_equal(out.numpy(), a + b)
    log = capsys.readouterr().err
    assert log.count("verdigris: autotuned add") == 2 and "a=(1048576,)" in log and " us" in log


def test_tuning_restores_what_the_kernel_writes(rng):
    @tile.kernel
    def accumulate(x, acc, BLOCK: vg.constexpr):
        i = tile.bid(0)
        tile.store(acc, index=(i,), tile=tile.load(acc, index=(i,), shape=(BLOCK,))
                   + tile.load(x, index=(i,), shape=(BLOCK,)))

    tuned = vg.autotune(configs=[{"BLOCK": 256}, {"BLOCK": 1024}], key=["x"])(accumulate)
    x, start = (rng.standard_normal(100_000).astype(np.float32) for _ in range(2))
    acc = vg.asarray(start)
    tuned[lambda meta: vg.cdiv(100_000, meta["BLOCK"])](vg.asarray(x), acc)
    np.testing.assert_array_equal(acc.numpy(), start + x)
