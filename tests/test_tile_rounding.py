"""cuTile's `rounding_mode=` and `flush_to_zero=` (issue #26 item 3, docs/api.md "Rounding
modes"): `tile.truediv`, `sqrt` and `exp2`. On the cpu backend every mode computes the IEEE
result (round to nearest), `.ftz` flushing float32 subnormals; the PTX holds the one
instruction each mode names, and assembles with ptxas; modes that PTX lacks are refused."""
import re

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris import types as T
from verdigris.ir import ArrayType

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")

MODES = [(None, False), ("rn", False), ("rn", True), ("full", False), ("FULL", True),
         ("approx", False), ("APPROX", True)]
TINY = np.finfo(np.float32).tiny


def poisoned(n):
    return np.full(n, np.nan, np.float32)


@tile.kernel
def quotients(x, y, out, B: vg.constexpr, MODE: vg.constexpr, FTZ: vg.constexpr):
    i = tile.bid(0)
    a = tile.load(x, index=(i,), shape=(B,))
    q = tile.truediv(a, tile.load(y, index=(i,), shape=(B,)), rounding_mode=MODE, flush_to_zero=FTZ)
    tile.store(out, index=(i,), tile=q)


@tile.kernel
def roots(x, out, B: vg.constexpr, MODE: vg.constexpr, FTZ: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.sqrt(tile.load(x, index=(i,), shape=(B,)),
                                               rounding_mode=MODE, flush_to_zero=FTZ))


@tile.kernel
def powers_of_two(x, out, B: vg.constexpr, FTZ: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.exp2(tile.load(x, index=(i,), shape=(B,)),
                                               flush_to_zero=FTZ))


@pytest.mark.parametrize("mode, ftz", MODES)
def test_every_division_mode_is_the_ieee_quotient_on_the_cpu(mode, ftz, rng):
    x = rng.standard_normal(100).astype(np.float32)
    y = (rng.standard_normal(100) + 3).astype(np.float32)
    out = poisoned(100)
    quotients[4](x, y, out, B=32, MODE=mode, FTZ=ftz)
    np.testing.assert_array_equal(out, (x.astype(np.float64) / y).astype(np.float32))


@pytest.mark.parametrize("mode", [None, "full", "approx"])
def test_float16_divides_in_float32_rounded_once(mode, rng):
    x = rng.standard_normal(100).astype(np.float16)
    y = (rng.standard_normal(100) + 3).astype(np.float16)
    out = np.full(100, np.nan, np.float16)
    quotients[4](x, y, out, B=32, MODE=mode, FTZ=True)
    np.testing.assert_array_equal(out, (x.astype(np.float64) / y).astype(np.float16))


