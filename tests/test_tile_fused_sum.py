"""`tile.sum(x * y)` in a kernel with `fma=True`: the in-thread part of the sum runs as
chains of `reduce.CHAIN` partials, so each product after a chain's first fuses into the add
that takes it (`fma.rn.f32`, as Triton's `tl.sum(x * x)`); without `fma` every multiply and
add rounds on its own (no fused op in the PTX). Checked on the PTX (sm_90a) and, run on the
host CPU (`host_jit`), against the cpu backend within float32 rounding."""
from __future__ import annotations

import re

import numpy as np
import pytest

import host_jit
import verdigris as vg
from verdigris import codegen, tile
from verdigris.ir.nodes import ArrayType
from verdigris.runtime import backend
from verdigris.runtime.dispatch import KernelFunction
from verdigris.tile.reduce import CHAIN

COLS, WARPS = 4096, 4  # 32 elements per thread: 4 chains of 8


@tile.kernel
def squares(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS))
    tile.store(out, index=(r,), tile=tile.full((1,), tile.sum(t * t)))


FUSED = KernelFunction(squares.fn, "tile", fma=True)
SPECS = dict(x=ArrayType(vg.float32, 2, "global", True, True), out=ArrayType(vg.float32, 1, "global", True, True),
             COLS=COLS)


def ptx(kernel) -> str:
    return codegen.compile_to_ptx(kernel.specialize_types(SPECS, (32 * WARPS,)), "sm_90a").ptx


def test_products_fuse_into_the_chains_adds():
    per_thread = COLS // (32 * WARPS)
    fused = len(re.findall(r"fma\.rn\.f32", ptx(FUSED)))
    assert fused >= per_thread - per_thread // CHAIN


def test_without_fma_nothing_fuses():
    text = ptx(squares)
    assert "fma.rn.f32" not in text and len(re.findall(r"mul\.rn\.f32", text)) >= COLS // (32 * WARPS)


@pytest.mark.parametrize("kernel", [squares, FUSED], ids=["rounded", "fused"])
def test_sum_of_squares_on_the_host(kernel):
    rng = np.random.default_rng()
    x = rng.standard_normal((3, COLS)).astype(np.float32)
    out = np.full(3, np.nan, np.float32)
    assert host_jit.run(kernel, 3, num_warps=WARPS, x=x, out=out, COLS=COLS) is None
    want = (x.astype(np.float64) ** 2).sum(1)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    backend.set_backend("cpu")
    cpu = np.full(3, np.nan, np.float32)
    kernel[3](x, cpu, COLS=COLS)
    np.testing.assert_allclose(cpu, want, rtol=1e-5)
