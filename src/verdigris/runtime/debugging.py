"""One thread of a SIMT kernel run as plain Python, for the Python debugger.

Takes: a SIMT kernel, its grid and block, its arguments, and which thread (`block_id`,
`thread_id`). Gives `DebugLaunch` (what `k.debug[grid, block]` returns): called with the
kernel's arguments, it runs the kernel's own Python function once, as that thread, so
`breakpoint()` in the body (or a pdb breakpoint on one of its lines) stops there with the
thread's variables in view, and stepping goes line by line through the body and its
`@vg.func` helpers.

Arrays are host arrays (NumPy's, or the cpu backend's); device memory is refused. The
thread sees: its ids (`thread_id`, `block_id`, `global_id`, `lane_id`, `block_dim`,
`grid_dim` of the launch given); arrays as NumPy views of the arguments (written in place,
as a launch of that one thread would), whose element accesses are bounds checked as in a
kernel (an index outside the shape, a negative one included, raises `vg.BoundsError`);
`local.array`, `shared.array` (one per declaring line) and `shared.dynamic` as zeroed
NumPy arrays that only this thread writes; atomics done on the spot; `barrier()`,
`syncwarp()`, `grid_barrier()` and fences as no-ops (nobody else runs); `print` and
`vg.math` as on the host. Warp operations and `block_ticket` need the other threads: calling one raises
`vg.LaunchError` saying so.

Guarantees: nothing is compiled, proven or checked for races here (use a launch for
that); arithmetic is NumPy's on the values given (array elements are NumPy scalars of the
array's dtype, ids int32, `global_id` int64; Python scalars as passed), which can differ from
a launch in the width of scalar arguments' arithmetic. The intrinsics' host implementations
hold only while the call runs.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import lang
from ..errors import BoundsError, LaunchError, user_call_site
from ..ir import nodes as N
from ..types import DType

WARP_SIZE = 32


class CheckedArray(np.ndarray):
    """A view whose element accesses (one int index per axis) are bounds checked."""

    def __getitem__(self, index):
        return super().__getitem__(self._checked(index))

    def __setitem__(self, index, value):
        super().__setitem__(self._checked(index), value)

    def _checked(self, index):
        at = index if isinstance(index, tuple) else (index,)
        if len(at) == self.ndim and all(isinstance(i, (int, np.integer)) for i in at):
            if any(not 0 <= i < n for i, n in zip(at, self.shape)):
                raise BoundsError.of("array", at, self.shape, "the debugged thread",
                                     user_call_site())
        return index


def _checked(value):
    """An array argument as a bounds-checked view of its memory; anything else as given."""
    if hasattr(value, "__cuda_array_interface__") or (
            hasattr(value, "__dlpack_device__") and not hasattr(value, "__array__")):
        raise LaunchError("k.debug runs the thread on the host: pass host arrays (NumPy, or "
                          "arrays of the cpu backend), not device memory",
                          hint="copy to the host with arr.numpy(), step through, copy back if needed")
    array = np.asarray(value) if hasattr(value, "__array__") and not np.isscalar(value) else None
    return value if array is None or array.ndim == 0 else array.view(CheckedArray)


def _atomic(op: str):
    def apply(array, index, *operands):
        old = array[index]
        if op == "cas":
            compare, value = operands
            if old == compare:
                array[index] = value
            return old
        value = operands[0]
        array[index] = {"add": lambda: old + value, "sub": lambda: old - value,
                        "max": lambda: max(old, value), "min": lambda: min(old, value),
                        "and": lambda: old & value, "or": lambda: old | value,
                        "xor": lambda: old ^ value, "exch": lambda: value}[op]()
        return old
    return apply


def _needs_others(name: str):
    def refuse(*args, **kwargs):
        raise LaunchError(f"{name}() needs the other threads of the warp or block, which do "
                          "not run when one thread is stepped through",
                          hint="debug this part with print() in a launch")
    return refuse


class Debugging:
    """`k.debug`: `k.debug[grid, block]` is a `DebugLaunch`."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, config) -> "DebugLaunch":
        from .dispatch import _dims

        if not (isinstance(config, tuple) and len(config) == 2):
            raise LaunchError(f"{self.kernel.__name__}.debug needs a grid and a block: "
                              f"{self.kernel.__name__}.debug[grid, block](...)")
        name = self.kernel.__name__
        return DebugLaunch(self.kernel, _dims(config[0], "grid", name), _dims(config[1], "block", name))


