"""numba's `forall` (docs/api.md "Launch shapes"): `k.forall(n, block=256)` of a SIMT kernel
is `k[vg.cdiv(n, block), block]`, checked as any launch is; tile kernels and bad counts are
refused with a LaunchError."""

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def threads_seen(out, n):
    i = simt.global_id(0)
    if i < n:
        out[i] = simt.grid_dim(0) * simt.block_dim(0) + simt.grid_dim(1) + simt.block_dim(1)


@pytest.mark.parametrize("block", [None, 32, 1024])
def test_forall_launches_enough_one_dimensional_blocks_for_n_threads(rng, block):
    for n in (1, int(rng.integers(2, 5000)), 256, 257):
        out = np.full(n + 7, -1, np.int64)
        kwargs = {} if block is None else {"block": block}
        threads_seen.forall(n, **kwargs)(out, n)
        per_block = block or 256
        assert (out[:n] == vg.cdiv(n, per_block) * per_block + 1 + 1).all()
        assert (out[n:] == -1).all()


def test_forall_is_the_subscript_launch():
    assert threads_seen.forall(1000) is threads_seen[4, 256]
    assert threads_seen.forall(1000, block=128) is threads_seen[8, 128]


def test_forall_of_no_threads_launches_nothing():
    out = np.full(4, -1, np.int64)
    threads_seen.forall(0)(out, 0)
    assert (out == -1).all()


@simt.kernel
def unguarded(x):
    i = simt.global_id(0)
    x[i] = i                    # the threads past x.shape[0] write past its end


@simt.kernel
def guarded(x):
    i = simt.global_id(0)
    if i < x.shape[0]:
        x[i] = i


def test_a_forall_launch_is_checked_as_any_launch(rng):
    n = int(rng.integers(1, 255))
    x = np.full(n, -1, np.int64)
    guarded.forall(n)(x)
    np.testing.assert_array_equal(x, np.arange(n))
    x = np.full(n, -1, np.int64)
    with pytest.raises(vg.BoundsError, match=rf"out of bounds: x\[{n}\] .* thread \({n % 256}, 0, 0\)"):
        unguarded.forall(n)(x)
    assert (x == -1).all()


@tile.kernel
def tile_copy(x, out):
    tile.store(out, index=(0,), tile=tile.load(x, index=(0,), shape=(8,)))


def test_forall_is_refused_for_tile_kernels_and_bad_counts():
    with pytest.raises(vg.LaunchError, match=r"forall\(\) launches SIMT kernels"):
        tile_copy.forall(8)
    for n, block in ((-1, 256), (2.5, 256), (True, 256), (8, 0), (8, 2048)):
        with pytest.raises(vg.LaunchError):
            threads_seen.forall(n, block=block)


FORALL_SITES = '''
import numpy as np
from verdigris import simt


@simt.kernel
def increment(x):
    i = simt.global_id(0)
    if i < x.shape[0]:
        x[i] += 1


@simt.kernel
def racy(x):
    x[0] = x[simt.global_id(0)]


x = np.zeros(1000, np.int32)
increment.forall(x.size)(x)
racy.forall(x.size, block=128)(x)
'''


def test_verdigris_check_reads_forall_launch_sites(tmp_path, capsys):
    """`k.forall(n, block=b)(...)` is a launch site as `k[grid, block](...)` is: checked with
    its block (256 where it says none)."""
    from verdigris.cli import main

    path = tmp_path / "sites.py"
    path.write_text(FORALL_SITES)
    status = main(["check", str(path)])
    out = capsys.readouterr().out
    assert status != 0 and "kernel 'increment': proven" in out
    assert "kernel 'racy': refused (VG202" in out and "blocks of 128 threads" in out
    assert "2 kernels and 2 launches checked" in out
