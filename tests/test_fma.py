"""The `fma` kernel option: with `fma=True` float multiply-adds contract into one `fma` on
the GPU; by default every operation rounds on its own (as on the cpu backend)."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile
from verdigris.codegen import compile_to_ptx
from verdigris.ir.printer import format_kernel


def _axpy(**options):
    @simt.kernel(**options)
    def axpy(alpha, x, y, out):
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = alpha * x[i] + y[i]
    return axpy


def _scale_shift(**options):
    @tile.kernel(**options)
    def scale_shift(x, w, b, out, BLOCK: vg.constexpr):
        i = tile.bid(0)
        t = tile.load(x, index=(i,), shape=(BLOCK,))
        tile.store(out, index=(i,), tile=t * tile.load(w, index=(i,), shape=(BLOCK,))
                   + tile.load(b, index=(i,), shape=(BLOCK,)))
    return scale_shift


def _ptx(kernel, *args, **kwargs) -> str:
    return compile_to_ptx(kernel.specialize(*args, **kwargs), "sm_90a").ptx


def _arrays(n=1000):
    return [np.zeros(n, np.float32) for _ in range(4)]


@pytest.mark.parametrize("fma, fused", [({}, False), ({"fma": False}, False), ({"fma": True}, True)])
def test_simt_multiply_add_is_fused_only_when_the_kernel_says_fma_true(fma, fused):
    x, y, out, _ = _arrays()
    ptx = _ptx(_axpy(**fma), 2.0, x, y, out, block=(256,))
    assert ("fma.rn.f32" in ptx) == fused
    assert ("mul.rn.f32" in ptx or "mul.f32" in ptx) == (not fused)


@pytest.mark.parametrize("fma, fused", [({}, False), ({"fma": True}, True)])
def test_tile_multiply_add_is_fused_only_when_the_kernel_says_fma_true(fma, fused):
    x, w, b, out = _arrays(4096)
    ptx = _ptx(_scale_shift(**fma), x, w, b, out, BLOCK=1024)
    assert ("fma.rn.f32" in ptx) == fused


def test_the_option_is_part_of_the_printed_ir_and_so_of_every_cache_key():
    x, y, out, _ = _arrays()
    fused = format_kernel(_axpy(fma=True).specialize(2.0, x, y, out, block=(256,)))
    rounded = format_kernel(_axpy().specialize(2.0, x, y, out, block=(256,)))
    assert "fma=True" in fused and "fma=True" not in rounded
    assert fused.replace("\n", "", 1) != rounded.replace("\n", "", 1)


def test_both_settings_compute_the_same_on_the_cpu_backend(rng):
    n = 3000
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    outs = []
    for options in ({}, {"fma": True}):
        out = np.full(n, np.nan, np.float32)
        _axpy(**options)[vg.cdiv(n, 256), 256](1.5, x, y, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], np.float32(1.5) * x + y)  # each operation rounded


def test_an_unknown_option_is_refused_at_the_definition():
    with pytest.raises(vg.CompileError, match=r"unknown option 'fast'; the options are fma") as info:
        _axpy(fast=True)
    assert info.value.loc is not None and info.value.loc.file.endswith("test_fma.py")
