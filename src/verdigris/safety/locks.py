"""Critical sections in the race proofs of the tile track (`with tile.lock(locks, index):`).

Takes: the accesses of two blocks (`tiles.TileAccess`, whose `locks` name the lock
elements held around each: (lock array, index polynomials)) and a kernel's body. Gives:
`exclusion(enc, a, b)`, the facts a race between two blocks' accesses `a` (copy "1") and
`b` (copy "2") needs besides theirs: for every lock array both hold, the two indices
differ somewhere; `with_lock_hint(errors, kernel)`, the race findings of a kernel that
takes a spin lock by hand (`tile.atomic_cas`/`tile.atomic_xchg`), with a hint to the
structured form; `held_apart(a, b)` and `hint(a, b)`, what a race message says about the
locks held around its accesses.

Guarantees (docs/safety.md, "Locks"): blocks that hold one lock element run their critical
sections one at a time (`ir.locks`: acquire and release ordering, the block's barriers
around the body), so two such accesses are ordered and no race; every other pair is asked
as before (the facts only remove pairs whose lock indices are equal). Within one block the
facts do not apply: its statements keep program order, which the lock does not give.
"""
from __future__ import annotations

from ..errors import SafetyError
from ..ir import nodes as N
from ..ir.locks import Locked

HINT = ("a spin lock written with tile.atomic_cas and tile.atomic_xchg orders nothing for the "
        "race checker: put the accesses it guards in `with tile.lock(locks, index):` instead")


def exclusion(enc, a, b) -> list:
    """For each lock array held around both `a` and `b`: their lock indices differ."""
    facts = []
    for name_a, index_a in getattr(a, "locks", ()):
        for name_b, index_b in getattr(b, "locks", ()):
            if name_a == name_b:
                facts.append(enc.any([enc.poly(x.rename("1")) != enc.poly(y.rename("2"))
                                      for x, y in zip(index_a, index_b)]))
    return facts


def _arrays(x) -> set:
    """The lock arrays held around access `x`."""
    return {name for name, _ in getattr(x, "locks", ())}


def held_apart(a, b) -> str:
    """What a race message adds where a lock is held around either access: the two blocks
    hold different elements of one lock array, or only one of them holds a lock."""
    mine, theirs = _arrays(a), _arrays(b)
    if mine & theirs:
        return f", each holding its own element of {min(mine & theirs)} (the lock indices differ)"
    if mine and theirs:
        return f", holding locks of different arrays ({', '.join(sorted(mine | theirs))})"
    if mine or theirs:
        return ", one of them outside every tile.lock"
    return ""


def hint(a, b) -> str:
    """The hint of a race between accesses that a lock is held around ("" where none is)."""
    mine, theirs = _arrays(a), _arrays(b)
    if not (mine or theirs):
        return ""
    if mine & theirs:
        return ("index the lock by what the body updates (`with tile.lock(locks, g):` around "
                "the update of row g), so that blocks that meet hold one lock element")
    return ("put every access of {array} that other blocks may meet inside a `with "
            "tile.lock(...)` of one lock array, indexed by what it updates")


def with_lock_hint(errors: list, kernel: N.Kernel) -> list:
    """`errors`, where `kernel` takes a lock by hand, with `HINT` added to its races."""
    from ..frontend import walk

    nodes = list(walk(kernel.body))
    structured = {id(n) for s in nodes if isinstance(s, Locked) for n in (s.acquire, s.release)}
    by_hand = any(isinstance(n, N.Atomic) and n.op in ("cas", "exch") and id(n) not in structured
                  for n in nodes)
    if not by_hand:
        return errors
    return [SafetyError(e.message, e.loc, f"{e.hint}; {HINT}" if e.hint else HINT, e.code)
            if e.code in ("VG202", "VG203") else e for e in errors]
