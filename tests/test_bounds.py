"""Bounds proofs (`safety.bounds`), the checked GPU code they spare, and the launch guard.

No GPU here: proofs and guards run on the host, the PTX is grepped and assembled by ptxas,
and the checked code runs on the host through test_codegen's harness (its fault record is
a NumPy array), which shows an out-of-bounds access skipped and the first fault recorded.
"""
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt
from verdigris.codegen import checks
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
    spec, *_ = spec_for(unguarded, (1, 1, 1), (64, 1, 1), np.ones(n, np.float32))
    assert not any(accesses(spec.kernel).values()) and spec.bounds_guard is None
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
            assert codegen.assemble(codegen.compile_to_ptx(k, target).ptx, target)[:4] == b"\x7fELF"


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
