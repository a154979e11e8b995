"""Which CUDA stream a launch goes on.

Takes: the launch's `stream=` (None, an int handle, a `CUstream`, a `torch.cuda.Stream`, a
CuPy or numba stream, a `cuda.core` stream: anything with `__cuda_stream__`, `.cuda_stream`,
`.ptr` or `.handle`), and whether any argument is a torch tensor. Gives: `resolve(stream,
device, torch_args) -> int`, the raw CUstream handle, `handle(stream) -> int`,
`synchronize_stream(stream)`, `Event` (`vg.Event`: record, wait, synchronize, timing) and
`Stream` (`vg.Stream`: a stream of the user's own, destroyed when it is collected).

Rules, in order:
1. an explicit `stream=` wins;
2. else, when any argument is a torch tensor, PyTorch's current stream on that device (so
   kernels order with torch's work and are captured by `torch.cuda.graph`);
3. else `DEFAULT_STREAM`, handle 0: the NULL stream, which in the driver API is the *legacy*
   default stream (it waits for, and is waited on by, every blocking stream of the context).
   verdigris's own copies, fills and DLPack exports are ordered on it too.
There is no "current stream" of verdigris's own: a `vg.Stream` is used where it is named.
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
        from . import driver

        _require_cuda("events order and time work")
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

        return _done(driver.api().cuEventQuery(self.handle), "cuEventQuery")

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


class Stream:
    """A CUDA stream of your own on `device`: pass it as a launch's `stream=`
    (`k[grid, block](..., stream=s)`), to events (`e.record(s)`, `e.wait(s)`) and to
    `vg.synchronize(stream=s)`. Other libraries take it by the CUDA stream protocol
    (`s.__cuda_stream__()`, which cuda.core reads) or by its raw handle:
    `torch.cuda.ExternalStream(s.handle)`, `cupy.cuda.ExternalStream(s.handle)`.

    By default the stream is *blocking*: it waits for, and is waited on by, the legacy
    default stream, where verdigris's copies and fills and the launches that name no
    stream run, so work on it comes after `vg.asarray(...)` and before `a.numpy()` with
    nothing to do. `non_blocking=True` (CU_STREAM_NON_BLOCKING) makes one that runs beside
    the legacy default stream: order it yourself, with `s.synchronize()` or events.

    `handle` is the raw CUstream (an int), `device` its GPU. `synchronize()` waits for the
    stream's work (and, as `vg.synchronize`, raises BoundsError for an out-of-bounds access
    a kernel recorded); `query()` says whether it is all done. The stream is destroyed when
    the object is collected (work already on it still runs to the end). There is no
    "current stream" and no `with s:`: a launch runs on the stream its `stream=` names.
    On the cpu backend, where kernels run to completion in turn, making one is a
    BackendError, as for `vg.Event`."""

    def __init__(self, device: int = 0, non_blocking: bool = False):
        from . import driver

        _require_cuda("streams order work")
        drv = driver.api()
        flags = drv.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else \
            drv.CUstream_flags.CU_STREAM_DEFAULT
        self.device, self.non_blocking = device, bool(non_blocking)
        with driver.on_device(device):
            self._stream = driver.check(drv.cuStreamCreate(flags), "cuStreamCreate")
        self.handle = int(self._stream)

    def __cuda_stream__(self) -> tuple:
        """The CUDA stream protocol: (version 0, the raw handle)."""
        return (0, self.handle)

    def synchronize(self) -> None:
        from . import faults

        synchronize_stream(self.handle)
        faults.raise_pending(self.device)

    def query(self) -> bool:
        from . import driver

        return _done(driver.api().cuStreamQuery(self._stream), "cuStreamQuery")

    def __repr__(self) -> str:
        kind = ", non_blocking=True" if self.non_blocking else ""
        return f"vg.Stream(device={self.device}{kind}, handle=0x{self.handle:x})"

    def __del__(self):
        try:
            from . import driver

            driver.api().cuStreamDestroy(self._stream)
        except Exception:  # at interpreter exit the driver may already be gone
            pass


def _require_cuda(what: str) -> None:
    from . import backend

    if backend.current() != "cuda":
        raise BackendError(f"{what} on a GPU: they need the cuda backend (on the cpu "
                           "backend kernels run to completion in turn)")


def _done(result, call: str) -> bool:
    """A cuEventQuery or cuStreamQuery result: False for CUDA_ERROR_NOT_READY."""
    from . import driver

    (err,) = result
    if driver.error_name(err) == "CUDA_ERROR_NOT_READY":
        return False
    driver.check((err,), call)
    return True


def synchronize_stream(stream) -> None:
    """Wait for the work on `stream` (any stream `handle` understands)."""
    from . import driver

    driver.check(driver.api().cuStreamSynchronize(handle(stream)), "cuStreamSynchronize")
