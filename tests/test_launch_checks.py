"""Launch-time checks on the cpu backend: aliasing, repeated grid axes, self-overlapping
outputs, thread counts. Each refused launch leaves memory untouched."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.examples.axpy import axpy


def poisoned(n):
    return np.full(n, np.nan, np.float32)


def test_same_array_in_and_out_is_refused_before_running(rng):
    x = rng.standard_normal(300).astype(np.float32)
    before = x.copy()
    with pytest.raises(vg.AliasError) as info:
        axpy[2, 256](2.0, x, rng.standard_normal(300).astype(np.float32), x)
    assert info.value.code == "VG201"
    text = str(info.value)
    assert "writes 'out', which is the same memory as 'x'" in text
    assert "out[i] = alpha * x[i] + y[i]" in text and "^" in text
    assert "test_launch_checks.py" in text  # the call site
    np.testing.assert_array_equal(x, before)


def test_partly_overlapping_views_are_refused(rng):
    buf = rng.standard_normal(600).astype(np.float32)
    with pytest.raises(vg.AliasError, match="overlaps 'y'"):
        axpy[2, 256](1.0, poisoned(299), buf[1:300], buf[:299])


def test_a_view_through_another_dtype_is_refused(rng):
    buf = rng.standard_normal(512).astype(np.float32)
    with pytest.raises(vg.AliasError, match="overlaps 'x'"):
        axpy[2, 256](1.0, buf.view(np.int32).view(np.float32)[:256], poisoned(256), buf[128:384])


def test_disjoint_views_of_one_buffer_pass(rng):
    buf = rng.standard_normal(512).astype(np.float32)
    x, out = buf[:256], buf[256:]
    want = 2.0 * x.astype(np.float64) + x
    axpy[1, 256](2.0, x, x, out)  # x is read twice: reads may alias each other
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_a_second_grid_axis_the_kernel_ignores_is_a_race(rng):
    """Launches specialize on which grid axes have one block, so this is proven racy."""
    x = rng.standard_normal(256).astype(np.float32)
    out = poisoned(256)
    with pytest.raises(vg.SafetyError, match=r"thread \(block \(0, 1\), .* both write out\[") as info:
        axpy[(1, 2), 256](1.0, x, x.copy(), out)
    assert info.value.code == "VG202"
    assert np.isnan(out).all()


def test_broadcast_output_is_refused(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (64,), (0,))
    with pytest.raises(vg.AliasError, match="zero or overlapping stride"):
        axpy[1, 64](1.0, x, x, out)


@simt.kernel
def copy_2d(x, out):
    r, c = simt.global_id(1), simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c]


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)])
def test_an_empty_output_is_no_overlap_whatever_its_strides(shape):
    x, out = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    copy_2d[(1, 1), (8, 8)](x, out)  # NumPy gives empty arrays zero strides: nothing to run
    strided = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, (0, 0))
    copy_2d[(1, 1), (8, 8)](x, strided)


def test_threads_along_an_axis_must_fit_int32():
    with pytest.raises(vg.LaunchError, match="4294967294 threads along x, past the limit of 2147483647"):
        axpy[2**31 - 1, 2]


@pytest.mark.parametrize("value", [2**63, -2**63 - 1, 2**70])
def test_an_int_argument_beyond_int64_names_the_argument(value):
    x = np.zeros(8, np.float32)
    with pytest.raises(vg.LaunchError, match=r"argument 'alpha' is -?\d+, which does not fit "
                                             r"int64") as info:
        axpy[1, 32](value, x, x, np.zeros(8, np.float32))
    assert info.value.loc is not None and info.value.loc.file == __file__


def test_a_bad_block_gets_a_block_hint():
    x = np.zeros(8, np.float32)
    with pytest.raises(vg.LaunchError, match="every block dimension must be positive") as info:
        axpy[1, -1](1.0, x, x, np.zeros(8, np.float32))
    assert "1 to 1024 threads" in info.value.hint


def test_an_intrinsic_called_on_the_host_names_the_call():
    with pytest.raises(vg.CompileError, match=r"can only be called inside a verdigris kernel") as info:
        simt.global_id(0)
    assert info.value.loc.file == __file__ and "@simt.kernel" in info.value.hint


@pytest.mark.parametrize("written, read", [
    (np.s_[:, 15:], np.s_[:, :15]),  # column halves: the rows interleave, no element shared
    (np.s_[1::2, :], np.s_[::2, :]),  # odd and even rows
    (np.s_[:, 1::2], np.s_[:, ::2]),
])
def test_disjoint_views_of_one_matrix_are_accepted(rng, written, read):
    base = rng.standard_normal((30, 30)).astype(np.float32)
    want = base.copy()
    want[written] = base[read] + 1.0
    copy_plus_one[(2, 2), (16, 16)](base[read], base[written])
    np.testing.assert_array_equal(base, want)


@simt.kernel
def copy_1d(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * 2.0


def test_views_of_different_strides_that_never_meet_are_accepted(rng):
    """Odd elements and multiples of 4 interleave without meeting (exact, as
    np.shares_memory); odd elements and multiples of 3 meet."""
    base = rng.standard_normal(200).astype(np.float32)
    want = base.copy()
    want[::4][:30] = base[1::2][:30] * 2.0
    copy_1d[1, 32](base[1::2][:30], base[::4][:30])
    np.testing.assert_array_equal(base, want)
    with pytest.raises(vg.AliasError, match="overlaps"):
        copy_1d[1, 32](base[1::2][:30], base[::3][:30])


@pytest.mark.parametrize("written, read", [(np.s_[:, 14:29], np.s_[:, :15]),
                                           (np.s_[2::2, :], np.s_[::2, :])])
def test_views_that_share_an_element_are_refused(written, read):
    base = np.zeros((30, 30), np.float32)
    with pytest.raises(vg.AliasError, match="overlaps"):
        copy_plus_one[(2, 2), (16, 16)](base[read], base[written])


@simt.kernel
def copy_plus_one(x, out):
    r, c = simt.global_id(1), simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c] + 1.0


def test_host_api_mistakes_get_clear_errors():
    from verdigris.examples.tile_vector_add import add

    with pytest.raises(vg.LaunchError, match=r"launch it with add\[grid\]\(\.\.\.\)"):
        add(np.ones(4, np.float32), np.ones(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(vg.LaunchError, match="non-empty list of configs") as info:
        vg.autotune(configs=[1024, 4096], key=["n"])(add)
    assert "BLOCK" in info.value.hint
    before = vg.current_backend()
    if before == "cpu":
        with pytest.raises(vg.BackendError, match="need the cuda backend"):
            vg.Event()
    vg.set_backend("CPU")
    assert vg.current_backend() == "cpu"
    vg.set_backend(before)
