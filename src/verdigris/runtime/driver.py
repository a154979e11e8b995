"""The CUDA driver, reached through NVIDIA's cuda-bindings, loaded lazily.

Takes: device ordinals. Gives: `api()` (the `cuda.bindings.driver` module), `check(ret)`,
`is_available()`, `device_count()`, `context(device)` (the device's *primary* context, the
one PyTorch, CuPy and the runtime API share, retained on first use), `on_device(device)`
(a `with` block in that context, which leaves the thread's current context as it found
it), `activate(device)`, `is_current(device)`, `properties(device)`, `synchronize(device)`.

Guarantees:
- Importing this module never touches the driver; `is_available()` never raises (False
  without cuda-bindings, libcuda or a GPU).
- `check` turns a failed CUresult into a `KernelError` for faults raised by a kernel that
  ran (illegal address, trap, ...) and a `BackendError` for everything else, naming the call,
  the driver's error name and its description.
- A primary context is retained once per device and never released (it lives as long as
  the process, as in the CUDA runtime).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

from ..errors import BackendError, KernelError

_lock = threading.Lock()
_api = None
_available: bool | None = None
_device_count: int | None = None
_contexts: dict = {}  # ordinal -> CUcontext (retained primary context)
_properties: dict = {}  # ordinal -> DeviceProperties

# Sticky errors a kernel causes while it runs: they surface at the next synchronizing call.
_KERNEL_FAULTS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_LAUNCH_TIMEOUT",
})


def api():
    """The `cuda.bindings.driver` module, with `cuInit` done. Raises BackendError."""
    global _api
    if _api is None:
        with _lock:
            if _api is None:
                _api = _load()
    return _api


def _load():
    try:
        from cuda.bindings import driver as drv
    except ImportError as exc:
        raise BackendError(f"the cuda backend needs the cuda-bindings package ({exc})",
                           hint="pip install cuda-bindings, or use vg.set_backend('cpu')") from None
    try:
        (err,) = drv.cuInit(0)
    except Exception as exc:  # libcuda.so missing: cuda-pathfinder raises its own types
        raise BackendError(f"the NVIDIA driver library could not be loaded: {exc}",
                           hint="install the NVIDIA driver, or use vg.set_backend('cpu')") from None
    if err:
        raise _error(drv, err, "cuInit")
    return drv


def error_name(err) -> str:
    """The CUresult's enumerator name, e.g. 'CUDA_ERROR_ILLEGAL_ADDRESS'."""
    name = getattr(err, "name", None)
    return name if name else f"CUresult {int(err)}"


def _error(drv, err, call: str):
    name = error_name(err)
    try:
        status, text = drv.cuGetErrorString(err)
        text = "" if status or not text else text.decode()
    except Exception:  # describing an error must not raise another
        text = ""
    message = f"{call} failed: {name}" + (f" ({text})" if text else "")
    cls = KernelError if name in _KERNEL_FAULTS else BackendError
    return cls(message)


def check(ret, call: str = "CUDA driver call"):
    """Unwrap a cuda-bindings result tuple `(err, *values)`: None, the one value, or a tuple.

    Raises KernelError (a fault from a kernel that ran) or BackendError naming `call`.
    """
    err = ret[0]
    if err:
        raise _error(_api, err, call)
    n = len(ret)
    return None if n == 1 else ret[1] if n == 2 else ret[1:]


def is_available() -> bool:
    """True when cuda-bindings, the driver and at least one GPU are present. Never raises."""
    global _available
    if _available is None:
        try:
            _available = device_count() > 0
        except Exception:
            _available = False
    return _available


def device_count() -> int:
    """How many CUDA devices there are (asked once; devices do not come and go)."""
    global _device_count
    if _device_count is None:
        err, count = api().cuDeviceGetCount()
        _device_count = 0 if error_name(err) == "CUDA_ERROR_NO_DEVICE" else check((err, count), "cuDeviceGetCount")
    return _device_count


