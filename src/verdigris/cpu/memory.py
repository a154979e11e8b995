"""Memory as the SIMT interpreter sees it: arrays, and the one gate every access goes through.

Takes: a frame of the interpreter (`frames.Frame`: its lanes, their block and thread ids,
the observer), an array (`Memory`), the lanes' indices and the mask of active lanes.
Gives: `Memory` (a global argument, a thread's local array or a block's shared array),
`Access` (what an observer of memory sees: the seam where shadow memory hooks in), `Site`
(what a Load, Store or Atomic says besides its lanes), and the accesses `load`, `store`
and `atomic`.

Guarantees: no access reaches memory before every active lane's index has been checked on
every axis (0 <= index < extent); a violation raises `BoundsError` naming the kernel,
array, index, shape and the first offending lane's block and thread. The observer sees
every access of at least one active lane, before memory is touched. Local arrays have one
copy per lane, shared arrays one per block (of the chunk), global arrays are the user's.
Several lanes storing to one element in one step: the last lane (highest block, then
highest thread) wins, as NumPy assigns repeated fancy indices in order (observed, not
promised by its documentation). Atomics of one step take effect in lane order (`atomics`).
Every store, and every atomic that leaves some element other than it found it, counts in
the frame's `changes` (a loop that changes nothing waits forever: `simt`'s spin test).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .. import ir
from ..errors import BoundsError, LaunchError, Loc
from . import atomics, ops


@dataclass(frozen=True, eq=False)
class Access:
    """One Load, Store or Atomic as shadow memory sees it: one entry per active lane."""

    array: str
    space: str  # "global" | "local" (the lane's own elements) | "shared" (its block's)
    flat: np.ndarray  # int64 row-major element index into the array (of the lane's block)
    block: np.ndarray  # int64 linear block id (x fastest)
    thread: np.ndarray  # int64 linear thread id within the block (x fastest)
    is_write: bool  # a Store or an Atomic
    loc: Loc
    atomic: bool = False
    unsafe: bool = False  # inside `with vg.unsafe():`
    # Barrier intervals, in kernels with barriers or shared memory (else None): how many
    # barriers the lane's block has passed, and how many barriers or syncwarps its warp has.
    block_epoch: Optional[np.ndarray] = None
    warp_epoch: Optional[np.ndarray] = None
    # in a kernel that calls grid_barrier() (else None): how many the grid has passed
    grid_epoch: Optional[np.ndarray] = None


@dataclass(frozen=True)
class Site:
    """A Load, Store or Atomic of the kernel: what its `Access`es say besides the lanes."""

    loc: Loc
    is_write: bool
    atomic: bool
    unsafe: bool


@dataclass(eq=False)
class Memory:
    """An array as the interpreter indexes it."""

    name: str
    space: str
    data: np.ndarray  # the user's array (a bits view for bf16/fp8); locals (lanes, *shape);
    # shared (blocks, *shape)
    shape: tuple  # the kernel's view of the extents (Python ints)
    decode: Callable  # elements -> register form
    encode: Callable  # register form -> elements

    @classmethod
    def of_argument(cls, kernel: ir.Kernel, param: ir.Param, value) -> "Memory":
        dtype = param.type.dtype
        if not isinstance(value, np.ndarray):
            raise LaunchError(f"kernel {kernel.name}: argument {param.name!r} must be a NumPy "
                              f"array on the cpu backend, not {type(value).__name__}", param.loc)
        if value.ndim != param.type.ndim or not ops.accepts_array_dtype(dtype, value.dtype):
            raise LaunchError(f"kernel {kernel.name}: argument {param.name!r} is a {value.ndim}-d "
                              f"{value.dtype} array; the kernel was specialized for "
                              f"{param.type.ndim}-d {dtype.name}", param.loc)
        if param.name in kernel.writes and not value.flags.writeable:
            raise LaunchError(f"kernel {kernel.name} writes {param.name!r}, "
                              "but that array is read-only", param.loc)
        bits, decode, encode = ops.memory_codec(dtype)
        data = value if bits is None else value.view(bits)
        # A 0-d array is indexed as its one-element 1-d view (indices: [0]).
        return cls(param.name, "global", data.reshape(1) if data.ndim == 0 else data,
                   value.shape or (1,), decode, encode)

    @classmethod
    def local(cls, ref: ir.ArrayRef, lanes: int) -> "Memory":
        shape = tuple(ref.type.shape) or (1,)  # a 0-d local: see of_argument
        data = np.zeros((lanes, *shape), ops.register_dtype(ref.dtype))
        return cls(ref.name, "local", data, shape, ops.identity, ops.identity)

    @classmethod
    def shared(cls, ref: ir.ArrayRef, blocks: int, shape: tuple) -> "Memory":
        """One array of `shape` per block, filled with all-ones bits (NaN, -1): its
        contents start undefined, and shadow memory reports reads before writes."""
        bits, decode, encode = ops.memory_codec(ref.dtype)
        data = np.empty((blocks, *shape), bits or ref.dtype.np)
        data.view(np.uint8)[...] = 0xFF
        return cls(ref.name, "shared", data, shape, decode, encode)


def _access(fr, mem: Memory, indices: list, mask: np.ndarray, site: Site):
    """The one gate of every access: checks bounds and tells the observer. Gives the index
    of each lane (one int64 array per axis of `mem.data`), or None when no lane is active."""
    index = [np.broadcast_to(np.asarray(i, np.int64), (fr.lanes,)) for i in indices]
    if not mask.any():
        return None
    _check_bounds(fr, mem, index, mask, site.loc)
    fr.observer(_observed(fr, mem, index, mask, site))
    if mem.space == "local":
        index.insert(0, fr.lane)
    elif mem.space == "shared":
        index.insert(0, fr.block_slot)
    return index


def load(fr, mem: Memory, indices: list, mask: np.ndarray, site: Site) -> np.ndarray:
    index = _access(fr, mem, indices, mask, site)
    if index is None:
        return np.zeros(fr.lanes, mem.data.dtype)
    if not mask.all():  # masked lanes read element 0, which exists: some lane is in bounds
        index = [np.where(mask, i, 0) for i in index]
    return mem.data[tuple(index)]


def store(fr, mem: Memory, indices: list, mask: np.ndarray, site: Site, stored) -> None:
    index = _access(fr, mem, indices, mask, site)
    if index is None:
        return
    value = np.broadcast_to(stored, (fr.lanes,))
    fr.changes += 1
    if mask.all():
        mem.data[tuple(index)] = value
    else:
        mem.data[tuple(i[mask] for i in index)] = value[mask]


def atomic(fr, mem: Memory, indices: list, mask: np.ndarray, site: Site, scan, value, compare,
           register_dtype) -> np.ndarray:
    """Each active lane's old value; masked lanes get zeros."""
    old = np.zeros(fr.lanes, register_dtype)
    index = _access(fr, mem, indices, mask, site)
    if index is None:
        return old

    def active(v):
        return np.broadcast_to(np.asarray(v, register_dtype), (fr.lanes,))[mask]

    where = tuple(i[mask] for i in index)
    old[mask] = atomics.perform(scan, mem.data, where, active(value),
                                None if compare is None else active(compare),
                                mem.decode, mem.encode)
    if not np.array_equal(mem.decode(mem.data[where]), old[mask]):  # NaNs count as changes
        fr.changes += 1
    return old


