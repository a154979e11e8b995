"""The array constructors of both backends: `empty`, `full`, `zeros`, `ones`, `arange`,
the `*_like` ones, and `asarray`.

Takes: shapes and dtypes, fill values, host data (NumPy arrays, lists, scalars) or arrays
of other libraries, and the backend and device to make the array on. Gives: `empty`,
`full`, `zeros`, `ones`, `arange`, `empty_like`, `zeros_like`, `ones_like`, `full_like`,
`asarray` (what `vg.empty`, ... call with the current backend).

Guarantees: on the cuda backend each gives a C-contiguous `Array` in new device memory,
except `asarray` of another library's device array (a zero-copy view); on the cpu backend
a `HostArray` (`asarray` of a NumPy array views it without copying). Dtypes, lengths and
values are NumPy's (`arange` is made by NumPy on the host and copied in one transfer);
fills are `hostops`'s; every mistake is an `ArrayError` (or `BackendError` for an unknown
backend) naming the call.
"""
from __future__ import annotations

import numpy as np

from .. import types as T
from ..errors import ArrayError, BackendError
from . import hostops
from .arrayargs import describe_array, dtype_arg, dtype_of_value, host_data, is_real, scalar, shape_arg
from .arrays import Array, HostArray, _Allocation, _as_array
from .interop import _c_strides, host_view

_DEFAULT_DTYPE = T.float32  # as torch and CuPy kernels expect; NumPy's float64 is slow on GPUs


def _check_backend(backend: str) -> None:
    if backend not in ("cuda", "cpu"):
        raise BackendError(f"unknown backend {backend!r}: use 'cuda' or 'cpu'")


def empty(shape, dtype=_DEFAULT_DTYPE, *, backend: str = "cuda", device: int = 0):
    """An uninitialized C-contiguous array (a NumPy array on the cpu backend)."""
    _check_backend(backend)
    shape, dtype = shape_arg(shape), dtype_arg(dtype)
    if backend == "cpu":
        return np.empty(shape, dtype.np).view(HostArray)
    strides = _c_strides(shape)
    size = 1
    for n in shape:
        size *= n
    memory = _Allocation(size * dtype.itemsize, device)
    return Array(memory.ptr, shape, strides, dtype, device, False, memory)


def full(shape, fill_value, dtype=None, *, backend: str = "cuda", device: int = 0):
    """A C-contiguous array with every element `fill_value` (a NumPy array on the cpu
    backend). The dtype, unless given, is NumPy's for the value: bool, int64 for an int,
    float64 for a float, a NumPy scalar's own. The value converts as NumPy converts (a
    float into an integer dtype truncates toward zero); one the dtype cannot hold (an
    integer out of range, NaN into an integer) is an ArrayError.

    On the device: a memset where the value's bytes repeat every 1, 2 or 4 bytes (every
    value of a dtype of up to 4 bytes, and 8-byte ones such as 0.0), else a verdigris
    kernel compiled once per machine (`hostops`); nothing crosses from the host."""
    dtype = dtype_of_value(fill_value) if dtype is None else dtype_arg(dtype)
    value = scalar(fill_value, dtype)
    out = empty(shape, dtype, backend=backend, device=device)
    if backend == "cpu":
        out.fill(value)
    else:
        hostops.fill(out, value.tobytes())
    return out


def zeros(shape, dtype=_DEFAULT_DTYPE, *, backend: str = "cuda", device: int = 0):
    """A zero-filled C-contiguous array (a NumPy array on the cpu backend); one memset."""
    return full(shape, 0, dtype, backend=backend, device=device)


def ones(shape, dtype=_DEFAULT_DTYPE, *, backend: str = "cuda", device: int = 0):
    """A C-contiguous array of ones (a NumPy array on the cpu backend); one memset, but
    for 8-byte dtypes (a kernel: `full`)."""
    return full(shape, 1, dtype, backend=backend, device=device)


