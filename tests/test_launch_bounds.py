"""The `min_blocks_per_sm` kernel option (CUDA's `__launch_bounds__`): the PTX entry gets
`.maxntid` (the launch's threads per block) and `.minnctapersm`, so ptxas keeps to the
registers that let that many blocks share a multiprocessor; values outside 1..32 are
refused where the kernel is defined; the cpu backend computes the same either way."""
import re
import subprocess

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris.errors import CompileError
from verdigris.examples import reduce_sum, tile_gemm
from verdigris.ir.printer import format_kernel

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
REGISTERS = 65536  # per multiprocessor, sm_80 to sm_90


def _sum_kernel(**options):
    return simt.kernel(**options)(reduce_sum.block_sum.fn)


@tile.kernel(min_blocks_per_sm=3)
def scale(x, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(BLOCK,)) * 2.0)


@needs_ptxas
@pytest.mark.parametrize("block, blocks", [(1024, 2), (512, 4), (256, 1)])
def test_simt_entry_gets_the_launch_bounds_and_ptxas_keeps_to_them(block, blocks, tmp_path):
    x, out = np.zeros(1 << 20, np.float32), np.zeros(1, np.float32)
    ir = _sum_kernel(min_blocks_per_sm=blocks).specialize(x, out, BLOCK=block, PER_THREAD=8,
                                                          block=(block,))
    assert f"min_blocks_per_sm={blocks}" in format_kernel(ir)  # and so in every cache key
    ptx = codegen.compile_to_ptx(ir, "sm_90a").ptx
    assert f".maxntid {block}" in ptx and f".minnctapersm {blocks}" in ptx
    source = tmp_path / "k.ptx"
    source.write_text(ptx)
    done = subprocess.run([codegen.ptxas_path(), "-arch=sm_90a", "-v", str(source), "-o",
                           str(tmp_path / "k.cubin")], capture_output=True, text=True, check=True)
    used = int(re.search(r"Used (\d+) registers", done.stdout + done.stderr).group(1))
    assert used * block * blocks <= REGISTERS


@needs_ptxas
def test_without_the_option_the_entry_is_bounded_by_its_block_only(tmp_path):
    """A block of 1024 threads has at most 64 registers each: `.maxntid` tells ptxas, so a
    kernel never takes more than its launch can give (it failed to launch before)."""
    x, out = np.zeros(4096, np.float32), np.zeros(1, np.float32)
    ir = _sum_kernel().specialize(x, out, BLOCK=1024, PER_THREAD=8, block=(1024,))
    ptx = codegen.compile_to_ptx(ir, "sm_90a").ptx
    assert ".maxntid 1024" in ptx and ".minnctapersm" not in ptx
    assert "min_blocks_per_sm" not in format_kernel(ir)
    source = tmp_path / "k.ptx"
    source.write_text(ptx)
    done = subprocess.run([codegen.ptxas_path(), "-arch=sm_90a", "-v", str(source), "-o",
                           str(tmp_path / "k.cubin")], capture_output=True, text=True, check=True)
    assert int(re.search(r"Used (\d+) registers", done.stdout + done.stderr).group(1)) * 1024 <= REGISTERS


def test_tile_entry_gets_its_warps_as_the_threads():
    x, out = np.zeros(4096, np.float32), np.zeros(4096, np.float32)
    ptx = codegen.compile_to_ptx(scale.specialize(x, out, BLOCK=1024), "sm_90a").ptx
    threads = int(re.search(r"\.maxntid (\d+)", ptx).group(1))
    assert threads % 32 == 0 and ".minnctapersm 3" in ptx


def test_a_warp_specialized_product_refuses_more_than_one_block():
    a = np.zeros((1024, 1024), np.float16)
    gemm = tile.kernel(min_blocks_per_sm=2)(tile_gemm.gemm.fn)
    ir = gemm.specialize(a, a, np.zeros((1024, 1024), np.float32), BM=128, BN=256, BK=64)
    with pytest.raises(CompileError, match="min_blocks_per_sm=2 cannot hold for this kernel"):
        codegen.compile_to_ptx(ir, "sm_90a")


@pytest.mark.parametrize("value", [0, 33, 2.0, "2", True])
def test_bad_values_are_refused_at_the_definition(value):
    with pytest.raises(CompileError, match="give a whole number from 1 to 32") as info:
        _sum_kernel(min_blocks_per_sm=value)
    assert info.value.loc.file == reduce_sum.block_sum.fn.__code__.co_filename


def test_the_cpu_backend_computes_the_same(rng):
    x = rng.random(100_003).astype(np.float32)
    sums = []
    for options in ({}, {"min_blocks_per_sm": 2}):
        out = np.zeros(1, np.float32)
        _sum_kernel(**options)[8, 128](x, out, BLOCK=128, PER_THREAD=4)
        sums.append(out[0])
    assert sums[0] == sums[1]
    np.testing.assert_allclose(sums[0], x.astype(np.float64).sum(), rtol=1e-5)
