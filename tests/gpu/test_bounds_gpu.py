"""Bounds checks on the GPU: an out-of-bounds access is skipped, recorded, and raised as
`vg.BoundsError` at the next synchronization; the context stays usable; a launch that
breaks the proofs' preconditions runs the checked kernel."""
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.examples.gather_sum import gather_sum, gather_sum_any

pytestmark = pytest.mark.gpu


@simt.kernel
def write_past(out):
    out[simt.global_id(0)] = 7.0  # no guard: the last block's tail is out of bounds


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


def test_oob_write_raises_at_sync_and_leaves_memory_and_context_intact(rng):
    n = 1000
    backing = vg.asarray(np.full(n + 48, -1.0, np.float32))
    write_past[vg.cdiv(n, 256), 256](backing[:n])
    with pytest.raises(vg.BoundsError) as info:
        vg.synchronize()
    err = info.value
    assert err.code == "VG302" and err.loc.line == write_past.fn.__code__.co_firstlineno + 2
    assert re.fullmatch(r"out of bounds: out\[10[0-2]\d\] with shape \(1000,\) in kernel write_past, "
                        r"block \(3, 0, 0\) thread \((\d+), 0, 0\)", err.message), err.message
    assert "out[simt.global_id(0)] = 7.0" in str(err) and "^" in str(err)
    host = backing.numpy()  # no second report: the fault was cleared
    assert (host[:n] == 7.0).all() and (host[n:] == -1.0).all()  # nothing past the end written
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = vg.asarray(np.full(n, np.nan, np.float32))
    axpy[vg.cdiv(n, 256), 256](1.5, vg.asarray(x), vg.asarray(y), out)
    vg.synchronize()
    np.testing.assert_allclose(out.numpy(), 1.5 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_numpy_copy_reports_the_fault():
    out = vg.zeros(100, vg.float32)
    write_past[1, 128](out)
    with pytest.raises(vg.BoundsError, match=r"out\[1[0-2]\d\] with shape \(100,\)"):
        np.asarray(out)
    assert (out.numpy() == 7.0).all()


def test_short_input_runs_the_checked_kernel(rng):
    n = 5000
    x, y = rng.standard_normal(n - 7).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = vg.asarray(np.full(n, np.nan, np.float32))
    axpy[vg.cdiv(n, 256), 256](2.0, vg.asarray(x), vg.asarray(y), out)
    with pytest.raises(vg.BoundsError, match=r"x\[499[3-9]\] with shape \(4993,\) in kernel axpy"):
        vg.synchronize()
    got = out.numpy()
    np.testing.assert_allclose(got[:n - 7], 2.0 * x.astype(np.float64) + y[:n - 7], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[n - 7:], y[n - 7:], rtol=1e-6)  # the skipped load read 0
    axpy[vg.cdiv(n, 256), 256](2.0, vg.asarray(y), vg.asarray(y), out)  # proven variant again
    np.testing.assert_allclose(out.numpy(), 3.0 * y.astype(np.float64), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel, constexprs", [(gather_sum, {"K": 8}), (gather_sum_any, {})],
                         ids=["unrolled", "rolled loop"])
def test_checked_loads_record_their_first_skipped_load(rng, kernel, constexprs):
    """In a stretch of straight-line code (gather_sum's loop, unrolled) and carried out of a
    loop that stays a loop (gather_sum_any, K at run time) alike."""
    n, K = 3000, 8
    x = rng.standard_normal(n).astype(np.float32)
    idx = rng.integers(0, n, (n, K))
    idx[1234, 2], idx[1234, 5] = n + 11, n + 40  # one thread reads past x twice
    out = vg.asarray(np.full(n, np.nan, np.float32))
    kernel[vg.cdiv(n, 256), 256](vg.asarray(x), vg.asarray(idx), out, **constexprs)
    with pytest.raises(vg.BoundsError) as info:
        vg.synchronize()
    assert re.fullmatch(rf"out of bounds: x\[{n + 11}\] with shape \({n},\) in kernel {kernel.__name__}, "
                        r"block \(4, 0, 0\) thread \(210, 0, 0\)", info.value.message), info.value.message
    assert "total += x[idx[i, k]]" in str(info.value)
    want = np.where(idx < n, x[np.minimum(idx, n - 1)].astype(np.float64), 0.0).sum(1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)  # skipped loads read 0
    idx[idx >= n] = 0
    kernel[vg.cdiv(n, 256), 256](vg.asarray(x), vg.asarray(idx), out, **constexprs)
    vg.synchronize()  # in bounds: no fault left behind
    np.testing.assert_allclose(out.numpy(), x[idx].astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
