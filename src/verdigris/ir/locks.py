"""The critical section of the tile track: `with tile.lock(locks, index):`.

Takes: nothing (`frontend.locks` builds it). Gives: `Locked`, a statement with a body.

Semantics (docs/api.md, "Compare-and-swap, exchange and locks"; docs/safety.md, "Locks"):
the block takes the lock element by repeating `acquire` (an `Atomic` "cas" of the element
from 0 to 1) until it gives 0, with acquire ordering at GPU scope, once for the block; then
all its threads run `body`; once every thread is done, `release` (an `Atomic` "exch" of the
element to 0) runs once, with release ordering. Guarantees the frontend establishes: the
lock array is an int32 array parameter that no other statement of the kernel accesses; no
`Locked` stands inside another; nothing leaves `body` early (no `Exit` of a region outside
it, no `Break` or `Continue` of a loop outside it).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import nodes as N


@dataclass(eq=False)
class Locked(N.Stmt):
    acquire: N.Atomic  # cas(locks, index, 0, 1): the element's old value, 0 where it was free
    body: list
    release: N.Atomic  # exch(locks, index, 0)

    @property
    def locks(self) -> N.ArrayRef:
        return self.acquire.array

    @property
    def indices(self) -> tuple:
        return self.acquire.indices
