"""64-bit integer arguments specialize on int32's range (`ir.nodes.Param.narrow`), on the cpu
backend: a launch whose int64 or uint64 scalar lies in -2**31 <= v < 2**31 runs the narrow
variant, whose race and bounds proofs know that range; a larger value runs the wide variant,
proven or refused on its own. Each row kernel beside its use: proven with a Python int
width, refused (with the values that wrap) with a width near 2**62, on one kernel object
whose launches alternate."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile
from verdigris.runtime.signatures import SignatureError, parse_signature
from verdigris.frontend.typing import Narrow
from verdigris.ir.printer import format_kernel
from verdigris.runtime.bundle import _serving
from verdigris.runtime.scalars import is_narrow, narrowness


@simt.kernel
def rows(x, out, width):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row < x.shape[0] and col < width:
        out[row * width + col] = x[row]


@simt.kernel
def rows_unsigned(x, out, width):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row < x.shape[0] and col < vg.int64(width):
        out[vg.uint64(row) * width + vg.uint64(col)] = x[row]


@tile.kernel
def keep_below(x, out, n, BLOCK: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=tile.where(tile.arange(BLOCK) < n, t, 0.0))


ROWS, WIDTH = 4, 8
GRID, BLOCK = (1, ROWS), (WIDTH, 1)


def _rows_reference(x):
    return np.repeat(x.astype(np.float64), WIDTH)


def _variants(kernel) -> list:
    """The narrow fact of each specialization's last scalar, in the order they were built."""
    return [narrowness(key[-1]) for key in kernel._specializations]


@pytest.fixture(autouse=True)
def cpu_backend(monkeypatch):
    monkeypatch.setenv("VERDIGRIS_BACKEND", "cpu")


def test_the_narrow_range_is_int32s():
    for v in (0, 7, -2**31, 2**31 - 1, np.int64(-2**31), np.uint64(2**31 - 1)):
        assert is_narrow(v)
    for v in (2**31, -2**31 - 1, 2**62, np.int64(2**62), np.uint64(2**31), np.uint64(2**64 - 1)):
        assert not is_narrow(v)


@pytest.mark.parametrize("width", [WIDTH, np.int64(WIDTH)])
def test_a_row_kernel_with_a_small_width_is_proven_and_runs(rng, width):
    x = rng.standard_normal(ROWS).astype(np.float32)
    out = np.full(ROWS * WIDTH, np.nan, np.float32)
    rows[GRID, BLOCK](x, out, width)
    assert np.array_equal(out, _rows_reference(x).astype(np.float32))
    ir = rows.specialize(x, out, width, block=BLOCK)
    assert [p.narrow for p in ir.params] == [False, False, True]
    assert "width: int64 narrow" in format_kernel(ir)


@pytest.mark.parametrize("width", [np.int64(2**62), np.int64(2**31), 2**40])
def test_a_row_kernel_with_a_huge_width_is_refused_with_the_values_that_wrap(rng, width):
    x = rng.standard_normal(ROWS).astype(np.float32)
    out = np.full(ROWS * WIDTH, np.nan, np.float32)
    with pytest.raises(vg.SafetyError) as err:
        rows[GRID, BLOCK](x, out, width)
    text = str(err.value)
    assert err.value.code == "VG202" and "wraps around in int64" in text
    assert "width = " in text and "thread" in text
    assert np.isnan(out).all()  # nothing ran


def test_launches_alternating_small_and_huge_values_get_their_variant_each_time(rng):
    rows._specializations.clear()
    x = rng.standard_normal(ROWS).astype(np.float32)
    for width in (WIDTH, 2**62, WIDTH, np.int64(2**62), -2**31, 2**31, WIDTH):
        out = np.full(ROWS * WIDTH, np.nan, np.float32)
        if is_narrow(width):
            rows[GRID, BLOCK](x, out, width)
            want = _rows_reference(x) if width == WIDTH else np.full(ROWS * WIDTH, np.nan)
            assert np.array_equal(out, want.astype(np.float32), equal_nan=True)
        else:
            with pytest.raises(vg.SafetyError, match="wraps around"):
                rows[GRID, BLOCK](x, out, width)
            assert np.isnan(out).all()
    assert sorted(_variants(rows)) == [False, True]  # two variants, whatever the order


def test_an_unsigned_width_specializes_the_same_way(rng):
    rows_unsigned._specializations.clear()
    x = rng.standard_normal(ROWS).astype(np.float32)
    out = np.full(ROWS * WIDTH, np.nan, np.float32)
    rows_unsigned[GRID, BLOCK](x, out, np.uint64(WIDTH))
    assert np.array_equal(out, _rows_reference(x).astype(np.float32))
    with pytest.raises(vg.SafetyError):
        rows_unsigned[GRID, BLOCK](x, out, np.uint64(2**62))
    assert sorted(_variants(rows_unsigned)) == [False, True]


def test_only_64_bit_integers_carry_the_fact(rng):
    x = rng.standard_normal(ROWS).astype(np.float32)
    out = np.full(ROWS * WIDTH, np.nan, np.float32)
    key = rows.spec_key([x, out, np.int32(WIDTH)], rows.describe_args([x, out, np.int32(WIDTH)]),
                        BLOCK)
    assert key[-1] == ("s", "int32") and narrowness(key[-1]) is None
    entries = [rows.spec_key([x, out, w], rows.describe_args([x, out, w]), BLOCK)[-1]
               for w in (WIDTH, 2**40, np.uint64(3))]
    assert entries == [("s", "int64", None, True), ("s", "int64", None, False),
                       ("s", "uint64", None, True)]
    assert all(type(e[-1]) is bool for e in entries)  # Python bools: bundles keep keys' repr


def test_a_tile_kernel_specializes_on_both_facts(rng):
    x = rng.standard_normal(4096).astype(np.float32)
    keep_below._specializations.clear()
    for n in (992, 2**40, 1000, 2**40 + 8):
        out = np.full(4096, np.nan, np.float32)
        keep_below[4](x, out, n, BLOCK=1024)
        want = np.where(np.arange(4096) % 1024 < n, x.astype(np.float64), 0.0)
        assert np.array_equal(out, want.astype(np.float32))
    facts = sorted((key[4][2], key[4][3]) for key in keep_below._specializations)
    assert facts == [(False, False), (False, True), (True, False), (True, True)]


def test_a_signature_says_narrow_and_bundles_never_serve_a_wide_launch_narrow():
    spec = parse_signature(rows, "f32[::1], f32[::1], i64:narrow")["width"]
    assert spec == Narrow(vg.int64)
    assert parse_signature(keep_below, "f32[::1], f32[::1], i64:16:narrow, 1024")["n"] \
        == Narrow(vg.int64, 16)
    for bad in ("f32[::1], f32[::1], i32:narrow", "f32[::1]:narrow, f32[::1], i64"):
        with pytest.raises(SignatureError, match="narrow"):
            parse_signature(rows, bad)
    ir = rows.specialize_types(parse_signature(rows, "f32[::1], f32[::1], i64:narrow"), BLOCK)
    assert ir.params[2].narrow
    assert not rows.specialize_types(parse_signature(rows, "f32[::1], f32[::1], i64"),
                                     BLOCK).params[2].narrow
    narrow_key = (BLOCK, None, ("s", "int64", True, True))
    wide_key = (BLOCK, None, ("s", "int64", True, False))
    assert wide_key in _serving(narrow_key)  # proven for every value: for small ones too
    assert all(narrowness(k[2]) is False for k in _serving(wide_key))
