"""Whether two threads' accesses may run at the same time: the ordering part of a race query.

Takes: a z3 encoder (`encoder._Encoder`) over two copies of the thread ("1" and "2"), two
accesses (`symbolic.Ordered`, or plain `Access`es without barriers) and the `Space`. Gives:
- `unordered(enc, a, b, space, apart=False)`: a z3 formula that holds when thread 1 at `a`
  and thread 2 at `b` are distinct threads that nothing orders:
  - threads of different blocks are ordered only by grid_barrier() (when they come after
    different grid barrier instances), in global memory (each block has its own shared
    memory);
  - threads of one block are ordered by barrier() (when they come after different barrier
    instances, see `barriers`), threads of one warp also by syncwarp(); between two threads
    of one block the facts of uniformity hold (`uniform.equalities`), and between any two
    threads, that their tickets of one counter element differ (`tickets.apart`, and
    `block_ticket`s of different blocks).
  `apart=True` asks only about threads of different warps.
- `may_meet(a, b)`: False when the two accesses of one block cannot come after the same
  barrier (no solver needed), e.g. a write before a barrier and a read after it.
- `warp_of(ids, block)`: the warp of a thread of a counterexample.
"""
from __future__ import annotations

from . import barriers, tickets
from .algebra import per_thread, rename_formula
from .uniform import equalities


def epochs(access, kind: str) -> tuple:
    """The epochs of `access` of `kind` (`barriers`): those of an `Ordered` access, else
    the kernel's start."""
    return getattr(access, "epochs", barriers.START)[kind]


def may_meet(a, b) -> bool:
    """Whether `a` and `b` may come after one barrier (block barriers order warps too)."""
    mine = {x.barrier for x in epochs(a, "block")}
    return any(y.barrier in mine for y in epochs(b, "block"))


def _same_epoch(enc, a, b, kind: str):
    z3 = enc.z3
    options = []
    for x in epochs(a, kind):
        for y in epochs(b, kind):
            if x.barrier != y.barrier or len(x.iters) != len(y.iters):
                continue
            options.append(z3.And(
                enc.formula(rename_formula(x.cond, "1")), enc.formula(rename_formula(y.cond, "2")),
                *[enc.poly(p.rename("1")) == enc.poly(q.rename("2")) for p, q in zip(x.iters, y.iters)]))
    return enc.any(options)


def unordered(enc, a, b, space, apart: bool = False):
    z3 = enc.z3
    pairs = {n: (enc.atom(per_thread(n, "1")), enc.atom(per_thread(n, "2"))) for n in space.identity()}
    if not space.barriers and getattr(a, "memory", "global") == "global" and not apart:
        pair = enc.any([x != y for x, y in pairs.values()])
    else:
        differ = {kind: [x != y for n, (x, y) in pairs.items() if n.startswith(kind)] for kind in ("tid", "bid")}
        pair = _unordered(enc, a, b, space, apart, differ)
        # after `_unordered`, which may encode more atoms (block tickets only come with
        # barriers, so the branch above never needs them)
        pair = z3.And(pair, *_tickets_apart(enc, space, differ["bid"]))
    return z3.And(pair, *tickets.apart(enc, space))  # (the threads differ in every case)


def _tickets_apart(enc, space, blocks_differ: list) -> list:
    """Two blocks never hold the same ticket of one counter: each `block_ticket` is the old
    value of its own atomic add, and every write of the counter adds 1."""
    z3 = enc.z3
    used = [n for n in enc.used if n in space.tickets]
    if not used or not blocks_differ:
        return []
    pairs = [(x, y) for x in used for y in used if space.tickets[x] == space.tickets[y]]
    apart = [enc.atom(per_thread(x, "1")) != enc.atom(per_thread(y, "2")) for x, y in pairs]
    return [z3.Implies(enc.any(blocks_differ), enc.all(apart))] + [
        _within_a_launch(enc, space, x, y) for x, y in pairs]


TICKETS_PER_LAUNCH = 2**32  # adds of 1 to one counter in a launch, at most (`frontend`)


def _within_a_launch(enc, space, x: str, y: str):
    """Two tickets of one counter in one launch are fewer than TICKETS_PER_LAUNCH adds of 1
    apart, modulo the counter's dtype: a 64-bit ticket may be anything (the counter starts
    where the caller left it), but another block's is near it, so that `tile * 6144` of two
    tickets do not meet where 64-bit arithmetic wraps."""
    z3 = enc.z3
    atom = space.atoms[x]
    modulus = atom.hi - atom.lo + 1
    apart, turns = z3.FreshInt("ticket_gap", enc.ctx), z3.FreshInt("ticket_turns", enc.ctx)
    return z3.And(enc.atom(per_thread(x, "1")) - enc.atom(per_thread(y, "2")) == apart + modulus * turns,
                  -TICKETS_PER_LAUNCH < apart, apart < TICKETS_PER_LAUNCH, -1 <= turns, turns <= 1)


def _unordered(enc, a, b, space, apart: bool, differ: dict):
    z3 = enc.z3
    warp = space.warp()
    together = enc.poly(warp.rename("1")) == enc.poly(warp.rename("2"))
    when = _same_epoch(enc, a, b, "block")
    if "warp" in space.barriers:
        when = z3.If(together, _same_epoch(enc, a, b, "warp"), when)
    inside = [z3.Not(enc.any(differ["bid"])), enc.any(differ["tid"]), when]
    if apart:
        inside.append(z3.Not(together))
    inside_block = z3.And(*inside, *equalities(enc, space, together))
    if getattr(a, "memory", "global") == "shared":
        return inside_block
    blocks_apart = enc.any(differ["bid"])
    if "grid" in space.barriers:
        blocks_apart = z3.And(blocks_apart, _same_epoch(enc, a, b, "grid"))
    return z3.Or(blocks_apart, inside_block)


def warp_of(ids: dict, block: tuple) -> int:
    """The warp of the thread with ids {"tid0@": ..., ...} in a block of shape `block`."""
    x, y, z = (ids.get(f"tid{axis}@", 0) for axis in range(3))
    return (x + block[0] * (y + block[1] * z)) // 32
