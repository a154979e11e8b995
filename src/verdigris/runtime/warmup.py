"""The first compile's one-time setup, done ahead on a daemon thread.

A process's first compile for the GPU pays, besides its own work, for loading LLVM
(~25 ms), importing the lowering and the safety checker (~20 ms), making LLVM's target
machine and, for kernels that call the math library, parsing libdevice (~30 ms, in LLVM).
On the first call all of it is on the user's clock; this module does it ahead, while the
program makes its inputs.

Takes: `kernel_defined(kernel_fn)` (a kernel function was made), `device_ready(device)`
(the cuda backend retained its first context on `device`) and `compiled(kernel_fn)` (a
kernel was compiled, not read from the disk cache). Gives: once a kernel has been defined
and a device is ready (or NVIDIA's driver is installed: `/dev/nvidiactl`), in either
order, one daemon thread per process that imports what a
launch imports (`RUNTIME`: cuda-bindings, the launch path; where torch is imported, builds
or loads the compiled launcher, `clauncher.extension`), then loads what the compile of
those kernels' tracks imports (`MODULES`), sets LLVM up for the device's target and, when
a kernel's code names a libdevice function, starts libdevice's parse. The compiler's part
is only for a kernel this machine has not compiled before (a marker in the disk cache,
under the function's code): a process whose kernels come from the disk cache would only
pay for it beside its launches. `join()` waits for the thread.

Guarantees:
- It never calls the driver (it reads the device's properties only once a launch made its
  context), so a process that forks before its first launch still has a CUDA-free parent.
  It is joined before `os.fork` (no child inherits a half-done import).
- A launch made while it runs waits only for what it needs (Python's import locks, the
  LLVM set-up's lock) and never does the work twice.
- It changes no generated code, and any failure in it is silent: the compile meets the same
  failure and reports it. `VERDIGRIS_WARMUP=0` turns it off (for measuring a first call
  without it; the cpu backend never starts it). With `VERDIGRIS_LOG=compile` the next compile's line says what
  it did (`take_report`: the kernels, and the time it took off the program's clock).
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time

# What a launch on the GPU imports, a compiled kernel's too (`cuda.bindings` alone ~40 ms;
# a program whose arrays are torch's has not imported it)
RUNTIME = ("cuda.bindings.driver", "verdigris.runtime.launch_cuda", "verdigris.runtime.proofs",
           "verdigris.runtime.records", "verdigris.runtime.bundle", "verdigris.runtime.fastpath",
           "verdigris.runtime.assumptions")
# What the first compile of a kernel of each track imports besides (tests/test_warmup.py
# checks that a cold launch after the warm-up imports nothing else of the compiler)
_COMMON = ("verdigris.runtime.tensormap", "verdigris.codegen.lower", "verdigris.codegen.mathlib",
           "verdigris.codegen.libdevice", "verdigris.safety", "verdigris.safety.bounds")
MODULES = {"simt": _COMMON,
           "tile": _COMMON + ("verdigris.safety.tilerace", "verdigris.tile.lower")}
# ... and when a kernel's code names one of these functions (a product written `a @ b`
# goes without: the warm-up is only ever a head start)
MODULES_BY_NAME = {"verdigris.tile.matmul": frozenset({"mma", "dot"})}

_lock = threading.Lock()
_defined: list = []  # (track, code object) of kernels no warm-up has looked at yet
_device: int | None = None
_thread: threading.Thread | None = None
_running = False
_done = False  # the compiler is warm: nothing more to do in this process
_reports: list = []  # what the warm-up did, until a compile's log line takes it


def kernel_defined(kernel_fn) -> None:
    with _lock:
        if not _done:
            _defined.append((kernel_fn.track, kernel_fn.fn.__code__))
            _start_locked()


def device_ready(device: int) -> None:
    global _device
    with _lock:
        if _device is None:
            _device = device
            _start_locked()


def compiled(kernel_fn) -> None:
    """Mark `kernel_fn` as compiled on this machine (a later process skips its warm-up)."""
    from . import cache

    cache.put(_marker(kernel_fn.fn.__code__), b"")


def take_report() -> str | None:
    """What the warm-up did, once it is done (for the first compile's log line), then None."""
    return _reports.pop() if _reports else None


def join(timeout: float | None = None) -> None:
    thread = _thread
    if thread is not None:
        thread.join(timeout)


def _start_locked() -> None:
    global _thread, _running
    if _running or _done or not _defined or (_device is None and not _driver_installed()):
        return
    if os.environ.get("VERDIGRIS_BACKEND", "").strip().lower() == "cpu" or _switched_off():
        return
    _running = True
    _thread = threading.Thread(target=_run, daemon=True, name="verdigris-warmup")
    _thread.start()


def _switched_off() -> bool:
    return os.environ.get("VERDIGRIS_WARMUP", "").strip().lower() in ("0", "off", "false", "no")


@functools.cache
def _driver_installed() -> bool:
    """Whether this looks like a machine whose kernels run on a GPU, asked without the
    driver: Linux's NVIDIA driver makes this device node."""
    return os.path.exists("/dev/nvidiactl")


def _run() -> None:
    """Import the runtime; look at the kernels defined so far (and those defined
    meanwhile); warm the compiler up for the first ones not compiled here before, then stop
    for good."""
    global _running, _done
    try:
        for module in RUNTIME:
            importlib.import_module(module)
        if "torch" in sys.modules:  # a program of torch tensors: their compiled launcher
            from . import clauncher

            clauncher.extension()  # built once per machine (~0.3 s), loaded (~1 ms)
        while True:
            with _lock:
                kernels = list(_defined)
                _defined.clear()
                if not kernels:
                    _running = False
                    return
            new = [(track, code) for track, code in kernels if not _seen(code)]
            if new:
                start = time.perf_counter()
                _warm(new)
                _reports.append(f"the compiler warmed up for {', '.join(c.co_name for _, c in new)} "
                                f"in {(time.perf_counter() - start) * 1e3:.1f} ms beside the program")
                break
    except Exception:  # the compile meets the same failure, and reports it
        pass
    with _lock:
        _running, _done = False, True
        _defined.clear()


def _marker(code) -> str:
    from . import cache, records

    return cache.key(records.code_text(code), "compiled here", "any target")


def _seen(code) -> bool:
    from . import cache

    return cache.get(_marker(code)) is not None


def _warm(kernels: list) -> None:
    from ..codegen import mathlib, nvptx
    from .launch_cuda import targets

    names = set().union(*(code.co_names for _, code in kernels))
    nvptx.initialize()  # loads LLVM (its library outside the GIL) and sets it up
    if names & mathlib.LIBDEVICE_OPS:
        from ..codegen import libdevice

        libdevice.prefetch()
    modules = [m for track in sorted({track for track, _ in kernels}) for m in MODULES[track]]
    modules += [m for m, functions in MODULES_BY_NAME.items() if names & functions]
    for module in modules:
        importlib.import_module(module)
    if _device is not None:  # known by now, or the compile makes its target machine itself
        nvptx.target_machine(targets(_device)[0])


def _join_before_fork() -> None:
    join(timeout=10.0)


os.register_at_fork(before=_join_before_fork)
