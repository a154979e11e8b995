"""`verdigris.simt`: the SIMT track. You write what one thread does; thousands run it.

    @simt.kernel
    def axpy(alpha, x, y, out):
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = alpha * x[i] + y[i]

    axpy[grid, block](2.0, x, y, out)

The functions below are the intrinsics kernels call; on the host they raise.
"""
from __future__ import annotations

from types import ModuleType

from ..lang import device_only


def kernel(fn=None, **options):
    """`@simt.kernel`: make `fn` a SIMT kernel, launched as `k[grid, block](*args)`."""
    from ..runtime.dispatch import KernelFunction

    if fn is None:
        return lambda f: KernelFunction(f, "simt", **options)
    return KernelFunction(fn, "simt", **options)


thread_id = device_only("simt.thread_id", "Index of this thread in its block along `axis` (int32).")
block_id = device_only("simt.block_id", "Index of this block in the grid along `axis` (int32).")
block_dim = device_only("simt.block_dim", "Threads per block along `axis` (int32).")
grid_dim = device_only("simt.grid_dim", "Blocks in the grid along `axis` (int32).")
global_id = device_only("simt.global_id",
                        "block_id(axis) * block_dim(axis) + thread_id(axis), as int64.")

local = ModuleType("verdigris.simt.local", "Per-thread arrays: `local.array(shape, dtype)`.")
local.array = device_only("simt.local.array",
                          "local.array(shape, dtype): a per-thread array of static shape.")

__all__ = ["kernel", "thread_id", "block_id", "block_dim", "grid_dim", "global_id", "local"]