def _check_bounds(fr, mem: Memory, index: list, mask: np.ndarray, loc: Loc) -> None:
    outside = np.zeros(fr.lanes, bool)
    for i, extent in zip(index, mem.shape):
        outside |= i.view(np.uint64) >= np.uint64(extent)  # negative -> huge: outside too
    outside &= mask
    if outside.any():
        lane = int(outside.argmax())
        raise BoundsError.of(mem.name, [i[lane] for i in index], mem.shape,
                             f"kernel {fr.kernel_name}, {fr.describe(lane)}", loc)


def _observed(fr, mem: Memory, index: list, mask: np.ndarray, site: Site) -> Access:
    active = (lambda lanes: lanes) if mask.all() else (lambda lanes: lanes[mask])
    flat = active(index[0])
    for i, extent in zip(index[1:], mem.shape[1:]):
        flat = flat * extent + active(i)
    epochs = (None, None) if fr.block_epoch is None else \
        (active(fr.block_epoch[fr.block_slot]), active(fr.warp_epoch[fr.lane_warp]))
    grid_epoch = None if fr.grid_epoch is None else np.broadcast_to(fr.grid_epoch, flat.shape)
    return Access(mem.name, mem.space, flat, active(fr.lane_block), active(fr.lane_thread),
                  site.is_write, site.loc, site.atomic, site.unsafe, *epochs, grid_epoch)