@pytest.mark.parametrize("mode, ftz", [m for m in MODES if m[0] not in ("full", "FULL")])
def test_every_sqrt_mode_is_the_ieee_root_on_the_cpu(mode, ftz, rng):
    x = rng.uniform(0, 100, 100).astype(np.float32)
    out = poisoned(100)
    roots[4](x, out, B=32, MODE=mode, FTZ=ftz)
    np.testing.assert_array_equal(out, np.sqrt(x.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("ftz", [False, True])
def test_exp2_with_or_without_flushing_is_exp2_on_the_cpu(ftz, rng):
    x = rng.uniform(-20, 20, 100).astype(np.float32)
    out = poisoned(100)
    powers_of_two[4](x, out, B=32, FTZ=ftz)
    np.testing.assert_allclose(out, np.exp2(x.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("mode", [None, "approx"])
def test_flush_to_zero_flushes_subnormal_operands_and_results(mode):
    x = np.array([TINY / 4, -TINY / 4, TINY * 4, 1.0, -TINY * 4], np.float32)
    y = np.array([1.0, 1.0, 16.0, 1.0, 8.0], np.float32)
    kept, flushed = poisoned(5), poisoned(5)
    quotients[1](x, y, kept, B=8, MODE=mode, FTZ=False)
    quotients[1](x, y, flushed, B=8, MODE=mode, FTZ=True)
    np.testing.assert_array_equal(kept, x / y)
    np.testing.assert_array_equal(flushed, [0.0, -0.0, 0.0, 1.0, -0.0])
    assert list(np.signbit(flushed)) == [False, True, False, False, True]


def test_exp2_flushes_a_subnormal_result():
    x = np.array([-130.0, -126.0, 1.0], np.float32)  # 2**-130 is subnormal in float32
    kept, flushed = poisoned(3), poisoned(3)
    powers_of_two[1](x, kept, B=4, FTZ=False)
    powers_of_two[1](x, flushed, B=4, FTZ=True)
    assert kept[0] == np.float32(2.0 ** -130) and flushed[0] == 0
    np.testing.assert_array_equal(flushed[1:], [2.0 ** -126, 2.0])


@tile.kernel
def normalized(x, out, B: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    norm = tile.sqrt(tile.sum(t * t), rounding_mode="approx", flush_to_zero=True)  # a scalar
    tile.store(out, index=(i,), tile=tile.truediv(t, norm, rounding_mode="full"))


def test_scalars_of_a_tile_kernel_take_the_keywords_too(rng):
    x = rng.uniform(0.1, 1, (4, 64)).astype(np.float32)
    out = np.full((4, 64), np.nan, np.float32)
    normalized[4](x.ravel(), out.ravel(), B=64)
    norm = np.sqrt(np.sum(x * x, axis=1, keepdims=True, dtype=np.float64))
    np.testing.assert_allclose(out, x / norm, rtol=1e-6)


@simt.kernel
def simt_roots(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = vg.math.sqrt(x[i], rounding_mode="approx") / 2


def test_the_keywords_work_in_simt_kernels_too(rng):
    x = rng.uniform(0, 10, 70).astype(np.float32)
    out = poisoned(70)
    simt_roots[3, 32](x, out)
    np.testing.assert_array_equal(out, (np.sqrt(x.astype(np.float64)) / 2).astype(np.float32))


# ----------------------------------------------------------------------------- refusals


@tile.kernel
def wide_quotients(x, out, B: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.store(out, index=(i,), tile=tile.truediv(t, 3.0, rounding_mode="approx"))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        kernel[1](*args, **kwargs)
    return info.value


@pytest.mark.parametrize("mode", ["rz", "RM", "down", 3])
def test_a_division_mode_ptx_lacks_is_refused(mode):
    z = np.zeros(8, np.float32)
    err = compile_error(quotients, z, z, z, B=8, MODE=mode, FTZ=False)
    assert f"truediv() has no rounding_mode={mode!r}" in str(err) and "'approx'" in str(err)
    located.assert_points_at(err, "q = tile.truediv(a, tile.load(y, index=(i,), shape=(B,)), "
                                  "rounding_mode=MODE, flush_to_zero=FTZ)", __file__)


def test_sqrt_has_no_full_mode():
    z = np.zeros(8, np.float32)
    err = compile_error(roots, z, z, B=8, MODE="full", FTZ=False)
    assert "sqrt() has no rounding_mode='full'" in str(err)


def test_flush_to_zero_takes_a_bool():
    z = np.zeros(8, np.float32)
    err = compile_error(powers_of_two, z, z, B=8, FTZ=1)
    assert "flush_to_zero= takes a constant True or False" in str(err)


def test_float64_takes_no_rounding_variant():
    z = np.zeros(8, np.float64)
    err = compile_error(wide_quotients, z, z, B=8)
    assert "not float64's" in str(err)
    located.assert_points_at(err, 'tile.store(out, index=(i,), tile=tile.truediv(t, 3.0, '
                                  'rounding_mode="approx"))', __file__)


@tile.kernel
def exp2_rounded(x, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.exp2(tile.load(x, index=(i,), shape=(B,)),
                                               rounding_mode="approx"))


def test_exp2_takes_no_rounding_mode():
    z = np.zeros(8, np.float32)
    err = compile_error(exp2_rounded, z, z, B=8)
    assert "exp2() takes 1 argument and the keywords flush_to_zero" in str(err)


# ----------------------------------------------------------------------------- PTX


def arr(dtype):
    return ArrayType(dtype, 1, "global", True, True)


PTX_CASES = [  # float16 and bfloat16 compute in float32
    (quotients, dict(MODE="approx", FTZ=False), "div.approx.f32"),
    (quotients, dict(MODE="approx", FTZ=True), "div.approx.ftz.f32"),
    (quotients, dict(MODE="full", FTZ=False), "div.full.f32"),
    (quotients, dict(MODE="full", FTZ=True), "div.full.ftz.f32"),
    (quotients, dict(MODE="rn", FTZ=True), "div.rn.ftz.f32"),
    (quotients, dict(MODE=None, FTZ=False), "div.rn.f32"),
    (roots, dict(MODE="approx", FTZ=False), "sqrt.approx.f32"),
    (roots, dict(MODE="approx", FTZ=True), "sqrt.approx.ftz.f32"),
    (roots, dict(MODE="rn", FTZ=True), "sqrt.rn.ftz.f32"),
    (roots, dict(MODE=None, FTZ=False), "sqrt.rn.f32"),
    (powers_of_two, dict(FTZ=True), "ex2.approx.ftz.f32"),
    (normalized, {}, "sqrt.approx.ftz.f32"),
    (normalized, {}, "div.full.f32"),
    (quotients, dict(MODE="approx", FTZ=False, DT=T.float16), "div.approx.f32"),
    (roots, dict(MODE="approx", FTZ=True, DT=T.bfloat16), "sqrt.approx.ftz.f32"),
]


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel_fn, constants, instruction", PTX_CASES,
                         ids=[f"{c[2]}-{c[1].get('DT', T.float32).name}" for c in PTX_CASES])
def test_each_mode_is_its_ptx_instruction(kernel_fn, constants, instruction, target):
    constants = dict(constants)
    a = arr(constants.pop("DT", T.float32))
    arrays = dict(x=a, y=a, out=a) if kernel_fn is quotients else dict(x=a, out=a)
    ptx = codegen.compile_to_ptx(kernel_fn.specialize_types({**arrays, "B": 32, **constants}),
                                 target).ptx
    found = set(re.findall(r"\b(?:div|sqrt|ex2)\.[a-z0-9.]+", ptx))
    assert instruction in found, found
    if kernel_fn is not normalized:
        assert found <= {instruction, "div.rn.f32"}, found  # no other variant slipped in
    codegen.assemble(ptx, target, optimize=False)
