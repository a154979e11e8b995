"""The runtime's host-side parts, without a GPU: describe(), byte_extent, DLPack on the host,
argument packing, streams, the disk cache, and the cpu backend's array constructors."""
import ctypes
import struct
import threading
import types

import numpy as np
import pytest

import verdigris.types as T
from verdigris.errors import BackendError, KernelError, LaunchError, Loc
from verdigris.ir import ArrayType, Kernel, Param, abi_params
from verdigris.runtime import arrays, constructors, cache, dlpack, driver, streams
from verdigris.runtime.arrays import Array
from verdigris.runtime.interop import ArrayInfo, byte_extent, describe
from verdigris.runtime.module import ArgPacker

rng = np.random.default_rng()
LOC = Loc("<test>", 1)


def byte_bounds(a):
    return np.lib.array_utils.byte_bounds(a) if hasattr(np.lib, "array_utils") else np.byte_bounds(a)


def random_view(a):
    """A random basic-indexing view of `a`: random starts, stops and (negative) steps."""
    key = []
    for n in a.shape:
        step = int(rng.choice([-3, -2, -1, 1, 2, 3]))
        start, stop = sorted(rng.integers(0, n + 1, size=2))
        key.append(slice(start, stop, step) if step > 0 else slice(stop, start, step))
    return a[tuple(key)]


