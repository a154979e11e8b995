"""Loop invariants for the variables a loop carries: their scope and their interval.

Takes: the values a loop's variables have where the loop is entered and at its back edge
(from `symbolic`'s executor, which runs one arbitrary iteration). Gives:
- `Assumed(scope, lo, hi)`: what iteration k may assume of a variable at its start;
- `entry(value, known, dtype, scopes, space)`: the assumption the loop's entry value supports;
- `widen(assumed, value, dtype, ...)`: the assumption made weaker until it also covers the
  value at the back edge (intervals widen to the next of a few thresholds: the bounds of
  the entry value, -1, 0, 1 and the dtype's range, so the fixpoint is reached in a few
  passes);
- `refine(cond, atoms, space)`: the havocked atoms' intervals tightened by the loop
  condition, which holds in the body (`s < 256` bounds `s` there).
Guarantee: an assumption that `widen` leaves unchanged holds at entry and is kept by every
iteration, so it holds at the start of every iteration (the body runs under it), and, with
the values at the `break`s, after the loop. This keeps narrow index arithmetic on carried
variables (`t + s` with `s //= 2`, `t - offset` with `offset *= 2` while `offset < n`) from
looking like it could wrap.
"""
from __future__ import annotations

from typing import NamedTuple

from .algebra import INF, Poly, dtype_range
from .uniform import cap, meet


class Assumed(NamedTuple):
    scope: str
    lo: float = -INF
    hi: float = INF


def entry(value, known: bool, dtype, scopes, space) -> Assumed:
    """`known`: the variable has a value at entry (else it is assigned before any use)."""
    scope = cap(scopes.of(value)) if known else "block"
    if not dtype.is_int or not isinstance(value, Poly):
        return Assumed(scope, *(dtype_range(dtype) if dtype.is_int else (-INF, INF)))
    lo, hi = space.interval(value)
    rlo, rhi = dtype_range(dtype)
    return Assumed(scope, max(lo, rlo), min(hi, rhi))


def widen(assumed: Assumed, value, dtype, start: Assumed, scopes, space) -> Assumed:
    """`assumed`, weakened to cover `value` (`start`: the assumption at entry)."""
    scope = meet(assumed.scope, cap(scopes.of(value)))
    if not dtype.is_int:
        return Assumed(scope, assumed.lo, assumed.hi)
    rlo, rhi = dtype_range(dtype)
    lo, hi = space.interval(value) if isinstance(value, Poly) else (rlo, rhi)
    marks = sorted({rlo, rhi, -1, 0, 1, start.lo, start.hi} - {-INF, INF})
    if lo < assumed.lo:
        lo = max((m for m in marks if m <= lo), default=rlo)
    if hi > assumed.hi:
        hi = min((m for m in marks if m >= hi), default=rhi)
    return Assumed(scope, min(lo, assumed.lo), max(hi, assumed.hi))


def hull(assumed: Assumed, values, scopes, space) -> Assumed:
    """`assumed` together with the values a variable has where the loop is left early."""
    lo, hi, scope = assumed.lo, assumed.hi, assumed.scope
    for value in values:
        scope = meet(scope, cap(scopes.of(value)))
        vlo, vhi = space.interval(value) if isinstance(value, Poly) else (-INF, INF)
        lo, hi = min(lo, vlo), max(hi, vhi)
    return Assumed(scope, lo, hi)


def refine(cond: tuple, atoms: set, space) -> None:
    """Tighten the intervals of `atoms` (fresh per iteration) by the conjuncts of `cond`
    that bound one of them: `c*h + d op 0` with c = +-1."""
    for part in cond[1:] if cond[0] == "and" else (cond,):
        if part[0] != "cmp" or part[1] == "ne":
            continue
        terms = {m: c for m, c in part[2].terms.items() if m}
        if len(terms) != 1:
            continue
        (mono, c), = terms.items()
        if len(mono) != 1 or mono[0] not in atoms or c not in (1, -1):
            continue
        atom, d = space.atoms[mono[0]], part[2].terms.get((), 0)
        strict = 1 if part[1] == "lt" else 0
        if part[1] == "eq":  # h == -d*c
            atom.lo, atom.hi = max(atom.lo, -d * c), min(atom.hi, -d * c)
        elif c == 1:  # h + d < 0 (or <= 0)
            atom.hi = min(atom.hi, -d - strict)
        else:  # -h + d < 0 (or <= 0)
            atom.lo = max(atom.lo, d + strict)
