"""The host array API without a GPU: the constructors on the cpu backend against NumPy, what
they refuse (`vg.ArrayError`), `vg.Array`'s views (`reshape`, `view`) as address arithmetic,
how `hostops` coalesces views and picks driver calls, and the `elementwise` kernels run on
the cpu backend and assembled for the GPU. tests/test_arrays_fakecuda.py drives the cuda
paths through the fake driver; tests/gpu/test_arrays_gpu.py runs them on a GPU."""
import itertools

import numpy as np
import pytest

import verdigris as vg
import verdigris.types as T
from verdigris.codegen import ptxas
from verdigris.runtime import elementwise, hostops
from verdigris.runtime.arrayargs import broadcast, scalar
from verdigris.runtime.arrays import Array, HostArray
from verdigris.runtime.interop import ArrayInfo, describe
from tests.test_runtime import fake_array, random_view

DTYPES = [T.bool_, T.int8, T.uint8, T.int16, T.uint16, T.int32, T.uint32, T.int64, T.uint64,
          T.float16, T.bfloat16, T.float32, T.float64]


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Exactly equal: dtype, shape and every bit."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    as_bytes = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in (got, want)]
    assert np.array_equal(*as_bytes), (got, want)


# ----------------------------------------------------------------------------- constructors


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_filled_constructors_match_numpy(dtype, rng):
    shape = tuple(int(n) for n in rng.integers(0, 5, size=int(rng.integers(0, 4))))
    value = int(rng.integers(0, 100)) if dtype.is_int else float(rng.standard_normal())
    for got, want in [(vg.ones(shape, dtype), np.ones(shape, dtype.np)),
                      (vg.zeros(shape, dtype), np.zeros(shape, dtype.np)),
                      (vg.full(shape, value, dtype), np.full(shape, value, dtype.np))]:
        assert isinstance(got, HostArray)
        same(got, want)
    like = np.empty((3, 2), dtype.np)[:, ::-1]
    for got, want in [(vg.zeros_like(like), np.zeros_like(like)),
                      (vg.ones_like(like), np.ones_like(like)),
                      (vg.full_like(like, value), np.full_like(like, value))]:
        assert isinstance(got, HostArray)
        same(got, want)


@pytest.mark.parametrize("value, dtype", [(1.5, np.float64), (7, np.int64), (True, np.bool_),
                                          (np.float16(2), np.float16), (np.uint8(3), np.uint8),
                                          (np.array(2.5, np.float32), np.float32)])
def test_full_takes_the_values_dtype_as_numpy(value, dtype):
    got = vg.full((2, 3), value)
    same(got, np.full((2, 3), value))
    assert got.dtype == dtype


def test_defaults_and_like_dtypes():
    assert vg.ones(3).dtype == np.float32 and vg.zeros(3).dtype == np.float32  # as vg.empty
    ints = np.arange(6).reshape(2, 3)
    same(vg.full_like(ints, 2.9), np.full_like(ints, 2.9))  # the array's dtype: truncated
    same(vg.ones_like(ints, vg.float16), np.ones_like(ints, np.float16))
    same(vg.full_like(ints, 1.25, "f32"), np.full((2, 3), 1.25, np.float32))


@pytest.mark.parametrize("args, dtype", [
    ((5,), None), ((2, 11, 3), None), ((-3.5, 2.0, 0.25), None), ((1, 2, 0.1), None),
    ((10, 0, -3), None), ((0, 1, 0.1), np.float32), ((3,), np.float16), ((0, 5, 2), np.uint8),
    ((5, None, 2), None), ((0, 3, 0.5), "bfloat16"), ((np.int32(4),), None), ((0,), None)])
def test_arange_is_numpys(args, dtype):
    got = vg.arange(*args, dtype=dtype)
    assert isinstance(got, HostArray)
    want_dtype = None if dtype is None else T.from_any(dtype).np
    same(got, np.arange(*args, dtype=want_dtype))


def test_conversion_of_fill_values():
    same(scalar(2.9, T.int32), np.array(2, np.int32))  # toward zero, as NumPy
    same(scalar(-2.9, T.int8), np.array(-2, np.int8))
    same(scalar(0.5, T.bool_), np.array(True))
    same(scalar(np.float64(1e300), T.float32), np.array(np.inf, np.float32))
    same(scalar(True, T.float16), np.array(1, np.float16))
    same(scalar(2**64 - 1, T.uint64), np.array(2**64 - 1, np.uint64))
    same(scalar(np.array(-3), T.int16), np.array(-3, np.int16))