# ----------------------------------------------------------------------------- describe


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.bool_, np.int64])
def test_describe_numpy_views(dtype):
    base = rng.standard_normal((7, 9, 5)).astype(dtype)
    for _ in range(20):
        view = random_view(base)
        info = describe(view)
        assert info.ptr == view.ctypes.data
        assert info.shape == view.shape
        assert info.strides == tuple(s // view.itemsize for s in view.strides)
        assert info.dtype is T.from_numpy(dtype)
        assert info.device == -1 and info.keepalive is view and not info.readonly


def test_describe_numpy_readonly_and_0d():
    a = np.array(rng.standard_normal(), np.float32)
    a.flags.writeable = False
    info = describe(a)
    assert info.shape == () and info.strides == () and info.readonly
    assert info.ptr == a.ctypes.data


def test_describe_rejects_misaligned_strides():
    raw = np.zeros(64, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[1:].view(np.uint8), (7,), (3,)).view(np.uint8)
    bad = np.ndarray((5,), np.float32, buffer=raw, offset=0, strides=(6,))
    assert describe(odd).strides == (3,)
    with pytest.raises(LaunchError, match="not aligned"):
        describe(bad)


def test_describe_unsupported_dtype():
    with pytest.raises(LaunchError, match="complex64"):
        describe(np.zeros(3, np.complex64))


@pytest.mark.parametrize("value", [1, 2.5, True, None, "x", (1, 2), np.float32(3), object()])
def test_describe_non_arrays(value):
    assert describe(value) is None


class FakeCAI:
    def __init__(self, cai):
        self._cai = cai

    @property
    def __cuda_array_interface__(self):
        return self._cai


def test_describe_cuda_array_interface():
    shape = tuple(int(n) for n in rng.integers(1, 9, size=3))
    ptr = int(rng.integers(1, 2**40)) * 256
    contiguous = describe(FakeCAI({"shape": shape, "typestr": "<f2", "data": (ptr, True),
                                   "version": 3}))
    assert contiguous.ptr == ptr and contiguous.shape == shape and contiguous.readonly
    assert contiguous.strides == (shape[1] * shape[2], shape[2], 1)
    assert contiguous.dtype is T.float16 and contiguous.device == 0
    strided = describe(FakeCAI({"shape": (4, 3), "typestr": "<i4", "data": (ptr, False),
                                "strides": (-4, 48), "version": 3}))
    assert strided.strides == (-1, 12) and strided.dtype is T.int32 and not strided.readonly


def test_describe_cuda_array_interface_on_the_instance():
    obj = types.SimpleNamespace(__cuda_array_interface__={
        "shape": (5,), "typestr": "<u8", "data": (4096, False), "version": 3})
    info = describe(obj)
    assert info.dtype is T.uint64 and info.shape == (5,) and info.strides == (1,)
    assert describe(types.SimpleNamespace(x=1)) is None


def test_describe_cuda_array_interface_refuses_masks():
    with pytest.raises(LaunchError, match="mask"):
        describe(FakeCAI({"shape": (2,), "typestr": "<f4", "data": (256, False),
                          "mask": object(), "version": 3}))


class FakeTorchDtype:
    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class FakeTensor:
    """What describe() reads of a torch.Tensor, under a class whose module is 'torch'."""

    __module__ = "torch"

    def __init__(self, ptr, shape, stride, dtype, device):
        self._ptr, self.shape, self._stride = ptr, shape, stride
        self.dtype, self._device = FakeTorchDtype(dtype), device
        self.is_cuda, self.is_cpu = device >= 0, device < 0

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._stride

    def get_device(self):
        return self._device


def test_describe_torch_like():
    t = FakeTensor(0x7000, (3, 4), (1, 3), "bfloat16", 2)
    info = describe(t)
    assert (info.ptr, info.shape, info.strides, info.dtype, info.device) == (
        0x7000, (3, 4), (1, 3), T.bfloat16, 2)
    assert info.keepalive is t
    assert describe(FakeTensor(0x10, (2,), (1,), "float32", -1)).device == -1
    with pytest.raises(LaunchError, match="complex64"):
        describe(FakeTensor(0x10, (2,), (1,), "complex64", 0))


class DLPackOnly:
    """A host producer that offers only DLPack (numpy's own export)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None, **kwargs):
        assert stream is None
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_describe_dlpack_producer():
    a = rng.standard_normal((6, 4))[::2, ::-1]
    info = describe(DLPackOnly(a))
    assert (info.ptr, info.shape, info.device) == (a.ctypes.data, a.shape, -1)
    assert info.strides == (8, -1) and info.dtype is T.float64


# ----------------------------------------------------------------------------- byte_extent


def test_byte_extent_matches_numpy_byte_bounds():
    base = rng.standard_normal((6, 5, 4)).astype(np.float32)
    for _ in range(200):
        view = random_view(base)
        if view.size:
            assert byte_extent(describe(view)) == byte_bounds(view)
        else:
            assert byte_extent(describe(view)) == (view.ctypes.data, view.ctypes.data)


def test_byte_extent_edge_cases():
    ptr = 1 << 20
    assert byte_extent(ArrayInfo(ptr, (), (), T.float64, 0, False, None)) == (ptr, ptr + 8)
    assert byte_extent(ArrayInfo(ptr, (5,), (-2,), T.int16, 0, False, None)) == (ptr - 16, ptr + 2)
    assert byte_extent(ArrayInfo(ptr, (4, 0), (3, 1), T.int32, 0, False, None)) == (ptr, ptr)
    assert byte_extent(ArrayInfo(ptr, (7,), (0,), T.float32, 0, False, None)) == (ptr, ptr + 4)
    assert byte_extent(ArrayInfo(ptr, (3, 2), (-4, 1), T.uint8, 0, False, None)) == (ptr - 8, ptr + 2)


# ----------------------------------------------------------------------------- DLPack


class Exporter:
    def __init__(self, info):
        self.info = info

    def __dlpack__(self, stream=None, **kwargs):
        return dlpack.export(self.info, self)

    def __dlpack_device__(self):
        return (dlpack.KDL_CPU, 0)


def test_dlpack_export_to_numpy_is_zero_copy_and_released():
    a = rng.standard_normal((5, 6))[:, ::-2]
    before = len(dlpack._exports)
    b = np.from_dlpack(Exporter(describe(a)))
    assert b.ctypes.data == a.ctypes.data and b.strides == a.strides
    np.testing.assert_array_equal(b, a)
    assert len(dlpack._exports) == before + 1
    del b
    assert len(dlpack._exports) == before


def test_dlpack_unconsumed_capsule_is_released():
    before = len(dlpack._exports)
    capsule = Exporter(describe(np.arange(4.0))).__dlpack__()
    assert len(dlpack._exports) == before + 1
    del capsule
    assert len(dlpack._exports) == before


def test_dlpack_capsule_is_consumed_once():
    capsule = np.arange(3.0).__dlpack__()
    info = dlpack.from_capsule(capsule)
    assert info.shape == (3,) and info.dtype is T.float64
    with pytest.raises(LaunchError, match="unconsumed"):
        dlpack.from_capsule(capsule)


# ----------------------------------------------------------------------------- Array views


def fake_array(shape, dtype=T.float32):
    """An Array over no memory (views are address arithmetic; nothing is read)."""
    np_dtype = dtype.np
    strides = tuple(s // np_dtype.itemsize for s in np.empty(shape, np_dtype).strides)
    return Array(1 << 30, shape, strides, dtype, 0, False, None)


def test_array_indexing_matches_numpy_views():
    host = np.empty((6, 7, 5), np.float32)
    device = fake_array(host.shape)
    keys = [(2,), (-1, slice(None, None, -2)), (Ellipsis, 3), (slice(1, 5), Ellipsis, slice(4, 0, -3)),
            (slice(None), 6, slice(2, 2)), 4, (1, 2, 3)]
    for key in keys:
        as_tuple = key if isinstance(key, tuple) else (key,)
        view = host[as_tuple if Ellipsis in as_tuple else as_tuple + (Ellipsis,)]  # 0-d, not a scalar
        got = device[key]
        assert got.shape == view.shape, key
        assert got.strides == tuple(s // 4 for s in view.strides), key
        assert got.ptr - device.ptr == view.ctypes.data - host.ctypes.data, key


def test_array_indexing_errors():
    a = fake_array((3, 4))
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError):
        a[0, 0, 0]
    with pytest.raises(TypeError):
        a[1.5]


def test_array_is_its_own_array_info():
    a = fake_array((4, 3), T.int16)
    assert describe(a) is a
    assert (a.ndim, a.size, a.nbytes) == (2, 12, 24)
    cai = a[:, ::2].__cuda_array_interface__
    assert cai["strides"] == (6, 4) and cai["typestr"] == "<i2" and cai["version"] == 3


def test_memory_owners_refuse_to_be_copied():
    """An owner frees its memory when the last view is gone: a copy would free it twice."""
    import copy
    import pickle

    for owner in (arrays._Allocation(0, 0), dlpack._Imported(0, None)):
        for duplicate in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="owns device memory"):
                duplicate(owner)


def test_array_copies_copy_the_data():
    """copy.copy, copy.deepcopy, pickling and a.copy() of a vg.Array (a view too) give new
    memory holding the same values, each freed once (the fake driver aborts on a double
    free)."""
    from tests import fakecuda

    if fakecuda.library_dir() is None:
        pytest.skip("needs a C compiler")
    pytest.importorskip("cuda.bindings.driver")
    done = fakecuda.run("""
import copy, gc, pickle
import numpy as np
import verdigris as vg
a = vg.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
for make in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x)),
             lambda x: x.copy(), lambda x: x[:, 1:3].copy(), lambda x: x[:0].copy()):
    b = make(a)
    assert b.ptr != a.ptr or b.size == 0
    print(np.asarray(b).tolist())
    del b
    gc.collect()
