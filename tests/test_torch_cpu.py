"""torch tensors (and other host arrays NumPy cannot read) on the cpu backend: a bfloat16
tensor and one that requires grad are read and written in place through a NumPy view of
their memory (`interop.host_view`, no copy), as float32 tensors always were (issue #27).
torch is not a test dependency: `FakeTensor` has exactly what verdigris reads of a torch
tensor (and refuses NumPy and DLPack as torch does for these), `DLPackOnly` is an array
known only by `__dlpack__`; the torch tests run where torch is installed."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt, tile
from verdigris import types as T
from verdigris.runtime import dlpack
from verdigris.runtime.interop import ArrayInfo

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


class FakeDType:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


FakeDType.__module__ = "torch"


class FakeTensor:
    """A host tensor over `data`'s memory, as torch's extractor reads one."""

    is_cuda, is_cpu, device = False, True, "cpu"

    def __init__(self, data: np.ndarray, requires_grad: bool = False):
        self.data, self.requires_grad = data, requires_grad
        self.shape, self.dtype = data.shape, FakeDType(data.dtype.name)

    def data_ptr(self):
        return self.data.ctypes.data

    def stride(self):
        return tuple(s // self.data.itemsize for s in self.data.strides)

    def __array__(self, *args, **kwargs):
        raise TypeError("Got unsupported ScalarType BFloat16" if self.data.dtype == BF16 else
                        "Can't call numpy() on Tensor that requires grad")

    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")


FakeTensor.__module__ = "torch"


class DLPackOnly:
    """A host array known only through `__dlpack__` (as a JAX CPU array is)."""

    def __init__(self, data: np.ndarray):
        self.data = data

    def __dlpack_device__(self):
        return (dlpack.KDL_CPU, 0)

    def __dlpack__(self, stream=None, **kwargs):
        d = self.data
        info = ArrayInfo(d.ctypes.data, d.shape, tuple(s // d.itemsize for s in d.strides),
                         T.from_numpy(d.dtype), -1, False, d)
        return dlpack.export(info, d)


@simt.kernel
def scale_into(x, out, factor):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * factor


@tile.kernel
def scale_tiles(x, out, factor):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(32,)) * factor)


def _launch(kernel, x, out, factor):
    if kernel is scale_into:
        scale_into[2, 64](x, out, factor)
    else:
        scale_tiles[4](x, out, factor)


@pytest.mark.parametrize("kernel", [scale_into, scale_tiles], ids=["simt", "tile"])
@pytest.mark.parametrize("wrap", [FakeTensor, lambda d: FakeTensor(d, True), DLPackOnly],
                         ids=["bf16", "bf16-requires-grad", "dlpack"])
def test_bfloat16_host_tensors_are_read_and_written_in_place(rng, kernel, wrap):
    x = rng.standard_normal(128).astype(BF16)
    out = np.full(128, np.nan, BF16)
    _launch(kernel, wrap(x), wrap(out), 0.5)  # the result lands in `out`'s own memory
    want = (x.astype(np.float64) * 0.5).astype(BF16)  # exact: a power of two
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("kernel", [scale_into, scale_tiles], ids=["simt", "tile"])
def test_a_tensor_that_requires_grad_is_read_without_a_copy(rng, kernel):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    _launch(kernel, FakeTensor(x, requires_grad=True), FakeTensor(out), 2.0)
    np.testing.assert_array_equal(out, x * np.float32(2.0))


def test_strided_views_keep_their_layout(rng):
    base = rng.standard_normal(256).astype(BF16)
    out = np.full(256, np.nan, np.float32)
    scale_into[2, 64](FakeTensor(base[::2]), FakeTensor(out[1::2]), 1.0)
    np.testing.assert_array_equal(out[1::2], base[::2].astype(np.float32))
    assert np.isnan(out[::2]).all()


def test_vg_asarray_of_a_bfloat16_tensor_is_a_view_on_the_cpu_backend(rng):
    x = rng.standard_normal(8).astype(BF16)
    a = vg.asarray(FakeTensor(x))
    assert a.dtype == BF16 and np.shares_memory(a, x)


def test_real_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    x = torch.tensor(rng.standard_normal(128), dtype=torch.bfloat16, requires_grad=True)
    out = torch.full((128,), float("nan"), dtype=torch.bfloat16)
    scale_into[2, 64](x, out, 0.5)
    assert torch.equal(out, (x.detach().double() * 0.5).to(torch.bfloat16))


def test_a_lazily_negated_tensor_is_refused():
    """torch._neg_view's memory holds the values un-negated: launching on it would read
    the wrong values, so the launch is refused with the fix named."""
    torch = pytest.importorskip("torch")

    @simt.kernel
    def copy(x, y):
        i = simt.global_id(0)
        if i < x.shape[0]:
            y[i] = x[i]

    y = torch.zeros(4)
    with pytest.raises(vg.LaunchError, match="negative or conjugate bit"):
        copy[1, 32](torch.arange(4.0)._neg_view(), y)
    copy[1, 32](torch.arange(4.0)._neg_view().resolve_neg(), y)
    assert y.tolist() == [-0.0, -1.0, -2.0, -3.0]
