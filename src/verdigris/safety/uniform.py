"""Uniformity: which values are the same for every thread of a block, or of a warp.

Takes: the `Space` of one analysis: its atoms, and `space.scopes`, the scope the executor
(`symbolic`) gave each per-thread atom it made, with the loop counters of the iteration the
atom belongs to. Gives:
- `SCOPES`, weakest first: "thread" (may differ between any two threads), "warp" (the same
  for the lanes of one warp), "block" (the same for the threads of one block), "launch" (the
  same everywhere: sizes, shapes, scalar parameters); `meet` (the weakest of some scopes),
  `join` (the strongest), `at_least(s, need)`;
- `Scopes(space).of(value)`: the scope a value (polynomial, formula, `Opaque` float) provably
  has, read off its atoms (and `thread_id(0) < 32*m`, warp-uniform in blocks of whole-warp
  rows). Loop counters count as uniform over the launch: every uniformity question
  compares two threads at the same iteration of the loops around the point it asks about;
- `equalities(enc, space, together)`: the facts scopes give a z3 query about two threads of
  one block: an atom of scope "block" is equal for both when they are at the same iteration
  of the loops it was made in; one of scope "warp" too, where `together` (a z3 bool: they
  share a warp) holds.

Why values are uniform (the executor's rules): block ids, sizes and parameters are; a value
loaded at a uniform index is (threads that read one element in one barrier interval read the
same value, or the kernel has a race the checker reports; over the launch for a global
array, where two blocks' reads in one grid barrier interval race with any write between
them, over the block for a shared one), unless a write may change it with
no race reported: loads of local arrays, of arrays atomics write or that are written inside
`vg.unsafe()`, and loads inside `vg.unsafe()` of any array the kernel writes are per-thread,
as are atomics' results; ballot/any/all, and shfl_idx
from a warp-uniform lane, are warp-uniform; a variable a loop carries has the scope the
loop's fixpoint proves; anything derived from uniform values is uniform.
"""
from __future__ import annotations

from dataclasses import dataclass

from .algebra import Poly, formula_atoms, per_thread

SCOPES = ("thread", "warp", "block", "launch")
_RANK = {s: i for i, s in enumerate(SCOPES)}
_DERIVED = ("ite", "floordiv", "mod", "loopvar", "wrap", "pow2", "rshift")  # atoms defined by other values


@dataclass(frozen=True)
class Opaque:
    """A float (floats are not modelled), with the scope it is uniform over."""

    scope: str


def meet(*scopes) -> str:
    return min(scopes, key=_RANK.__getitem__, default="launch")


def join(*scopes) -> str:
    return max(scopes, key=_RANK.__getitem__, default="thread")


def at_least(scope: str, need: str) -> bool:
    return _RANK[scope] >= _RANK[need]


def cap(scope: str) -> str:
    """The strongest scope a per-thread atom may have (it is renamed per thread): any, since
    what differs between blocks says so itself (block ids, tickets and shared memory loads
    are "block")."""
    return scope


class Scopes:
    def __init__(self, space):
        self.space, self.memo = space, {}

    def atom(self, name: str) -> str:
        if not name.endswith("@"):
            return "launch"
        known = self.memo.get(name)
        if known is None:
            entry, atom = self.space.scopes.get(name), self.space.atoms[name]
            known = entry[0] if entry is not None else "launch" if atom.kind == "counter" else \
                "warp" if self.whole_warps(atom) else \
                meet(*map(self.of, atom.definition)) if atom.kind in _DERIVED else "thread"
            self.memo[name] = known
        return known

    def whole_warps(self, atom) -> bool:
        """Whether `atom` is the same on the lanes of a warp because warps are whole rows
        of a block shaped (32*m, ...): thread_id(1), thread_id(2), and
        (thread_id(0) + 32*u) // (32*j) with u uniform."""
        block = self.space.block
        if block is None or block[0] % 32:
            return False
        if atom.name in ("tid1@", "tid2@"):
            return True
        if atom.kind != "floordiv" or atom.definition[1].value is None or atom.definition[1].value % 32:
            return False
        x = atom.definition[0]
        rest = x - Poly.atom("tid0@")
        return x.terms.get(("tid0@",)) == 1 and at_least(self.of(rest), "block") and \
            all(c % 32 == 0 for c in rest.terms.values())

    def of(self, value) -> str:
        if isinstance(value, Poly):
            return meet(*map(self.atom, value.atoms()))
        if isinstance(value, tuple):
            if value[0] in ("and", "or", "not"):
                return meet(*map(self.of, value[1:]))
            if value[0] == "cmp" and self.warp_threshold(value):
                return "warp"
            return meet(*map(self.atom, formula_atoms(value, set())))
        return "thread" if value is None else value.scope

    def warp_threshold(self, f: tuple) -> bool:
        """Whether `f` is `thread_id(0) < c` (or >=, <=, >) with c a multiple of 32 in a block
        of whole-warp rows: the same for the lanes of a warp."""
        block = self.space.block
        sign = f[2].terms.get(("tid0@",))
        if block is None or block[0] % 32 or sign not in (1, -1) or f[1] not in ("lt", "le") \
                or set(f[2].terms) - {("tid0@",), ()}:
            return False
        c = f[2].terms.get((), 0)
        # t + c < 0: t < -c; t + c <= 0: t < 1 - c; -t + c < 0: t >= c + 1; -t + c <= 0: t >= c
        bound = (-c if f[1] == "lt" else 1 - c) if sign == 1 else (c + 1 if f[1] == "lt" else c)
        return bound % 32 == 0


def equalities(enc, space, together=None) -> list:
    """Facts for a query about two threads of one block (see the module docstring)."""
    z3 = enc.z3
    facts, done = [], set()
    while True:
        todo = [n for n in list(enc.used) if n in space.scopes and n not in done]
        if not todo:
            return facts
        for name in todo:
            done.add(name)
            scope, loops = space.scopes[name]
            if scope == "thread" or (scope == "warp" and together is None):
                continue
            same = [enc.atom(per_thread(k, "1")) == enc.atom(per_thread(k, "2")) for k in loops]
            if scope == "warp":
                same.append(together)
            equal = enc.atom(per_thread(name, "1")) == enc.atom(per_thread(name, "2"))
            facts.append(z3.Implies(enc.all(same), equal) if same else equal)