BAD_CALLS = [
    (lambda: vg.full(3, "x"), "a fill value is a number"),
    (lambda: vg.full(3, 1 + 2j), "not complex"),
    (lambda: vg.full(3, 300, vg.int8), "300 does not fit int8, whose values go from -128 to 127"),
    (lambda: vg.full(3, -1, vg.uint32), "-1 does not fit uint32"),
    (lambda: vg.full(3, float("nan"), vg.i32), "integer dtypes have no NaN or infinity"),
    (lambda: vg.full(3, 2**70, vg.f32), None),  # fits: a large float32
    (lambda: vg.ones((2, -1)), "negative dimensions are not allowed: (2, -1)"),
    (lambda: vg.zeros(2.5), "a shape is an int or a tuple of ints, not 2.5"),
    (lambda: vg.empty(3, "floaty"), "unknown dtype 'floaty'"),
    (lambda: vg.ones(3, np.complex64), "complex64"),
    (lambda: vg.zeros_like([1, 2]), "zeros_like needs an array, not list"),
    (lambda: vg.arange(0, 3, 0), "arange's step must not be 0"),
    (lambda: vg.arange("a"), "arange's start must be a real number, not str"),
    (lambda: vg.arange(1e20), "Maximum allowed size exceeded"),
    (lambda: vg.asarray(np.zeros(2, np.complex64)), "complex64"),
    (lambda: vg.asarray(["a", "b"], vg.f32), "cannot be read as an array of float32"),
]


@pytest.mark.parametrize("call, message", BAD_CALLS)
def test_bad_arguments_are_array_errors_at_the_users_line(call, message):
    if message is None:
        call()
        return
    with pytest.raises(vg.ArrayError, match=None) as caught:
        call()
    err = caught.value
    assert message in err.message, err.message
    assert isinstance(err, (ValueError, TypeError)) and isinstance(err, vg.Error)
    assert err.loc is not None and err.loc.file == __file__  # the lambda's line, with a caret
    assert "^" in str(err)


# ----------------------------------------------------------------------------- Array views


