"""`vg.assume(condition)`: facts the proofs take as given and every launch checks.

Each racy kernel beside its twin with the fact stated: refused without it (with the threads
that collide), accepted with it, and its launch refused (`vg.AssumptionError`, VG304, at
the assumption's line, naming the condition and the values) when the fact is false.
"""
from __future__ import annotations

import runpy

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile
from verdigris.runtime.assumptions import of_kernel
from verdigris.safety import bounds


# ----------------------------------------------------------------------------- SIMT races


@simt.kernel
def rows_racy(x, out, n, m):
    i = simt.global_id(0)
    if i < x.shape[0]:
        for j in range(m):
            out[i * n + j] = x[i]


@simt.kernel
def rows(x, out, n, m):
    vg.assume(m <= n)
    i = simt.global_id(0)
    if i < x.shape[0]:
        for j in range(m):
            out[i * n + j] = x[i]


@simt.kernel
def two_halves_racy(x, out, n):
    i = simt.global_id(0)
    if i < n:
        out[i] = x[i]
        out[i + 32] = 2.0 * x[i]


@simt.kernel
def two_halves(x, out, n):
    vg.assume(n <= 32)
    i = simt.global_id(0)
    if i < n:
        out[i] = x[i]
        out[i + 32] = 2.0 * x[i]


def test_a_row_kernel_is_refused_without_its_fact_and_runs_with_it(rng):
    x = rng.random(100).astype(np.float32)
    out = np.full(800, np.nan, np.float32)
    with pytest.raises(vg.SafetyError) as err:
        rows_racy[1, 128](x, out, 8, 5)
    assert err.value.code in ("VG202", "VG205") and "thread" in str(err.value)
    rows[1, 128](x, out, 8, 5)
    want = np.full((100, 8), np.nan, np.float32)
    want[:, :5] = x[:, None]
    assert np.array_equal(out.reshape(100, 8), want, equal_nan=True)


def test_a_launch_that_breaks_the_fact_is_refused_before_it_runs(rng):
    x = rng.random(100).astype(np.float32)
    out = np.full(800, np.nan, np.float32)
    with pytest.raises(vg.AssumptionError) as err:
        rows[1, 128](x, out, 8, 9)
    e = err.value
    assert isinstance(e, vg.LaunchError) and e.code == "VG304"
    assert e.loc.line == rows.fn.__code__.co_firstlineno + 2  # the vg.assume line (after the decorator and def)
    assert "vg.assume(m <= n)" in str(e) and "m = 9" in str(e) and "n = 8" in str(e)
    assert "vg.assume(m <= n)\n" in e.loc.excerpt() + "\n" and "^" in str(e)
    assert np.isnan(out).all()  # nothing ran


