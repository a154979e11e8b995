"""`verdigris.simt`: the SIMT track. You write what one thread does; thousands run it.

    @simt.kernel
    def axpy(alpha, x, y, out):
        i = simt.global_id(0)
        if i < out.shape[0]:
            out[i] = alpha * x[i] + y[i]

    axpy[grid, block](2.0, x, y, out)

Threads of one block cooperate through `shared` memory (`shared.array(shape, dtype)`, or
`shared.dynamic(dtype)` sized by the launch: `k[grid, block](..., shared_bytes=n)`),
`barrier()` (every thread of the block waits for all the others) and `syncwarp()` (the
same for the 32 lanes of a warp); the lanes of a warp exchange registers with
`shfl_down/shfl_up/shfl_xor/shfl_idx` and vote with `ballot/any_/all_`. Atomics work on
global and shared arrays; `block_ticket(counter)` numbers the blocks in the order they
arrive, for kernels whose blocks wait on each other (a one-pass scan's look-back).

The functions below are the intrinsics kernels call; on the host they raise.
"""
from __future__ import annotations

from types import ModuleType

from ..lang import device_only


def kernel(fn=None, **options):
    """`@simt.kernel`: make `fn` a SIMT kernel, launched as `k[grid, block](*args)`.

    `@simt.kernel(fma=True)`: on the GPU, `x * y + z` may run as one fused multiply-add,
    rounded once (as CUDA C++ and Triton do by default): fewer instructions, and as accurate,
    but no longer bit for bit the cpu backend's result. By default every float multiply and
    add rounds on its own, as on the cpu backend."""
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
lane_id = device_only("simt.lane_id", "This thread's lane in its warp: the linear thread "
                                      "index in the block % 32 (int32).")
warp_size = 32  # threads per warp on every GPU verdigris targets

local = ModuleType("verdigris.simt.local", "Per-thread arrays: `local.array(shape, dtype)`.")
local.array = device_only("simt.local.array",
                          "local.array(shape, dtype): a per-thread array of static shape.")

shared = ModuleType("verdigris.simt.shared", "Arrays shared by the threads of a block.")
shared.array = device_only(
    "simt.shared.array", "shared.array(shape, dtype): one array per block, of static shape "
    "(at most 48 KB per kernel); its contents start undefined.")
shared.dynamic = device_only(
    "simt.shared.dynamic", "shared.dynamic(dtype): the block's dynamic shared memory as a 1-d "
    "array of dtype, sized by the launch: k[grid, block](..., shared_bytes=n) gives "
    "n // itemsize elements.")

barrier = device_only("simt.barrier", "Wait until every thread of the block gets here; their "
                      "shared and global writes before it are visible to all after it.")
syncwarp = device_only("simt.syncwarp", "barrier() for the 32 lanes of this thread's warp.")
block_ticket = device_only(
    "simt.block_ticket", "block_ticket(counter): the order in which blocks get here (0 for the "
    "first, when the one-element integer array `counter` starts at 0), the same for every "
    "thread of the block, as uint32 (uint64 for a 64-bit counter). A block that waits only "
    "for blocks with lower tickets waits for blocks that are already running, whatever order "
    "the GPU starts blocks in; the race checker knows two blocks' tickets differ. Every "
    "thread of the block must reach it together (it holds two barriers), and nothing else "
    "may write `counter` but atomic_add of 1 (a larger constant would wrap it sooner). The "
    "proofs assume fewer than 2**32 tickets and adds of a 32-bit counter per launch (they "
    "wrap around after that).")

_WARP_DOCS = {
    "shfl_down": "shfl_down(value, delta): `value` of lane lane_id() + delta (own value past "
                 "lane 31).",
    "shfl_up": "shfl_up(value, delta): `value` of lane lane_id() - delta (own value below lane 0).",
    "shfl_xor": "shfl_xor(value, mask): `value` of lane lane_id() ^ mask (butterfly).",
    "shfl_idx": "shfl_idx(value, lane): `value` of lane `lane` (own value outside 0..31).",
    "ballot": "ballot(pred): uint32 with bit k set where lane k's pred holds.",
    "any": "any_(pred): whether pred holds on some lane of the warp.",
    "all": "all_(pred): whether pred holds on every lane of the warp.",
}
shfl_down, shfl_up, shfl_xor, shfl_idx, ballot, any_, all_ = (
    device_only(f"simt.{op}", doc) for op, doc in _WARP_DOCS.items())

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
           "atomic_xor", "atomic_exch", "atomic_cas", "kernel", "thread_id", "block_id",
           "block_dim", "grid_dim", "global_id", "lane_id", "warp_size", "local", "shared",
           "barrier", "syncwarp", "block_ticket", "shfl_down", "shfl_up", "shfl_xor", "shfl_idx", "ballot",
           "any_", "all_"]