def arange(start, stop=None, step=1, dtype=None, *, backend: str = "cuda", device: int = 0):
    """Values from `start` up to, not including, `stop`, `step` apart; one argument is the
    stop, from 0 (`arange(5)`: 0 to 4). Length, values and dtype are NumPy's: int64 for
    integers, float64 where any argument is a float, unless `dtype` is given.

    Made by NumPy on the host and copied to the device in one transfer: NumPy's results to
    the last bit (a float step rounds as NumPy rounds it), and no kernel to compile on a
    cold start, for n x itemsize bytes through the host, which is little for what arange
    usually makes (indices, inputs for a test)."""
    for name, number in (("start", start), ("stop", stop), ("step", step)):
        if number is not None and not is_real(number):
            raise ArrayError(f"arange's {name} must be a real number, not "
                             f"{type(number).__name__}")
    if step == 0:
        raise ArrayError("arange's step must not be 0")
    try:
        host = np.arange(start, stop, step, None if dtype is None else dtype_arg(dtype).np)
    except (ValueError, TypeError, OverflowError, MemoryError) as err:
        raise ArrayError(f"arange({start!r}, {stop!r}, {step!r}): {err}") from None
    dtype_arg(host.dtype)
    return asarray(host, backend=backend, device=device)


def _like(a, dtype, backend, device, name: str) -> tuple:
    """`a`'s shape and dtype (unless `dtype` is given), backend and device (unless given)."""
    info = describe_array(a)
    if info is None:
        raise ArrayError(f"{name} needs an array, not {type(a).__name__}")
    if backend is None:
        backend = "cpu" if info.device < 0 else "cuda"
    return (tuple(info.shape), info.dtype if dtype is None else dtype,
            {"backend": backend, "device": max(info.device, 0) if device is None else device})


def empty_like(a, dtype=None, *, backend: str | None = None, device: int | None = None):
    """An uninitialized C-contiguous array with `a`'s shape (and dtype, unless given).

    The backend defaults to where `a` lives: cpu for host arrays, cuda for device arrays.
    """
    shape, dtype, where = _like(a, dtype, backend, device, "empty_like")
    return empty(shape, dtype, **where)


def zeros_like(a, dtype=None, *, backend: str | None = None, device: int | None = None):
    """`zeros` with `a`'s shape (and dtype, unless given), where `a` lives (`empty_like`)."""
    shape, dtype, where = _like(a, dtype, backend, device, "zeros_like")
    return full(shape, 0, dtype, **where)


def ones_like(a, dtype=None, *, backend: str | None = None, device: int | None = None):
    """`ones` with `a`'s shape (and dtype, unless given), where `a` lives (`empty_like`)."""
    shape, dtype, where = _like(a, dtype, backend, device, "ones_like")
    return full(shape, 1, dtype, **where)


def full_like(a, fill_value, dtype=None, *, backend: str | None = None,
              device: int | None = None):
    """`full` with `a`'s shape and dtype (unless given: the value does not choose it, as in
    NumPy), where `a` lives (`empty_like`)."""
    shape, dtype, where = _like(a, dtype, backend, device, "full_like")
    return full(shape, fill_value, dtype, **where)


def asarray(obj, dtype=None, *, backend: str = "cuda", device: int = 0):
    """`obj` as an array of `backend`.

    cuda: device arrays of other libraries (torch, CuPy, JAX, numba) become zero-copy
    `Array` views; host data (NumPy arrays, lists, scalars) is copied to the device.
    cpu: NumPy arrays are returned as they are; device arrays are copied to the host.
    Giving `dtype` that differs from the data's converts it, which copies (on the device
    for device arrays: `Array.astype`).
    """
    _check_backend(backend)
    dtype = None if dtype is None else dtype_arg(dtype)
    info = describe_array(obj)
    if backend == "cpu":
        if info is not None and info.device >= 0:
            obj = _as_array(info).numpy()
        elif info is not None and not isinstance(obj, np.ndarray):  # a torch bfloat16 tensor
            obj = host_view(info)  # too: a view, as NumPy gives of the dtypes it knows
        return host_data(obj, dtype).view(HostArray)
    if info is not None and info.device >= 0:
        return _as_array(info).astype(dtype or info.dtype, copy=False)
    host = np.ascontiguousarray(host_data(obj, dtype))
    out = empty(host.shape, dtype_arg(host.dtype) if dtype is None else dtype, device=device)
    hostops.to_device(out.ptr, host, device)
    return out