class DebugLaunch:
    """`k.debug[grid, block]`: call it with the kernel's arguments and `block_id=`,
    `thread_id=` (tuples or ints; default the first thread), `shared_bytes=`."""

    def __init__(self, kernel, grid: tuple, block: tuple):
        if kernel.track != "simt":
            raise LaunchError(f"{kernel.__name__}: k.debug steps through SIMT kernels; a tile "
                              "kernel's operations work on whole tiles",
                              hint="debug a tile kernel with print() in it")
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args, block_id=0, thread_id=0, shared_bytes: int = 0, **kwargs):
        block_id, thread_id = _position(block_id, self.grid, "block_id"), _position(thread_id, self.block, "thread_id")
        host = self._intrinsics(block_id, thread_id, shared_bytes)
        saved = dict(lang.HOST_THREAD)
        lang.HOST_THREAD.clear()
        lang.HOST_THREAD.update(host)
        try:
            return self.kernel.fn(*map(_checked, args), **{k: _checked(v) for k, v in kwargs.items()})
        finally:
            lang.HOST_THREAD.clear()
            lang.HOST_THREAD.update(saved)

    def _intrinsics(self, block_id: tuple, thread_id: tuple, shared_bytes: int) -> dict:
        grid, block = self.grid, self.block
        linear = thread_id[0] + block[0] * (thread_id[1] + block[1] * thread_id[2])
        shared: dict = {}

        def shared_array(shape, dtype):
            site = sys._getframe(1)  # one array per declaring line, as one per block
            key = (site.f_code, site.f_lineno)
            if key not in shared:
                shared[key] = np.zeros(shape, _numpy(dtype)).view(CheckedArray)
            return shared[key]

        host = {
            "simt.thread_id": lambda axis: np.int32(thread_id[axis]),
            "simt.block_id": lambda axis: np.int32(block_id[axis]),
            "simt.block_dim": lambda axis: np.int32(block[axis]),
            "simt.grid_dim": lambda axis: np.int32(grid[axis]),
            "simt.global_id": lambda axis: np.int64(block_id[axis] * block[axis] + thread_id[axis]),
            "simt.lane_id": lambda: np.int32(linear % WARP_SIZE),
            "simt.local.array": lambda shape, dtype: np.zeros(shape, _numpy(dtype)).view(CheckedArray),
            "simt.shared.array": shared_array,
            "simt.shared.dynamic": lambda dtype: np.zeros(shared_bytes // np.dtype(_numpy(dtype)).itemsize,
                                                          _numpy(dtype)).view(CheckedArray),
            "simt.barrier": lambda: None, "simt.syncwarp": lambda: None,
            "simt.grid_barrier": lambda: None,
            "vg.assume": lambda condition: None,
            **{f"simt.threadfence{suffix}": (lambda: None) for suffix in ("", "_block", "_system")},
            **{f"simt.atomic_{op}": _atomic(op) for op in N.ATOMIC_OPS},
        }
        for name in (*N.SHUFFLES, *N.VOTES, *N.MATCHES, *N.REDUCTIONS, "activemask", "block_ticket"):
            host[f"simt.{name}"] = _needs_others(name)
        return host


def _numpy(dtype):
    return dtype.np if isinstance(dtype, DType) else dtype


def _position(value, extent: tuple, what: str) -> tuple:
    at = (value,) if isinstance(value, int) else tuple(value)
    at = at + (0,) * (3 - len(at))
    if len(at) != 3 or any(not 0 <= i < n for i, n in zip(at, extent)):
        raise LaunchError(f"{what}={value!r} is outside the launch's {extent}")
    return at
