"""Shadow memory: the cpu backend's dynamic race detector.

Takes: a launch's grid, block, global array shapes, shared array shapes, blocks per chunk
and whether the kernel has barriers, then every `Access` the SIMT interpreter makes, in its
order (a `Shadow` is the interpreter's observer).
Gives: `Shadow`, which raises `SafetyError` at the first access that conflicts with an
earlier one, or that reads shared memory no thread of the block wrote, before that access
touches memory.

Guarantees: two accesses of one element by two distinct threads that nothing orders
conflict when both are plain writes (VG202), when one is a plain read and the other a
plain write (VG203), or when one is atomic and the other plain (VG204). Threads of
different blocks are ordered only by `grid_barrier()`, threads of one block also by
`barrier()`, lanes of one warp also by `syncwarp()` (GPUVerify's barrier intervals;
`Access.grid_epoch`, `block_epoch` and `warp_epoch` count the barriers passed). Shared
memory belongs to a block: its conflicts are VG211 (threads of different warps, no barrier between) and VG212 (lanes of one warp, no
syncwarp between: lanes are not in lock step), and a read of an element no thread of the
block wrote before is VG213. A thread's own accesses never conflict with each other,
atomics never conflict with atomics, local arrays belong to one thread, and accesses inside
`with vg.unsafe():` are neither recorded nor checked (their writes still count as writes
for VG213). Several lanes writing one element in one lock-step step conflict too. Where one
access meets several kinds of conflict, the static checker's preference decides the code
(two writers before a reader). The message names the two threads and the element in the
static checker's words ("thread (block 1, thread 0) and thread (block 0, thread 127) both
write out[127]"; coordinates as tuples, one number per axis, when the launch uses more than
axis 0) and points at the line of the second access.

How: per element and kind of access (plain write, plain read, atomic), `_Level`s of at most
two recorded threads, each level deciding one question exactly: is there an earlier access
of that kind by a thread of another block (never stale), of another warp of this block in
this block's current interval, of another lane of this warp in the warp's current
interval? (In a kernel with grid barriers, the first question is asked of the grid's
current interval.) Two entries of distinct groups (blocks, warps, threads) suffice to name,
for any thread, one of another group; an entry of an earlier interval is as good as none and is
replaced. A kernel without barriers needs one level, distinct threads. Shared memory is
kept per block slot of the chunk (entries of the slot's earlier blocks are stale by owner).
Every check and update is a NumPy gather or scatter over the access's lanes, through a
slice where the lanes' elements are consecutive (the common case, and several times faster
than fancy indexing).
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SafetyError
from ..safety.codes import CODES

if TYPE_CHECKING:
    from .memory import Access

_NONE = -1
WARP_SIZE = 32

_HINTS = {
    "VG202": "give each thread elements of its own, or combine the values with an atomic "
             "(simt.atomic_add, ...)",
    "VG203": "write to a separate output array, or let each thread read only elements that "
             "no other thread writes",
    "VG204": "update this array only with atomics between two barriers",
    "VG211": "put simt.barrier() between one thread's access and the other's",
    "VG212": "put simt.syncwarp() between one lane's access and the other's, or exchange the "
             "values with shuffles (simt.shfl_down, ...)",
    "VG213": "let the block write every element it reads first (e.g. a padding value where "
             "a bounds guard skips the load), with a barrier() between",
}
_HINT_TAIL = "; accesses meant to race go inside `with vg.unsafe():`"


class _Column:
    """One number per element, made on first use."""

    def __init__(self, size: int, dtype):
        self.size, self.dtype, self.ids = size, dtype, None

    def made(self) -> np.ndarray:
        if self.ids is None:
            self.ids = np.full(self.size, _NONE, self.dtype)
        return self.ids


class _Who:
    """The threads of an access's active lanes: their groups and epochs."""

    def __init__(self, groups: dict, epochs: dict):
        self.groups = groups  # "thread" | "warp" | "block" | "grid" -> ids per lane
        self.epochs = epochs  # "warp" | "block" | "grid" -> epoch per lane (its barrier count)

    def take(self, lanes) -> "_Who":
        return _Who({k: v[lanes] for k, v in self.groups.items()},
                    {k: v[lanes] for k, v in self.epochs.items()})


