"""verdigris: safe GPU kernels written in Python, compiled straight to PTX.

Public API only; see README.md and DESIGN.md §1. Heavy modules (llvmlite, the driver) load
on first use, not at import.
"""
from __future__ import annotations

from . import math, simt, tile
from .errors import (AliasError, ArrayError, AssumptionError, BackendError, BoundsError, CompileError,
                     DivergenceError, Error, KernelError, LaunchError, SafetyError,
                     UnsupportedConstruct)
from .lang import assume, constexpr, func, unsafe
from .runtime.backend import current as current_backend
from .runtime.backend import set_backend
from .types import (DType, bfloat16, bool_, float8_e4m3fn, float8_e5m2, float16, float32,
                    float64, int8, int16, int32, int64, tfloat32, uint8, uint16, uint32, uint64)

__version__ = "0.1.0"

i8, i16, i32, i64 = int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
f16, bf16, f32, f64, tf32 = float16, bfloat16, float32, float64, tfloat32


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of blocks of size `b` that cover `a` items (on the host,
    and inside kernels, as `tl.cdiv` and `ct.cdiv` are)."""
    return -(-a // b)


cdiv.__vg_inline__ = True  # `lang.plain_helper`: kernels inline it


def asarray(obj, dtype=None, *, device: int = 0):
    """`obj` on the current backend's device: a `vg.Array` on cuda (host data is copied,
    torch/CuPy/JAX device arrays are viewed without copying), a NumPy array on cpu."""
    from .runtime import constructors

    return constructors.asarray(obj, dtype, backend=current_backend(), device=device)


def empty(shape, dtype=float32, *, device: int = 0):
    """An uninitialized array on the current backend's device."""
    from .runtime import constructors

    return constructors.empty(shape, dtype, backend=current_backend(), device=device)


def zeros(shape, dtype=float32, *, device: int = 0):
    """A zero-filled array on the current backend's device."""
    from .runtime import constructors

    return constructors.zeros(shape, dtype, backend=current_backend(), device=device)


def ones(shape, dtype=float32, *, device: int = 0):
    """An array of ones on the current backend's device."""
    from .runtime import constructors

    return constructors.ones(shape, dtype, backend=current_backend(), device=device)


def full(shape, fill_value, dtype=None, *, device: int = 0):
    """An array with every element `fill_value` on the current backend's device; the dtype,
    unless given, is NumPy's for the value (int64 for an int, float64 for a float)."""
    from .runtime import constructors

    return constructors.full(shape, fill_value, dtype, backend=current_backend(), device=device)


def arange(start, stop=None, step=1, dtype=None, *, device: int = 0):
    """`numpy.arange(start, stop, step, dtype)` on the current backend's device (made on
    the host and copied in one transfer)."""
    from .runtime import constructors

    return constructors.arange(start, stop, step, dtype, backend=current_backend(), device=device)


def empty_like(a, dtype=None):
    """An uninitialized array with `a`'s shape and dtype, where `a` lives."""
    from .runtime import constructors

    return constructors.empty_like(a, dtype)


def zeros_like(a, dtype=None):
    """A zero-filled array with `a`'s shape and dtype, where `a` lives."""
    from .runtime import constructors

    return constructors.zeros_like(a, dtype)


def ones_like(a, dtype=None):
    """An array of ones with `a`'s shape and dtype, where `a` lives."""
    from .runtime import constructors

    return constructors.ones_like(a, dtype)


def full_like(a, fill_value, dtype=None):
    """An array with `a`'s shape and dtype (unless given), every element `fill_value`,
    where `a` lives."""
    from .runtime import constructors

    return constructors.full_like(a, fill_value, dtype)


def from_dlpack(obj):
    """A zero-copy view of anything with `__dlpack__`."""
    from .runtime import arrays

    return arrays.from_dlpack(obj)


def autotune(configs, key, *, timer=None):
    """Decorator over a kernel: time `configs` (dicts of constexpr values, and `num_warps`
    for tile kernels) once per value of the `key` parameters on the GPU, keep the fastest
    (also on disk), and launch with it; on the cpu backend the first config. See
    `verdigris.runtime.autotune`."""
    from .runtime.autotune import autotune as _autotune

    return _autotune(configs, key, timer=timer)


def synchronize(device: int = 0, *, stream=None) -> None:
    """Wait for all work on `device`, or only for the work on `stream` (a torch, CuPy,
    cuda.core or numba stream, or a raw handle); no-op on the cpu backend. Raises
    `BoundsError` for an out-of-bounds access a kernel recorded."""
    if current_backend() == "cuda":
        from .runtime import driver, faults, streams

        if stream is None:
            driver.synchronize(device)
        else:
            streams.synchronize_stream(stream)
            faults.raise_pending(device)


def load_bundle(path):
    """The kernel in a bundle file (`kernel.compile_aot(...).save(path)` or `verdigris compile
    --emit bundle`), launched like the kernel it came from, without the compiler."""
    from .runtime.bundle import load_bundle

    return load_bundle(path)


# names imported on first use: they pull in the driver bindings -> (module, attribute)
_LAZY = {"Array": ("runtime.arrays", "Array"), "Event": ("runtime.streams", "Event"),
         "Stream": ("runtime.streams", "Stream"), "torch_op": ("runtime.torch_ops", "torch_op")}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attribute)
    raise AttributeError(f"module 'verdigris' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
