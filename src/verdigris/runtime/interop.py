"""What an array argument is: pointer, shape, strides, dtype, device, for any array library.

Takes: any object a kernel may be given. Gives: `describe(obj) -> ArrayInfo | None` (None:
not an array), `extractor(type)` (the per-type function `describe` uses), and
`byte_extent(info) -> (lo, hi)` (also `span(ptr, shape, strides, itemsize)`), the half-open
byte range a view can touch, which the launch-time alias check compares,
`shares_elements(a, b)`, which it asks where two ranges overlap (`views_share` over the
views' parts, which generated launchers ask), `overlaps_itself(shape, strides)`, which it
asks of each array a kernel writes, and `host_view(info)`, the NumPy view of host memory
the cpu backend runs on (made from the very description the alias check inspected: no
second export).

Understood: `vg.Array`, NumPy arrays (host memory, device -1), torch tensors, CuPy arrays,
anything with `__cuda_array_interface__` (numba device arrays, JAX GPU arrays) and anything
with `__dlpack__` (JAX, others).

Guarantees:
- Strides are in *elements*, not bytes (a byte stride that is not a multiple of the item
  size is refused with LaunchError). `device` is the CUDA ordinal, or -1 for host memory.
- Fast on the launch path: one dict lookup on `type(obj)` picks a per-type extractor that
  reads the library's own attributes (no dict building, no imports of torch or CuPy).
  The extractor for a type is chosen once and cached.
- `keepalive` holds whatever keeps the memory alive (the object itself, or the owner of a
  DLPack import), so a launch can hold it until it is enqueued.
- The `stream` entry of a `__cuda_array_interface__` is not acted on: which stream a
  launch uses is decided by streams.py (pass `stream=` when the producer works on its own).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .. import types as T
from ..errors import LaunchError


class MemoryOwner:
    """Base of the objects that free memory when the last view of it is gone (an
    ArrayInfo's `keepalive`). There is one per piece of memory: a copy would free it a
    second time, so copying or pickling one is refused."""

    __slots__ = ()

    def __reduce_ex__(self, protocol):
        raise TypeError(f"{type(self).__name__} owns device memory: it cannot be copied or "
                        "pickled (copy the array instead: a.copy())")


class ArrayInfo:
    """One array view: where it starts and how it is laid out. Treat as immutable."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "readonly", "keepalive")

    def __init__(self, ptr: int, shape: tuple, strides: tuple, dtype: T.DType, device: int,
                 readonly: bool, keepalive):
        self.ptr = ptr  # address of element [0, 0, ...]
        self.shape = shape
        self.strides = strides  # in elements
        self.dtype = dtype
        self.device = device  # CUDA ordinal, or -1 for host memory
        self.readonly = readonly
        self.keepalive = keepalive

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for extent in self.shape:
            n *= extent
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        where = "host" if self.device < 0 else f"cuda:{self.device}"
        return (f"ArrayInfo(ptr=0x{self.ptr:x}, shape={tuple(self.shape)}, "
                f"strides={tuple(self.strides)}, dtype={self.dtype!r}, device={where})")


_ITEMSIZE = {d: d.itemsize for d in T.ALL}  # a dict lookup beats the DType property


def byte_extent(info: ArrayInfo) -> tuple:
    """The half-open byte range [lo, hi) the view can touch; (ptr, ptr) when it is empty."""
    return span(info.ptr, info.shape, info.strides, _ITEMSIZE[info.dtype])


SHARING_WORK = 10_000  # search steps `shares_elements` takes before it answers "maybe"


def shares_elements(a: ArrayInfo, b: ArrayInfo) -> bool:
    """Whether two views of one dtype whose byte ranges overlap can reach one element: is
    `b.ptr - a.ptr` (in elements) a sum of `i_k * a.strides[k] - j_k * b.strides[k]` with
    each index in its axis' range (NumPy's `shares_memory` asks the same)? Exact: columns
    `x[:, :k]` and `x[:, k:]`, `x[::2]` and `x[1::2]`, `x[1::2]` and `x[::4]`. An axis with
    the same stride in both views counts once, as the difference of the two indices. Views
    of different dtypes, or a search past `SHARING_WORK` steps: True."""
    if a.dtype != b.dtype:
        return True
    return views_share(a.ptr, a.shape, a.strides, b.ptr, b.shape, b.strides, _ITEMSIZE[a.dtype])


def views_share(a_ptr: int, a_shape, a_strides, b_ptr: int, b_shape, b_strides, size: int) -> bool:
    """`shares_elements` of two views of one dtype (`size` bytes an element) given by their
    parts (strides in elements): what a generated launcher asks where two byte ranges
    overlap (`launcher_arrays.alias_check`)."""
    offset, rest = divmod(b_ptr - a_ptr, size)
    return bool(rest) or _reaches(offset, tuple(a_shape), tuple(a_strides), tuple(b_shape), tuple(b_strides))


@functools.lru_cache(maxsize=1024)
def _reaches(offset: int, a_shape: tuple, a_strides: tuple, b_shape: tuple, b_strides: tuple) -> bool:
    """`views_share` of views `offset` elements apart (cached: a launch on the parts of a
    packed array asks the same of every allocation)."""
    terms = []  # (|coefficient|, lowest, highest multiple)
    for k in range(max(len(a_shape), len(b_shape))):
        sa, na = (a_strides[k], a_shape[k]) if k < len(a_shape) else (0, 1)
        sb, nb = (b_strides[k], b_shape[k]) if k < len(b_shape) else (0, 1)
        if sa == sb:
            terms.append((sa, -(nb - 1), na - 1))
        else:
            terms += [(sa, 0, na - 1), (-sb, 0, nb - 1)]
    axes = sorted(((abs(c), lo, hi) if c > 0 else (-c, -hi, -lo) for c, lo, hi in terms
                   if c and hi > lo), reverse=True)
    reach = [(0, 0)] * (len(axes) + 1)  # what the axes after k can add: (least, most)
    for k in range(len(axes) - 1, -1, -1):
        s, lo, hi = axes[k]
        reach[k] = (reach[k + 1][0] + lo * s, reach[k + 1][1] + hi * s)
    work = [SHARING_WORK]

    def reachable(k: int, left: int) -> bool:
        work[0] -= 1
        if k == len(axes) or work[0] < 0:
            return left == 0 or work[0] < 0
        s, lo, hi = axes[k]
        least, most = reach[k + 1]
        first, last = max(lo, -((most - left) // s)), min(hi, (left - least) // s)
        return any(reachable(k + 1, left - d * s) for d in range(first, last + 1))

    return reachable(0, offset)


def overlaps_itself(shape, strides) -> bool:
    """Whether two distinct indices of a view with this layout reach one element (a
    broadcast view: a zero or overlapping stride), which no launch or copy may write."""
    if len(shape) == 1:  # the common case, without the cache lookup
        return shape[0] > 1 and strides[0] == 0
    return _layout_overlaps(tuple(shape), tuple(strides))


@functools.lru_cache(maxsize=1024)
def _layout_overlaps(shape: tuple, strides: tuple) -> bool:
    """`overlaps_itself`, a sufficient test: sorted by stride, each axis must step past
    everything the smaller axes cover. An empty view has no elements to share, whatever
    its strides (NumPy gives some zeros)."""
    if 0 in shape:
        return False
    covered = 0
    for extent, stride in sorted(((n, abs(s)) for n, s in zip(shape, strides) if n > 1),
                                 key=lambda axis: axis[1]):
        if stride <= covered:
            return True
        covered += stride * (extent - 1)
    return False


def span(ptr: int, shape, strides, itemsize: int) -> tuple:
    """`byte_extent` of a view given by its parts (strides in elements)."""
    if len(shape) == 1:  # the common case, without the loop
        extent, stride = shape[0], strides[0]
        if extent == 0:
            return (ptr, ptr)
        if stride >= 0:
            return (ptr, ptr + ((extent - 1) * stride + 1) * itemsize)
        return (ptr + (extent - 1) * stride * itemsize, ptr + itemsize)
    lo = hi = 0
    for extent, stride in zip(shape, strides):
        if extent == 0:
            return (ptr, ptr)
        if stride > 0:
            hi += (extent - 1) * stride
        else:
            lo += (extent - 1) * stride
    return (ptr + lo * itemsize, ptr + (hi + 1) * itemsize)


def describe(obj) -> ArrayInfo | None:
    """The ArrayInfo of an array argument, or None if `obj` is not an array."""
    try:
        extract = _EXTRACTORS[type(obj)]
    except KeyError:
        extract = _EXTRACTORS[type(obj)] = _choose_extractor(type(obj))
    return extract(obj)


def host_view(info: ArrayInfo) -> np.ndarray:
    """A NumPy view of host memory `info` describes (no copy), keeping its owner alive:
    what the cpu backend runs on for a torch tensor (bfloat16, one that requires grad), a
    DLPack import or any host array that is not NumPy's. Read-only where `info` is."""
    dtype = info.dtype.np
    if info.size == 0:
        return np.empty(info.shape, dtype)
    lo, hi = byte_extent(info)
    memory = (ctypes.c_char * (hi - lo)).from_address(lo)
    memory.owner = info.keepalive  # the view's base holds it, and so the memory
    view = np.ndarray(info.shape, dtype, buffer=memory, offset=info.ptr - lo,
                      strides=tuple(s * info.dtype.itemsize for s in info.strides))
    view.flags.writeable = not info.readonly
    return view


def extractor(tp):
    """The function `describe` uses for objects of type `tp` (chosen once per type)."""
    extract = _EXTRACTORS.get(tp)
    if extract is None:
        extract = _EXTRACTORS[tp] = _choose_extractor(tp)
    return extract


# ----------------------------------------------------------------------------- helpers

_DTYPE_CACHE: dict = {}  # a library's dtype object (or CAI typestr) -> DType
_STRIDE_CACHE: dict = {}  # (byte strides, itemsize) -> element strides


def _dtype_of(key, convert) -> T.DType:
    dtype = _DTYPE_CACHE.get(key)
    if dtype is None:
        try:
            dtype = convert(key)
        except (TypeError, KeyError, ValueError):
            raise LaunchError(f"arrays of dtype {key} are not supported by verdigris") from None
        _DTYPE_CACHE[key] = dtype
    return dtype


def _element_strides(byte_strides: tuple, itemsize: int) -> tuple:
    key = (byte_strides, itemsize)
    strides = _STRIDE_CACHE.get(key)
    if strides is None:
        if any(s % itemsize for s in byte_strides):
            raise LaunchError(f"an array with byte strides {byte_strides} is not aligned to its "
                              f"{itemsize}-byte elements", hint="pass a copy of it")
        strides = tuple(s // itemsize for s in byte_strides)
        if len(_STRIDE_CACHE) > 4096:  # bound the cache; layouts repeat in real programs
            _STRIDE_CACHE.clear()
        _STRIDE_CACHE[key] = strides
    return strides


def _c_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def _numpy_data_offset():
    """Offset of the `data` pointer in a NumPy array object, checked against `.ctypes.data`."""
    probe = np.empty(3)
    offset = object.__basicsize__  # PyArrayObject: PyObject_HEAD, then char *data
    if ctypes.c_void_p.from_address(id(probe) + offset).value == probe.ctypes.data:
        return offset
    return None


_NP_DATA_OFFSET = _numpy_data_offset()


def _numpy_ptr(a: np.ndarray) -> int:
    if _NP_DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_size_t.from_address(id(a) + _NP_DATA_OFFSET).value


# ----------------------------------------------------------------------------- extractors


def _not_an_array(obj):
    return None


def _vg_array(a):
    return a  # vg.Array is an ArrayInfo


def _numpy(a):
    return ArrayInfo(_numpy_ptr(a), a.shape, _element_strides(a.strides, a.itemsize),
                     _dtype_of(a.dtype, T.from_numpy), -1, not a.flags.writeable, a)


def _lazily_transformed(t) -> bool:
    """Whether a torch tensor's values are not those of its memory: its negative or
    conjugate bit is set (torch negates or conjugates them when it reads them)."""
    return any(getattr(t, bit, lambda: False)() for bit in ("is_neg", "is_conj"))


def _torch(t):
    if _lazily_transformed(t):
        raise LaunchError("a torch tensor with its negative or conjugate bit set (a lazy view, such as "
                          "x.conj() of a complex tensor or torch._neg_view) holds values its memory does not",
                          hint="pass t.resolve_neg().resolve_conj() (a copy with the values in memory)")
    if t.is_cuda:
        device = t.get_device()
    elif t.is_cpu:
        device = -1
    else:
        raise LaunchError(f"torch tensors on device '{t.device}' are not supported",
                          hint="move the tensor to 'cuda' or 'cpu'")
    return ArrayInfo(t.data_ptr(), t.shape, t.stride(), _dtype_of(t.dtype, T.from_any),
                     device, False, t)


def _cupy(a):
    memory = a.data  # a MemoryPointer: cheaper than `a.device`, which builds a Device
    return ArrayInfo(memory.ptr, a.shape, _element_strides(a.strides, a.itemsize),
                     _dtype_of(a.dtype, T.from_numpy), memory.device_id, False, a)


def _cuda_array_interface(obj):
    try:
        cai = obj.__cuda_array_interface__
    except (AttributeError, TypeError, ValueError):  # e.g. a JAX array on the host
        return _dlpack(obj)
    ptr, readonly = cai["data"]
    if cai.get("mask") is not None:
        raise LaunchError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    dtype = _dtype_of(cai["typestr"], T.from_numpy)
    shape = tuple(cai["shape"])
    byte_strides = cai.get("strides")
    strides = (_c_strides(shape) if byte_strides is None
               else _element_strides(tuple(byte_strides), dtype.itemsize))
    return ArrayInfo(ptr, shape, strides, dtype, _device_of_pointer(ptr), bool(readonly), obj)


def _device_of_pointer(ptr: int) -> int:
    """The CUDA ordinal owning device memory at `ptr` (0 when there is one GPU, or none)."""
    from . import driver

    if ptr == 0 or not driver.is_available() or driver.device_count() == 1:
        return 0
    drv = driver.api()
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return driver.check(drv.cuPointerGetAttribute(attr, ptr), "cuPointerGetAttribute")


def _dlpack(obj):
    from .dlpack import consume

    return consume(obj)


def _instance_probe(obj):
    """Types with nothing on the class: the protocols may still be instance attributes."""
    if hasattr(obj, "__cuda_array_interface__"):
        return _cuda_array_interface(obj)
    if hasattr(obj, "__dlpack__"):
        return _dlpack(obj)
    return None


def _choose_extractor(tp):
    module = getattr(tp, "__module__", "") or ""
    if issubclass(tp, ArrayInfo):
        return _vg_array
    if issubclass(tp, np.ndarray):
        return _numpy
    if module.split(".", 1)[0] == "torch" and hasattr(tp, "data_ptr"):
        return _torch
    if module.split(".", 1)[0] == "cupy" and hasattr(tp, "data") and hasattr(tp, "device"):
        return _cupy
    if hasattr(tp, "__cuda_array_interface__"):
        return _cuda_array_interface
    if hasattr(tp, "__dlpack__"):
        return _dlpack
    return _instance_probe


_EXTRACTORS: dict = {tp: _not_an_array for tp in
                     (int, float, bool, complex, str, bytes, type(None), tuple, list, dict)}
_EXTRACTORS.update({tp: _not_an_array for tp in set(np.sctypeDict.values())
                    if issubclass(tp, np.generic)})
