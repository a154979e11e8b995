"""A fake CUDA driver (fakecuda.c) for testing and profiling the host side without a GPU.

Takes: nothing (needs a C compiler, `cc`). Gives: `library_dir()` (a folder holding the
built `libcuda.so.1`, or None without a compiler), `environment(devices=1)` (the environment
a subprocess needs to load it instead of the real driver), `run(code, devices=1)` (runs
Python code in such a subprocess and returns its CompletedProcess), and, inside such a
process, `last_launch(nparams)` (what the last cuLaunchKernel got, with its first
`nparams` argument slots read as 8-byte words: the launch's packed buffers outlive it),
`live_streams()` (how many streams exist: created and not yet destroyed),
`torch_on_device_zero()` (torch CPU tensors launched as device 0's),
`count_general_calls()` (a counter of the general launch path's calls) and
`host_view(info)` (a NumPy array over the "device memory" an `ArrayInfo` describes, which
is host memory here: what lets a test run a kernel on the cpu backend in its place).

The driver must be chosen before cuda-bindings loads it, hence a subprocess per test.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("fakecuda.c")
ROOT = SOURCE.parent.parent.parent


def library_dir() -> str | None:
    """Builds the fake driver once per source version; None when no C compiler exists."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir(), f"verdigris-fakecuda-{digest}")
    library = folder / "libcuda.so.1"
    if not library.exists():
        folder.mkdir(exist_ok=True)
        partial = folder / f".libcuda.{os.getpid()}.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE),
                        "-ldl"], check=True, capture_output=True)
        os.replace(partial, library)
    return str(folder)


def environment(devices: int = 1, **extra) -> dict:
    folder = library_dir()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{folder}:{os.environ.get('LD_LIBRARY_PATH', '')}",
           "VGFAKE_DEVICES": str(devices), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
           "VERDIGRIS_BACKEND": "cuda", **extra}
    env.pop("VERDIGRIS_CACHE_DIR", None)
    env["VERDIGRIS_CACHE_DIR"] = extra.get("VERDIGRIS_CACHE_DIR") or tempfile.mkdtemp(
        prefix="vg-fake-cache-")
    return env


def run(code: str, devices: int = 1, timeout: float = 120, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environment(devices, **extra), timeout=timeout, cwd=str(ROOT))


class Launch(ctypes.Structure):
    _fields_ = [("count", ctypes.c_longlong), ("function", ctypes.c_void_p),
                ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p), ("device", ctypes.c_int),
                ("params", ctypes.POINTER(ctypes.c_void_p)), ("cooperative", ctypes.c_int)]


def _library():
    return ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)


def last_launch(nparams: int = 0) -> Launch:
    lib = _library()
    lib.vgfake_last_launch.restype = ctypes.POINTER(Launch)
    lib.vgfake_function_name.restype = ctypes.c_char_p
    launch = Launch.from_buffer_copy(lib.vgfake_last_launch().contents)
    launch.name = lib.vgfake_function_name(ctypes.c_void_p(launch.function)).decode()
    launch.slots = [ctypes.c_uint64.from_address(launch.params[i]).value for i in range(nparams)]
    return launch


def live_streams() -> int:
    return _library().vgfake_live_streams()


def host_view(info):
    import numpy as np

    from verdigris.runtime.interop import byte_extent

    lo, hi = byte_extent(info)
    memory = (ctypes.c_char * max(hi - lo, 1)).from_address(lo)
    itemsize = info.dtype.itemsize
    return np.ndarray(tuple(info.shape), info.dtype.np, buffer=memory, offset=info.ptr - lo,
                      strides=tuple(s * itemsize for s in info.strides))


def torch_on_device_zero() -> None:
    """Inside such a process: torch CPU tensors pass for device 0's (host memory is the fake
    driver's device memory), for the Python launchers (`is_cuda`, `get_device()`) and the
    compiled one (`clauncher.dl_device`), and torch's current stream is the default one."""
    import torch

    from verdigris.runtime import clauncher, streams
    from verdigris.runtime.dlpack import KDL_CPU

    torch.Tensor.is_cuda = property(lambda self: True)
    torch.Tensor.get_device = lambda self: 0
    streams._torch_current_raw_stream = lambda device: 0
    clauncher.dl_device = lambda ordinal: (KDL_CPU, 0)


def count_general_calls() -> list:
    """Inside such a process: from now on, count the calls of the general launch path
    (`KernelFunction.launch`) in the returned list's one item."""
    from verdigris.runtime import dispatch

    calls = [0]
    general = dispatch.KernelFunction.launch

    def counting(self, *args, **kwargs):
        calls[0] += 1
        return general(self, *args, **kwargs)

    dispatch.KernelFunction.launch = counting
    return calls
