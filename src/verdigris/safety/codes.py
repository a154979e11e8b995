"""The safety error codes: one row per rule, shared by the checker, the launch path, the
cpu backend's dynamic checks, `verdigris check` and `verdigris explain`.

VG2xx: races and aliasing. VG3xx: memory safety. A code, once published, keeps its
meaning; retired codes are not reused.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    code: str
    title: str  # one line, used in messages and the README table


CODES = {c.code: c for c in (
    Code("VG201", "an array the kernel writes overlaps another array argument of the launch"),
    Code("VG202", "two threads may write the same element"),
    Code("VG203", "a thread may read an element that another thread writes"),
    Code("VG204", "an array is accessed both atomically and with plain reads or writes"),
    Code("VG205", "a write index could not be proven disjoint between threads"),
    Code("VG210", "a barrier may be reached by some threads of a block and not others"),
    Code("VG211", "threads of one block access the same shared element between two barriers"),
    Code("VG212", "warp-synchronous shared memory accesses without syncwarp()"),
    Code("VG213", "shared memory is read before anything wrote it"),
    Code("VG214", "a warp operation may be reached by some lanes of a warp and not others"),
    Code("VG301", "an index is out of bounds on every launch (proven while compiling)"),
    Code("VG302", "an index was out of bounds while the kernel ran"),
    Code("VG303", "a variable may be read before anything assigned it"),
    Code("VG304", "a launch breaks a fact the kernel states with vg.assume"),
)}
