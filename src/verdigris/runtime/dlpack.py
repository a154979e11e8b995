"""DLPack both ways, through ctypes: no compiled extension.

Takes: an `ArrayInfo` to export, or an object with `__dlpack__` (or a bare capsule) to
import. Gives: `export(info, owner)` -> a "dltensor" PyCapsule holding a DLManagedTensor;
`consume(obj)` / `from_capsule(capsule)` -> an `ArrayInfo` whose `keepalive` calls the
producer's deleter when the last view of it is gone.

Guarantees:
- An exported tensor keeps `owner` (and so the memory) alive until the consumer calls the
  deleter, or until the capsule is dropped unconsumed.
- Imports accept legacy ("dltensor") and versioned ("dltensor_versioned", DLPack 1.x)
  capsules; a capsule is renamed "used_..." once consumed, as the protocol requires.
- Data on a CUDA device is requested on the legacy default stream (stream=1), the stream
  verdigris's own arrays are ordered on.
"""
from __future__ import annotations

import ctypes

from .. import types as T
from ..errors import LaunchError
from .interop import ArrayInfo, MemoryOwner, _c_strides

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_HOST_DEVICES = (KDL_CPU, KDL_CUDA_HOST)
_CUDA_DEVICES = (KDL_CUDA, KDL_CUDA_MANAGED)
_READ_ONLY_FLAG = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
LEGACY_DEFAULT_STREAM = 1  # DLPack's name for the CUDA legacy default stream


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


def _capi(name, restype, *argtypes):
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                     ctypes.c_void_p)
_capsule_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                         ctypes.c_char_p)
_capsule_set_name = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
# The capsule destructor gets a capsule whose refcount is 0: use raw pointers, never objects.
_raw_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_raw_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)

# Names must outlive every capsule that refers to them: module-level bytes objects.
_NAME = b"dltensor"
_USED_NAME = b"used_dltensor"
_VERSIONED_NAME = b"dltensor_versioned"
_USED_VERSIONED_NAME = b"used_dltensor_versioned"

_exports: dict = {}  # address of a DLManagedTensor we made -> what it keeps alive


@_DELETER
def _release_export(managed_address):
    _exports.pop(managed_address, None)


@_DELETER
def _capsule_destructor(capsule_address):
    if _raw_is_valid(capsule_address, _NAME):  # never consumed: we still own the tensor
        _exports.pop(_raw_pointer(capsule_address, _NAME), None)


_CAPSULE_DESTRUCTOR = ctypes.cast(_capsule_destructor, ctypes.c_void_p)


def export(info: ArrayInfo, owner) -> object:
    """A legacy "dltensor" capsule describing `info`; `owner` stays alive until released."""
    ndim = len(info.shape)
    shape = (ctypes.c_int64 * ndim)(*info.shape)
    strides = (ctypes.c_int64 * ndim)(*info.strides)
    code, bits = T.DLPACK[info.dtype.name]
    device = (KDL_CPU, 0) if info.device < 0 else (KDL_CUDA, info.device)
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(info.ptr or None, DLDevice(*device), ndim,
                                 DLDataType(code, bits, 1),
                                 ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                                 ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), 0)
    managed.deleter = _release_export
    address = ctypes.addressof(managed)
    _exports[address] = (managed, shape, strides, owner)
    return _capsule_new(address, _NAME, _CAPSULE_DESTRUCTOR)


class _Imported(MemoryOwner):
    """Owns a consumed DLManagedTensor: calls its deleter when the last view is gone."""

    __slots__ = ("address", "deleter")

    def __init__(self, address: int, deleter):
        self.address = address
        self.deleter = deleter

    def __del__(self):
        if self.deleter:
            self.deleter(self.address)


def consume(obj) -> ArrayInfo:
    """Import an object with `__dlpack__` (zero copy)."""
    device_type, _ = obj.__dlpack_device__()
    stream = LEGACY_DEFAULT_STREAM if device_type in _CUDA_DEVICES else None
    return from_capsule(obj.__dlpack__(stream=stream))


def from_capsule(capsule) -> ArrayInfo:
    """Import an unconsumed DLPack capsule, legacy or versioned."""
    if _capsule_is_valid(capsule, _VERSIONED_NAME):
        address = _capsule_pointer(capsule, _VERSIONED_NAME)
        managed = DLManagedTensorVersioned.from_address(address)
        readonly = bool(managed.flags & _READ_ONLY_FLAG)
        used = _USED_VERSIONED_NAME
    elif _capsule_is_valid(capsule, _NAME):
        address = _capsule_pointer(capsule, _NAME)
        managed = DLManagedTensor.from_address(address)
        readonly = False
        used = _USED_NAME
    else:
        raise LaunchError("this object is not an unconsumed DLPack capsule")
    tensor = managed.dl_tensor
    info = _info(tensor, readonly)  # validate before taking ownership
    _capsule_set_name(capsule, used)
    info.keepalive = _Imported(address, managed.deleter)
    return info


def _info(tensor: DLTensor, readonly: bool) -> ArrayInfo:
    if tensor.dtype.lanes != 1:
        raise LaunchError(f"DLPack tensors with {tensor.dtype.lanes} lanes are not supported")
    try:
        dtype = T.from_dlpack(tensor.dtype.code, tensor.dtype.bits)
    except TypeError as exc:
        raise LaunchError(str(exc)) from None
    device_type, device_id = tensor.device.device_type, tensor.device.device_id
    if device_type in _HOST_DEVICES:
        device = -1
    elif device_type in _CUDA_DEVICES:
        device = device_id
    else:
        raise LaunchError(f"DLPack device type {device_type} is neither host nor CUDA memory")
    ndim = tensor.ndim
    shape = tuple(tensor.shape[k] for k in range(ndim))
    strides = (tuple(tensor.strides[k] for k in range(ndim)) if tensor.strides
               else _c_strides(shape))
    ptr = (tensor.data or 0) + tensor.byte_offset
    return ArrayInfo(ptr, shape, strides, dtype, device, readonly, None)
