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
  condition, which holds in the body (`s < 256` bounds `s` there; `narrow`: a power of
  two's closed form, and its exponent with it);
- `progression(back, current)` and `closed_form(...)`: a variable that each iteration
  steps by a constant (`j += 2`), halves or doubles (`s //= 2`, `offset *= 2`) is, at
  iteration k, `entry + k*d` (a loop variable), or the k-th term of its sequence instead
  of an unknown: then the two threads of a race query at different iterations see the
  values they really have. A power of two times or divided by a power of two (entering
  as a constant, or as a power of two of the loop around: a bitonic sort's `j = k // 2`)
  is a `pow2` atom (`intops`) of a loop variable exponent, so bit operations see a power
  of two where the loop condition excludes 0 (`j > 0`); other constants are spelled out.
  Either holds while the value stays in the assumed interval: no iteration past the last
  term (the last exponent in range) starts, so k is at most its index.
- `entered(cond, heads, entries, space)`: whether a loop surely runs its first iteration,
  by its condition with the values at entry (`j > 0` where `j = k // 2`, k >= 2);
- `trip_count(cond, counter, space)`: how many times a loop runs where its condition is a
  constant at each iteration k (`value_at` follows the closed forms' definitions), and
  `bound(...)`: what k < that count says of the counter and the variables in the body.
  Why closed forms and not unrolling: a tree's loops (`d = N >> 1; while d > 0: ...;
  d >>= 1` with `offset *= 2`) are already in closed form over k, so the known count only
  has to bound k, which bounds the index arithmetic (no wrap) and lets z3 split on the few
  values of k; the accesses stay one iteration's, so the race queries do not multiply
  with the trip count, and loops whose bounds are not constants keep their model.
Guarantee: an assumption that `widen` leaves unchanged holds at entry and is kept by every
iteration, so it holds at the start of every iteration (the body runs under it), and, with
the values at the `break`s, after the loop. A closed form is used only where the pass that
used it found the same progression at the back edge (the step cannot wrap: `symbolic`
turns a result that may wrap into a `wrap` atom, which is no progression). This keeps narrow index arithmetic on carried
variables (`t + s` with `s //= 2`, `t - offset` with `offset *= 2` while `offset < n`) from
looking like it could wrap. A trip count holds where the closed forms do: at the head of
every iteration that starts, and where the loop stops, each variable is within its
assumed interval, and there its spelled-out value is the one it has.
"""
from __future__ import annotations

from typing import NamedTuple

from .algebra import FALSE, INF, TRUE, Poly, compare, dtype_range
from .intops import is_power_of_two, log2, power_of_two
from .uniform import cap, meet


class Assumed(NamedTuple):
    scope: str
    lo: float = -INF
    hi: float = INF
    form: tuple = ()  # a progression (see `progression`): iteration k's value in closed form

MAX_TERMS = 64  # values of a geometric progression spelled out


def entry(value, known: bool, dtype, scopes, space) -> Assumed:
    """`known`: the variable has a value at entry (else it is assigned in the body before it
    is read, almost always: nothing is assumed, which spares the fixpoint a pass)."""
    scope = cap(scopes.of(value)) if known else "thread"
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
    """Tighten the intervals of `atoms` by the conjuncts of `cond` that bound one of them:
    `c*h + rest op 0` (op <, <= or ==; c a constant; `rest` free of h), with rest at its
    least (or most) over its interval: `t < rows * cols` keeps a while loop's `t` below
    the most `rows * cols` can be, and `vg.assume(1 <= G <= 64)` bounds G."""
    for part in cond[1:] if cond[0] == "and" else (cond,):
        if part[0] != "cmp" or part[1] == "ne":
            continue
        strict = 1 if part[1] == "lt" else 0
        for name in part[2].atoms() & atoms:
            mine = {m: c for m, c in part[2].terms.items() if name in m}
            if list(mine) != [(name,)]:
                continue
            c = mine[(name,)]
            rlo, rhi = space.interval(part[2] - Poly({(name,): c}))
            # c*h <= -strict - rest, at most -strict - rlo (and, == 0, at least -rhi)
            most, least = -strict - rlo, -rhi if part[1] == "eq" else -INF
            if c < 0:
                most, least, c = -least, -most, -c
            narrow(space.atoms[name], -INF if least == -INF else -(-int(least) // c),
                   INF if most == INF else int(most) // c, space)


def progression(back, current, space) -> tuple:
    """How the back-edge value follows from the value at the iteration's start: ("add", d)
    with d constant or the same for the whole launch, ("mul", c) or ("div", c) (floor
    division) with c >= 2 constant; () if none of these."""
    if not isinstance(back, Poly) or not isinstance(current, Poly) or not current.terms:
        return ()
    step = back - current
    if not any(name.endswith("@") for name in step.atoms()):
        return ("add", step)
    mono, coef = next(iter(current.terms.items()))
    ratio = back.terms.get(mono, 0) // coef
    if ratio >= 2 and back == current * Poly.const(ratio):
        return ("mul", ratio)
    atom, mine = space.atoms.get(_lone_atom(back)), space.atoms.get(_lone_atom(current))
    if atom is not None and atom.kind == "floordiv":
        divisor = atom.definition[1].value
        if divisor is not None and divisor >= 2 and atom.definition[0] == current:
            return ("div", divisor)
    if atom is not None and mine is not None and atom.kind == mine.kind == "pow2":
        # floor(2**e) // 2**m is floor(2**(e - m)) (`intops` so divides a power of two)
        fall = (mine.definition[0] - atom.definition[0]).value
        if fall is not None and fall >= 1:
            return ("div", 2**fall)
    return ()


def closed_form(form: tuple, entry, k: Poly, lo, hi, space, label: str):
    """Iteration k's value of a variable entering the loop as `entry`, or None."""
    if not isinstance(entry, Poly):
        return None
    if form[0] == "add":
        return space.fresh("loopvar", lo, hi, (entry, k, form[1]), label)
    if is_power_of_two(space, entry) and form[1] & (form[1] - 1) == 0:
        return _power_form(form, entry, k, lo, hi, space, label)
    v = entry.value
    if v is None:
        return None
    terms = []
    while lo <= v <= hi and len(terms) < MAX_TERMS:
        terms.append(v)
        v = v // form[1] if form[0] == "div" else v * form[1]
        if v == terms[-1]:
            break
    if not terms:
        return None
    if not lo <= v <= hi:  # past the last term the value leaves the invariant's interval
        _last_iteration(k, len(terms) - 1, space)
    value = Poly.const(terms[-1])
    for i in reversed(range(len(terms) - 1)):
        value = space.fresh("ite", min(terms[i:]), max(terms[i:]),
                            (compare("eq", k, Poly.const(i)), Poly.const(terms[i]), value))
    return value


def _power_form(form: tuple, entry: Poly, k: Poly, lo, hi, space, label: str) -> Poly:
    """A power of two times or divided by a power of two each iteration, at iteration k:
    floor(2**e) (a `pow2` atom) with e = log2(entry) +- k*log2(ratio) (a loop variable), so
    that bit operations see a power of two wherever it is not 0: the halving `j` of a
    bitonic sort's while loops, under `j > 0`, whose `j = k // 2` enters with a power of two
    of the loop around. The interval [lo, hi] holds at the head of every iteration that
    starts: so does the one it gives e (which bounds k)."""
    step = (form[1].bit_length() - 1) * (1 if form[0] == "mul" else -1)
    start = log2(space, entry)
    (slo, shi), (elo, ehi) = space.interval(start), _exponent_range(lo, hi)
    room = ehi - slo if step > 0 else shi - elo  # how far the exponent may go within [elo, ehi]
    if room != INF:
        _last_iteration(k, int(room) // abs(step), space)
    reach = space.interval(start + k * Poly.const(step))
    exponent = space.fresh("loopvar", max(elo, reach[0]), min(ehi, reach[1]), (start, k, Poly.const(step)), label)
    return power_of_two(space, exponent)


def _last_iteration(k: Poly, last, space) -> None:
    """Iteration `last` is the last whose head a closed form covers (past it the variable
    leaves its invariant's interval): no later iteration starts."""
    counter = space.atoms[next(iter(k.atoms()))]
    counter.hi = min(counter.hi, last)


def _exponent_range(lo, hi) -> tuple:
    """The exponents e for which floor(2**e) may be in [lo, hi] (hi >= 1)."""
    return ((int(lo) - 1).bit_length() if lo >= 1 else -INF, int(hi).bit_length() - 1 if hi != INF else INF)


def narrow(atom, lo, hi, space) -> None:
    """Tighten the interval of `atom`, made for one iteration of a loop (a havocked variable,
    or its closed form), to [lo, hi]; with it that of a closed form's exponent, which is
    made for it alone (`_power_form`)."""
    atom.lo, atom.hi = max(atom.lo, lo), min(atom.hi, hi)
    exponent = space.atoms.get(_lone_atom(atom.definition[0])) if atom.kind == "pow2" else None
    if exponent is not None and exponent.kind == "loopvar" and atom.hi >= 1:
        narrow(exponent, *_exponent_range(atom.lo, atom.hi), space)


# ----------------------------------------------------------------------------- trip counts


def trip_count(cond: tuple, counter: str, space) -> int | None:
    """How many iterations a loop whose condition at the head of iteration k (`counter`) is
    `cond` runs, where `cond` is a constant at each k (its variables are constants or closed
    forms in k: `d = 256; while d > 0: ... d >>= 1` runs 9) and fails before MAX_TERMS;
    else None. Sound where the closed forms are: at the head of each iteration that starts,
    and where the loop stops, every variable is in its invariant's interval, so the values
    spelled out there are the values it has (`value_at` refuses the others)."""
    for i in range(MAX_TERMS):
        if i > space.atoms[counter].hi:  # past the end of a closed form: no iteration starts
            return i
        holds = truth(cond, {counter: i}, space)
        if holds is None:
            return None
        if not holds:
            return i
    return None


def entered(cond: tuple, heads: dict, entries: dict, space) -> bool:
    """Whether a while loop surely runs its first iteration: its condition `cond` (at the
    head of iteration k, where the variables it carries have the values `heads`, whose
    intervals hold at every head) holds by the intervals of its terms where those have
    their values at entry (`entries`): `j > 0` with `j = k // 2` of a power of two k >= 2.
    (An inner loop that surely runs ends each iteration of the loop around it with its own
    last barrier.)"""
    at_entry = {atom: entries[n] for n, atom in ((n, _lone_atom(v)) for n, v in heads.items())
                if atom is not None and isinstance(entries.get(n), Poly)}
    parts = () if cond == TRUE else cond[1:] if cond[0] == "and" else (cond,)
    return all(part[0] == "cmp" and _holds(part[1], space.interval(part[2].substitute(at_entry)))
               for part in parts)


def _holds(op: str, interval: tuple) -> bool:
    """Whether `x op 0` holds for every x in `interval`."""
    lo, hi = interval
    return {"lt": hi < 0, "le": hi <= 0, "eq": lo == hi == 0, "ne": lo > 0 or hi < 0}[op]


def bound(cond: tuple, counter: str, count: int, heads, space) -> tuple:
    """`cond` for a loop known to run `count` times: FALSE if never; else the counter's
    interval and those of the values at the head of iteration k (`heads`) that follow from
    k < count (`offset` of a loop that doubles it 9 times is at most 256, not 2**30)."""
    if count == 0:
        return FALSE
    space.atoms[counter].hi = count - 1
    for name in filter(None, map(_lone_atom, heads)):
        values = [value_at(Poly.atom(name), {counter: i}, space) for i in range(count)]
        if None not in values:
            narrow(space.atoms[name], min(values), max(values), space)
    return cond


def truth(f: tuple, known: dict, space) -> bool | None:
    """Whether formula `f` holds where the atoms of `known` have those values, as `value_at`
    finds them; None where it cannot tell."""
    tag = f[0]
    if tag in ("true", "false"):
        return tag == "true"
    if tag == "cmp":
        v = value_at(f[2], known, space)
        return None if v is None else {"lt": v < 0, "le": v <= 0, "eq": v == 0, "ne": v != 0}[f[1]]
    if tag == "not":
        inner = truth(f[1], known, space)
        return None if inner is None else not inner
    if tag in ("and", "or"):
        parts = [truth(sub, known, space) for sub in f[1:]]
        decisive = tag == "or"  # one true part decides an or, one false part an and
        if decisive in parts:
            return decisive
        return None if None in parts else not decisive
    return None


def value_at(p: Poly, known: dict, space) -> int | None:
    """The constant `p` is where the atoms of `known` (name -> int) have those values,
    following the definitions of the atoms it is written in (if-then-else, loop variable,
    floor division, modulo); None where an atom is neither known nor so defined, or where
    its value would leave the atom's interval (which a step that wraps would do: the
    definition does not hold there)."""
    values = {}
    for name in p.atoms():
        v = known[name] if name in known else _defined(space.atoms[name], known, space)
        if v is None:
            return None
        values[name] = Poly.const(v)
    return p.substitute(values).value


def _lone_atom(p) -> str | None:
    """The atom `p` is, if it is one."""
    if isinstance(p, Poly) and len(p.terms) == 1:
        (mono, coef), = p.terms.items()
        if coef == 1 and len(mono) == 1:
            return mono[0]
    return None


def _defined(atom, known: dict, space) -> int | None:
    d = atom.definition
    if atom.kind == "ite":
        holds = truth(d[0], known, space)
        v = None if holds is None else value_at(d[1] if holds else d[2], known, space)
    elif atom.kind == "loopvar":
        v = value_at(d[0] + d[1] * d[2], known, space)
    elif atom.kind == "pow2":
        e = value_at(d[0], known, space)
        v = None if e is None else 2**e if e >= 0 else 0
    elif atom.kind == "table":
        i = value_at(d[0], known, space)
        v = d[1 + i].value if i is not None and 0 <= i < len(d) - 1 else None
    elif atom.kind in ("floordiv", "mod"):
        x, y = value_at(d[0], known, space), value_at(d[1], known, space)
        v = None if x is None or y is None else 0 if y == 0 else x // y if atom.kind == "floordiv" else x % y
    else:
        return None
    return v if v is not None and atom.lo <= v <= atom.hi else None
