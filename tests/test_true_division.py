"""True division (docs/api.md "True division"): `/` of two integers is float64, as in Python
and NumPy (int32 / int32 -> float64), on both tracks; a float operand's type wins
(`i / 2.0` is float32, the weak-literal rule). References are NumPy's own quotients, which
the kernels match bit for bit (both convert each operand to float64 and divide once)."""

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris.ir.nodes import ArrayType


def typed_ir(kernel, *args, **kwargs):
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def locals_named(kernel_ir, name):
    return {t for k, t in kernel_ir.locals.items() if k.partition("#")[0] == name}


def poisoned(n, dtype=np.float64):
    out = np.empty(n, dtype)
    out[...] = np.nan
    return out


def integers(rng, n, dtype, nonzero=False):
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if nonzero:
        values[values == 0] = 1
    return values


# ----------------------------------------------------------------------------- SIMT


@simt.kernel
def simt_divide(a, b, n, by_array, by_literal, by_argument):
    i = simt.global_id(0)
    if i < a.shape[0]:
        by_array[i] = a[i] / b[i]
        by_literal[i] = a[i] / 7
        by_argument[i] = a[i] / n


@pytest.mark.parametrize("da, db", [(np.int32, np.int32), (np.int64, np.int64),
                                    (np.uint8, np.int8), (np.int16, np.uint32)])
def test_simt_integer_true_division_is_numpys_float64(rng, da, db):
    a, b = integers(rng, 300, da), integers(rng, 300, db)
    b[:3] = 0  # x / 0 is inf or nan, as in NumPy
    a[:3] = (0, 5, -5) if np.iinfo(da).min < 0 else (0, 5, 6)
    n = int(rng.integers(1, 1000))
    outs = [poisoned(300) for _ in range(3)]
    simt_divide[10, 32](a, b, n, *outs)
    with np.errstate(divide="ignore", invalid="ignore"):
        wants = (a / b, a / np.int64(7), a / n)
    for got, want in zip(outs, wants):
        np.testing.assert_array_equal(got, want)


@simt.kernel
def simt_quotient_types(a, b, out):
    i = simt.global_id(0)
    if i < a.shape[0]:
        q = a[i] / b[i]         # int32 / int32: float64
        f = a[i] / 2.0          # a float literal's type wins: float32
        out[i] = q + f


def test_simt_quotient_dtypes(rng):
    a, b = integers(rng, 64, np.int32), integers(rng, 64, np.int32, nonzero=True)
    ir = typed_ir(simt_quotient_types, a, b, poisoned(64))
    assert locals_named(ir, "q") == {vg.float64} and locals_named(ir, "f") == {vg.float32}
    out = poisoned(64)
    simt_quotient_types[2, 32](a, b, out)
    np.testing.assert_array_equal(out, a / b + (a.astype(np.float32) / np.float32(2)))


@simt.kernel
def stores_into_float32(a, b, out):
    i = simt.global_id(0)
    if i < a.shape[0]:
        out[i] = a[i] / b[i]


def test_a_float64_quotient_stored_into_float32_is_rounded_once(rng):
    a, b = integers(rng, 64, np.int64), integers(rng, 64, np.int64, nonzero=True)
    out = poisoned(64, np.float32)
    stores_into_float32[2, 32](a, b, out)
    np.testing.assert_array_equal(out, (a / b).astype(np.float32))


# ----------------------------------------------------------------------------- tile


@tile.kernel
def tile_divide(a, b, n, by_tile, by_literal, by_argument, B: vg.constexpr):
    i = tile.bid(0)
    x = tile.load(a, index=(i,), shape=(B,))
    y = tile.load(b, index=(i,), shape=(B,))
    tile.store(by_tile, index=(i,), tile=x / y)
    tile.store(by_literal, index=(i,), tile=x / 3)
    tile.store(by_argument, index=(i,), tile=x / n)


@pytest.mark.parametrize("da, db", [(np.int32, np.int32), (np.int8, np.uint16)])
def test_tile_integer_true_division_is_numpys_float64(rng, da, db):
    a, b = integers(rng, 128, da), integers(rng, 128, db, nonzero=True)
    n = int(rng.integers(1, 1000))
    outs = [poisoned(128) for _ in range(3)]
    tile_divide[4](a, b, n, *outs, B=32)
    for got, want in zip(outs, (a / b, a / np.int64(3), a / n)):
        np.testing.assert_array_equal(got, want)


@tile.kernel
def tile_quotient_types(a, out, B: vg.constexpr):
    x = tile.load(a, index=(0,), shape=(B,))
    q = x / x.shape[0]          # int32 tile / int: float64
    f = x / 2.0                 # float32
    tile.store(out, index=(0,), tile=q + f)


def test_tile_quotient_dtypes(rng):
    a = integers(rng, 16, np.int32)
    ir = typed_ir(tile_quotient_types, a, poisoned(16), B=16)
    assert {t.dtype for t in locals_named(ir, "q")} == {vg.float64}
    assert {t.dtype for t in locals_named(ir, "f")} == {vg.float32}
    out = poisoned(16)
    tile_quotient_types[1](a, out, B=16)
    np.testing.assert_array_equal(out, a / 16 + a.astype(np.float32) / np.float32(2))


# ----------------------------------------------------------------------------- PTX

I32, I64, F64 = vg.int32, vg.int64, vg.float64


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("kernel, specs", [
    (simt_divide, dict(a=ArrayType(I32, 1, "global"), b=ArrayType(I32, 1, "global"), n=I64,
                       by_array=ArrayType(F64, 1, "global"), by_literal=ArrayType(F64, 1, "global"),
                       by_argument=ArrayType(F64, 1, "global"))),
    (tile_divide, dict(a=ArrayType(I32, 1, "global"), b=ArrayType(I32, 1, "global"), n=I64,
                       by_tile=ArrayType(F64, 1, "global"), by_literal=ArrayType(F64, 1, "global"),
                       by_argument=ArrayType(F64, 1, "global"), B=64)),
], ids=["simt", "tile"])
def test_integer_true_division_assembles_as_a_float64_division(kernel, specs):
    ptx = codegen.compile_to_ptx(kernel.specialize_types(specs), "sm_80").ptx
    assert "div.rn.f64" in ptx and "div.rn.f32" not in ptx
    assert codegen.assemble(ptx, "sm_80")[:4] == b"\x7fELF"
