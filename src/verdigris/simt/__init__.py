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

_ATOMIC_DOCS = {
    "add": "old = atomic_add(array, index, value): array[index] += value, indivisibly.",
    "sub": "old = atomic_sub(array, index, value): array[index] -= value, indivisibly.",
    "max": "old = atomic_max(array, index, value): array[index] = max(old, value).",
    "min": "old = atomic_min(array, index, value): array[index] = min(old, value).",
    "and": "old = atomic_and(array, index, value): array[index] &= value.",
    "or": "old = atomic_or(array, index, value): array[index] |= value.",
    "xor": "old = atomic_xor(array, index, value): array[index] ^= value.",
    "exch": "old = atomic_exch(array, index, value): array[index] = value.",
    "cas": "old = atomic_cas(array, index, compare, value): store value where old == compare.",
}
atomic_add, atomic_sub, atomic_max, atomic_min, atomic_and_, atomic_or_, atomic_xor, \
    atomic_exch, atomic_cas = (device_only(f"simt.atomic_{op}", doc) for op, doc in _ATOMIC_DOCS.items())
atomic_and, atomic_or = atomic_and_, atomic_or_

__all__ = ["atomic_add", "atomic_sub", "atomic_max", "atomic_min", "atomic_and_", "atomic_or_",
           "atomic_xor", "atomic_exch", "atomic_cas", "kernel", "thread_id", "block_id", "block_dim", "grid_dim", "global_id", "local"]