class _Level:
    """Up to two recorded threads per element, of distinct `group`s. With an `owner`
    ("grid", "block" or "warp"), an entry counts only for threads of its owner while the
    owner's epoch is the one it was recorded in."""

    def __init__(self, shadow: "Shadow", size: int, group: str, owner: str | None = None):
        self.shadow, self.group, self.owner = shadow, group, owner
        self.ids = [_Column(size, shadow.ids), _Column(size, shadow.ids)]
        self.stamps = [_Column(size, np.int64), _Column(size, np.int64)] if owner else None

    def _live(self, slot: int, at, who: _Who):
        """The entries of `slot` at `at`, and which of them count for `who`'s lanes."""
        tids = self.ids[slot].ids[at]
        live = tids != _NONE
        if self.owner:
            live &= (self.shadow.group(tids, self.owner) == who.groups[self.owner]) \
                & (self.stamps[slot].ids[at] == who.epochs[self.owner])
        return tids, live

    def others(self, at, who: _Who):
        """Per lane: a recorded thread of another group that counts, or -1; None: none."""
        if self.ids[0].ids is None:
            return None
        mine, found = who.groups[self.group], None
        for slot in (0, 1):
            if self.ids[slot].ids is None:
                break
            tids, live = self._live(slot, at, who)
            hit = live & (self.shadow.group(tids, self.group) != mine)
            found = np.where(hit, tids, _NONE) if found is None \
                else np.where((found == _NONE) & hit, tids, found)
        return found

    def _put(self, slot: int, at, flat, take, who: _Who) -> None:
        ids, stamps = self.ids[slot].made(), self.stamps and self.stamps[slot].made()
        if take.all():
            where, tid = at, who.groups["thread"]
            stamp = self.owner and who.epochs[self.owner]
        else:
            where, tid = flat[take], who.groups["thread"][take]
            stamp = self.owner and who.epochs[self.owner][take]
        ids[where] = tid
        if self.owner:
            stamps[where] = stamp

    def record(self, at, flat: np.ndarray, who: _Who) -> None:
        mine = who.groups[self.group]
        self.ids[0].made()
        if self.owner:
            self.stamps[0].made()
        tids, live = self._live(0, at, who)
        take = ~live | (self.shadow.group(tids, self.group) == mine)
        if take.any():
            self._put(0, at, flat, take, who)
        first = self.shadow.group(self.ids[0].ids[at], self.group)  # lanes of one element
        pending = first != mine  # see which of them was recorded
        if not pending.any():
            return
        flat, who, first = flat[pending], who.take(pending), first[pending]
        self.ids[1].made()
        if self.owner:
            self.stamps[1].made()
        tids, live = self._live(1, flat, who)
        group = self.shadow.group(tids, self.group)
        take = ~live | (group == who.groups[self.group]) | (group == first)
        if take.any():
            self._put(1, flat, flat, take, who)


# What an access is -> {what an earlier access of another thread was: (code, message)}.
_CONFLICTS = {
    "write": {"write": ("VG202", "{me} and {other} both write {el}"),
              "read": ("VG203", "{me} writes {el} while {other} reads it"),
              "atomic": ("VG204", "{other} updates {el} atomically while {me} writes it "
                                  "without an atomic")},
    "read": {"write": ("VG203", "{other} writes {el} while {me} reads it"),
             "atomic": ("VG204", "{other} updates {el} atomically while {me} reads it "
                                 "without an atomic")},
    "atomic": {"write": ("VG204", "{me} updates {el} atomically while {other} writes it "
                                  "without an atomic"),
               "read": ("VG204", "{me} updates {el} atomically while {other} reads it "
                                 "without an atomic")},
}
# The levels of global memory (without barriers: one) and of shared memory; for shared
# memory, what a plain conflict found at a level is.
_GLOBAL_LEVELS = (("block", None), ("warp", "block"), ("thread", "warp"))
_GRID_LEVELS = (("block", "grid"),) + _GLOBAL_LEVELS[1:]  # a kernel with grid barriers
_SHARED_LEVELS = (("warp", "block"), ("thread", "warp"))
_SHARED_CODES = {"warp": ("VG211", " with no barrier() between them"),
                 "thread": ("VG212", " with no syncwarp() between them: the lanes of a warp "
                                     "do not run in lock step")}


def _elements(flat: np.ndarray):
    """The lanes' elements as a slice where they are consecutive and increasing, else `flat`."""
    n = len(flat)
    if flat[-1] - flat[0] == n - 1 and (flat[1:] > flat[:-1]).all():
        return slice(int(flat[0]), int(flat[0]) + n)
    return flat


