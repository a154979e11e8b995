"""Barrier intervals: which barrier each access may come after, for the two-thread queries.

Takes: what the executor (`symbolic`) sees along a path: the barriers it passes, the paths
it joins, the loops it enters and leaves. Gives: *epochs*, per kind ("grid":
grid_barrier(), "block": grid_barrier() and barrier(), "warp": all three and syncwarp()),
a tuple of `Alt`s: the barrier this thread passed last, with the iteration of each loop
around that barrier and the condition under which it was that one; `resolve` turns them
into plain alternatives once the whole kernel has run.

Why it is enough (GPUVerify's barrier intervals): once every barrier is proven uniform
(`diverge`), all threads of a block pass the same sequence of barrier instances, so two of
their accesses may run concurrently iff both come after the same barrier instance: the same
`Alt.barrier` at equal `iters` (with both conditions holding). Threads of one warp are also
ordered by syncwarp(), so their question uses the "warp" epochs.

Loops: in a loop that contains a barrier the executor runs one arbitrary iteration k.
Its first iteration starts where the loop was entered (the epochs at entry, under k == 0);
a later one where iteration k - 1 ended: the placeholder `Alt(("back", k), (k - 1,))`,
resolved at the end to the barriers that may end an iteration, at that iteration (or at any
earlier one, and the loop's entry, where an iteration may pass no barrier at all). After the
loop (trip count T, with k < T: a constant where the executor knows how many times the
loop runs, else a block-uniform atom): the entry if T == 0 (unless the loop surely runs
once: a `for` over a range that is never empty, or T a constant of at least 1: an
alternative whose condition is false is dropped), else the end of iteration T - 1, or the
barrier before a `break` in it. Where an iteration of an outer loop ends with an inner
loop, it ends in the inner loop's last iteration: the inner trip count of that outer
iteration (`Space.trip_count_then`; the solver knows a trip count as one function of the
block and the iteration of the loops around it), so the stages of a bitonic sort do not
meet. Where an iteration may pass no barrier, the one that ends iteration k is that of an
earlier iteration; where an iteration passes a barrier exactly when a chain of loops
inside it runs, down to one whose every iteration ends with a barrier (`passing_loops`:
each barrier that may end it is the last of such a chain, at any depth), that earlier
iteration is the last one that passed one (none after it up to k did: a quantifier over
the iterations, nested one per loop of the chain, over their trip counts), and the loop's
entry ends iteration k only where none up to k passed one. An
alternative's condition carried to another iteration is said of that iteration where it
mentions only loop counters, trip counts (of inner loops at any depth: their values then,
`Space.trip_count_then`) and values of the whole launch (an inner loop that ran no
iteration then); one that mentions other values of one iteration is dropped (a sound
over-approximation).
"""
from __future__ import annotations

from dataclasses import dataclass

from .algebra import FALSE, INF, TRUE, Poly, compare, conj, disj, formula_atoms

KINDS = ("grid", "block", "warp")  # a barrier of one kind is one of every narrower kind too


@dataclass(frozen=True)
class Alt:
    barrier: object  # "start", a Barrier node's id, or ("back", counter name)
    iters: tuple  # Polys: the iteration of each loop around it; for "back", (index,)
    cond: tuple = TRUE


START = {kind: (Alt("start", ()),) for kind in KINDS}


def passed(epochs: dict, scope: str, barrier, iters: tuple) -> dict:
    """The epochs after passing `barrier` (scope "grid", "block" or "warp") at iteration
    `iters`."""
    here = (Alt(barrier, iters),)
    return {kind: here if kind in narrower(scope) else epochs[kind] for kind in KINDS}


def narrower(scope: str) -> tuple:
    """The epoch kinds a barrier of `scope` starts anew: its own and every narrower one."""
    return KINDS[KINDS.index(scope):]


def merge(cond_a: tuple, a: dict, cond_b: tuple, b: dict) -> dict:
    """The epochs where the paths `a` (taken under `cond_a`) and `b` join."""
    return {kind: a[kind] if a[kind] == b[kind] else
            _union(_guard(a[kind], cond_a) + _guard(b[kind], cond_b)) for kind in KINDS}


def iteration(epochs: dict, kinds: frozenset, counter: str) -> dict:
    """The epochs at the start of iteration k (`counter`) of a loop whose body passes
    barriers of `kinds`."""
    k = Poly.atom(counter)
    out = dict(epochs)
    for kind in kinds:
        back = Alt(("back", counter), (k - Poly.const(1),), compare("ge", k, Poly.const(1)))
        out[kind] = _guard(epochs[kind], compare("eq", k, Poly.const(0))) + (back,)
    return out


