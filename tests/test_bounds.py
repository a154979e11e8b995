"""Bounds proofs (`safety.bounds`), the checked GPU code they spare, and the launch guard.

No GPU here: proofs and guards run on the host, the PTX is grepped and assembled by ptxas,
and the checked code runs on the host through test_codegen's harness (its fault record is
a NumPy array), which shows an out-of-bounds access skipped and the first fault recorded.
"""
import copy
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt
from verdigris.codegen import checks
from verdigris.examples.gather_sum import gather_sum, gather_sum_any
from verdigris.runtime import backend

from test_codegen import (L, N, T, array, assign, axpy, compare, const, global_id, kernel, load,
                          needs_ptxas, on_host, proven, store, var)


@simt.kernel
def axpy_k(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


@simt.kernel
def stencil3(x, out):
    i = simt.global_id(0)
    if i >= 1 and i < out.shape[0] - 1:
        out[i] = x[i - 1] + x[i] + x[i + 1]


@simt.kernel
def unguarded(out):
    out[simt.global_id(0)] = 1.0


@simt.kernel
def gather(idx, x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[idx[i]]


@simt.kernel
def periodic(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i % 4]


@simt.kernel
def grid_stride(x, out):
    for i in range(simt.global_id(0), out.shape[0], simt.grid_dim(0) * simt.block_dim(0)):
        out[i] = 2.0 * x[i]


def spec_for(k, grid, block, *args):
    values = k.bind(args, {})
    infos = k.describe_args(values)
    return k.specialization(k.spec_key(values, infos, block, grid)), values, infos


def accesses(kern):
    return {(type(n).__name__, n.array.name, n.loc.col): id(n) in kern.facts["in_bounds"]
            for n in checks.sites(kern)}


@pytest.fixture
def cpu():
    previous = backend.current()
    backend.set_backend("cpu")
    yield
    backend.set_backend(previous)


def test_axpy_is_proven_under_shape_preconditions(cpu):
    x, y, out = (np.ones(n, np.float32) for n in (100, 100, 100))
    spec, values, infos = spec_for(axpy_k, (1, 1, 1), (128, 1, 1), 2.0, x, y, out)
    assert all(accesses(spec.kernel).values()) and len(accesses(spec.kernel)) == 3
    texts = sorted(t for _, t in spec.kernel.facts["bounds_preconditions"])
    assert texts == ["out.shape[0] <= x.shape[0]", "out.shape[0] <= y.shape[0]"]
    assert spec.bounds_guard(values, infos, (1, 1, 1), (128, 1, 1))
    short = np.ones(99, np.float32)  # x shorter than out: the checked kernel must run
    _, values, infos = spec_for(axpy_k, (1, 1, 1), (128, 1, 1), 2.0, short, y, out)
    assert not spec.bounds_guard(values, infos, (1, 1, 1), (128, 1, 1))
    longer = np.ones(200, np.float32)  # longer inputs are fine
    _, values, infos = spec_for(axpy_k, (1, 1, 1), (128, 1, 1), 2.0, longer, longer, out)
    assert spec.bounds_guard(values, infos, (1, 1, 1), (128, 1, 1))


def test_short_input_raises_bounds_error_on_the_cpu_backend(cpu):
    n = 300
    x, y, out = np.ones(n - 5, np.float32), np.ones(n, np.float32), np.full(n, np.nan, np.float32)
    with pytest.raises(vg.BoundsError) as info:
        axpy_k[vg.cdiv(n, 128), 128](2.0, x, y, out)
    assert info.value.code == "VG302"
    assert re.search(r"out of bounds: x\[29\d\] with shape \(295,\) in kernel axpy_k, block \(2, 0, 0\) "
                     r"thread \(\d+, 0, 0\)", info.value.message)


def test_stencil_proofs_and_what_stays_checked(cpu):
    n = 64
    spec, values, infos = spec_for(stencil3, (1, 1, 1), (64, 1, 1), np.ones(n, np.float32),
                                   np.ones(n, np.float32))
    assert all(accesses(spec.kernel).values()) and len(accesses(spec.kernel)) == 4
    assert [t for _, t in spec.kernel.facts["bounds_preconditions"]] == ["out.shape[0] <= x.shape[0]"]
    assert spec.bounds_guard(values, infos, (1, 1, 1), (64, 1, 1))
    _, values, infos = spec_for(stencil3, (1, 1, 1), (64, 1, 1), np.ones(n - 1, np.float32),
                                np.ones(n, np.float32))
    assert not spec.bounds_guard(values, infos, (1, 1, 1), (64, 1, 1))
    # 64 * block_id + thread_id: in bounds on launches whose grid covers at most out; this
    # one (two blocks of 64 over 64 elements) breaks that and runs the checked kernel
    spec, values, infos = spec_for(unguarded, (2, 1, 1), (64, 1, 1), np.ones(n, np.float32))
    assert all(accesses(spec.kernel).values())
    assert [t for _, t in spec.kernel.facts["bounds_preconditions"]] == ["64*grid_dim(0) <= out.shape[0]"]
    assert not spec.bounds_guard(values, infos, (2, 1, 1), (64, 1, 1))
    assert spec.bounds_guard(values, infos, (1, 1, 1), (64, 1, 1))
    # one block: the index is a thread id, below 64, proven where out has 64 elements
    spec, *_ = spec_for(unguarded, (1, 1, 1), (64, 1, 1), np.ones(n, np.float32))
    assert all(accesses(spec.kernel).values())
    assert [t for _, t in spec.kernel.facts["bounds_preconditions"]] == ["64 <= out.shape[0]"]
    spec, *_ = spec_for(gather, (1, 1, 1), (64, 1, 1), np.zeros(n, np.int64), np.ones(n, np.float32),
                        np.ones(n, np.float32))
    proofs = {name: ok for (_, name, _), ok in accesses(spec.kernel).items()}
    assert proofs == {"idx": True, "x": False, "out": True}  # a loaded index keeps its check
    spec, *_ = spec_for(grid_stride, (4, 1, 1), (64, 1, 1), np.ones(n, np.float32), np.ones(n, np.float32))
    assert all(accesses(spec.kernel).values())


@needs_ptxas
def test_safe_axpy_ptx_has_no_check_beyond_the_users_guard():
    ptx = codegen.compile_to_ptx(proven(axpy()), "sm_90").ptx
    assert len(re.findall(r"\bsetp\.", ptx)) == 1  # i < out.shape[0], the user's own
    assert "atom." not in ptx and "fence" not in ptx and len(re.findall(r"\bbra", ptx)) == 1
    checked = codegen.compile_to_ptx(axpy(), "sm_90").ptx  # no proofs: x and y are checked
    assert len(re.findall(r"\bsetp\.lt\.u64", checked)) == 2 and "fence.sc.sys" in checked
    for target in ("sm_80", "sm_90a"):
        for k in (axpy(), proven(axpy())):
            assert codegen.assemble(codegen.compile_to_ptx(k, target).ptx, target, optimize=False)[:4] == b"\x7fELF"


def _oob_kernel():
    """out[i] = x[i + shift] + 1 for i < out.shape[0]: x is short, so late threads fault."""
    x, out = array("x", T.float32), array("out", T.float32)
    i = var("i", T.int64)
    shifted = N.Binary(L, "add", i, var("shift", T.int64), T.int64)
    value = N.Binary(L, "add", load(x, shifted), const(1.0, T.float32), T.float32)
    body = [assign("i", global_id()),
            N.If(L, compare("lt", i, N.Shape(L, out, 0, T.int64)),
                 [store(out, [i], value), store(x, [N.Binary(L, "mul", i, const(-1, T.int64), T.int64)], value)], [])]
    return kernel("shifted", [("shift", T.int64), ("x", x), ("out", out)], body, {"i": T.int64})


def test_checked_access_is_skipped_and_the_first_fault_recorded(rng):
    k = _oob_kernel()
    x = rng.standard_normal(10).astype(np.float32)
    out = np.full(12, np.nan, np.float32)
    x_before = x.copy()
    record = on_host(k)((3,), (4,), shift=1, x=x, out=out)
    assert np.array_equal(out[:9], x_before[1:10] + 1)  # in bounds
    assert np.array_equal(out[9:], [1.0, 1.0, 1.0])  # the faulting loads read 0
    assert x[0] == x_before[1] + 1 and np.array_equal(x[1:], x_before[1:])  # x[-i] skipped for i > 0
    assert record[checks.RECORD_FLAG] == 1
    site = checks.sites(k).index(next(n for n in checks.sites(k) if isinstance(n, N.Store) and n.array.name == "x"))
    # thread 1 of block 0 is the first to fault: x[-1], a negative index
    assert record[checks.RECORD_SITE] == site and record[checks.RECORD_KERNEL] == checks.kernel_id(k)
    assert list(record[checks.RECORD_BLOCK:checks.RECORD_BLOCK + 3]) == [0, 0, 0]
    assert list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [1, 0, 0]
    assert record[checks.RECORD_NDIM] == 1 and record[checks.RECORD_INDEX] == -1
    assert record[checks.RECORD_EXTENT] == 10


def test_the_example_kernel_is_proven_in_bounds(cpu):
    from verdigris.examples import axpy as ax

    spec, *_ = spec_for(ax.axpy, (1, 1, 1), (256, 1, 1), 2.0, *(np.ones(8, np.float32) for _ in range(3)))
    assert len(spec.kernel.facts["in_bounds"]) == len(checks.sites(spec.kernel)) > 0
    print(f"axpy bounds proof: {spec.kernel.facts['bounds_seconds'] * 1e3:.2f} ms")


# -------------------------------------------- fault records settled at the end of a stretch


@simt.kernel
def two_reads(x, idx, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        first = x[idx[2 * i]]
        second = x[idx[2 * i + 1]]
        out[i] = first + second


@simt.kernel
def walk_while_positive(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        j = i
        while x[j] > 0.0:  # past the last element the load is skipped, reads 0, and stops the walk
            j += 1
        out[i] = j - i


@simt.kernel
def pick(flags, idx, x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[idx[i]] if flags[i] != 0 else -1.0


def checked_on_host(k, grid, block, **args):
    """Runs `k`'s checked code (its proofs applied) on the host; the fault record it left."""
    grid, block = ((*dims, 1, 1)[:3] for dims in (grid, block))
    spec, *_ = spec_for(k, grid, block, *args.values())
    return spec.kernel, on_host(spec.kernel)(grid, block, **args)


def site_of(kern, array: str, nth: int = 0) -> int:
    sites = checks.sites(kern)
    return sites.index([n for n in sites if isinstance(n, N.Load) and n.array.name == array][nth])


def test_the_first_skipped_access_of_a_stretch_is_recorded(rng, cpu):
    x = rng.standard_normal(50).astype(np.float32)
    idx = rng.integers(0, 50, 40)
    idx[10:12] = [53, 57]  # thread 5 reads past x twice
    out = np.full(20, np.nan, np.float32)
    kern, record = checked_on_host(two_reads, (1,), (20,), x=x, idx=idx, out=out)
    want = x[np.minimum(idx, 49)].reshape(20, 2).sum(1)  # float32 sums of two, as the kernel's
    want[5] = 0.0  # both loads skipped, each read 0
    np.testing.assert_array_equal(out, want)
    assert record[checks.RECORD_FLAG] == 1 and record[checks.RECORD_SITE] == site_of(kern, "x", 0)
    assert record[checks.RECORD_INDEX] == 53 and record[checks.RECORD_EXTENT] == 50
    assert list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [5, 0, 0]
    assert record[checks.RECORD_NDIM] == 1 and not record[checks.RECORD_INDEX + 1:checks.RECORD_EXTENT].any()


def test_a_fault_in_a_loop_condition_is_recorded_when_the_loop_ends(cpu):
    x = np.ones(6, np.float32)
    x[2] = -1.0
    out = np.full(6, -7, np.int64)
    kern, record = checked_on_host(walk_while_positive, (1,), (6,), x=x, out=out)
    np.testing.assert_array_equal(out, [2, 1, 0, 3, 2, 1])  # threads 3-5 walk off the end
    assert record[checks.RECORD_FLAG] == 1 and record[checks.RECORD_SITE] == site_of(kern, "x")
    assert record[checks.RECORD_INDEX] == 6 and record[checks.RECORD_EXTENT] == 6


def test_a_fault_in_the_arm_of_a_conditional_expression_is_recorded(rng, cpu):
    x = rng.standard_normal(8).astype(np.float32)
    flags = np.array([1, 0, 1, 1, 0, 1, 0, 0], np.int32)
    idx = np.array([3, 99, 7, 12, 98, 0, 97, 96])  # thread 3 takes its arm and reads x[12]
    out = np.full(8, np.nan, np.float32)
    kern, record = checked_on_host(pick, (1,), (8,), flags=flags, idx=idx, x=x, out=out)
    np.testing.assert_array_equal(out, [x[3], -1, x[7], 0.0, -1, x[0], -1, -1])
    assert record[checks.RECORD_FLAG] == 1 and record[checks.RECORD_SITE] == site_of(kern, "x")
    assert record[checks.RECORD_INDEX] == 12 and list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [3, 0, 0]


def test_a_checked_loop_is_unrolled_and_its_loads_come_before_its_record(rng, cpu):
    x = rng.standard_normal(64).astype(np.float32)
    idx = rng.integers(0, 64, (16, 8))
    idx[9, 6] = 70  # thread 9's seventh read is past x
    out = np.full(16, np.nan, np.float32)
    kern, record = checked_on_host(gather_sum, (1,), (16,), x=x, idx=idx, out=out, K=8)
    want = np.where(idx < 64, x[np.minimum(idx, 63)].astype(np.float64), 0.0).sum(1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert record[checks.RECORD_INDEX] == 70 and list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [9, 0, 0]
    ptx = codegen.compile_to_ptx(kern, "sm_90").ptx
    loads = [m.start() for m in re.finditer(r"\bld\.global\.nc", ptx)]
    assert len(loads) == 16 and "for." not in codegen.lower_to_llvm(kern, "sm_90")  # unrolled here
    assert max(loads) < ptx.index("atom.relaxed.gpu.global.cas")  # one record, after all 16 loads
    assert ptx.count("atom.relaxed.gpu.global.cas") == 1


# ----------------------------------- fault records carried out of loops that are not unrolled


@simt.kernel
def gather_until(x, idx, out, count):
    """gather_sum_any's sum over the first `count` indices, ending early once it passes 100."""
    i = simt.global_id(0)
    if i < out.shape[0]:
        total = 0.0
        for k in range(count):
            total += x[idx[i, k]]
            if total > 100.0:
                break
        out[i] = total


@simt.kernel
def gather_nest(x, idx, out, rows, count):
    i = simt.global_id(0)
    if i < out.shape[0]:
        total = 0.0
        for r in range(rows):
            for k in range(count):
                total += x[idx[i, r, k]]
        out[i] = total


@simt.kernel
def head_loop_tail(x, idx, out, count):
    """A checked load before a rolled loop, in it, and after it."""
    i = simt.global_id(0)
    if i < out.shape[0]:
        total = x[idx[i, 0]]
        for k in range(1, count):
            total += x[idx[i, k]]
        out[i] = total + x[idx[i, count]]


def gather_reference(x, idx):
    """Per row of idx, the sum of x at its indices, an index outside x reading 0."""
    inside = (idx >= 0) & (idx < len(x))
    return np.where(inside, x[np.where(inside, idx, 0)].astype(np.float64), 0.0).reshape(len(idx), -1).sum(1)


def test_a_rolled_loop_carries_its_first_fault_to_its_exit(rng, cpu):
    x = rng.standard_normal(64).astype(np.float32)
    idx = rng.integers(0, 64, (16, 9))
    idx[9, 3], idx[9, 6] = 70, 90  # thread 9 reads past x in two iterations
    out = np.full(16, np.nan, np.float32)
    kern, record = checked_on_host(gather_sum_any, (1,), (16,), x=x, idx=idx, out=out)
    np.testing.assert_allclose(out, gather_reference(x, idx), rtol=1e-5, atol=1e-5)
    assert record[checks.RECORD_SITE] == site_of(kern, "x") and record[checks.RECORD_INDEX] == 70
    assert list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [9, 0, 0]
    llvm = codegen.compile_to_ptx(kern, "sm_90").llvm_ir
    assert llvm.count("cmpxchg") == 1  # one record path, after the loop
    assert llvm.count("load float") > 1  # so LLVM unrolled the loop


def test_a_fault_before_a_break_is_recorded(rng, cpu):
    x = np.ones(64, np.float32)
    x[5] = 1000.0
    idx = np.zeros((4, 6), np.int64)
    idx[2, 1:3] = [77, 5]  # thread 2 skips a read, then reaches 1000 and breaks
    out = np.full(4, np.nan, np.float32)
    kern, record = checked_on_host(gather_until, (1,), (4,), x=x, idx=idx, out=out, count=6)
    np.testing.assert_array_equal(out, [6, 6, 1001, 6])
    assert record[checks.RECORD_INDEX] == 77 and list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [2, 0, 0]


def test_a_nest_of_rolled_loops_records_the_first_fault_in_program_order(rng, cpu):
    x = rng.standard_normal(32).astype(np.float32)
    idx = rng.integers(0, 32, (8, 3, 5))
    idx[4, 2, 0], idx[4, 1, 3] = 40, 50  # in order: row 1's fault comes first
    out = np.full(8, np.nan, np.float32)
    kern, record = checked_on_host(gather_nest, (1,), (8,), x=x, idx=idx, out=out, rows=3, count=5)
    np.testing.assert_allclose(out, gather_reference(x, idx), rtol=1e-5, atol=1e-5)
    assert record[checks.RECORD_INDEX] == 50 and list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [4, 0, 0]
    assert codegen.compile_to_ptx(kern, "sm_90").llvm_ir.count("cmpxchg") == 1


@pytest.mark.parametrize("faults, recorded", [((0, 2), 0), ((2, 4), 2), ((4,), 4)], ids=["head", "loop", "tail"])
def test_faults_before_in_and_after_a_rolled_loop_keep_program_order(rng, cpu, faults, recorded):
    x = rng.standard_normal(32).astype(np.float32)
    idx = rng.integers(0, 32, (4, 5))
    for k in faults:
        idx[1, k] = 100 + k
    out = np.full(4, np.nan, np.float32)
    kern, record = checked_on_host(head_loop_tail, (1,), (4,), x=x, idx=idx, out=out, count=4)
    np.testing.assert_allclose(out, gather_reference(x, idx), rtol=1e-5, atol=1e-5)
    assert record[checks.RECORD_INDEX] == 100 + recorded
    assert list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [1, 0, 0]


def test_an_index_with_a_small_top_is_proven_when_the_extent_passes_it(cpu):
    spec, values, infos = spec_for(periodic, (2, 1, 1), (64, 1, 1), np.ones(4, np.float32), np.ones(100, np.float32))
    assert all(accesses(spec.kernel).values())
    assert sorted(t for _, t in spec.kernel.facts["bounds_preconditions"]) == ["4 <= x.shape[0]"]
    assert spec.bounds_guard(values, infos, (2, 1, 1), (64, 1, 1))
    _, values, infos = spec_for(periodic, (2, 1, 1), (64, 1, 1), np.ones(3, np.float32), np.ones(100, np.float32))
    assert not spec.bounds_guard(values, infos, (2, 1, 1), (64, 1, 1))  # the checked kernel runs
    out = np.full(100, np.nan, np.float32)
    with pytest.raises(vg.BoundsError, match=r"x\[3\] with shape \(3,\)"):
        periodic[2, 64](np.arange(3, dtype=np.float32), out)


def test_a_32_bit_index_is_tested_in_32_bits_under_a_launch_condition(rng, cpu):
    x = rng.standard_normal(40).astype(np.float32)
    idx = rng.integers(0, 40, 16).astype(np.int32)
    idx[3], idx[9] = -5, 40  # negative, and one past the end: both skipped, the first recorded
    out = np.full(16, np.nan, np.float32)
    kern, record = checked_on_host(gather, (1,), (16,), idx=idx, x=x, out=out)
    assert kern.facts["narrow_extents"] == ("x:0",)
    assert "x.shape[0] <= 2147483647" in [t for _, t in kern.facts["bounds_preconditions"]]
    want = np.where((idx >= 0) & (idx < 40), x[np.clip(idx, 0, 39)], 0.0)
    np.testing.assert_array_equal(out, want)
    assert record[checks.RECORD_INDEX] == -5 and list(record[checks.RECORD_THREAD:checks.RECORD_THREAD + 3]) == [3, 0, 0]
    llvm = codegen.lower_to_llvm(checks.as_launched(kern, checked=False), "sm_90")
    assert re.search(r"icmp ult i32 %[^,]+, %\S+", llvm)  # x's test, on the loaded int32 itself
    checked = codegen.lower_to_llvm(checks.as_launched(kern, checked=True), "sm_90")
    assert not re.search(r"icmp ult i32", checked)  # the variant for launches past 2**31 - 1
    spec, values, infos = spec_for(gather, (1, 1, 1), (16, 1, 1), idx, x, out)
    assert spec.bounds_guard(values, infos, (1, 1, 1), (16, 1, 1))
    huge = copy.copy(infos[1])
    huge.shape = (2**31,)
    assert not spec.bounds_guard(values, [infos[0], huge, infos[2]], (1, 1, 1), (16, 1, 1))


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_kernels_with_settled_checks_assemble(target, cpu):
    cases = [(two_reads, (np.ones(4, np.float32), np.zeros(8, np.int64), np.ones(4, np.float32))),
             (walk_while_positive, (np.ones(4, np.float32), np.zeros(4, np.int64))),
             (pick, (np.ones(4, np.int32), np.zeros(4, np.int64), np.ones(4, np.float32), np.ones(4, np.float32))),
             (gather_sum, (np.ones(4, np.float32), np.zeros((4, 8), np.int64), np.ones(4, np.float32), 8)),
             (gather_sum_any, (np.ones(4, np.float32), np.zeros((4, 8), np.int64), np.ones(4, np.float32))),
             (gather_until, (np.ones(4, np.float32), np.zeros((4, 8), np.int64), np.ones(4, np.float32), 8)),
             (gather_nest, (np.ones(4, np.float32), np.zeros((4, 2, 8), np.int64), np.ones(4, np.float32), 2, 8)),
             (head_loop_tail, (np.ones(4, np.float32), np.zeros((4, 8), np.int64), np.ones(4, np.float32), 7))]
    for k, args in cases:
        spec, *_ = spec_for(k, (1, 1, 1), (128, 1, 1), *args)
        assert codegen.assemble(codegen.compile_to_ptx(spec.kernel, target).ptx, target, optimize=False)[:4] == b"\x7fELF"


# ------------------------------------------------------- 64-bit wrap-around and huge extents


@simt.kernel
def shifted_by_a_sum(x, out, k, m, n):
    i = simt.global_id(0)
    j = i + k + m  # int64: k + m near -2**64 wraps to a small positive shift
    if j >= 0 and i < n:
        out[i] = x[j]


@simt.kernel
def shifted_by_a_cast(x, out, k, n):
    i = simt.global_id(0)
    j = i + vg.int64(k)  # a uint64 k of 2**64 - 1 is -1
    if j < n:
        out[i] = x[j]


@simt.kernel
def stepped_past_int64(x, out, step, n):
    i = simt.global_id(0)
    total = 0.0
    while i < n:
        total += x[i]
        i += step % 9223372036854775807  # i + step past 2**63 - 1 is negative
    if simt.global_id(0) < out.shape[0]:
        out[simt.global_id(0)] = total


@simt.kernel
def beside_a_long_view(x, y, z, out):
    i = simt.global_id(0)
    if i + x.shape[0] < y.shape[0] + 5:  # wraps where x is a broadcast view 2**63 - 1 long
        out[i] = z[i]


def long_view():
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), (2**63 - 1,), (0,))


WRAPPING = {
    "sum": (shifted_by_a_sum, lambda x, out: (x, out, np.int64(-2**63), np.int64(-2**63 + 5), 8)),
    "cast": (shifted_by_a_cast, lambda x, out: (x, out, np.uint64(2**64 - 1), 4)),
    "while": (stepped_past_int64, lambda x, out: (x, out, 2**63 - 2, 4)),
}


@pytest.mark.parametrize("case", WRAPPING)
def test_an_index_that_wraps_in_64_bits_is_checked_where_it_does(cpu, case):
    """The guard compares exact integers; the kernel's 64-bit arithmetic wraps. A load whose
    index wraps past x on these launches (k + m = 2**64 - 5, int64(2**64 - 1) = -1, i
    stepped past 2**63 - 1) keeps its check on them:
    it is not proven, or the guard sends the launch to the checked variant. (The proofs
    once took these as exact: `k + m + n <= x.shape[0]` held, and x[5] was read unchecked.)"""
    k, make = WRAPPING[case]
    x, out = np.arange(4, dtype=np.float32), np.zeros(8, np.float32)
    grid, block = (1, 1, 1), (8, 1, 1)
    spec, values, infos = spec_for(k, grid, block, *make(x, out))
    (load,) = [ok for (kind, _, _), ok in accesses(spec.kernel).items() if kind == "Load"]
    guard = spec.bounds_guard
    assert not (load and (guard is None or guard(values, infos, grid, block)))
    with pytest.raises(vg.BoundsError, match=r"x\[-?\d+\] with shape \(4,\)"):
        k[1, 8](*make(x, out))


def test_a_broadcast_view_past_the_longest_extent_is_refused_at_launch(cpu):
    """A broadcast extent of 2**63 - 1 once made `i + x.shape[0]` wrap; the proofs now take
    extents below 2**40 (`ir.limits.MAX_EXTENT`), and a launch refuses a longer view before
    anything runs, naming the argument and the axis."""
    x, out = np.arange(4, dtype=np.float32), np.full(8, -7, np.float32)
    with pytest.raises(vg.LaunchError, match=r"argument 'x' has 9223372036854775807 elements "
                                             r"along axis 0, past the limit of 2\*\*40 - 1"):
        beside_a_long_view[1, 8](long_view(), x[:1], x, out)
    assert (out == -7).all()
    beside_a_long_view[1, 8](np.zeros(3, np.uint8), x[:1], x, out)  # i + 3 < 6: i = 0, 1, 2
    np.testing.assert_array_equal(out, [0, 1, 2] + [-7] * 5)


@simt.kernel
def short_of_y(y, z, out):
    i = simt.global_id(0)
    if i < y.shape[0] - 5:
        out[i] = z[i]


@simt.kernel
def shifted_read(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i + 1]


def test_launch_conditions_assumed_only_where_their_sides_fit_int64(cpu):
    """The proven variant assumes its launch conditions (`llvm.assume`) in 64-bit arithmetic
    that must not wrap, the guard compares exact integers: `y.shape[0] <= 5 + z.shape[0]`
    holds of a z 2**63 - 1 long (a broadcast view), where `5 + z.shape[0]` overflows and
    the assume would be poison (undefined behaviour), so it is not assumed;
    `1 + out.shape[0] <= x.shape[0]` is (its left side is below its right one)."""
    def assumes(k, *args):
        spec, *_ = spec_for(k, (1, 1, 1), (32, 1, 1), *args)
        assert all(accesses(spec.kernel).values())
        llvm = codegen.lower_to_llvm(checks.as_launched(spec.kernel, checked=False), "sm_90")
        return [t for _, t in spec.kernel.facts["bounds_preconditions"]], llvm.count("call void @llvm.assume")

    y, z = np.ones(8, np.float32), np.ones(8, np.float32)
    texts, count = assumes(short_of_y, y, z, np.zeros(8, np.float32))
    assert "y.shape[0] <= 5 + z.shape[0]" in texts and count == 0
    assert assumes(shifted_read, y, np.zeros(4, np.float32)) == (["1 + out.shape[0] <= x.shape[0]"], 1)



def test_an_array_whose_extents_multiply_past_2_63_is_refused_at_launch():
    """An empty array, or one a foreign interface describes (`__cuda_array_interface__`
    takes any shape), may claim extents whose product passes 2**63 - 1, where the proofs
    take `r * x.shape[1] + c` exact: refused by the launch check (NumPy refuses such shapes
    itself, so the check is asked directly here)."""
    from types import SimpleNamespace

    from verdigris.runtime import limits

    claimed = SimpleNamespace(shape=(2**40 - 1, 2**40 - 1, 0))
    with pytest.raises(vg.LaunchError, match=r"'x' of shape .* whose product passes 2\*\*63 - 1"):
        limits.check_extents("k", ["x", "n"], [claimed, None])
    limits.check_extents("k", ["x"], [SimpleNamespace(shape=(2**31, 2**31, 0))])  # 2**62: fits