del a
gc.collect()
print("freed")
""")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    whole = np.arange(12.0).reshape(3, 4).tolist()
    assert lines[:6] == [str(whole)] * 4 + [str(np.arange(12.0).reshape(3, 4)[:, 1:3].tolist()),
                                            "[]"]
    assert lines[6] == "freed"


# ----------------------------------------------------------------------------- cpu backend


def test_cpu_backend_constructors():
    a = rng.standard_normal((3, 4))
    view = constructors.asarray(a, backend="cpu")  # the same memory, with numpy() as vg.Array has
    assert isinstance(view, arrays.HostArray) and np.shares_memory(view, a)
    assert type(view.numpy()) is np.ndarray and np.shares_memory(view.numpy(), a)
    assert constructors.asarray([1, 2], backend="cpu").dtype == np.int64
    assert constructors.asarray(a, T.float32, backend="cpu").dtype == np.float32
    z = constructors.zeros((2, 5), T.int8, backend="cpu")
    assert z.dtype == np.int8 and z.shape == (2, 5) and not z.any()
    e = constructors.empty(7, backend="cpu")
    assert e.shape == (7,) and e.dtype == np.float32
    like = constructors.empty_like(a[:, ::2])
    assert isinstance(like, np.ndarray) and like.shape == (3, 2) and like.dtype == np.float64
    with pytest.raises(BackendError):
        constructors.empty(3, backend="tpu")


# ----------------------------------------------------------------------------- packing


def scalar_kernel(dtypes):
    params = [Param(f"s{i}", "scalar", LOC, dtype=d) for i, d in enumerate(dtypes)]
    params.append(Param("out", "array", LOC, type=ArrayType(T.float32, 2, unit_inner_stride=True)))
    params.append(Param("inp", "array", LOC, type=ArrayType(T.float32, 1)))
    return Kernel("k", "simt", params, {}, [], LOC)


def read_slots(address, abi):
    pointers = (ctypes.c_void_p * len(abi)).from_address(address)
    return [ctypes.string_at(pointers[i], p.dtype.itemsize) for i, p in enumerate(abi)]


def bfloat16_reference(x: float) -> int:
    """Round-to-nearest-even of the float32 value, computed with float64 arithmetic."""
    f = float(np.float32(x))
    if f == 0:
        return int(np.array(f, np.float32).view(np.uint32)) >> 16
    exponent = np.floor(np.log2(abs(f)))
    quantum = 2.0 ** (exponent - 7)
    rounded = np.round(f / quantum) * quantum  # numpy rounds halves to even
    return int(np.array(rounded, np.float32).view(np.uint32)) >> 16


def test_arg_packer_writes_every_slot():
    dtypes = [T.bool_, T.int8, T.uint16, T.int32, T.uint32, T.int64, T.float16, T.bfloat16,
              T.float32, T.float64]
    abi = abi_params(scalar_kernel(dtypes))
    assert [p.role for p in abi[len(dtypes):]] == ["ptr", "shape", "shape", "stride", "ptr",
                                                   "shape", "stride"]
    packer = ArgPacker(abi)
    for _ in range(5):
        scalars = [bool(rng.integers(2)), int(rng.integers(-128, 128)), int(rng.integers(2**16)),
                   int(rng.integers(-2**31, 2**31)), int(rng.integers(2**32)),
                   int(rng.integers(-2**63, 2**63)), float(rng.standard_normal()),
                   float(rng.standard_normal() * 1e3), float(rng.standard_normal()),
                   float(rng.standard_normal())]
        arrays_part = [int(rng.integers(2**48)), 3, 9, 9, int(rng.integers(2**48)), 11, -2]
        slots = read_slots(packer.pack(scalars + arrays_part), abi)
        expected = [
            struct.pack("?", scalars[0]), struct.pack("b", scalars[1]), struct.pack("H", scalars[2]),
            struct.pack("i", scalars[3]), struct.pack("I", scalars[4]), struct.pack("q", scalars[5]),
            np.float16(scalars[6]).tobytes(), struct.pack("H", bfloat16_reference(scalars[7])),
            np.float32(scalars[8]).tobytes(), np.float64(scalars[9]).tobytes(),
        ] + [struct.pack("Q", arrays_part[0])] + [struct.pack("q", v) for v in arrays_part[1:4]] + [
            struct.pack("Q", arrays_part[4])] + [struct.pack("q", v) for v in arrays_part[5:]]
        assert slots == expected


def test_arg_packer_bfloat16_ties_and_nan():
    packer = ArgPacker(abi_params(scalar_kernel([T.bfloat16])))
    tie_even = float(np.array(0x3F808000, np.uint32).view(np.float32))  # halfway, even below
    tie_odd = float(np.array(0x3F818000, np.uint32).view(np.float32))  # halfway, odd below
    for value, bits in [(tie_even, 0x3F80), (tie_odd, 0x3F82), (float("inf"), 0x7F80)]:
        slot = read_slots(packer.pack([value, 0, 1, 1, 1, 0, 1, 1]), packer.abi)[0]
        assert struct.unpack("H", slot)[0] == bits
    slot = read_slots(packer.pack([float("nan"), 0, 1, 1, 1, 0, 1, 1]), packer.abi)[0]
    assert struct.unpack("H", slot)[0] & 0x7F80 == 0x7F80 and struct.unpack("H", slot)[0] & 0x7F


def test_arg_packer_names_the_value_that_does_not_fit():
    packer = ArgPacker(abi_params(scalar_kernel([T.int8])))
    with pytest.raises(LaunchError, match="s0 = 300 does not fit int8"):
        packer.pack([300, 0, 1, 1, 1, 0, 1, 1])
    with pytest.raises(LaunchError, match="3 argument values for 8"):
        packer.pack([1, 2, 3])
    floats = ArgPacker(abi_params(scalar_kernel([T.float32])))
    with pytest.raises(LaunchError, match="s0 = 1e\\+300 does not fit float32"):
        floats.pack([1e300, 0, 1, 1, 1, 0, 1, 1])


def test_arg_packer_buffers_are_per_thread():
    packer = ArgPacker(abi_params(scalar_kernel([T.int64])))
    here = packer.pack([1, 0, 1, 1, 1, 0, 1, 1])
    there = []
    worker = threading.Thread(target=lambda: there.append(packer.pack([2, 0, 1, 1, 1, 0, 1, 1])))
    worker.start()
    worker.join()
    assert there[0] != here
    assert struct.unpack("q", read_slots(here, packer.abi)[0])[0] == 1


# ----------------------------------------------------------------------------- streams


def test_stream_handles():
    handle = int(rng.integers(1, 2**40))
    assert streams.handle(handle) == handle
    assert streams.handle(None) == streams.DEFAULT_STREAM == 0
    assert streams.handle(types.SimpleNamespace(cuda_stream=handle)) == handle  # torch
    assert streams.handle(types.SimpleNamespace(ptr=handle)) == handle  # CuPy
    assert streams.handle(types.SimpleNamespace(handle=ctypes.c_void_p(handle))) == handle  # numba
    assert streams.handle(types.SimpleNamespace(handle=ctypes.c_void_p(None))) == 0
    assert streams.handle(types.SimpleNamespace(__cuda_stream__=lambda: (0, handle))) == handle
    with pytest.raises(LaunchError, match="not a CUDA stream"):
        streams.handle("stream 7")


def test_stream_resolution_rules():
    handle = int(rng.integers(1, 2**40))
    assert streams.resolve(handle, 0, torch_args=True) == handle
    assert streams.resolve(None, 0, torch_args=False) == 0


# ----------------------------------------------------------------------------- cache


def test_cache_put_get(tmp_path, monkeypatch):
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path / "c"))
    key = cache.key("def k(): pass", ("f32", 1), "sm_90")
    assert len(key) == 64 and cache.get(key) is None
    data = rng.bytes(1000)
    cache.put(key, data)
    assert cache.get(key) == data
    assert [p.name for p in (tmp_path / "c").iterdir()] == [key]  # no temporary left behind


def test_cache_key_depends_on_every_part():
    keys = {cache.key("src", ("a",), "sm_90"), cache.key("src2", ("a",), "sm_90"),
            cache.key("src", ("b",), "sm_90"), cache.key("src", ("a",), "sm_80")}
    assert len(keys) == 4
    assert cache.key("ab", "c", "t") != cache.key("a", "bc", "t")


def test_cache_unwritable_directory_is_a_miss(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(blocker / "sub"))
    cache.put("k" * 64, b"data")
    assert cache.get("k" * 64) is None


def test_cache_code_compiles_once_and_survives_damage(tmp_path, monkeypatch):
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    n = np.random.default_rng().integers(1, 1000)
    source = f"def f(x):\n    return x * {n}\n"
    first = cache.code(source, "<test>")
    (entry,) = tmp_path.iterdir()
    namespace: dict = {}
    exec(cache.code(source, "<test>"), namespace)  # read back from the disk
    assert namespace["f"](3) == 3 * n and namespace["f"].__code__.co_filename == "<test>"
    entry.write_bytes(b"not marshal data")
    assert cache.code(source, "<test>").co_consts == first.co_consts  # compiled again


def test_cache_default_location(monkeypatch):
    monkeypatch.delenv("VERDIGRIS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/tmp/xdg-test")
    assert cache.cache_dir() == "/tmp/xdg-test/verdigris"


# ----------------------------------------------------------------------------- driver


def test_is_available_never_raises(monkeypatch):
    assert isinstance(driver.is_available(), bool)

    def no_driver():
        raise BackendError("no driver")

    monkeypatch.setattr(driver, "_api", None)
    monkeypatch.setattr(driver, "_available", None)
    monkeypatch.setattr(driver, "_device_count", None)
    monkeypatch.setattr(driver, "_load", no_driver)
    assert driver.is_available() is False


def test_check_turns_results_into_errors():
    from cuda.bindings import driver as drv

    assert driver.check((drv.CUresult.CUDA_SUCCESS,)) is None
    assert driver.check((drv.CUresult.CUDA_SUCCESS, 7)) == 7
    assert driver.check((drv.CUresult.CUDA_SUCCESS, 7, 8)) == (7, 8)
    with pytest.raises(KernelError, match="cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        driver.check((drv.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,), "cuCtxSynchronize")
    with pytest.raises(BackendError, match="CUDA_ERROR_OUT_OF_MEMORY") as info:
        driver.check((drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None), "cuMemAlloc")
    assert not isinstance(info.value, KernelError)


def test_abi_binder_orders_values_as_the_abi_says():
    import numpy as np

    from verdigris.examples.axpy import axpy
    from verdigris.ir import abi_params
    from verdigris.runtime.interop import describe
    from verdigris.runtime.launch_cuda import abi_binder

    x, y = np.zeros(10, np.float32), np.zeros((10, 3), np.float32)[:, 1]
    out = np.zeros(10, np.float32)
    values = (2.5, x, y, out)
    infos = [None] + [describe(a) for a in values[1:]]
    spec = axpy.specialization(axpy.spec_key(values, infos, (128, 1, 1), (1, 1, 1)))
    got = abi_binder(spec.abi_slots)(values, infos, 0xFA)
    roles = [(a.param, a.role) for a in abi_params(spec.kernel)]
    assert roles == [("alpha", "scalar"), ("x", "ptr"), ("x", "shape"), ("y", "ptr"),
                     ("y", "shape"), ("y", "stride"), ("out", "ptr"), ("out", "shape")]
    assert got == (2.5, infos[1].ptr, 10, infos[2].ptr, 10, 3, infos[3].ptr, 10, 0xFA)


def test_dtypes_by_short_name_and_with_numpy():
    assert constructors.empty(3, "f32", backend="cpu").dtype == np.float32
    assert constructors.zeros(2, "bf16", backend="cpu").dtype == T.bfloat16
    assert np.dtype(T.float32) == np.float32 and np.zeros(2, T.int16).dtype == np.int16
    assert constructors.asarray(np.zeros(3, np.float32), backend="cpu").dtype == T.float32
    assert T.float32 == np.dtype("float32") and T.float32 != np.dtype("float64")
    with pytest.raises(TypeError, match="unknown dtype 'floaty'"):
        constructors.empty(3, "floaty", backend="cpu")


def test_from_dlpack_of_what_is_not_an_array_says_so():
    with pytest.raises(TypeError, match="not list"):
        arrays.from_dlpack([1, 2])
    with pytest.raises(TypeError, match="not its capsule"):
        arrays.from_dlpack(np.zeros(2).__dlpack__())
    view = arrays.from_dlpack(np.arange(3.0))
    assert isinstance(view, arrays.HostArray) and view.numpy().tolist() == [0.0, 1.0, 2.0]
