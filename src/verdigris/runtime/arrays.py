"""Device arrays (`vg.Array`), and the NumPy arrays that are the cpu backend's.

Takes: device memory (a pointer, shape, strides in elements, dtype, device, and what keeps
the memory alive), or the description of another library's array. Gives: `Array`,
`HostArray`, `from_dlpack`, and `_as_array` (an `ArrayInfo` as an `Array` view). The
constructors (`empty`, `full`, `asarray`, ...) are `constructors`'.

On the cuda backend an `Array` is a view of device memory allocated with `cuMemAlloc` in the
device's primary context (shared with PyTorch and CuPy). On the cpu backend NumPy arrays
*are* the device arrays: the constructors return `HostArray`s (NumPy arrays with a
`numpy()` method, as `vg.Array` has).

Guarantees:
- `Array.strides` are in *elements* (as the kernel ABI uses them), not bytes as in NumPy.
- An `Array` is its own `interop.ArrayInfo`, so describing one at a launch costs nothing.
- Views (`a[1:, ::2]`, `a.T`, `a.reshape`, `a.view`, DLPack and `__cuda_array_interface__`
  imports) keep the memory they view alive; memory is freed when the last view is gone,
  once: `a.copy()`, `copy.copy`, `copy.deepcopy` and pickling copy the data into new memory.
- Fills, copies and conversions on the device (`fill`, `a[key] = value`, `copy`, `astype`,
  `full`, `zeros`, `ones`) are `hostops`'s: driver calls where they fit, else verdigris
  kernels. Values follow NumPy's conversions; what cannot be done is an `ArrayError`
  naming the user's call, never an error from inside NumPy or the driver.
- Copies to and from the host, fills and conversions are ordered on the legacy default
  stream, and `numpy()` returns once the data is on the host; like `vg.synchronize()`, it
  raises `BoundsError` for an out-of-bounds access a kernel recorded (`faults`).
- DLPack export: `__dlpack__(stream=s)` synchronizes the device first unless `s` is None,
  -1 or 1 (the legacy default stream, which our own work is ordered on).
"""
from __future__ import annotations

import itertools
import operator

import numpy as np

from ..errors import ArrayError, LaunchError
from . import dlpack, driver, faults, hostops
from .arrayargs import (broadcast, check_writable, describe_array, dtype_arg, host_data,
                        is_number, reshaped, scalar)
from .interop import ArrayInfo, MemoryOwner, _c_strides, byte_extent, describe

_SERIALS = itertools.count(1 << 62)  # big: an int object of its own, which `is` compares


class _Allocation(MemoryOwner):
    """Owns device memory from cuMemAlloc; frees it when the last view is gone."""

    __slots__ = ("ptr", "nbytes", "device")

    def __init__(self, nbytes: int, device: int):
        self.device = device
        self.nbytes = nbytes
        self.ptr = 0
        if nbytes:
            driver.activate(device)
            self.ptr = int(driver.check(driver.api().cuMemAlloc(nbytes), "cuMemAlloc"))

    def __del__(self):
        if self.ptr:
            try:
                driver.activate(self.device)
                driver.api().cuMemFree(self.ptr)
            except Exception:  # at interpreter exit the driver may already be gone
                pass


class HostArray(np.ndarray):
    """A NumPy array that is a cpu-backend device array: what the constructors give there.
    It is a NumPy array in every way, plus `numpy()`, so code written for `vg.Array`
    (`out.numpy()`) runs on both backends."""

    def numpy(self) -> np.ndarray:
        """This array as a plain NumPy array: the same memory, as torch's `.numpy()` of a
        cpu tensor (a `vg.Array`'s `numpy()` copies from the device)."""
        return self.view(np.ndarray)