def after(epochs: dict, kinds: frozenset, counter: str, trips: Poly, breaks: list, once: bool) -> dict:
    """The epochs after a loop (`epochs`: at its entry; `breaks`: the epochs of its
    `break`s, in terms of iteration k; `once`: its first iteration surely runs)."""
    out = dict(epochs)
    last = trips - Poly.const(1)
    for kind in kinds:
        never = () if once else _guard(epochs[kind], compare("eq", trips, Poly.const(0)))
        ended = (Alt(("back", counter), (last,), compare("ge", trips, Poly.const(1))),)
        broke = tuple(Alt(x.barrier, tuple(p.substitute({counter: last}) for p in x.iters))
                      for b in breaks for x in b[kind])
        out[kind] = _union(never + ended + broke)
    return out


def _guard(alts: tuple, cond: tuple) -> tuple:
    return tuple(Alt(x.barrier, x.iters, conj(x.cond, cond)) for x in alts)


def _union(alts) -> tuple:
    """One alternative per (barrier, iteration), their conditions or-ed; none for one whose
    condition is false (the entry of a loop known to run: not where it leaves)."""
    merged: dict = {}
    for x in alts:
        if x.cond == FALSE:
            continue
        key = (x.barrier, x.iters)
        merged[key] = disj(merged[key], x.cond) if key in merged else x.cond
    return tuple(Alt(b, i, c) for (b, i), c in merged.items())


def _then(name: str, around: set, mapping: dict, space) -> Poly:
    """The value the atom `name` of an inner loop's iteration took in the iteration that
    `mapping` gives of the loops around it (`around`: the counters of the loops around the
    one being resolved, which keep theirs): where it is the trip count of a loop in an
    iteration that those and `mapping` give, that loop's trip count then; else unknown."""
    atoms = set().union(*(p.atoms() for p in space.atoms[name].definition))
    if name in space.loops_counted and atoms <= around | set(mapping):
        return space.trip_count_then(name, mapping)
    return space.fresh("counter", 0, INF, label="an iteration")


def _carried(cond: tuple, around: set, mapping: dict, space) -> tuple:
    """`cond` (of an alternative) in the iteration that `mapping` gives, where it mentions
    only the counters of the loops around (`around`, unchanged), atoms `mapping` gives, the
    trip counts of inner loops in an iteration those give (an inner loop that ran no
    iteration then) and values of the whole launch; else true (dropped: a sound
    over-approximation)."""
    mapping = dict(mapping)
    for name in sorted(formula_atoms(cond, set()), key=lambda n: n in space.loops_counted):
        if name in mapping or name in around or "@" not in name and not space.atoms[name].definition:
            continue
        atoms = set().union(*(p.atoms() for p in space.atoms[name].definition))
        if name not in space.loops_counted or not atoms <= around | set(mapping):
            return TRUE
        mapping[name] = space.trip_count_then(name, mapping)
    return _substitute(cond, mapping)


def _substitute(f: tuple, mapping: dict) -> tuple:
    tag = f[0]
    if tag == "cmp":
        return ("cmp", f[1], f[2].substitute(mapping))
    if tag in ("and", "or", "not"):
        return (tag, *(_substitute(sub, mapping) for sub in f[1:]))
    if tag in ("passes", "quiet"):
        return (tag, f[1], f[2].substitute(mapping), f[3].substitute(mapping),
                tuple(p.substitute(mapping) for p in f[4]), f[5])
    return f


def passing_loops(ends: tuple, real: list, depth: int, space) -> tuple | None:
    """(the iteration of the loops around, the inner loops) where an iteration of a loop
    (at `depth`; `ends`: the barriers that may end one, `real` those passed in it) passes
    a barrier exactly when one of the loops in it runs an iteration that passes one, which
    the solver can say of any iteration: a trip count is one function of the block and the
    iteration. Each inner loop is (its trip count: a loop's name, or a constant; how its
    own iterations pass one, or None where each ends with a barrier), so an iteration
    passes one where, for some loop, every loop along the chain down to one whose every
    iteration ends with a barrier runs at least once (an inner loop's trip count then).

    Exactly: every barrier that may end it (`real`) is the last of such a loop, under a
    condition that says the loop ran one that passes (in the iteration that did); every
    other way to end it (no barrier passed) is under a condition that says none did, for
    every one of those loops (it ran no iteration, or none of its iterations passed one).
    None where it is not so (a barrier outside those loops, a path that skips one, a
    `break` in one: the alternative's condition says neither)."""
    here = tuple(real[0].iters[:depth + 1]) if real else ()
    inner: dict = {}  # trip count (Poly) -> how the loop's iterations pass one
    for y in real:
        inside = len(y.iters) > depth + 1 and y.iters[:depth + 1] == here
        found = _inner_loop(y, here, space) if inside else None
        if found is None or inner.get(found[0], found[1]) != found[1]:
            return None
        inner[found[0]] = found[1]
    for z in ends:
        if z not in real and not all(_implies(z.cond, _ran_none(trips, how, here))
                                     for trips, how in inner.items()):
            return None
    loops = tuple(sorted(((_loop(trips, space), how) for trips, how in inner.items()), key=repr))
    return (here[:depth], loops) if loops and len({name for name, _ in loops}) == len(loops) else None


