"""Shadow memory: the cpu backend's dynamic race detector.

Takes: a launch's grid, block and global array shapes, then every `Access` the SIMT
interpreter makes, in its order (a `Shadow` is the interpreter's observer).
Gives: `Shadow`, which raises `SafetyError` at the first access that conflicts with an
earlier one, before that access touches memory.

Guarantees: two accesses of one element of a global array by two distinct threads conflict
when both are plain writes (VG202), when one is a plain read and the other a plain write
(VG203), or when one is atomic and the other plain (VG204). No barriers exist yet, so the
whole launch is one interval: any two threads may run in either order. A thread's own
accesses never conflict with each other (in-place updates are fine), atomics never conflict
with atomics, accesses inside `with vg.unsafe():` are neither recorded nor checked, and local
arrays belong to one thread. Several lanes writing one element in one lock-step step are a
VG202 too. Where one access meets several kinds of conflict, the static checker's preference
decides the code (two writers, VG202, before a reader, VG203). The message names the two
threads and the element in the static checker's words ("thread (block 1, thread 0) and
thread (block 0, thread 127) both write out[127]"; coordinates as tuples, one number per
axis, when the launch uses more than axis 0) and points at the line of the second access.

How: per element of each global array and per kind of access (plain write, plain read,
atomic), up to two distinct thread ids (global linear ids, block * threads + thread; -1 for
none): two suffice to name, for any thread, another one. Columns are made on first use, the
second one when a second thread shows up. Every check and update is a NumPy gather or scatter
over the access's lanes, through a slice where the lanes' elements are consecutive (the
common case, and several times faster than fancy indexing).
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SafetyError
from ..safety.codes import CODES

if TYPE_CHECKING:
    from .simt import Access

_NONE = -1

_HINTS = {
    "VG202": "give each thread elements of its own, or combine the values with an atomic "
             "(simt.atomic_add, ...)",
    "VG203": "write to a separate output array, or let each thread read only elements that "
             "no other thread writes",
    "VG204": "update this array only with atomics in this launch",
}
_HINT_TAIL = "; accesses meant to race go inside `with vg.unsafe():`"


class _Column:
    """One thread id per element, made on first use."""

    def __init__(self, size: int, dtype):
        self.size, self.dtype, self.ids = size, dtype, None

    def made(self) -> np.ndarray:
        if self.ids is None:
            self.ids = np.full(self.size, _NONE, self.dtype)
        return self.ids


class _Ids:
    """Up to two distinct thread ids per element."""

    def __init__(self, size: int, dtype):
        self.first, self.second = _Column(size, dtype), _Column(size, dtype)

    def others(self, at, tid: np.ndarray):
        """Per lane: a recorded thread other than the lane's own, or -1; None: none recorded."""
        if self.first.ids is None:
            return None
        first = self.first.ids[at]
        if self.second.ids is None:
            return np.where(first == tid, _NONE, first)
        return np.where(first == tid, self.second.ids[at], first)

    def record(self, at, flat: np.ndarray, tid: np.ndarray) -> None:
        first = self.first.made()
        recorded = first[at]
        fresh = recorded == _NONE
        if fresh.all():
            first[at] = tid
        elif fresh.any():
            first[flat[fresh]] = tid[fresh]
        recorded = first[at]  # lanes sharing an element see which of them was recorded
        other = recorded != tid
        if other.any():
            flat, tid = flat[other], tid[other]
            second = self.second.made()
            empty = second[flat] == _NONE
            second[flat[empty]] = tid[empty]


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


def _elements(flat: np.ndarray):
    """The lanes' elements as a slice where they are consecutive and increasing, else `flat`."""
    n = len(flat)
    if flat[-1] - flat[0] == n - 1 and (flat[1:] > flat[:-1]).all():
        return slice(int(flat[0]), int(flat[0]) + n)
    return flat


class Shadow:
    """The race detector of one launch; call it with each `Access`."""

    def __init__(self, grid: tuple, block: tuple, shapes: dict):
        self.grid, self.block = grid, block
        self.threads = prod(block)
        self.axes = 1 + max((a for a in range(3) if grid[a] != 1 or block[a] != 1), default=0)
        self.shapes = shapes
        self.ids = np.int32 if prod(grid) * self.threads < 2 ** 31 else np.int64
        self.cells = {name: {kind: _Ids(prod(shape), self.ids) for kind in _CONFLICTS}
                      for name, shape in shapes.items()}

    def __call__(self, access: Access) -> None:
        if access.unsafe or access.space != "global":
            return
        cells = self.cells[access.array]
        flat = access.flat
        at = _elements(flat)
        tid = (access.block * self.threads + access.thread).astype(self.ids)
        kind = "atomic" if access.atomic else "write" if access.is_write else "read"
        # Recorded first, so that lanes of this step writing one element meet each other.
        cells[kind].record(at, flat, tid)
        self._check(access, tid, [(rule, cells[earlier].others(at, tid))
                                  for earlier, rule in _CONFLICTS[kind].items()])

    def _check(self, access: Access, tid: np.ndarray, rules: list) -> None:
        """Raise for the first rule that finds another thread for some lane, at its first
        such lane. `rules`: pairs of ((code, message), the other thread per lane or None),
        in the static checker's order of preference (two writers before a reader)."""
        for (code, words), others in rules:
            if others is None:
                continue
            hit = others != _NONE
            if hit.any():
                lane = int(hit.argmax())
                break
        else:
            return
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

