"""Shared reads of a tiled loop (VG213): a store and a load of one iteration, both under the
loop's run-time bound (`k0 < depth`), which is the same for every thread of the block. Where
the load runs, every thread's store of that iteration ran (coverage enumerates the block):
proven without the solver; a store that some threads skip leaves elements unwritten,
which is refused (or listed, never proven)."""
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt


@simt.kernel
def tiled_copy(x, out):  # every thread stores its element of the tile, then reads another's
    tile = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    n = x.shape[0]
    for k0 in range(int(simt.block_id(0)) * 128, n, int(simt.grid_dim(0)) * 128):
        tile[t] = x[k0 + t] if k0 + t < n else vg.float32(0)
        simt.barrier()
        if k0 + 127 - t < n:
            out[k0 + 127 - t] = tile[127 - t]
        simt.barrier()


@simt.kernel
def tiled_copy_half_stored(x, out):  # only the first half of the threads store
    tile = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    n = x.shape[0]
    for k0 in range(int(simt.block_id(0)) * 128, n, int(simt.grid_dim(0)) * 128):
        if t < 64:
            tile[t] = x[k0 + t] if k0 + t < n else vg.float32(0)
        simt.barrier()
        if k0 + 127 - t < n:
            out[k0 + 127 - t] = tile[127 - t]
        simt.barrier()


def analysis(kernel, n=1000):
    x = np.zeros(n, np.float32)
    return safety.analyze(kernel.specialize(x, x.copy(), block=(128, 1, 1)))


def test_a_tiled_loops_reads_are_proven_by_enumeration(rng):
    result = analysis(tiled_copy)
    assert not result.errors and result.facts["unproven_shared_reads"] == ()
    x = rng.random(1000).astype(np.float32)
    out = np.full_like(x, np.nan)
    tiled_copy[3, 128](x, out)
    np.testing.assert_array_equal(out, x)


def test_the_sgemm_examples_tiles_are_proven_written_without_the_solver():
    from verdigris.examples import sgemm

    a, b, c = (np.zeros(s, np.float32) for s in ((300, 200), (200, 250), (300, 250)))
    result = safety.analyze(sgemm.sgemm.specialize(a, b, c, block=(256, 1, 1), **sgemm.CONFIG))
    assert not result.errors and result.facts["unproven_shared_reads"] == ()
    assert result.solver_queries == 0


def test_a_store_some_threads_skip_is_refused_with_a_reader_and_the_element():
    with pytest.raises(vg.SafetyError) as info:
        analysis(tiled_copy_half_stored)
    assert info.value.code == "VG213"
    assert re.search(r"thread \(block 0, thread \d+\) reads tile\[(6[4-9]|[7-9]\d|1[0-2]\d)\]", str(info.value))