def test_reshape_views_contiguous_arrays():
    host = np.empty((4, 6), np.int16)
    device = fake_array(host.shape, T.int16)
    for shape in [(24,), (2, -1), (-1, 3, 2), ((6, 4),), (1, 24, 1), ([3, 8],)]:
        got = device.reshape(*shape)
        want = host.reshape(*shape)
        assert got.shape == want.shape and got.ptr == device.ptr and got.dtype is T.int16
        assert got.strides == tuple(s // 2 for s in want.strides)
    assert fake_array((0, 3)).reshape(-1, 5).shape == np.empty((0, 3)).reshape(-1, 5).shape == (0, 5)
    for shape, message in [((5, 5), "cannot reshape an array of 24 elements into shape (5, 5)"),
                           ((-1, -1), "into shape (-1, -1)"), ((7, -1), "into shape (7, -1)"),
                           ((-1, 0), "into shape (-1, 0)"),
                           (("a",), "a shape is an int")]:
        with pytest.raises(vg.ArrayError, match=message.replace("(", r"\(").replace(")", r"\)")):
            device.reshape(*shape)
    with pytest.raises(vg.ArrayError, match="not C-contiguous") as caught:
        device[:, ::2].reshape(12)
    assert "a.copy().reshape" in str(caught.value)
    assert device[1:3].reshape(12).ptr == device.ptr + 6 * 2  # a contiguous slice is fine


@pytest.mark.parametrize("old, new", list(itertools.product(
    [T.uint8, T.float16, T.float32, T.int64], [T.int8, T.bfloat16, T.uint32, T.float64])))
def test_view_reinterprets_as_numpy(old, new):
    host = np.zeros((3, 8), old.np)
    for index in [(...,), (slice(1, 3),), (1,), (slice(None), slice(0, 4)), (slice(None, None, -1),)]:
        source = host[index]
        device = fake_array(host.shape, old)[index]
        try:
            want = source.view(new.np)
        except ValueError:
            with pytest.raises(vg.ArrayError):
                device.view(new)
            continue
        if want.ctypes.data % new.itemsize:  # NumPy allows misaligned views; kernels may not
            continue
        got = device.view(new)
        assert got.shape == want.shape and got.dtype is new, index
        assert got.ptr - device.ptr == want.ctypes.data - source.ctypes.data
        assert got.strides == tuple(s // new.itemsize for s in want.strides)
        assert got.itemsize == new.itemsize and got.nbytes == want.nbytes


def test_view_errors_say_why():
    a = fake_array((3, 4), T.float32)
    with pytest.raises(vg.ArrayError, match="last axis contiguous"):
        a[:, ::2].view(T.uint8)
    with pytest.raises(vg.ArrayError, match="whole multiples of 8 bytes"):
        a[:, :3].view(T.float64)
    with pytest.raises(vg.ArrayError, match="0-d array"):
        a[1, 2].view(T.float16)
    with pytest.raises(vg.ArrayError, match="unknown dtype"):
        a.view("f33")
    with pytest.raises(vg.ArrayError, match=r"axes \(0, 0\) are not a permutation of 2 axes"):
        a.transpose(0, 0)


# ----------------------------------------------------------------------------- hostops plans


def addresses(info: ArrayInfo) -> np.ndarray:
    """The byte address of every element of a view, in row-major order of its shape."""
    if not info.shape:
        return np.array([info.ptr])
    index = np.indices(info.shape).reshape(len(info.shape), -1)
    return info.ptr + np.asarray(info.strides, np.int64) @ index * info.dtype.itemsize


def test_coalesce_keeps_the_pairs_of_elements(rng):
    """Coalesced views visit the same (destination, source) pairs of addresses."""
    for _ in range(200):
        base = np.empty(tuple(int(n) for n in rng.integers(1, 6, size=int(rng.integers(1, 5)))),
                        np.float32)
        dst = random_view(base)
        if dst.size == 0:
            continue
        # a source of the same shape, laid out otherwise: axes permuted, some reversed
        perm = rng.permutation(dst.ndim)
        src = np.empty(tuple(dst.shape[p] for p in perm), np.float32).transpose(np.argsort(perm))
        src = src[tuple(slice(None, None, -1) if flip else slice(None)
                        for flip in rng.integers(0, 2, size=dst.ndim))]
        views = [describe(dst), describe(src)]
        merged = hostops.coalesce(views)
        assert len(set(v.shape for v in merged)) == 1 and len(merged[0].shape) <= dst.ndim
        assert all(s > 0 for s in merged[0].strides)  # the destination walks forwards
        pairs = set(zip(*(addresses(v) for v in views)))
        assert set(zip(*(addresses(v) for v in merged))) == pairs


def test_coalesce_merges_what_numpy_would():
    a = np.empty((4, 5, 6), np.int32)
    for view, shape in [(a, (120,)), (a.T, (120,)), (a[::-1, ::-1], (120,)), (a[:, 1:4], (4, 18)),
                        (a[:, :, 1:], (20, 5)), (a[::2], (2, 30)), (a[:, :, ::2], (60,)),
                        (a[1], (30,)), (a[:, 2, 3], (4,)), (a[::2, ::2, ::2], (2, 3, 3))]:
        (merged,) = hostops.coalesce([describe(view)])
        assert merged.shape == shape, (view.shape, view.strides)


def test_rows_are_what_a_driver_call_takes(monkeypatch):
    monkeypatch.setattr(hostops.driver, "properties", lambda device: type("P", (), {"max_pitch": 2**31 - 1}))
    a = np.empty((4, 6), np.float32)

    def rows(*views):
        return hostops._rows(hostops.coalesce([describe(v) for v in views]))

    assert rows(a) == (96, 1, (96,))  # one run
    assert rows(a[2, 3:4]) == rows(a[2:3, 3:4]) == (4, 1, (4,))  # one element
    assert rows(a[:, 1:4]) == (12, 4, (24,))
    assert rows(a[:, 1:4], np.empty((4, 3), np.float32)) == (12, 4, (24, 12))
    assert rows(a[:, ::2]) is None  # a step inside rows
    assert rows(a[:, 1]) is None  # rows of one element: narrow rows go to a kernel
    assert rows(np.empty((2, 3, 4))[:, :2, :2]) is None  # three axes
    broadcast_row = broadcast(describe(np.empty(4, np.float32)), (6, 4))
    assert rows(np.empty((6, 4), np.float32), broadcast_row) is None  # pitch 0


def test_broadcast_follows_numpy(rng):
    for shape, target in [((3,), (2, 3)), ((1, 3), (4, 3)), ((4, 1), (4, 5)), ((), (2, 2)),
                          ((1, 1, 3), (3,)), ((2, 1, 3), (5, 2, 4, 3))]:
        host = rng.standard_normal(shape)
        got = broadcast(describe(host), target)
        # NumPy's assignment drops leading axes of one element (np.broadcast_to does not)
        dropped = host.reshape(shape[max(0, len(shape) - len(target)):])
        want = np.broadcast_to(dropped, target)
        np.empty(target)[...] = host  # which NumPy's assignment takes
        assert got.shape == want.shape
        assert got.strides == tuple(s // 8 for s in want.strides)
    for shape, target in [((2,), (3,)), ((3, 2), (2,)), ((2, 3), (3, 3))]:
        with pytest.raises(vg.ArrayError, match=r"does not broadcast to the shape"):
            broadcast(describe(np.empty(shape)), target)


# ----------------------------------------------------------------------------- kernels


def run_on_cpu(kernel, out, operand, grid):
    """A kernel of `elementwise` on the cpu backend, over a small `grid` (so that every
    grid-stride loop goes round)."""
    kernel.launch(grid, elementwise.BLOCK, (out, operand), {}, on="cpu")


@pytest.mark.parametrize("dtype", [T.uint8, T.uint16, T.uint32, T.uint64], ids=lambda d: d.name)
def test_fill_kernel_sets_every_element_of_a_view(dtype, rng):
    base = np.full((5, 7, 40 * dtype.itemsize), 0xAB, np.uint8).view(dtype.np)  # poisoned
    view = base[::2, 1::3, ::-1]
    value = dtype.np.type(rng.integers(0, np.iinfo(dtype.np).max, dtype=dtype.np))
    want = base.copy()
    want[::2, 1::3, ::-1] = value
    run_on_cpu(elementwise.fill, view, value, (1, 2, 2))
    same(base, want)


CONVERSIONS = [(T.float32, T.int8), (T.float64, T.float16), (T.float32, T.bfloat16),
               (T.int64, T.int8), (T.uint32, T.float32), (T.float16, T.float64),
               (T.int32, T.bool_), (T.float32, T.bool_), (T.bool_, T.float32),
               (T.bfloat16, T.int32), (T.uint8, T.int64), (T.float32, T.uint8)]


@pytest.mark.parametrize("source, target", CONVERSIONS, ids=lambda d: d.name)
def test_convert_kernel_converts_as_numpy(source, target, rng):
    values = rng.standard_normal((4, 6, 70)) * 40
    if not target.is_float and not target.is_bool:  # in range: NumPy leaves the rest undefined
        info = np.iinfo(target.np)
        values = np.clip(values, info.min, info.max)
    if source.is_int and not source.is_signed:
        values = np.abs(values)
    src = values.astype(source.np)[:, ::-1, 3:]
    out = np.full((6, 4, 67), 0x5A, np.uint8).astype(target.np).transpose(1, 0, 2)  # poisoned
    run_on_cpu(elementwise.convert, out, src, (1, 3, 2))
    same(out, src.astype(target.np))


def test_grid_covers_the_shape_and_stays_in_the_limits():
    assert elementwise.grid((1, 1, 1000)) == (4, 1, 1)
    assert elementwise.grid((7, 300, 5)) == (1, 300, 7)
    assert elementwise.grid((10**6, 10**6, 10**9)) == (65535, 65535, 65535)


needs_ptxas = pytest.mark.skipif(not ptxas.ptxas_available(), reason="ptxas not found")


@needs_ptxas
@pytest.mark.parametrize("kernel, signature", [
    (elementwise.fill, "u64[:, :, ::1], u64"), (elementwise.fill, "u8[:, :, :], u8"),
    (elementwise.convert, "i8[:, :, ::1], f32[:, :, :]"),
    (elementwise.convert, "bf16[:, :, ::1], f64[:, :, ::1]"),
    (elementwise.convert, "b1[:, :, :], f16[:, :, ::1]"),
    (elementwise.convert, "u64[:, :, ::1], u64[:, :, :]")], ids=str)
def test_kernels_assemble_for_the_gpus(kernel, signature):
    bundle = kernel.compile_aot(signature, block=elementwise.BLOCK, targets=["sm_80", "sm_90a"])
    assert len(bundle.images) >= 2  # per target; with a fully checked variant where reads
    assert all(image.startswith(b"\x7fELF") for image in bundle.images)  # need one


# ----------------------------------------------------------------------------- streams


def test_streams_and_events_need_the_cuda_backend():
    for make in (vg.Stream, vg.Event):
        with pytest.raises(vg.BackendError, match="need the cuda backend"):
            make()
