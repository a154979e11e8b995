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
same for the 32 lanes of a warp); `grid_barrier()` makes every thread of the grid wait for
all the others (a cooperative launch, whose grid must fit on the GPU at once). The lanes of
a warp exchange registers with `shfl_down/shfl_up/shfl_xor/shfl_idx` (within segments of
`width=` lanes), vote with `ballot/any_/all_`, find the lanes holding their value with `match_any/match_all`, and
combine their values with `reduce_add/min/max/and/or/xor`; all of these are reached by
every lane of the warp together (the checker proves it, VG214). `activemask()` is not: it
tells which lanes run it with the caller. Atomics work on global and shared arrays;
`block_ticket(counter)` numbers the blocks in the order they arrive, for kernels whose
blocks wait on each other (a one-pass scan's look-back).

`threadfence()` (`threadfence_block()`, `threadfence_system()`) orders the calling
thread's own reads and writes, as CUDA's `__threadfence()`; it waits for nobody, and the
checker gives it no meaning: a plain store that another block reads is a race (VG203)
with or without a fence. Blocks hand values over through atomics: CUDA's
threadFenceReduction is, here, each block `atomic_exch`ing its partial sum, `threadfence()`,
`block_ticket(counter)`; the block whose ticket is `grid_dim(0) - 1` knows the others are
done, and after `threadfence()` and `barrier()` reads their sums with atomics
(`atomic_add(partial, j, 0.0)`).

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
grid_barrier = device_only(
    "simt.grid_barrier", "Wait until every thread of the grid gets here (CUDA's cooperative "
    "groups grid.sync()); their global writes before it are visible to all after it. Every "
    "thread of the grid must reach it together (the checker proves it, VG210). A kernel that "
    "calls it is launched cooperatively, and its grid must fit on the GPU at once: a larger "
    "grid is refused at launch (LaunchError naming both sizes).")
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
    "shfl_down": "shfl_down(value, delta, width=32): `value` of lane lane_id() + delta (own "
                 "value past the end of the lane's segment of `width` lanes).",
    "shfl_up": "shfl_up(value, delta, width=32): `value` of lane lane_id() - delta (own value "
               "before the start of the lane's segment).",
    "shfl_xor": "shfl_xor(value, mask, width=32): `value` of lane lane_id() ^ mask (butterfly; "
                "own value where that lane is outside the lane's segment, mask >= width).",
    "shfl_idx": "shfl_idx(value, lane, width=32): `value` of lane `lane` of the caller's "
                "segment (own value outside 0..width-1).",
    "ballot": "ballot(pred): uint32 with bit k set where lane k's pred holds.",
    "any": "any_(pred): whether pred holds on some lane of the warp.",
    "all": "all_(pred): whether pred holds on every lane of the warp.",
    "activemask": "activemask(): uint32 with bit k set where lane k runs this call with the "
                  "caller (CUDA's __activemask()). Not a collective: it waits for no lane, and "
                  "on a GPU lanes on one path may not have reconverged, so a lane may be "
                  "missing (the cpu backend runs a warp in lock step: every lane on the path).",
    "match_any": "match_any(value): uint32 with bit k set where lane k's value equals the "
                 "caller's (CUDA's __match_any_sync; any scalar, compared by its bits: "
                 "-0.0 and 0.0 differ, a NaN matches the same NaN).",
    "match_all": "match_all(value): the warp's lanes as a uint32 mask (0xFFFFFFFF for a "
                 "whole warp) if every lane holds the same value (by its bits), else 0 "
                 "(CUDA's __match_all_sync, its predicate the result != 0).",
    **{f"reduce_{op}": f"reduce_{op}(value): {what} of `value` over the warp's lanes, the same "
                       f"bits on every lane (CUDA's __reduce_{op}_sync; {dtypes})."
       for op, what, dtypes in (
           ("add", "the sum", "integers wrap; floats are added in a fixed tree order"),
           ("min", "the minimum", "integers and floats, a NaN ignored as min() does"),
           ("max", "the maximum", "integers and floats, a NaN ignored as max() does"),
           ("and", "the bitwise and", "integers"), ("or", "the bitwise or", "integers"),
           ("xor", "the bitwise xor", "integers"))},
}
shfl_down, shfl_up, shfl_xor, shfl_idx, ballot, any_, all_, activemask, match_any, match_all, \
    reduce_add, reduce_min, reduce_max, reduce_and, reduce_or, reduce_xor = (
        device_only(f"simt.{op}", doc) for op, doc in _WARP_DOCS.items())

threadfence_block, threadfence, threadfence_system = (
    device_only(f"simt.{name}", f"{name}(): this thread's reads and writes before it are seen "
                f"by {who} before those after it (CUDA's __{name}(), a sequentially "
                "consistent fence). It waits for no other thread and orders nothing between "
                "threads by itself: a value another block reads must still go through atomics "
                "(see the module docstring).")
    for name, who in (("threadfence_block", "the threads of its block"),
                      ("threadfence", "every thread of the GPU"),
                      ("threadfence_system", "every thread, the host's and other GPUs' too")))

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
           "barrier", "syncwarp", "grid_barrier", "block_ticket", "shfl_down", "shfl_up",
           "shfl_xor", "shfl_idx", "ballot",
           "any_", "all_", "activemask", "match_any", "match_all", "reduce_add", "reduce_min",
           "reduce_max", "reduce_and", "reduce_or", "reduce_xor", "threadfence_block", "threadfence",
           "threadfence_system"]
