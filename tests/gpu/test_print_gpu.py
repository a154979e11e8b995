"""`print(...)` on the GPU (vprintf): the lines the cpu backend prints, as a set (threads
print in any order on the GPU), for a SIMT kernel and a tile kernel; a tile's elements
each once (a register several threads hold is printed by one of them, padding by none)."""
import ctypes

import numpy as np
import pytest

import verdigris as vg
from tests.test_print import element_lines, show_elements, show_grid, show_sums, show_values

pytestmark = pytest.mark.gpu


def printed(capfd, launch) -> list:
    capfd.readouterr()
    launch()
    vg.synchronize()  # the device's printf buffer reaches stdout at a synchronization
    ctypes.CDLL(None).fflush(None)  # through C's stdio, which may buffer it
    return capfd.readouterr().out.splitlines()


def on_cpu(capfd, launch) -> list:
    vg.set_backend("cpu")
    try:
        return printed(capfd, launch)
    finally:
        vg.set_backend("cuda")


def test_simt_print_gives_the_cpu_backends_lines(rng, capfd):
    x = rng.standard_normal(64).astype(np.float32)
    big = rng.standard_normal(64)
    flags = rng.integers(-3, 3, 64).astype(np.int32)
    n = int(rng.integers(5, 60))
    args = (x, big, flags)
    gpu = printed(capfd, lambda: (show_values[2, 32](*map(vg.asarray, args), n), vg.asarray(x).numpy()))
    cpu = on_cpu(capfd, lambda: show_values[2, 32](*args, n))
    assert len(cpu) == n and sorted(gpu) == sorted(cpu)


def test_sep_end_and_ids(capfd):
    out = vg.asarray(np.full((2, 6), np.nan, np.float32))
    gpu = printed(capfd, lambda: (show_grid[2, (3, 2)](out), out.numpy()))
    assert sorted(gpu) == sorted("[block (%d, 0, 0) thread (%d, %d, 0)] %d,%d;" % (b, tx, ty, tx, ty)
                                 for b in range(2) for ty in range(2) for tx in range(3))


def test_a_tile_kernel_prints_once_per_block(rng, capfd):
    x = rng.standard_normal(40).astype(np.float32)
    out = vg.asarray(np.full(40, np.nan, np.float32))
    gpu = printed(capfd, lambda: (show_sums[5](vg.asarray(x), out, B=8), out.numpy()))
    assert sorted(line.split(" block sum ")[0] for line in gpu) == ["[block (%d, 0, 0)]" % b for b in range(5)]
    sums = sorted((int(line.split()[-1]), float(line.split()[-2])) for line in gpu)
    assert np.allclose([s for _, s in sums], x.reshape(5, 8).astype(np.float64).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("R, C", [(2, 3), (16, 64)])
def test_each_element_of_a_tile_prints_once(rng, capfd, R, C):
    x = rng.standard_normal((3 * R, C)).astype(np.float32)
    out = vg.asarray(np.full_like(x, np.nan))
    gpu = printed(capfd, lambda: (show_elements[3](vg.asarray(x), out, R=R, C=C), out.numpy()))
    want = element_lines(x, R, C)
    assert len(gpu) == len(want)  # the printf buffer (1 MB) holds these
    key = lambda line: line.split(" row sum")[0]  # noqa: E731 -- sums may round apart
    assert sorted(map(key, gpu)) == sorted(map(key, want))
