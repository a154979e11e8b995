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
VG202 too. The message names the two threads and the element in the static checker's words
("thread (block 1, thread 0) and thread (block 0, thread 127) both write out[127]"; 3-tuples
of coordinates when the grid or block has more than one dimension) and points at the line of
the second access.

How: per element of each global array, int64 columns allocated on first use: the last plain
writer (a global linear thread id, block * threads + thread; -1 for none; it is the only
writer, or a VG202 would have been raised), and two distinct plain readers and two distinct
atomic updaters (-1 for none; two ids suffice to name, for any thread, another one). Every
check and update is a NumPy gather or scatter over the access's lanes.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SafetyError

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


class _Cells:
    """The shadow of one global array: one entry per element, columns made on first use."""

    def __init__(self, size: int):
        self.size = size
        self.writer = None  # (size,) the last plain writer
        self.readers = None  # (size, 2) two distinct plain readers
        self.atomics = None  # (size, 2) two distinct atomic updaters

    def column(self, name: str) -> np.ndarray:
        column = getattr(self, name)
        if column is None:
            shape = (self.size,) if name == "writer" else (self.size, 2)
            column = np.full(shape, _NONE, np.int64)
            setattr(self, name, column)
        return column


def _others(column, flat: np.ndarray, tid: np.ndarray):
    """Per lane: a thread other than the lane's own recorded in `column`, or -1."""
    if column is None:
        return None
    ids = column[flat]
    if column.ndim == 1:
        return np.where(ids == tid, _NONE, ids)
    return np.where(ids[:, 0] == tid, ids[:, 1], ids[:, 0])


def _record_pair(column: np.ndarray, flat: np.ndarray, tid: np.ndarray) -> None:
    """Keep up to two distinct thread ids per element."""
    first = column[flat, 0]
    fresh = first == _NONE
    if fresh.any():
        column[flat[fresh], 0] = tid[fresh]
        first = column[flat, 0]
    other = first != tid
    if other.any():
        flat, tid = flat[other], tid[other]
        empty = column[flat, 1] == _NONE
        column[flat[empty], 1] = tid[empty]


class Shadow:
    """The race detector of one launch; call it with each `Access`."""

    def __init__(self, grid: tuple, block: tuple, shapes: dict):
        self.grid, self.block = grid, block
        self.threads = prod(block)
        self.multi_dim = any(d != 1 for d in (*grid[1:], *block[1:]))
        self.shapes = shapes
        self.cells = {name: _Cells(prod(shape)) for name, shape in shapes.items()}

    def __call__(self, access: Access) -> None:
        if access.unsafe or access.space != "global":
            return
        cells = self.cells[access.array]
        flat = access.flat
        tid = access.block * self.threads + access.thread
        if access.atomic:
            self._check(access, tid, [
                ("VG204", _others(cells.writer, flat, tid), "{me} updates {el} atomically, "
                                                            "which {other} writes"),
                ("VG204", _others(cells.readers, flat, tid), "{me} updates {el} atomically, "
                                                             "which {other} reads")])
            _record_pair(cells.column("atomics"), flat, tid)
        elif access.is_write:
            self._check(access, tid, [
                ("VG202", _others(cells.writer, flat, tid), "{me} and {other} both write {el}"),
                ("VG203", _others(cells.readers, flat, tid), "{other} reads {el}, which {me} "
                                                             "writes"),
                ("VG204", _others(cells.atomics, flat, tid), "{me} writes {el}, which {other} "
                                                             "updates atomically")])
            writer = cells.column("writer")
            writer[flat] = tid  # lanes writing one element: the last lane's id stays
            self._check(access, tid, [("VG202", _others(writer, flat, tid),
                                       "{me} and {other} both write {el}")])
        else:
            self._check(access, tid, [
                ("VG203", _others(cells.writer, flat, tid), "{me} reads {el}, which {other} "
                                                            "writes"),
                ("VG204", _others(cells.atomics, flat, tid), "{me} reads {el}, which {other} "
                                                             "updates atomically")])
            _record_pair(cells.column("readers"), flat, tid)

    def _check(self, access: Access, tid: np.ndarray, rules: list) -> None:
        """Raise for the first lane that any rule finds another thread for."""
        rules = [rule for rule in rules if rule[1] is not None]
        if not rules:
            return
        hit = np.logical_or.reduce([others != _NONE for _, others, _ in rules])
        if not hit.any():
            return
        lane = int(hit.argmax())
        code, others, words = next(rule for rule in rules if rule[1][lane] != _NONE)
        message = words.format(me=self._thread(tid[lane]), other=self._thread(others[lane]),
                               el=self._element(access.array, access.flat[lane]))
        raise SafetyError(f"{message} (observed while running on the cpu backend)",
                          access.loc, hint=_HINTS[code] + _HINT_TAIL, code=code)

    def _thread(self, tid) -> str:
        block, thread = divmod(int(tid), self.threads)
        if not self.multi_dim:
            return f"thread (block {block}, thread {thread})"
        return f"thread (block {_coords(block, self.grid)}, thread {_coords(thread, self.block)})"

    def _element(self, array: str, flat) -> str:
        at = np.unravel_index(int(flat), self.shapes[array])
        return f"{array}[{', '.join(str(int(i)) for i in at)}]"


def _coords(linear: int, dims: tuple) -> str:
    x, y, _ = dims
    return f"({linear % x}, {linear // x % y}, {linear // (x * y)})"
