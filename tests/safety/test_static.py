"""The static race checker against the safety suite and the shapes issue 3 names.

Every racy kernel of `pairs.PAIRS` (and `warp_pairs.FENCE_PAIRS`) is refused at its launch, with its code, before memory
is touched; every fixed twin is accepted and computes its reference on the cpu backend.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, simt
from verdigris.examples import SIMT_EXAMPLES

from .pairs import PAIRS as CATALOGUE
from .warp_pairs import FENCE_PAIRS

PAIRS = CATALOGUE + FENCE_PAIRS

IDS = [p.name for p in PAIRS]


@pytest.fixture(autouse=True)
def cpu_backend():
    previous = vg.get_backend() if hasattr(vg, "get_backend") else None
    vg.set_backend("cpu")
    yield
    if previous is not None:
        vg.set_backend(previous)


def fresh(kernel):
    """The same kernel with an empty specialization cache (each test proves afresh)."""
    from verdigris.runtime.dispatch import KernelFunction

    return KernelFunction(kernel.fn, kernel.track)


def test_the_suite_is_large_and_names_are_unique():
    assert len(PAIRS) >= 30 and len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_racy_kernel_is_refused_before_memory_is_touched(pair):
    grid, block, args, kwargs = pair.make(np.random.default_rng())
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(vg.SafetyError) as info:
        fresh(pair.racy)[grid, block](*args, **kwargs)
    err = info.value
    assert err.code == pair.code, str(err)
    for was, now in zip(before, args):
        if isinstance(now, np.ndarray):
            np.testing.assert_array_equal(now, was)
    text = str(err)
    assert re.search(r"\n    .*\n    *\^", text), text  # the user's line with a caret
    assert err.loc.file.endswith("pairs.py")
    assert "hint:" in text
    if pair.code != "VG205" or "which the checker cannot see" in text:
        assert len(re.findall(r"thread \(block [^)]*\)?, thread [^)]*\)?\)", text)) == 2, text
        assert re.search(r"\w+\[-?\d+(, -?\d+)*\]", text), text


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_fixed_kernel_is_accepted_and_right(pair):
    grid, block, args, kwargs = pair.make(np.random.default_rng())
    want = pair.reference(tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
    kernel = fresh(pair.fixed)
    analysis = safety.analyze(kernel.specialize(*args, block=block, **kwargs))
    assert not analysis.errors, analysis.errors[0]
    try:
        kernel[grid, block](*args, **kwargs)
    except (NotImplementedError, vg.CompileError) as err:
        if "atomic" in str(err).lower():
            pytest.skip(f"the cpu backend cannot run atomics yet: {err}")
        raise
    for position, expected in want.items():
        got = args[position]
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------------------- rules

@simt.kernel
def racy_but_unsafe(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        with vg.unsafe():
            out[0] = x[i]


@simt.kernel
def unsafe_does_not_cover_the_rest(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        with vg.unsafe():
            out[0] = x[i]
        out[1] = x[i]


F32 = np.zeros(8, np.float32)


def analyze(kernel, *args, block=(64, 1, 1), **kwargs):
    k = fresh(kernel)
    return safety.analyze(k.build(k.spec_key(list(args), k.describe_args(list(args)), block)))


def test_accesses_inside_unsafe_are_exempt():
    result = analyze(racy_but_unsafe, F32, F32)
    assert not result.errors and result.facts["unsafe_accesses"] == 2
    errors = analyze(unsafe_does_not_cover_the_rest, F32, F32).errors
    assert [e.code for e in errors] == ["VG202"] and "out[1]" in errors[0].message


@simt.kernel
def atomics_anywhere(x, idx, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(out, idx[i], x[i])
        simt.atomic_max(out, 0, x[i])


@simt.kernel
def mixed_far_apart(out, log):
    i = simt.global_id(0)
    if i < out.shape[0]:
        simt.atomic_add(log, i % 4, 1)
        if i == 0:
            log[7] = 3  # a plain store another thread's atomic can meet: log[i % 4] != 7...
        out[i] = log[i % 4]  # ...but this plain read meets the atomics


def test_atomics_never_race_with_atomics_but_mixed_access_does():
    i64 = np.zeros(8, np.int64)
    assert not analyze(atomics_anywhere, F32, i64, F32).errors
    i32 = np.zeros(8, np.int32)
    errors = analyze(mixed_far_apart, i32, i32).errors
    assert {e.code for e in errors} == {"VG204"}
    assert all(e.loc.line != 0 and "atomically" in e.message for e in errors)
    assert len(errors) == 1  # log[7] is never updated atomically: no finding


@simt.kernel
def transpose_symbolic(x, out):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < x.shape[0] and c < x.shape[1]:
        out[c, r] = x[r, c]


@simt.kernel
def saxpy_own_element(a, x, y):
    i = simt.global_id(0)
    if i < y.shape[0]:
        y[i] = a * x[i] + y[i]


@simt.kernel
def rows_symbolic(x, out, width):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if c < width:
        out[r * width + c] = x[r * width + c]


@simt.kernel
def grid_stride_symbolic(x, out):
    for i in range(simt.global_id(0), out.shape[0], simt.grid_dim(0) * simt.block_dim(0)):
        out[i] = x[i]


ONE_D, TWO_D = [(128, 1, 1), (96, 1, 1), None], [(32, 8, 1), (16, 3, 1), None]


@pytest.mark.parametrize("kernel,args,block", [
    (kernel, args, block) for kernel, args, blocks in [
        (transpose_symbolic, (np.zeros((4, 4), np.float32),) * 2, TWO_D),
        (saxpy_own_element, (2.0, F32, F32), ONE_D),
        (rows_symbolic, (F32, F32, np.int32(5)), TWO_D),  # an int64 width may wrap: refused
        (grid_stride_symbolic, (F32, F32), ONE_D),
    ] for block in blocks], ids=str)
def test_accepted_with_symbolic_sizes_and_any_block(kernel, args, block):
    result = analyze(kernel, *args, block=block)
    assert not result.errors, result.errors[0]
    assert result.facts["race_free"]


def test_the_solver_works_to_a_budget_of_steps_not_of_seconds():
    """A verdict must not depend on how fast or busy the machine is: a proof that needs
    more steps than its budget is refused the same way every time, and passes with more."""
    (pair,) = [p for p in PAIRS if p.name == "i // 2 as write index"]
    grid, block, args, kwargs = pair.make(np.random.default_rng())
    ir = fresh(pair.fixed).specialize(*args, block=block, **kwargs)
    starved = [safety.analyze(ir, budget=1000).errors for _ in range(2)]
    assert [[e.code for e in errors] for errors in starved] == [["VG205"], ["VG205"]]
    assert starved[0][0].message == starved[1][0].message
    assert "the solver spent its budget of 1,000 steps" in starved[0][0].message
    assert not safety.analyze(ir).errors


@simt.kernel
def missing_offset(x, out):
    out[simt.thread_id(0)] = x[simt.global_id(0)]


def test_message_names_two_threads_the_element_and_the_sizes():
    err = analyze(missing_offset, F32, F32, block=(128, 1, 1)).errors[0]
    text = str(err)
    m = re.search(r"thread \(block (\d+), thread (\d+)\) and thread \(block (\d+), thread (\d+)\) "
                  r"both write out\[(\d+)\] \(with (.*)\)", text)
    assert m, text
    b1, t1, b2, t2, element = map(int, m.groups()[:5])
    assert b1 != b2 and t1 == t2 == element  # blocks differ, same thread_id: the element
    assert "out.shape[0] = " in m.group(6) and "blocks of 128 threads" in m.group(6)
    assert err.loc.line == missing_offset.fn.__code__.co_firstlineno + 2
    assert "out[simt.thread_id(0)] = x[simt.global_id(0)]" in text


def test_the_check_runs_once_per_specialization():
    k = fresh(saxpy_own_element)
    x = np.ones(100, np.float32)
    y = np.ones(100, np.float32)
    k[1, 128](2.0, x, y)
    spec = next(iter(k._specializations.values()))
    assert spec.kernel.facts["race_free"] is True
    k[1, 128](2.0, x, y)
    assert len(k._specializations) == 1
    np.testing.assert_allclose(y, 5.0)


# ----------------------------------------------------------------------------- examples

def _example_kernels():
    import importlib

    for name in SIMT_EXAMPLES:
        module = importlib.import_module(f"verdigris.examples.{name}")
        for value in vars(module).values():
            if getattr(value, "__vg_kernel__", False) and value.track == "simt":
                yield name, value


def test_examples_are_accepted_and_proof_time_is_reported(capsys, uncompiled):
    from verdigris.runtime.dispatch import KernelFunction

    rows = []
    original = KernelFunction.specialization

    def timed(self, key, **options):
        known = key in self._specializations
        spec = original(self, key, **options)
        if not known:
            start = time.perf_counter()
            result = safety.analyze(spec.kernel)
            rows.append((self.__name__, time.perf_counter() - start, result))
        return spec

    KernelFunction.specialization = timed
    try:
        import importlib

        for name in SIMT_EXAMPLES:
            module = importlib.import_module(f"verdigris.examples.{name}")
            assert all(r.ok for r in module.check(np.random.default_rng())), name
    finally:
        KernelFunction.specialization = original
    assert rows
    for name, seconds, result in rows:
        assert not result.errors
    with capsys.disabled():
        print("\nproof time per example specialization (analysis, seconds, solver queries):")
        for name, seconds, result in rows:
            print(f"  {name:24s} {result.seconds * 1e3:7.2f} ms  {result.solver_queries} queries")


@simt.kernel
def last_reduction(partials, out):
    """The second pass of a two-pass sum: one block adds the first pass's partials. Its
    store to out[0] races between blocks, so it is right only as launched: one block."""
    s = simt.shared.array(256, vg.float32)
    t = simt.thread_id(0)
    acc = vg.float32(0)
    for k in range(t, partials.shape[0], 256):
        acc += partials[k]
    s[t] = acc
    simt.barrier()
    stride = 128
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        simt.barrier()
        stride //= 2
    if t == 0:
        out[0] = s[0]


def test_a_one_block_launch_is_proven_as_one_block(rng):
    partials = rng.random(1000).astype(np.float32)
    out = np.full(1, np.nan, np.float32)
    last_reduction[1, 256](partials, out)
    np.testing.assert_allclose(out[0], partials.astype(np.float64).sum(), rtol=1e-5)
    with pytest.raises(vg.SafetyError) as info:
        last_reduction[2, 256](partials, out)
    assert info.value.code == "VG202" and "out[0]" in info.value.message


@simt.kernel
def while_grid_stride(x, out):
    i = simt.global_id(0)
    stride = simt.grid_dim(0) * simt.block_dim(0)
    while i < out.shape[0]:
        out[i] = x[i] * 2.0
        i += stride


@simt.kernel
def while_block_stride(x, out):
    """Steps by the block, not the grid: block 1's first element is block 0's second."""
    i = simt.global_id(0)
    while i < out.shape[0]:
        out[i] = x[i] * 2.0
        i += simt.block_dim(0)


@simt.kernel
def while_step_changes(x, out, n):
    """The step changes in the body: no progression, so no proof."""
    i = simt.global_id(0)
    step = simt.grid_dim(0) * simt.block_dim(0)
    while i < out.shape[0]:
        out[i] = x[i] * 2.0
        i += step
        step = n


def test_a_while_grid_stride_loop_is_proven_as_its_for_twin(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    while_grid_stride[3, 128](x, out)
    np.testing.assert_array_equal(out, x * 2)
    for racy, code in ((while_block_stride, "VG202"), (while_step_changes, "VG205")):
        args = (x, out) if racy is while_block_stride else (x, out, 1)
        with pytest.raises(vg.SafetyError) as info:
            racy[3, 128](*args)
        assert info.value.code == code, racy.__name__


@simt.kernel
def warp_partner_exchange(x, out, PARTNER: vg.constexpr):
    """Each thread reads element t ^ PARTNER after syncwarp(): with PARTNER 1 a lane of its
    own warp (ordered), with 32 a lane of the other warp, which syncwarp() does not order."""
    s = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    s[t] = x[i]
    simt.syncwarp()
    out[i] = s[t ^ PARTNER]


def test_xor_with_a_power_of_two_is_a_known_partner(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    warp_partner_exchange[2, 64](x, out, PARTNER=1)
    np.testing.assert_array_equal(out, x[np.arange(128) ^ 1])
    with pytest.raises(vg.SafetyError) as info:
        warp_partner_exchange[2, 64](x, out, PARTNER=32)
    assert info.value.code == "VG211"


@simt.kernel
def shift_stride_sum(x, part, SYNC: vg.constexpr):
    """The textbook tree reduction with the stride as 128 >> k: known exactly, so proven;
    without the barrier in the loop (SYNC False) a thread reads what another is writing."""
    buf = simt.shared.array(128, vg.float32)
    t = simt.thread_id(0)
    i = simt.global_id(0)
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    simt.barrier()
    for k in range(1, 8):
        s = 128 >> k
        if t < s:
            buf[t] += buf[t + s]
        if SYNC:
            simt.barrier()
    if t == 0:
        part[simt.block_id(0)] = buf[0]


def test_a_stride_shifted_by_the_loop_counter_is_known(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    part = np.full(8, np.nan, np.float32)
    shift_stride_sum[8, 128](x, part, SYNC=True)
    np.testing.assert_allclose(part.astype(np.float64).sum(), x.astype(np.float64).sum(), rtol=1e-4)
    with pytest.raises(vg.SafetyError) as info:
        shift_stride_sum[8, 128](x, part, SYNC=False)
    # the strides of two iterations with no barrier between them are known: a race, with
    # the threads and the element
    assert info.value.code == "VG211" and "buf[" in info.value.message


@simt.kernel
def two_per_thread(x, out):
    i = 2 * (simt.block_id(0) * 64 + simt.thread_id(0))  # int32: wraps to negative indices only
    if 0 <= i and i + 1 < out.shape[0]:
        out[i] = x[i]
        out[i + 1] = x[i + 1]


@simt.kernel
def wrapped_onto_one_row(x, out):
    row = simt.block_id(0) * 65536 * 32768  # int32: 0 for every even block
    out[row + simt.thread_id(0)] = x[simt.thread_id(0)]


@simt.kernel
def quotient_sign(out, a, b):
    if a < 0 and b < 0 and a // b < 0:  # only INT_MIN // -1, which wraps to INT_MIN
        out[0] = 1.0


def test_the_one_int32_quotient_that_wraps_is_not_ruled_out():
    (err,) = analyze(quotient_sign, np.zeros(4, np.float32), np.int32(-5), np.int32(-1)).errors
    assert err.code == "VG202" and "wraps around in int32 arithmetic" in err.message


def test_int32_arithmetic_wraps_as_the_hardware_does():
    """A wrapped int32 value is a function of what wrapped, not any int32: where it wraps
    only to negative indices (skipped), threads stay apart; where it wraps two blocks onto
    one row, that race is reported as one, with how to widen the index."""
    x, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    assert analyze(two_per_thread, x, out).errors == []
    (err,) = analyze(wrapped_onto_one_row, x, out).errors
    assert err.code == "VG202" and "wraps around in int32 arithmetic" in err.message
    assert "int(simt.block_id(0))" in err.hint


@simt.kernel
def rows_of_two_block_axes(x, out):
    row = simt.block_id(2) * simt.grid_dim(1) + simt.block_id(1)  # int32: may leave it
    col = simt.block_id(0) * simt.block_dim(0) + simt.thread_id(0)
    if row < x.shape[0] and col < x.shape[1]:
        out[row, col] = x[row, col] * 2.0


@simt.kernel
def rows_of_two_block_axes_one_short(x, out):
    row = simt.block_id(2) * (simt.grid_dim(1) - 1) + simt.block_id(1)
    col = simt.block_id(0) * simt.block_dim(0) + simt.thread_id(0)
    if row < x.shape[0] and col < x.shape[1]:
        out[row, col] = x[row, col] * 2.0


@simt.kernel
def rows_of_two_block_axes_and_a_loop(x, out):
    col = simt.block_id(0) * simt.block_dim(0) + simt.thread_id(0)
    for k in range(2):  # row + 1 is the next block's row too
        row = simt.block_id(2) * simt.grid_dim(1) + simt.block_id(1) + k
        if row < x.shape[0] and col < x.shape[1]:
            out[row, col] = x[row, col] * 2.0


def test_int32_rows_of_two_block_axes_are_proven_without_the_solver():
    """`block_id(2) * grid_dim(1) + block_id(1)` in int32 stays below 65535**2 < 2**32
    values: wrapping is one-to-one there and the mixed-radix rule proves it (the solver took
    0.13 s); a radix one short of the axis meets (block (0, 1, 1) and (0, 0, 2) share a row),
    and so does a loop adding 1 to the row."""
    x = np.zeros((64, 64), np.float32)
    fine = analyze(rows_of_two_block_axes, x, x.copy())
    assert fine.errors == [] and fine.facts["solver_queries"] == 0, fine.facts
    for racy in (rows_of_two_block_axes_one_short, rows_of_two_block_axes_and_a_loop):
        (err,) = analyze(racy, x, x.copy()).errors
        assert err.code == "VG202", err.message