class Array(ArrayInfo):
    """A view of CUDA device memory: `shape`, `dtype` (a vg DType), `strides` (elements),
    `ndim`, `size`, `itemsize`, `nbytes`, `device` (ordinal), `ptr`. Make them with
    `vg.empty`, `vg.zeros`, `vg.ones`, `vg.full`, `vg.arange`, `vg.asarray` or
    `vg.from_dlpack`, not by calling `Array` directly.

    As in NumPy: `a.numpy()` (a host copy), `a.copy()`, `a.astype(dtype)`, `a.fill(value)`,
    `a[key]` (a view: integers, slices, `...`), `a[key] = value` (a number, or an array
    that broadcasts to the view), `a.reshape(shape)` and `a.view(dtype)` (views), `a.T`,
    `a.transpose(axes)`.

    `kind` is what a launch checks of it, computed once: (dtype, device, rank, C order,
    unit inner stride, 16-byte aligned), one object per distinct kind (`runtime.fastpath`
    compares it by identity); `lo` and `hi` are the byte range [lo, hi) it can touch
    (`interop.byte_extent`), which the launch-time alias check compares; `serial` is this
    Array's own number, never given to another (a launcher remembers its last launch's
    arrays by it, without keeping them alive).

    An Array never changes after it is made: the launch checks rely on it."""

    __slots__ = ("kind", "lo", "hi", "serial")

    def __init__(self, ptr: int, shape: tuple, strides: tuple, dtype: T.DType, device: int,
                 readonly: bool, keepalive):
        super().__init__(ptr, shape, strides, dtype, device, readonly, keepalive)
        kind = (dtype, device, len(shape), tuple(strides) == _c_strides(tuple(shape)),
                bool(strides) and strides[-1] == 1, ptr % 16 == 0)
        self.kind = _KINDS.setdefault(kind, kind)
        self.lo, self.hi = byte_extent(self)
        self.serial = next(_SERIALS)

    # -- host transfer

    def numpy(self) -> np.ndarray:
        """A host copy (C-contiguous NumPy array)."""
        out = np.empty(self.shape, self.dtype.np)
        if out.size == 0:
            return out
        if self.is_c_contiguous:
            _copy_to_host(out, self.ptr, out.nbytes, self.device)
            return out
        lo, hi = byte_extent(self)
        span = np.empty(hi - lo, np.uint8)
        _copy_to_host(span, lo, hi - lo, self.device)
        itemsize = self.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            span[self.ptr - lo:].view(self.dtype.np), self.shape,
            tuple(s * itemsize for s in self.strides))
        out[...] = view
        return out

    def copy(self) -> "Array":
        """A C-contiguous copy in new memory on the same device (writable, whatever this
        one is), made on the device (`hostops.copy`)."""
        return self.astype(self.dtype)

    def astype(self, dtype, copy: bool = True) -> "Array":
        """This array converted to `dtype`, in new C-contiguous memory on the same device,
        as NumPy's `astype` converts: a float into an integer truncates toward zero, into
        bool is `x != 0`, an integer into a narrower one wraps; a float outside an integer
        dtype's range gives an undefined value, as in NumPy. `copy=False` returns this
        array itself when it has the dtype.

        Done on the device by a verdigris kernel (`elementwise.convert`), compiled once per
        pair of dtypes and machine: the first conversion between two dtypes with a fresh
        disk cache pays a compile (a few hundred milliseconds), none goes through the host."""
        from .constructors import empty

        dtype = dtype_arg(dtype)
        if dtype is self.dtype and not copy:
            return self
        out = empty(self.shape, dtype, device=self.device)
        hostops.copy(out, self)
        return out

    # copy.copy, copy.deepcopy and pickle copy the data, as NumPy and CuPy do (the memory
    # has one owner: a copied owner would free it twice)
    def __copy__(self) -> "Array":
        return self.copy()

    def __deepcopy__(self, memo) -> "Array":
        return self.copy()

    def __reduce__(self):
        return _from_host, (self.numpy(), self.device)

    def __array__(self, dtype=None, copy=None):
        """`np.asarray(a)`: a host copy, so code reads the same on both backends."""
        if copy is False:
            raise ValueError("a vg.Array is device memory: reading it on the host copies")
        host = self.numpy()
        return host if dtype is None else host.astype(dtype, copy=False)

    @property
    def is_c_contiguous(self) -> bool:
        return all(n == 1 or s == c for n, s, c in
                   zip(self.shape, self.strides, _c_strides(self.shape)))

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    # -- writes

    def fill(self, value) -> None:
        """Set every element to `value`, a number converted as `vg.full` converts it. On
        the device: a memset where the value's bytes repeat every 1, 2 or 4 bytes (any
        value of a dtype of up to 4 bytes), else a verdigris kernel (`hostops`)."""
        check_writable(self, "fill")
        hostops.fill(self, scalar(value, self.dtype).tobytes())

    def __setitem__(self, key, value) -> None:
        """`a[key] = value`, the key as `a[key]` takes it. A number sets every element of
        the view (`fill`); an array whose shape broadcasts to the view's (NumPy's rules)
        is copied into it, converted to this dtype as NumPy converts. Device arrays (a
        `vg.Array`, torch, CuPy...) are copied on the device; host data (NumPy arrays,
        lists) crosses in one transfer (`hostops.upload`); a smaller array that broadcasts
        crosses as it is and is repeated on the device."""
        view = self[key]
        check_writable(view, "assign to")
        if is_number(value):
            hostops.fill(view, scalar(value, view.dtype).tobytes())
            return
        info = None if isinstance(value, (np.ndarray, list, tuple)) else describe_array(value)
        if info is not None and info.device >= 0:
            hostops.copy(view, broadcast(info, view.shape))
            return
        host = host_data(value, view.dtype)
        broadcast(describe(host), view.shape)  # refuse before anything moves
        if host.size == view.size:
            hostops.upload(view, host.reshape(view.shape))
        else:  # a smaller array, repeated: it crosses as it is, the device repeats it
            from .constructors import asarray

            hostops.copy(view, broadcast(asarray(host, device=view.device), view.shape))

    # -- views

    def __getitem__(self, key) -> "Array":
        """Basic indexing (integers, slices, `...`): a view of the same memory."""
        key = key if isinstance(key, tuple) else (key,)
        if key.count(Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in key:
            at = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:at] + (slice(None),) * fill + key[at + 1:]
        if len(key) > self.ndim:
            raise IndexError(f"too many indices for an array with {self.ndim} dimensions")
        key = key + (slice(None),) * (self.ndim - len(key))
        ptr, shape, strides = self.ptr, [], []
        itemsize = self.dtype.itemsize
        for axis, (k, n, s) in enumerate(zip(key, self.shape, self.strides)):
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                shape.append(len(range(start, stop, step)))
                strides.append(s * step)
                if shape[-1]:
                    ptr += start * s * itemsize
            else:
                i = operator.index(k)
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
                ptr += (i % n) * s * itemsize
        return Array(ptr, tuple(shape), tuple(strides), self.dtype, self.device,
                     self.readonly, self.keepalive)

    def reshape(self, *shape) -> "Array":
        """A view of the same elements in `shape` (a tuple, or the extents as arguments;
        one of them may be -1: whatever the others leave). Views only: for an array that
        is not C-contiguous, an ArrayError (reshape a copy: `a.copy().reshape(...)`)."""
        shape = reshaped(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list))
                          else shape, self.size)
        if self.size and not self.is_c_contiguous:
            raise ArrayError(f"reshape gives views only, and this array of shape {self.shape} "
                             f"and strides {self.strides} (in elements) is not C-contiguous",
                             hint="reshape a contiguous copy: a.copy().reshape(...)")
        return Array(self.ptr, shape, _c_strides(shape), self.dtype, self.device,
                     self.readonly, self.keepalive)

    def view(self, dtype) -> "Array":
        """The same memory read as `dtype`, without a copy, by NumPy's rules: a dtype of
        the same item size keeps the shape; another rescales the last axis, which must be
        contiguous (a (3, 4) float32 array viewed as uint8 is (3, 16), as float64 (3, 2))."""
        dtype = dtype_arg(dtype)
        old, new = self.itemsize, dtype.itemsize
        shape, strides = self.shape, self.strides
        if old != new:
            where = f"a {self.dtype.name} array of shape {tuple(shape)}"
            if not shape:
                raise ArrayError(f"a 0-d array can only be viewed as a dtype of its item size "
                                 f"({old} bytes), not as {dtype.name} ({new})")
            if shape[-1] != 1 and strides[-1] != 1:
                raise ArrayError(f"viewing {where} as {dtype.name} needs its last axis "
                                 "contiguous", hint="view a contiguous copy: a.copy().view(...)")
            if (shape[-1] * old) % new or any(s * old % new for s in strides[:-1]) \
                    or self.ptr % new:
                raise ArrayError(f"{where} cannot be viewed as {dtype.name}: its last axis "
                                 f"({shape[-1]} x {old} bytes), its rows and its address must "
                                 f"be whole multiples of {new} bytes")
            shape = shape[:-1] + (shape[-1] * old // new,)
            strides = tuple(s * old // new for s in strides[:-1]) + (1,)
        return Array(self.ptr, tuple(shape), tuple(strides), dtype, self.device, self.readonly,
                     self.keepalive)

    def transpose(self, *axes) -> "Array":
        """A view with the axes permuted (reversed when none are given), as in NumPy."""
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        axes = tuple(axes) or tuple(reversed(range(self.ndim)))
        if sorted(axes) != list(range(self.ndim)):
            raise ArrayError(f"axes {axes} are not a permutation of {self.ndim} axes")
        return Array(self.ptr, tuple(self.shape[a] for a in axes),
                     tuple(self.strides[a] for a in axes), self.dtype, self.device,
                     self.readonly, self.keepalive)

    @property
    def T(self) -> "Array":
        return self.transpose()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # -- interchange

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("vg.Array exports without copying only")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("vg.Array exports to its own device only")
        if stream not in (None, -1, dlpack.LEGACY_DEFAULT_STREAM):
            driver.synchronize(self.device)
        return dlpack.export(self, self.keepalive)

    def __dlpack_device__(self) -> tuple:
        return (dlpack.KDL_CUDA, self.device)

    @property
    def __cuda_array_interface__(self) -> dict:
        itemsize = self.dtype.itemsize
        return {
            "shape": tuple(self.shape),
            "typestr": self.dtype.np.str,
            "data": (self.ptr, self.readonly),
            "strides": None if self.is_c_contiguous else tuple(s * itemsize for s in self.strides),
            "version": 3,
            "stream": 1,  # our work is ordered on the legacy default stream
        }

    def __repr__(self) -> str:
        return f"vg.Array(shape={tuple(self.shape)}, dtype={self.dtype!r}, device=cuda:{self.device})"


_KINDS: dict = {}  # Array.kind -> itself: one object per kind


def _copy_to_host(out: np.ndarray, src: int, nbytes: int, device: int) -> None:
    driver.activate(device)
    driver.check(driver.api().cuMemcpyDtoH(out.ctypes.data, src, nbytes), "cuMemcpyDtoH")
    faults.raise_pending(device)  # a synchronization point: report a recorded bounds fault


def _from_host(host: np.ndarray, device: int) -> Array:
    """An unpickled Array: its data copied back to `device`."""
    from .constructors import asarray

    return asarray(host, device=device)


def from_dlpack(obj):
    """A zero-copy view of `obj` (anything with `__dlpack__`): an `Array` for CUDA memory,
    a NumPy array for host memory (a `HostArray`, as the cpu backend's constructors give)."""
    if not hasattr(obj, "__dlpack_device__"):
        raise TypeError(f"from_dlpack needs an array with __dlpack__ and __dlpack_device__ "
                        f"(NumPy, torch, CuPy, JAX, vg.Array), not {type(obj).__name__}"
                        + ("; pass the array itself, not its capsule"
                           if type(obj).__name__ == "PyCapsule" else ""))
    device_type, _ = obj.__dlpack_device__()
    if device_type in (dlpack.KDL_CPU, dlpack.KDL_CUDA_HOST):
        return np.from_dlpack(obj).view(HostArray)
    return _as_array(dlpack.consume(obj))


def _as_array(info: ArrayInfo) -> Array:
    if isinstance(info, Array):
        return info
    if info.device < 0:
        raise LaunchError("this array is in host memory", hint="use vg.asarray to copy it")
    return Array(info.ptr, tuple(info.shape), tuple(info.strides), info.dtype, info.device,
                 info.readonly, info.keepalive)


Array.from_dlpack = staticmethod(from_dlpack)