def _inner_loop(y: Alt, here: tuple, space) -> tuple | None:
    """(the trip count, how its iterations pass a barrier) of the loop right inside the
    iteration `here` whose last barrier `y` is, where `y.cond` says that loop ran one
    that passes: a loop whose every iteration ends with a barrier (`y` in its last
    iteration, under trip count >= 1), or one whose iterations `passing_loops` knows
    (`y` in an iteration that passes one, before the trip count). None where not so."""
    at = y.iters[len(here)]
    last = at + Poly.const(1)
    if _counted(last, here, space) and _implies(y.cond, (compare("ge", last, Poly.const(1)),)):
        return last, None
    for f in _literals(y.cond):
        if f[0] == "quiet" and f[2] == at and tuple(f[4]) == here:
            trips = f[3] + Poly.const(1)
            ran = (("passes", f[1], at, at, f[4], f[5]),), (compare("le", at, f[3]),)
            if (_counted(trips, here, space) or trips.value is not None) and all(
                    _implies(y.cond, lit) for lit in ran):
                return trips, f[5]
    return None


def _ran_none(trips: Poly, how, here: tuple) -> tuple:
    """The literals that say the inner loop counted by `trips` passed no barrier in the
    iteration `here`: it ran no iteration, or (`how`) none of those it ran passed one."""
    none_ran = compare("eq", trips, Poly.const(0))
    quiet = ("quiet", "", Poly.const(-1), trips - Poly.const(1), here, how)
    return (none_ran,) if how is None else (none_ran, quiet)


def _counted(trips: Poly, here: tuple, space) -> bool:
    """Whether `trips` is the trip count atom of a loop in the iteration `here`."""
    name = next(iter(trips.atoms()), None)
    return name is not None and trips == Poly.atom(name) and name in space.loops_counted \
        and space.atoms[name].definition == here


def _loop(trips: Poly, space):
    """The loop `trips` counts (its name), or its constant trip count."""
    return trips.value if trips.value is not None else space.loops_counted[next(iter(trips.atoms()))]


def _literals(f: tuple):
    """The literals of formula `f` (under its and/or)."""
    if f[0] in ("and", "or"):
        for sub in f[1:]:
            yield from _literals(sub)
    else:
        yield f


def _implies(f: tuple, literals: tuple) -> bool:
    """Whether `f` surely implies one of `literals`, seen in its and/or structure alone."""
    if f in literals:
        return True
    if f[0] == "and":
        return any(_implies(sub, literals) for sub in f[1:])
    return f[0] == "or" and all(_implies(sub, literals) for sub in f[1:])


def is_back(x: Alt) -> bool:
    return isinstance(x.barrier, tuple)


@dataclass
class Loop:
    """What `resolve` needs of a loop that passes barriers."""

    depth: int  # the number of loops around it (its counter's position in `iters`)
    entry: dict  # epochs where the loop was entered
    end: dict  # epochs where an iteration ends (the end of the body, or a `continue`)


def resolve(alts: tuple, kind: str, loops: dict, space, active: frozenset = frozenset()) -> tuple:
    """`alts` with every ("back", k) placeholder replaced by the barriers that may end
    iteration `index` of that loop (`loops`: counter name -> `Loop`). Placeholders of the
    loops in `active` (being resolved further up) are kept."""
    out = []
    for x in alts:
        if not is_back(x) or x.barrier[1] in active:
            out.append(x)
            continue
        counter, index = x.barrier[1], x.iters[0]
        loop = loops[counter]
        ends = resolve(loop.end[kind], kind, loops, space, active | {counter})
        mine = Poly.atom(counter)
        real = [y for y in ends if not is_back(y) and y.barrier != "start"
                and len(y.iters) > loop.depth and y.iters[loop.depth] == mine]
        exists = compare("ge", index, Poly.const(0))
        at, facts = index, (exists,)
        if len(real) < len(ends):  # an iteration may pass no barrier: any earlier one ended it
            at = space.fresh("counter", 0, INF, label="an earlier iteration")
            facts = (exists, compare("le", at, index))
            entered = conj(x.cond, exists)
            known = passing_loops(ends, real, loop.depth, space)
            if known:  # `at` is the last iteration that passes one, or none did (the entry)
                facts += (("passes", "", at, at, *known), ("quiet", "", at, index, *known))
                entered = conj(entered, ("quiet", "", Poly.const(-1), index, *known))
            out.extend(resolve(_guard(loop.entry[kind], entered), kind, loops, space, active))
        for y in real:
            mapping = {counter: at}
            around = set().union(*(p.atoms() for p in y.iters[:loop.depth]))
            for p in y.iters[loop.depth + 1:]:  # inner loops: their iteration then is unknown,
                for name in sorted(p.atoms()):  # but for the last one (their trip count then)
                    mapping.setdefault(name, _then(name, around, mapping, space))
            out.append(Alt(y.barrier, tuple(p.substitute(mapping) for p in y.iters),
                           conj(x.cond, *facts, _carried(y.cond, around, mapping, space))))
    return _union(out)
