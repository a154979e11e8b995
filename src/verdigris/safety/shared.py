"""Shared memory: races between the threads of a block, and reads of what nothing wrote.

Takes: a `symbolic.Trace` (its accesses of shared arrays, each with its epochs). Gives:
- `check_pairs(trace, budget) -> Tally`: for each pair of accesses of one shared array
  (outside `vg.unsafe()`) with a plain write, or an atomic and a plain access: two distinct
  threads of one block touching one element after the same barrier is VG211 (VG212 when
  only lanes of one warp can, with no syncwarp() between them; VG204 for an atomic and a
  plain access); a pair the solver cannot decide, or whose collision needs values the
  checker cannot see, is VG205. Atomics never race with atomics.
- `check_reads(trace, budget) -> Tally`: VG213 for a plain read of an element that no
  thread of the block writes before it (earlier in the same iteration, or in an earlier
  iteration of a loop around both), where the block shape is known (how many threads write
  depends on it). A read whose index or path depends on loaded or carried values, or in a
  loop that can be left early, is refused as one that "may" read it; a read whose writes
  depend on such values is neither refused nor proven. `unproven`: the reads neither proven written nor
  refused (all of them without a block shape), which only the cpu backend checks.

How, per pair: `order.may_meet` (some barrier both may come after), then `fastpath`
(the index determines the thread), then `coverage.meetings` (no element of two threads
after one barrier instance, by enumeration), then `solver.collide` with the block's order:
first at the threads and iterations where the enumeration found two threads meet (an
example at once, where the solver agrees), else anywhere. Per read:
a write every thread of the block makes (unconditionally, wherever the read runs) whose
index `tid` covers the array along each axis, or the same thread's earlier write of the
same element, proves it written (writes before it in the same iteration only: a write later
in a loop's body does not cover the read of iteration 0); else `coverage` enumerates the
block's writes and reads; else z3 looks for a read element that, for every thread of the
block and every write that precedes the read (`_precedes`), is not the written one (a
quantified query, with a small budget): unsat proves the read written where the writes'
paths are certain; unknown is no finding, and no proof.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import budgets, coverage, diagnose, fastpath, order, solver
from .algebra import Poly, formula_atoms, per_thread, rename_formula
from .encoder import _depends, _Encoder
from .solver import Outcome, readable
from .uniform import Scopes, at_least

CODE_OF_KINDS = {("write", "write"): "VG211", ("read", "write"): "VG211",
                 ("atomic", "read"): "VG204", ("atomic", "write"): "VG204"}
_UNSEEN = ("unknown", "bool", "claim")  # atoms for values the checker cannot see


@dataclass
class Tally:
    errors: list = field(default_factory=list)
    fast: int = 0
    queries: int = 0
    unproven: list = field(default_factory=list)  # reads neither proven written nor refused


def by_array(trace) -> dict:
    groups: dict = {}
    for access in trace.accesses:
        if access.memory == "shared":
            groups.setdefault(access.array, []).append(access)
    return groups


def check_pairs(trace, budget: int) -> Tally:
    space, tally = trace.space, Tally()
    tids = [n for n in space.identity() if n.startswith("tid")]
    for accesses in by_array(trace).values():
        checked = [a for a in accesses if not a.unsafe]
        reported = set()  # lines with a finding already: one finding per line is enough
        for i, a in enumerate(checked):
            for b in checked[i:]:
                code = CODE_OF_KINDS.get(tuple(sorted((a.kind, b.kind))))
                if code is None or _flagged(a, b).loc.line in reported:
                    continue
                met = [] if not order.may_meet(a, b) or fastpath.disjoint(a, b, space, tids) \
                    else coverage.meetings(a, b, space)
                if met == []:  # apart
                    tally.fast += 1
                    continue
                tally.queries += 1
                error = _pair(code, a, b, space, budget, tally, met)
                if error is not None:
                    tally.errors.append(error)
                    reported.add(error.loc.line)
    return tally


def _flagged(a, b):
    """The access a finding about `a` and `b` points at (as `diagnose.race_error` does)."""
    if a.kind == b.kind == "write":
        return a
    if "atomic" in (a.kind, b.kind):
        return a if a.kind != "atomic" else b
    return a if a.kind == "read" else b


def _pair(code: str, a, b, space, budget: int, tally: Tally, met: list | None):
    """The finding about `a` and `b`, or None; `met`: where `coverage.meetings` found two
    threads meet (the solver's query at those points first: the example comes at once)."""
    outcome = solver.collide(a, b, space, budget, at=(met[0].first, met[0].second)) if met else None
    if outcome is None or outcome.status != "sat":
        outcome = solver.collide(a, b, space, budget)
        met = None
    if outcome.status == "unsat":
        return None
    if outcome.status == "unknown":
        return diagnose.unproven_error(a, b, outcome.reason)
    if outcome.unknowns:
        return diagnose.data_error(a, b, outcome)
    block = outcome.launch[1]
    if code == "VG211" and order.warp_of(outcome.threads[0], block) == order.warp_of(outcome.threads[1], block):
        if met:  # threads of one warp where the meetings had none of two warps
            return diagnose.race_error("VG212", a, b, outcome)
        tally.queries += 1
        apart = solver.collide(a, b, space, budget, apart=True)  # threads of two warps?
        outcome, code = (apart, code) if apart.status == "sat" else (outcome, "VG212")
    return diagnose.race_error(code, a, b, outcome)


# ----------------------------------------------------------------------------- VG213


def check_reads(trace, budget: int) -> Tally:
    space, tally = trace.space, Tally()
    if space.block is None:
        tally.unproven = [r for accesses in by_array(trace).values() for r in accesses
                          if r.kind == "read" and not r.unsafe]
        return tally
    scopes = Scopes(space)
    for accesses in by_array(trace).values():
        writes = [w for w in accesses if w.kind in ("write", "atomic")]
        for r in accesses:
            if r.kind != "read" or r.unsafe:
                continue
            # a proof counts the writes that come before the read in the same iteration
            # (`earlier`); a finding, those of any iteration of a loop around both too
            # (`before`: if none of them writes the element, nothing does before the read)
            earlier = [w for w in writes if w.seq < r.seq]
            before = [w for w in writes if w.seq < r.seq or set(w.loops) & set(r.loops)]
            if any(_covers(w, r, space, scopes) or _own(w, r, space) for w in earlier):
                tally.fast += 1
                continue
            certain = r.exact and not _unseen(r, space)
            verdict = coverage.decide(r, earlier, space)
            if verdict is not None and verdict.covered:
                tally.fast += 1
                continue
            if verdict is not None and verdict.exact and certain and earlier == before:
                tally.fast += 1
                block = tuple(space.block) + (1,) * (3 - len(space.block))
                outcome = Outcome("sat", (verdict.thread,), verdict.element, {}, ((1, 1, 1), block))
                tally.errors.append(diagnose.uninitialized_error(r, outcome))
                continue
            if any(_unseen(w, space) for w in before):  # a write the data steer may cover it
                tally.unproven.append(r)
                continue
            tally.queries += 1
            written, outcome = _never_written(r, before, space, min(budget, budgets.READ))
            if outcome is not None:
                tally.errors.append(diagnose.uninitialized_error(r, outcome, certain))
            elif not (written and all(w.exact for w in before)):
                tally.unproven.append(r)
    return tally


def _unseen(r, space) -> bool:
    """Whether the read's element or reachability depends on values the checker cannot see."""
    atoms = set().union(*(_depends(p, space) for p in r.indices))
    atoms |= _depends_formula(r.pc, space)
    return any(space.atoms[n].kind in _UNSEEN for n in atoms)


def _depends_formula(f: tuple, space) -> set:
    return set().union(*(_depends(Poly.atom(n), space) for n in formula_atoms(f, set())))


def _covers(w, r, space, scopes) -> bool:
    """Whether every thread of the block made `w` wherever `r` runs, together writing every
    element of the array: `w` indexes axis d by thread_id(a) with block_dim(a) >= shape[d],
    and its path condition is uniform and part of `r`'s."""
    mine = set(_conjuncts(r.pc))
    if not all(p in mine and at_least(scopes.of(p), "block") for p in _conjuncts(w.pc)):
        return False
    for axis, index in enumerate(w.indices):
        (mono, coef), = index.terms.items() if len(index.terms) == 1 else (((), 0),)
        if coef != 1 or len(mono) != 1 or not mono[0].startswith("tid"):
            return False
        extent = space.shape(w.array, axis).value
        if extent is None or space.block[int(mono[0][3])] < extent:
            return False
    return True


def _own(w, r, space) -> bool:
    """Whether the thread making `r` wrote the same element at `w` before, wherever `r`
    runs: the same index and a part of `r`'s path condition, once loop variables are
    `start + k*step` and the counters of the loops around `w` only are those around `r` only
    (`for b in range(t, n, B): buf[b] = ...` then `... = buf[b]` in a loop of the same range)."""
    if w.seq > r.seq:
        return False
    mine = [k for k in w.loops if k not in r.loops]
    theirs = [k for k in r.loops if k not in w.loops]
    if len(mine) != len(theirs):
        return False
    rename = {k: Poly.atom(j) for k, j in zip(mine, theirs)}
    same = [fastpath.expand(p, space).substitute(rename) == fastpath.expand(q, space)
            for p, q in zip(w.indices, r.indices)]
    if not all(same):
        return False
    parts = {_expand_formula(f, space, {}) for f in _conjuncts(r.pc)}
    return all(_expand_formula(f, space, rename) in parts for f in _conjuncts(w.pc))


def _conjuncts(pc: tuple) -> tuple:
    return pc[1:] if pc[0] == "and" else () if pc == ("true",) else (pc,)


def _expand_formula(f: tuple, space, rename: dict) -> tuple:
    if f[0] == "cmp":
        return ("cmp", f[1], fastpath.expand(f[2], space).substitute(rename))
    if f[0] in ("and", "or", "not"):
        return (f[0], *(_expand_formula(g, space, rename) for g in f[1:]))
    return f


def _precedes(w, r, inner, enc):
    """That the write `w` (of thread 1, encoded by `inner`) comes before the read `r` (of
    thread 2): in the loops around both, an earlier iteration, or the same one where `w`
    comes first in the body (`_never_written`'s writes precede `r` or share a loop)."""
    z3 = enc.z3
    shared = [k for k in r.loops if k in w.loops]  # outermost first
    result = z3.BoolVal(w.seq < r.seq, enc.ctx)
    for k in reversed(shared):
        mine, theirs = inner.atom(per_thread(k, "1")), enc.atom(per_thread(k, "2"))
        result = z3.Or(mine < theirs, z3.And(mine == theirs, result))
    return result


def _never_written(r, writes: list, space, budget: int) -> tuple:
    """(whether every element `r` may read is written first, a thread and an element it
    reads at `r` that no thread of its block writes before at any of `writes`, or None):
    (True, None) where z3 shows the first, which proves the read where the writes' paths
    are certain (no loop around them can be left early), (False, None) where it gave up."""
    z3 = budgets.z3()

    enc = _Encoder(space, z3)
    element = [enc.poly(p.rename("2")) for p in r.indices]
    facts = [enc.formula(rename_formula(r.pc, "2"))]
    facts += [z3.And(0 <= x, x < enc.poly(space.shape(r.array, d))) for d, x in enumerate(element)]
    facts += [enc.formula(rename_formula(f, "2")) for f in space.domain]
    facts += [enc.formula(f) for f in space.uniform_domain]
    ids = space.identity()
    for w in writes:
        inner = _Encoder(space, z3, enc.ctx)  # its own side conditions: they belong under the quantifier
        hit = [inner.formula(rename_formula(w.pc, "1"))]
        hit += [inner.poly(p.rename("1")) == x for p, x in zip(w.indices, element)]
        hit += [inner.formula(rename_formula(f, "1")) for f in space.domain]
        hit += [inner.atom(per_thread(n, "1")) == enc.atom(per_thread(n, "2")) for n in ids if n.startswith("bid")]
        hit.append(_precedes(w, r, inner, enc))
        bound = [term for name, term in inner.consts.items() if name.endswith("@1")]
        never = z3.Not(z3.And(*hit, *inner.side))
        facts.append(z3.ForAll(bound, never) if bound else never)
    result, s = enc.decide(facts, budget)
    if result != z3.sat:
        return result == z3.unsat, None
    value = readable(s, enc, ids, True, budget).int
    thread = {n: value(enc.atom(per_thread(n, "2"))) for n in ids}
    sizes = {space.atoms[n].label: value(enc.consts[n]) for n in sorted(enc.used)
             if space.atoms[n].kind in ("shape", "param")}
    launch = tuple(tuple(value(enc.poly(space.register(kind, axis))) for axis in range(3))
                   for kind in ("grid_dim", "block_dim"))
    return False, Outcome("sat", (thread,), tuple(value(x) for x in element), sizes, launch)