def test_a_second_write_past_n_needs_n_at_most_32(rng):
    x = rng.random(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    with pytest.raises(vg.SafetyError):
        two_halves_racy[1, 64](x, out, 32)
    two_halves[1, 64](x, out, 32)
    assert np.array_equal(out, np.concatenate([x[:32], 2.0 * x[:32]]))
    with pytest.raises(vg.AssumptionError, match=r"n <= 32.*n = 33"):
        two_halves[1, 64](x, out, 33)


# ----------------------------------------------------------------------------- tile races


@tile.kernel
def copy_twice_racy(x, out, k, B: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.store(out, index=(i,), tile=t)
    tile.store(out, index=(i + k // B,), tile=t)


@tile.kernel
def copy_twice(x, out, k, B: vg.constexpr):
    vg.assume(k >= B * tile.num_blocks(0))
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.store(out, index=(i,), tile=t)
    tile.store(out, index=(i + k // B,), tile=t)


def test_tile_blocks_are_proven_apart_under_a_fact_over_the_grid(rng):
    x = rng.random(1024).astype(np.float32)
    out = np.full(2048, np.nan, np.float32)
    with pytest.raises(vg.SafetyError) as err:
        copy_twice_racy[8](x, out, 1024, B=128)
    assert "block" in str(err.value)
    copy_twice[8](x, out, 1024, B=128)
    assert np.array_equal(out, np.concatenate([x, x]))
    with pytest.raises(vg.AssumptionError, match=r"k = 1000.*tile\.num_blocks\(0\) = 8"):
        copy_twice[8](x, out, 1000, B=128)


def test_a_fact_whose_product_could_wrap_int32_is_refused_where_it_would():
    """`B * tile.num_blocks(0)` is int32 arithmetic: the proofs take it exactly, so a
    launch where it leaves int32 is refused rather than checked in wrapped arithmetic."""
    x = np.zeros(128, np.float32)
    out = np.zeros(256, np.float32)
    with pytest.raises(vg.AssumptionError, match="overflows"):
        copy_twice[2**24](x, out, 2**40, B=128)  # 128 * 2**24 = 2**31


# ----------------------------------------------------------------------------- bounds


@simt.kernel
def gather_rows(x, out, n):
    vg.assume(out.shape[0] <= x.shape[0] and n > 0)
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i]


def test_a_bounds_precondition_the_fact_states_is_not_required_again():
    x, out = np.zeros(64, np.float32), np.zeros(32, np.float32)
    kernel = _built(gather_rows, (x, out, 1), (64, 1, 1))
    proof = bounds.prove(kernel)
    assert len(proof.in_bounds) == 2 and proof.preconditions == ()


@simt.kernel
def window(x, out, n, off):
    vg.assume(off >= 0 and n + off <= x.shape[0] and n <= out.shape[0])
    i = simt.global_id(0)
    if i < n:
        out[i] = x[i + off]


@simt.kernel
def window_unstated(x, out, n, off):
    i = simt.global_id(0)
    if i < n:
        out[i] = x[i + off]


def test_bounds_are_proven_from_a_fact_without_a_launch_guard(rng):
    x = rng.random(96).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    proven = {}
    for kernel in (window, window_unstated):
        ir = _built(kernel, (x, out, 64, 32), (32, 1, 1))
        proven[kernel] = bounds.prove(ir)
    assert len(proven[window].in_bounds) == 2 and proven[window].preconditions == ()
    assert len(proven[window_unstated].in_bounds) < 2  # x[i + off] keeps its check
    window[2, 32](x, out, 64, 32)
    assert np.array_equal(out, x[32:])
    with pytest.raises(vg.AssumptionError, match=r"off = 33, n = 64, x.shape\[0\] = 96"):
        window[2, 32](x, out, 64, 33)


# ----------------------------------------------------------------------------- the frontend


def _built(kernel, args, block):
    """The kernel's IR for `args`, straight from the frontend (no checks)."""
    values = kernel.bind(args, {})
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), block))


def _kernel(source: str, tmp_path):
    path = tmp_path / f"k{abs(hash(source))}.py"
    path.write_text("import verdigris as vg\nfrom verdigris import simt\n\n\n" + source)
    return runpy.run_path(str(path))["k"]


def _refused(source: str, match: str, tmp_path):
    with pytest.raises(vg.CompileError, match=match):
        _built(_kernel(source, tmp_path), (np.zeros(4, np.float32), 3), (32, 1, 1))


@pytest.mark.parametrize("body, match", [
    ("vg.assume(simt.thread_id(0) < n)", "thread_id"),
    ("vg.assume(x[0] > 0.0)", "float32|memory"),
    ("m = n * 2\n    vg.assume(m > 0)", "'m', a variable"),
    ("if n > 0:\n        vg.assume(n < 8)", "top level"),
    ("vg.assume(n << 1 < 8)", "lshift"),
    ("vg.assume(~n < 8)", "`~`"),
])
def test_an_assumption_reads_only_launch_values_at_the_top_level(body, match, tmp_path):
    _refused(f"@simt.kernel\ndef k(x, n):\n    {body}\n    x[0] = 1.0\n", match, tmp_path)


def test_a_reassigned_parameter_is_not_a_launch_value(tmp_path):
    _refused("@simt.kernel\ndef k(x, n):\n    vg.assume(n > 0)\n    n = n + 1\n    x[0] = n\n",
             "'n', a variable", tmp_path)


def test_assume_on_the_host_says_it_is_for_kernels():
    with pytest.raises(vg.CompileError, match="only be called inside"):
        vg.assume(True)


# ----------------------------------------------------------------------------- the host test


def _facts(tmp_path, source: str, *args):
    kernel = _kernel(source, tmp_path)
    ir = _built(kernel, args, (32, 1, 1))
    return of_kernel(ir, [p.name for p in kernel.params]), kernel


@pytest.mark.parametrize("condition, args, holds", [
    ("n % 32 == 0", (64,), True), ("n % 32 == 0", (65,), False),
    ("n % 32 == 0", (-64,), True),  # floor, as in the kernel
    ("n // 4 >= -1", (-4,), True), ("n // 4 >= -1", (-5,), False),
    ("n % 0 == 0 and n // 0 == 0", (7,), True),  # a zero divisor gives 0, as in the kernel
    ("min(n, 8) == 8 and max(n, 8) == n and abs(-n) == n", (9,), True),
    ("(n & (n - 1)) == 0", (64,), True), ("(n & (n - 1)) == 0", (96,), False),
    ("n < 10 or n * n > 100", (11,), True),
    ("(3 if n > 0 else 4) == 3", (1,), True),
    ("simt.block_dim(0) == 32 and simt.grid_dim(0) >= 1", (1,), True),
])
def test_the_host_evaluates_the_kernels_arithmetic_exactly(condition, args, holds, tmp_path):
    facts, _ = _facts(tmp_path, f"@simt.kernel\ndef k(x, n):\n    vg.assume({condition})\n    x[0] = 1.0\n",
                      np.zeros(4, np.float32), *args)
    x = np.zeros(4, np.float32)
    from verdigris.runtime.interop import describe

    values, infos = [x, *args], [describe(x), None]
    assert facts.holds(*facts._values(values, infos, (1, 1, 1), (32, 1, 1))) is holds


def test_an_int32_part_that_overflows_refuses_the_launch(tmp_path):
    facts, kernel = _facts(tmp_path, "@simt.kernel\ndef k(x, n):\n    vg.assume(n * 2 > 0 or n < 0)\n"
                           "    if simt.global_id(0) == 0:\n        x[0] = 1.0\n",
                           np.zeros(4, np.float32), np.int32(5))
    x = np.zeros(4, np.float32)
    kernel[1, 32](x, np.int32(5))
    with pytest.raises(vg.AssumptionError, match="overflows"):
        kernel[1, 32](x, np.int32(2**30))  # 2**31 leaves int32, though `n < 0` is false anyway


def test_a_kernel_without_assumptions_pays_nothing(tmp_path):
    facts, _ = _facts(tmp_path, "@simt.kernel\ndef k(x, n):\n    x[0] = 1.0\n", np.zeros(4, np.float32), 3)
    assert facts is None


def test_the_assumption_is_part_of_the_printed_ir():
    """The verdict cache is keyed by the printed IR: a kernel and its twin without the
    fact must not share a verdict."""
    from verdigris.ir.printer import format_kernel

    x, out = np.zeros(100, np.float32), np.zeros(800, np.float32)
    with_fact = format_kernel(_built(rows, (x, out, 8, 5), (128, 1, 1)))
    without = format_kernel(_built(rows_racy, (x, out, 8, 5), (128, 1, 1)))
    assert "assume (m <= n)" in with_fact and "assume" not in without
