"""Which CUDA stream a launch goes on.

Takes: the launch's `stream=` (None, an int handle, a `CUstream`, a `torch.cuda.Stream`, a
CuPy or numba stream, a `cuda.core` stream: anything with `__cuda_stream__`, `.cuda_stream`,
`.ptr` or `.handle`), and whether any argument is a torch tensor. Gives: `resolve(stream,
device, torch_args) -> int`, the raw CUstream handle, `handle(stream) -> int`,
`synchronize_stream(stream)`, and `Event` (`vg.Event`: record, wait, synchronize, timing).

Rules, in order:
1. an explicit `stream=` wins;
2. else, when any argument is a torch tensor, PyTorch's current stream on that device (so
   kernels order with torch's work and are captured by `torch.cuda.graph`);
3. else `DEFAULT_STREAM`, handle 0: the NULL stream, which in the driver API is the *legacy*
   default stream (it waits for, and is waited on by, every blocking stream of the context).
   verdigris's own copies, `zeros` and DLPack exports are ordered on it too.
"""
from __future__ import annotations

import ctypes
import sys

from ..errors import BackendError, LaunchError

DEFAULT_STREAM = 0


def handle(stream) -> int:
    """The raw CUstream handle (an int) of any stream-like object."""
    if type(stream) is int:
        return stream
    if stream is None:
        return DEFAULT_STREAM
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:  # the CUDA stream protocol: () -> (version, handle)
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch; CuPy; numba / cuda.core
        value = getattr(stream, attribute, None)
        if value is not None:
            return _to_int(value)
    return _to_int(stream)  # a CUstream, or anything else int() understands


def _to_int(value) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, ctypes.c_void_p):  # numba's stream.handle (ctypes binding)
        return value.value or 0
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LaunchError(f"{type(value).__name__} is not a CUDA stream",
                          hint="pass stream= an int handle, a CUstream, or a "
                               "torch/CuPy/numba stream") from None


_torch_current_raw_stream = None


def torch_current_function():
    """`device -> raw handle` of PyTorch's current stream (torch is imported: a tensor was
    passed). The private C entry point avoids building a Stream object (~1 µs); Triton
    uses it too."""
    global _torch_current_raw_stream
    if _torch_current_raw_stream is None:
        torch = sys.modules["torch"]
        _torch_current_raw_stream = getattr(
            torch._C, "_cuda_getCurrentRawStream",
            lambda d: torch.cuda.current_stream(d).cuda_stream)
    return _torch_current_raw_stream


def torch_current(device: int) -> int:
    """PyTorch's current stream on `device`."""
    return torch_current_function()(device)


def resolve(stream, device: int, torch_args: bool) -> int:
    """The raw handle a launch on `device` uses (see the module docstring for the rules)."""
    if stream is not None:
        return handle(stream)
    if torch_args:
        return torch_current(device)
    return DEFAULT_STREAM


class Event:
    """A CUDA event on `device`, for ordering and timing work on streams.

    `record(stream=None)` enqueues it (any stream `handle` understands; None: the legacy
    default stream, or, when given a torch tensor's stream, that one); `synchronize()` waits
    for it; `query()` says whether it has happened; `wait(stream)` makes later work on
    `stream` wait for it; `start.elapsed_time(end)` is the milliseconds between two
    recorded events (both made with `timing=True`, the default). Events can be recorded
    inside stream capture (they become graph nodes)."""

    def __init__(self, device: int = 0, timing: bool = True):
        from . import backend, driver

        if backend.current() != "cuda":
            raise BackendError("events order and time work on a GPU: they need the cuda "
                               "backend (on the cpu backend kernels run to completion in turn)")
        drv = driver.api()
        flags = drv.CUevent_flags.CU_EVENT_DEFAULT if timing else \
            drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self.device = device
        with driver.on_device(device):
            self.handle = driver.check(drv.cuEventCreate(flags), "cuEventCreate")

    def record(self, stream=None) -> "Event":
        from . import driver

        driver.check(driver.api().cuEventRecord(self.handle, handle(stream)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        from . import driver

        driver.check(driver.api().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def query(self) -> bool:
        from . import driver

        (err,) = driver.api().cuEventQuery(self.handle)
        if driver.error_name(err) == "CUDA_ERROR_NOT_READY":
            return False
        driver.check((err,), "cuEventQuery")
        return True

    def wait(self, stream=None) -> None:
        from . import driver

        driver.check(driver.api().cuStreamWaitEvent(handle(stream), self.handle, 0),
                     "cuStreamWaitEvent")

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to `end` (waits for `end`)."""
        from . import driver

        end.synchronize()
        return driver.check(driver.api().cuEventElapsedTime(self.handle, end.handle),
                            "cuEventElapsedTime")

    def __del__(self):
        try:
            from . import driver

            driver.api().cuEventDestroy(self.handle)
        except Exception:  # at interpreter exit the driver may already be gone
            pass


def synchronize_stream(stream) -> None:
    """Wait for the work on `stream` (any stream `handle` understands)."""
    from . import driver

    driver.check(driver.api().cuStreamSynchronize(handle(stream)), "cuStreamSynchronize")
