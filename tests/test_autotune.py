"""`vg.autotune` on the cpu backend: the first config untimed; with a timer injected, the
fastest config per key, one timing per key, the arguments restored after timing, and the
winner kept on disk for the next process."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile
from verdigris.errors import LaunchError


def make_add():
    @tile.kernel
    def add(a, b, out, n, BLOCK: vg.constexpr):
        i = tile.bid(0)
        tile.store(out, index=(i,), tile=tile.load(a, index=(i,), shape=(BLOCK,))
                   + tile.load(b, index=(i,), shape=(BLOCK,)))
    return add


CONFIGS = [{"BLOCK": 256}, {"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 512}]


class FakeTimer:
    """Seconds per config by the BLOCK it ran with (read off the launch's grid)."""

    def __init__(self, seconds: dict):
        self.seconds, self.calls = seconds, []

    def __call__(self, run):
        run()
        block = self.last_block
        self.calls.append(block)
        return self.seconds[block]


def tuned(timer, configs=CONFIGS):
    add = make_add()

    def grid(meta):
        timer.last_block = meta["BLOCK"]
        return vg.cdiv(meta["n"], meta["BLOCK"])
    return vg.autotune(configs=configs, key=["n"], timer=timer)(add), grid


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    return tmp_path


def tuning_entries(directory) -> list:
    """The autotuner's entries among what the cache directory holds."""
    return [p for p in directory.iterdir() if p.is_file() and p.read_bytes().startswith(b'{"choice"')]


def inputs(rng, n):
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    return a, b, np.full(n, np.nan, np.float32)


def test_cpu_backend_uses_the_first_config_without_timing(rng, cache_dir):
    add = vg.autotune(configs=CONFIGS, key=["n"])(make_add())
    a, b, out = inputs(rng, 1000)
    blocks = []
    add[lambda meta: blocks.append(meta["BLOCK"]) or vg.cdiv(meta["n"], meta["BLOCK"])](a, b, out, 1000)
    np.testing.assert_array_equal(out, a + b)
    assert blocks == [256] and not tuning_entries(cache_dir)


def test_a_launch_cannot_give_what_autotune_chooses(rng):
    add = vg.autotune(configs=CONFIGS, key=["n"])(make_add())
    a, b, out = inputs(rng, 1000)
    with pytest.raises(LaunchError, match="'BLOCK' is chosen by vg.autotune") as info:
        add[4](a, b, out, 1000, BLOCK=256)
    assert info.value.loc.file == __file__ and "tuned_kernel" in info.value.hint
    add.tuned_kernel[4](a, b, out, 1000, BLOCK=256)  # the kernel itself takes it
    np.testing.assert_array_equal(out, a + b)


def test_the_fastest_config_wins_once_per_key(rng, capsys):
    timer = FakeTimer({256: 3e-6, 1024: 1e-6, 512: 2e-6})
    add, grid = tuned(timer)
    for n in (1000, 1000, 5000):
        a, b, out = inputs(rng, n)
        add[grid](a, b, out, n)
        np.testing.assert_array_equal(out, a + b)
        assert timer.last_block == 1024  # the winner ran last, for real
    assert timer.calls == [256, 1024, 512] * 2  # timed for n=1000 and n=5000 only
    log = capsys.readouterr().err
    assert log.count("verdigris: autotuned add") == 2
    assert "n=1000" in log and "BLOCK=1024 num_warps=4 1.0 us" in log and "-> BLOCK=1024 num_warps=4" in log


def test_dtypes_are_part_of_the_key(rng):
    timer = FakeTimer({256: 1e-6, 1024: 2e-6, 512: 3e-6})
    add, grid = tuned(timer)
    a, b, out = inputs(rng, 100)
    add[grid](a, b, out, 100)
    add[grid](a.astype(np.float64), b.astype(np.float64), out.astype(np.float64), 100)
    assert len(timer.calls) == 6


def test_timing_restores_the_arrays_the_kernel_writes(rng):
    @tile.kernel
    def accumulate(x, acc, BLOCK: vg.constexpr):
        i = tile.bid(0)
        tile.store(acc, index=(i,), tile=tile.load(acc, index=(i,), shape=(BLOCK,))
                   + tile.load(x, index=(i,), shape=(BLOCK,)))

    runs = []
    tuner = vg.autotune(configs=[{"BLOCK": 128}, {"BLOCK": 64}], key=["x"],
                        timer=lambda run: (run(), runs.append(1), 1e-6 * len(runs))[-1])(accumulate)
    x = rng.standard_normal(1000).astype(np.float32)
    acc = rng.standard_normal(1000).astype(np.float32)
    start = acc.copy()
    tuner[lambda meta: vg.cdiv(1000, meta["BLOCK"])](x, acc)
    np.testing.assert_array_equal(acc, start + x)  # one launch's worth, after two timed runs
    assert len(runs) == 2


def test_the_winner_is_kept_on_disk_for_the_next_process(rng, cache_dir):
    add, grid = tuned(FakeTimer({256: 3e-6, 1024: 2e-6, 512: 1e-6}))
    a, b, out = inputs(rng, 3000)
    add[grid](a, b, out, 3000)
    assert len(tuning_entries(cache_dir)) == 1
    never = FakeTimer({})  # a fresh tuner (a new process) must not time again
    again, grid = tuned(never)
    add_out = np.full(3000, np.nan, np.float32)
    again[grid](a, b, add_out, 3000)
    assert never.calls == [] and never.last_block == 512
    np.testing.assert_array_equal(add_out, a + b)
    changed, grid = tuned(FakeTimer({256: 1e-6, 1024: 2e-6}), CONFIGS[:2])  # other configs: other entry
    changed[grid](a, b, add_out, 3000)
    assert len(tuning_entries(cache_dir)) == 2


def test_simt_kernels_tune_their_constexprs(rng):
    @simt.kernel
    def scale(x, out, FACTOR: vg.constexpr):
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = x[i] * FACTOR

    tuner = vg.autotune(configs=[{"FACTOR": 2}], key=[])(scale)
    x = rng.standard_normal(300).astype(np.float32)
    out = np.zeros_like(x)
    tuner[lambda meta: vg.cdiv(300, 128), 128](x, out)
    np.testing.assert_array_equal(out, x * 2)


@pytest.mark.parametrize("configs,key,message", [
    ([], ["n"], "non-empty list"),
    ([{"SIZE": 4}], ["n"], "'SIZE' is not a constexpr"),
    ([{"n": 4}], ["n"], "'n' is not a constexpr"),
    ([{"BLOCK": 4}], ["m"], "key 'm' is not a parameter"),
])
def test_bad_configs_and_keys_are_refused(configs, key, message):
    with pytest.raises(LaunchError, match=message):
        vg.autotune(configs=configs, key=key)(make_add())


def test_autotune_decorates_kernels_only():
    with pytest.raises(LaunchError, match="decorates a kernel"):
        vg.autotune(configs=[{}], key=[])(lambda x: x)


def test_cuda_path_on_the_fake_driver(tmp_path):
    """The GPU path without a GPU (tests/fakecuda: launches are recorded, not run): CUDA-event
    timing of every config, the written arrays copied and put back, one line, the winner
    launched, then taken from the disk cache by the next process."""
    fakecuda = pytest.importorskip("tests.fakecuda")
    if fakecuda.library_dir() is None:
        pytest.skip("needs a C compiler")
    code = """
import numpy as np
import verdigris as vg
from tests.fakecuda import last_launch
from tests.fakecuda.kernels import add
tuned = vg.autotune(configs=[{"BLOCK": 256}, {"BLOCK": 1024, "num_warps": 2}], key=["a"])(add)
a = vg.asarray(np.arange(5000, dtype=np.float32))
out = vg.asarray(np.zeros(5000, np.float32))
tuned[lambda meta: vg.cdiv(meta["a"].shape[0], meta["BLOCK"])](a, a, out)
launch = last_launch()
print("LAUNCH", launch.grid[0], launch.block[0])
print("OUT", float(out.numpy()[1]))
"""
    first = fakecuda.run(code, VERDIGRIS_CACHE_DIR=str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert "verdigris: autotuned add for a=(5000,)" in first.stderr and "BLOCK=1024 num_warps=2" in first.stderr
    grid, block = map(int, first.stdout.split("LAUNCH")[1].split()[:2])
    winner = first.stderr.split("-> ")[1].split()[0]  # the fake's timings are wall-clock noise
    assert (grid, block) == {"BLOCK=256": (20, 32), "BLOCK=1024": (5, 64)}[winner]
    assert "OUT 0.0" in first.stdout  # put back after timing (the fake driver runs nothing)
    second = fakecuda.run(code, VERDIGRIS_CACHE_DIR=str(tmp_path))
    assert second.returncode == 0, second.stderr
    assert "autotuned" not in second.stderr and second.stdout.split("LAUNCH")[1].split()[0] == str(grid)