def _device(ordinal: int):
    drv = api()
    count = device_count()
    if not 0 <= ordinal < count:
        raise BackendError(f"there is no CUDA device {ordinal} ({count} present)")
    return check(drv.cuDeviceGet(ordinal), "cuDeviceGet")


def context(device: int = 0):
    """The retained primary context of `device` (a CUcontext), created on first use."""
    ctx = _contexts.get(device)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(device)
            if ctx is None:
                ctx = check(api().cuDevicePrimaryCtxRetain(_device(device)),
                            "cuDevicePrimaryCtxRetain")
                _contexts[device] = ctx
        from . import warmup

        warmup.device_ready(device)
    return ctx


def is_current(device: int) -> bool:
    """Whether `device`'s primary context is this thread's current context."""
    current = check(api().cuCtxGetCurrent(), "cuCtxGetCurrent")
    return current is not None and int(current) == int(context(device))


def activate(device: int = 0):
    """Make `device`'s primary context current on this thread (one query when it already is)."""
    ctx = context(device)
    drv = _api
    current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) != int(ctx):
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


@contextlib.contextmanager
def on_device(device: int = 0):
    """Run the body in `device`'s primary context, then give the thread back the context it
    had (so torch and CuPy keep their current device). A thread that had none keeps this
    one, as the CUDA runtime does on a thread's first call."""
    ctx = context(device)
    drv = _api
    current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is not None and int(current) == int(ctx):
        yield ctx
    elif current is None or not int(current):
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        yield ctx
    else:
        check(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            yield ctx
        finally:
            check(drv.cuCtxPopCurrent(), "cuCtxPopCurrent")


def synchronize(device: int = 0) -> None:
    """Wait for all work on `device`; raises KernelError if a kernel faulted, BoundsError if
    one recorded an out-of-bounds access (`faults`)."""
    from . import faults

    with on_device(device):
        check(_api.cuCtxSynchronize(), "cuCtxSynchronize")
    faults.raise_pending(device)


@dataclass(frozen=True)
class DeviceProperties:
    ordinal: int
    name: str
    cc: tuple  # (major, minor)
    multiprocessors: int  # SM count
    max_threads_per_block: int
    max_shared_per_block_optin: int  # bytes of dynamic shared memory a kernel may opt into
    warp_size: int
    max_pitch: int  # bytes: the widest row pitch cuMemcpy2D takes
    total_memory: int  # bytes

    @property
    def arch(self) -> str:
        """The PTX target name of this device, e.g. 'sm_90'."""
        return f"sm_{self.cc[0]}{self.cc[1]}"


_ATTRIBUTES = {  # DeviceProperties field -> CU_DEVICE_ATTRIBUTE_ name
    "multiprocessors": "MULTIPROCESSOR_COUNT",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_shared_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "warp_size": "WARP_SIZE",
    "max_pitch": "MAX_PITCH",
}


def properties(device: int = 0) -> DeviceProperties:
    """Name, compute capability, SM count and limits of `device` (queried once)."""
    props = _properties.get(device)
    if props is None:
        drv = api()
        dev = _device(device)

        def attribute(name):
            attr = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
            return check(drv.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute")

        name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        props = DeviceProperties(
            ordinal=device,
            name=name.split(b"\0", 1)[0].decode(),
            cc=(attribute("COMPUTE_CAPABILITY_MAJOR"), attribute("COMPUTE_CAPABILITY_MINOR")),
            total_memory=check(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem"),
            **{field: attribute(attr) for field, attr in _ATTRIBUTES.items()},
        )
        _properties[device] = props
    return props


def driver_version() -> tuple:
    """The installed driver's CUDA version as (major, minor), e.g. (13, 0)."""
    version = check(api().cuDriverGetVersion(), "cuDriverGetVersion")
    return (version // 1000, version % 1000 // 10)