class Shadow:
    """The race detector of one launch; call it with each `Access`."""

    def __init__(self, grid: tuple, block: tuple, shapes: dict, shared: dict | None = None,
                 blocks_per_chunk: int = 1, ordered: bool = False, grid_ordered: bool = False):
        self.grid, self.block = grid, block
        self.threads = prod(block)
        self.warps_per_block = -(-self.threads // WARP_SIZE)
        self.axes = 1 + max((a for a in range(3) if grid[a] != 1 or block[a] != 1), default=0)
        shared = shared or {}
        self.shapes = {**shapes, **shared}
        self.ids = np.int32 if prod(grid) * self.threads < 2 ** 31 else np.int64
        self.slots = blocks_per_chunk
        levels = _GRID_LEVELS if grid_ordered else _GLOBAL_LEVELS if ordered else (("thread", None),)
        self.levels = {name: {kind: [_Level(self, prod(shape), *level) for level in levels]
                              for kind in _CONFLICTS} for name, shape in shapes.items()}
        self.levels.update({name: {kind: [_Level(self, blocks_per_chunk * prod(shape), *level)
                                          for level in _SHARED_LEVELS] for kind in _CONFLICTS}
                            for name, shape in shared.items()})
        self.written = {name: np.full(blocks_per_chunk * prod(shape), _NONE, np.int64)
                        for name, shape in shared.items()}

    def group(self, tids: np.ndarray, kind: str) -> np.ndarray:
        """The grid (0), block, warp (global: block * warps per block + warp) or thread of
        thread ids."""
        if kind == "thread":
            return tids
        if kind == "grid":
            return np.zeros_like(tids)
        blocks = tids // self.threads
        if kind == "block":
            return blocks
        return blocks * self.warps_per_block + tids % self.threads // WARP_SIZE

    def __call__(self, access: Access) -> None:
        if access.space == "local":
            return
        tid = (access.block * self.threads + access.thread).astype(self.ids)
        flat = access.flat
        if access.space == "shared":
            flat = access.block % self.slots * prod(self.shapes[access.array]) + flat
            self._check_written(access, flat, tid)
        if access.unsafe:
            return
        epochs = {} if access.block_epoch is None else \
            {"block": access.block_epoch, "warp": access.warp_epoch}
        if access.grid_epoch is not None:
            epochs["grid"] = access.grid_epoch
        who = _Who({k: self.group(tid, k) for k in ("thread", "warp", "block", "grid")}, epochs)
        at = _elements(flat)
        kind = "atomic" if access.atomic else "write" if access.is_write else "read"
        levels = self.levels[access.array]
        # Recorded first, so that lanes of this step writing one element meet each other.
        for level in levels[kind]:
            level.record(at, flat, who)
        for earlier, rule in _CONFLICTS[kind].items():
            for level in levels[earlier]:
                others = level.others(at, who)
                if others is not None and (others != _NONE).any():
                    self._raise(access, tid, others, rule, level.group)

    def _check_written(self, access: Access, cells: np.ndarray, tid: np.ndarray) -> None:
        """VG213 for a read (or atomic) of a shared element no thread of its block wrote."""
        written = self.written[access.array]
        if not access.is_write or access.atomic:
            unwritten = written[cells] != access.block
            if unwritten.any() and not access.unsafe:
                lane = int(unwritten.argmax())
                what = "updates {el} atomically" if access.atomic else "reads {el}"
                message = ("{me} " + what + ", which no thread of its block wrote before").format(
                    me=self._thread(tid[lane]), el=self._element(access.array, access.flat[lane]))
                raise SafetyError(f"{CODES['VG213'].title}: {message} (observed while running "
                                  "on the cpu backend)", access.loc, hint=_HINTS["VG213"],
                                  code="VG213")
        if access.is_write:
            written[cells] = access.block

    def _raise(self, access: Access, tid: np.ndarray, others: np.ndarray, rule: tuple,
               level: str) -> None:
        code, words = rule
        if access.space == "shared" and code != "VG204":
            code, tail = _SHARED_CODES[level]
            words += tail
        lane = int((others != _NONE).argmax())
        message = words.format(me=self._thread(tid[lane]), other=self._thread(others[lane]),
                               el=self._element(access.array, access.flat[lane]))
        raise SafetyError(f"{CODES[code].title}: {message} (observed while running on the "
                          "cpu backend)",
                          access.loc, hint=_HINTS[code] + _HINT_TAIL, code=code)

    def _thread(self, tid) -> str:
        block, thread = divmod(int(tid), self.threads)
        return f"thread (block {self._coords(block, self.grid)}, " \
               f"thread {self._coords(thread, self.block)})"

    def _coords(self, linear: int, dims: tuple) -> str:
        """A linear id as the static checker writes it: one number per axis the launch uses."""
        x, y, _ = dims
        coords = (linear % x, linear // x % y, linear // (x * y))[:self.axes]
        return str(coords[0]) if self.axes == 1 else f"({', '.join(map(str, coords))})"

    def _element(self, array: str, flat) -> str:
        at = np.unravel_index(int(flat), self.shapes[array])
        return f"{array}[{', '.join(str(int(i)) for i in at)}]"
