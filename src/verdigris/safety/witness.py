"""Races found by evaluating launches: a counterexample before the solver is asked.

Takes: two global accesses of one array (a tile kernel's `tiles.TileAccess`, not a plain
scatter against itself; or a SIMT kernel's `Ordered` access, in a kernel without barriers)
and their `Space`. Gives: `search(a, b, space) -> Outcome | None` (`solver.Outcome`):
"sat" with two distinct blocks (tile) or threads (SIMT) that reach `a` and `b` at one
element inside the array, in a launch it chose (the extents, parameters and grid, which
the message shows), or None where none of the launches tried has one (the solver then
decides, as it always did).

Why: the solver takes 1-2 s of CPU to find the example of a race in a grouped tile order
(divisions and remainders by run-time sizes), and 1-13 s for a race through a 64-bit
wrap-around of run-time values (a row width near 2**62, a group size times a count of
tiles that is 2**64): past a proof's time (VG205, "not proven", instead of VG202 with the
threads). The same races show in one launch of a few hundred, which evaluating every block
and the first threads of each launch at once (NumPy, `evaluate`) finds in milliseconds.

How: small launches first. Each value the two accesses depend on that nothing defines gets
a few candidates: an array extent 1, 0 (an empty array: a tile count of 0 divides by zero),
E, E + 1, 2E, 2E + 1, ... up to five tiles (E: the accesses' tile extent along that axis, 1
for a scalar access), a grid axis 2, 3, 4 or 8 blocks, a block axis the kernel was not
specialized on 1 to 64 threads, an integer parameter a few small values; every block of the
grid, the first nine threads of each block axis and its middle and last, the first
iterations of the loops around each access, and the first, second, middle and last lane of
each tile axis. The launches are tried smallest first, at most `LAUNCHES` of them and
`POINTS` points an access. Then, where the accesses depend on a value that wraps around
(a `wrap` atom), launches whose run-time values make a product in its exact value a power
of two that, times its coefficient and 2**j (j <= `SLACK`: a thread or block id), is the
modulus (`_wrapping`). The launch-domain facts (`Space.domain`, `uniform_domain`) that
involve these values must hold (those about the launch's values alone evaluated exactly);
the others are about values the accesses do not read.

Guarantees: it only refuses, never proves. A point the NumPy search finds (int64, which may
overflow) is evaluated again with exact integers, and returned only if it satisfies every
constraint of the solver's race query: both path conditions, the launch domain, each
atom's interval, indices equal and inside the array, two distinct threads (ids differ).
It gives up (None) on what it cannot evaluate exactly (loaded values, trip counts of
loops, truth values, lock-held accesses, block tickets, claims, barriers, shared memory).
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from .algebra import Poly, formula_atoms
from .encoder import _depends
from .evaluate import DEFINED, Evaluator, Opaque
from .solver import Outcome

POINTS = 1 << 19  # points of one access's search
LAUNCHES = 512  # launches (extents, parameters, grid) tried at most
TILES = 5  # an extent of up to this many tiles
GRIDS = (2, 3, 4, 8)  # blocks along a grid axis
BLOCKS = (1, 2, 4, 8, 32, 64)  # threads along a block axis the kernel was not specialized on
THREADS = 9  # the first threads of a block axis tried (and its middle and last)
TRIES = 8  # launches whose collision is checked exactly, at most (int64 may overflow)
SLACK = 6  # a wrap's product of run-time values may be 2**-SLACK of its modulus (`_wrapping`)
PARAMS = (1, 2, 3, 4, 0, 5, 8, 16, 17)  # an integer parameter's candidates
ITERATIONS = 6  # of each loop around an access

UNIFORM = ("shape", "size", "param")  # kinds of atoms with one value for the whole launch
PER_THREAD = ("thread", "lane", "counter")  # one value a thread (a tile block; lanes, iterations: a point)


def search(a, b, space) -> Outcome | None:
    if getattr(a, "locks", ()) or getattr(b, "locks", ()) or space.tickets or space.claims \
            or space.barriers or getattr(a, "memory", "global") != "global":
        return None
    try:
        return _search(a, b, space)
    except (Opaque, ArithmeticError, ValueError):  # (ValueError: a shift by a negative amount)
        return None


def _search(a, b, space) -> Outcome | None:
    accesses = (a,) if a is b else (a, b)
    needed = set(space.identity())
    for x in accesses:
        needed |= _base(x.indices, (x.pc,), space)
        needed |= _base([space.shape(x.array, d) for d in range(len(x.indices))], (), space)
    domain = _connected(space, needed)
    for f in domain:
        needed |= _base((), (f,), space)
    if any(space.atoms[n].kind not in UNIFORM + PER_THREAD for n in needed):
        raise Opaque("a value no launch chooses")
    uniform = sorted(n for n in needed if space.atoms[n].kind in UNIFORM)
    extents = _extents(a, b)
    small = _launches(space, uniform, extents, LAUNCHES)
    chosen = set(uniform)
    launch_facts = [f for f in domain if _base((), (f,), space) <= chosen]
    thread_facts = [f for f in domain if not any(f is g for g in launch_facts)]
    for launches in (small, lambda: _wrapping(accesses, space, uniform, extents)):
        rows = _holding(launches if isinstance(launches, list) else launches(), launch_facts, space, uniform)
        if not rows:
            continue
        found = [_points(x, space, uniform, _int64(rows), thread_facts) for x in accesses]
        for row, first, second in itertools.islice(_collisions(found, a is b), TRIES):
            outcome = _exact(a, b, space, dict(zip(uniform, rows[row])), (first, second), domain)
            if outcome is not None:
                return outcome
    return None


def _holding(rows: list, facts: list, space, uniform: list) -> list:
    """The launch rows that satisfy `facts` (about the launch's values alone), evaluated
    with exact integers: `G <= 2**63 - 1` overflows int64."""
    if not rows or not facts:
        return rows
    values = {n: np.array([r[k] for r in rows], object) for k, n in enumerate(uniform)}
    ev = Evaluator(space, values, exact=True)
    holds = functools.reduce(np.logical_and, [np.broadcast_to(ev.formula(f), len(rows)) for f in facts])
    return [r for r, ok in zip(rows, holds) if ok]


def _int64(rows: list) -> np.ndarray:
    """Launch rows (Python integers, a uint64 one up to 2**64) as int64 arrays: each value
    congruent to its own modulo 2**64, as two's complement holds it."""
    wrapped = [[v - 2**64 if v >= 2**63 else v for v in r] for r in rows]
    return np.array(wrapped, np.int64).reshape(len(rows), -1)


def _base(polys, formulas, space) -> set:
    """The atoms nothing defines that `polys` and `formulas` depend on."""
    names = {n for f in formulas for n in formula_atoms(f, set())}
    depends = set().union(*(_depends(p, space) for p in [*polys, *map(Poly.atom, names)]))
    return {n for n in depends if space.atoms[n].kind not in DEFINED}


def _connected(space, needed: set) -> list:
    """The launch-domain formulas that share a value with `needed` (through others): those
    that limit the values the search chooses."""
    formulas = [(f, _base((), (f,), space)) for f in space.domain + space.uniform_domain]
    chosen, names, grew = [], set(needed), True
    while grew:
        grew = False
        for f, atoms in formulas:
            if atoms & names and not any(f is g for g in chosen):
                chosen.append(f)
                names |= atoms
                grew = True
    return chosen


def _candidates(name: str, space, extents: dict) -> list:
    atom = space.atoms[name]
    if atom.kind == "shape":
        _, array, axis = name.rsplit(":", 2)
        e = extents.get((array, int(axis)), extents.get(int(axis), 1))
        values = [1, 0] + [v for m in range(1, TILES + 1) for v in (m * e, m * e + 1)]
    elif atom.kind == "size" and name.startswith("gdim"):
        values = GRIDS
    elif atom.kind == "size" and name.startswith("bdim"):
        values = BLOCKS
    elif atom.kind == "param":
        values = PARAMS
    else:
        raise Opaque(name)
    return [v for v in dict.fromkeys(values) if atom.lo <= v <= atom.hi]


def _extents(a, b) -> dict:
    """(array, axis) and axis -> the largest tile extent of the accesses along it."""
    extents = {}
    for x in (a, b):
        view = getattr(x, "view", None)
        for axis, e in enumerate(view.shape if view is not None else ()):
            extents[(x.array, axis)] = max(extents.get((x.array, axis), 1), e)
            extents[axis] = max(extents.get(axis, 1), e)
    return extents


def _launches(space, uniform: list, extents: dict, most: int, largest: bool = False) -> list:
    """Up to `most` value tuples of the uniform atoms, smallest first (`largest`: extents
    and grids largest first, parameters still smallest)."""
    choices = [_candidates(n, space, extents) for n in uniform]
    if largest:
        choices = [c if space.atoms[n].kind == "param" else sorted(c, reverse=True)
                   for n, c in zip(uniform, choices)]
    ranks = []
    for total in range(sum(len(c) - 1 for c in choices) + 1):
        ranks += sorted(_summing_to(total, [len(c) for c in choices]))
        if len(ranks) >= most:
            break
    return [tuple(c[i] for c, i in zip(choices, r)) for r in ranks[:most]]


def _wrapping(accesses, space, uniform: list, extents: dict) -> list:
    """Launches where a product of run-time values in an exact value that wraps around
    (a `wrap` atom's definition) is a power of two that, times 2**j (a per-thread factor,
    j <= SLACK, and the term's own coefficient), is the modulus: where a 32- or 64-bit
    index or condition wraps to meet another thread's. The other values: the first
    launches with extents and grids largest first (room for the threads that meet)."""
    depends = set().union(*(_depends(p, space) for x in accesses
                            for p in [*x.indices, *map(Poly.atom, formula_atoms(x.pc, set()))]))
    settings = {}
    for name in sorted(depends):
        atom = space.atoms[name]
        if atom.kind != "wrap":
            continue
        exact, modulus = atom.definition
        bits = int(modulus.value).bit_length() - 1
        for mono, coef in exact.terms.items():
            wide = [_chosen_by(f, space, uniform) for f in mono]
            wide = [w for w in wide if w is not None]
            if not wide or len(wide) > 2 or len({w[0] for w in wide}) < len(wide) or coef == 0:
                continue
            twos = (abs(coef) & -abs(coef)).bit_length() - 1
            for slack in range(SLACK + 1):
                for setting in _powers(wide, bits - twos - slack, space):
                    key = tuple(sorted(setting.items()))
                    settings[key] = min(slack, settings.get(key, slack))
    if not settings:
        return []
    settings = sorted(settings, key=settings.get)  # threads fewest apart first
    base = _launches(space, uniform, extents, max(1, LAUNCHES // len(settings)), largest=True)
    rows = {}
    for row in base:  # (each setting with the largest extents first: a failed one costs one try)
        for setting in settings:
            values = {**dict(zip(uniform, row)), **dict(setting)}
            rows.setdefault(tuple(values[n] for n in uniform), None)
    return list(rows)


def _chosen_by(factor: str, space, uniform: list):
    """(the uniform atom a launch chooses, its value for a `factor` of v) where `factor` is
    that atom or a count of an extent's tiles (`Space.extent_count`); None otherwise."""
    atom = space.atoms[factor]
    if factor in uniform and atom.kind in ("param", "shape"):
        return factor, lambda v: v
    count = space.extent_count(factor)
    if atom.kind == "floordiv" and count is not None:
        array, axis, c, d = count
        name = f"shape:{array}:{axis}"
        if name in uniform:
            return name, lambda v: v * d - c
    return None


def _powers(wide: list, total: int, space):
    """The settings of one or two chosen atoms whose factors are powers of two with
    exponents adding up to `total`, each within its atom's interval."""
    if total < 0:
        return
    splits = [(total,)] if len(wide) == 1 else [(e, total - e) for e in range(total + 1)]
    for exponents in splits:
        setting = {name: value(2**e) for (name, value), e in zip(wide, exponents)}
        if all(space.atoms[n].lo <= v <= space.atoms[n].hi for n, v in setting.items()):
            yield setting


def _summing_to(total: int, lengths: list):
    """Each tuple of positions in lists of `lengths` whose positions add up to `total`."""
    if not lengths:
        if total == 0:
            yield ()
        return
    for first in range(min(total, lengths[0] - 1) + 1):
        for rest in _summing_to(total - first, lengths[1:]):
            yield (first,) + rest


def _per_thread(x, space) -> dict:
    """The per-thread atoms of access `x` -> the values tried: every block of the largest
    grid tried, the first threads of a block and its middle and last, the first
    iterations, four lanes of each tile axis."""
    names = _base(x.indices, (x.pc,), space) | set(space.identity())
    values = {}
    for name in sorted(names):
        atom = space.atoms[name]
        top = int(atom.hi) if atom.kind in ("thread", "lane") else 0  # (a counter has none)
        if atom.kind == "thread" and name.startswith("bid"):
            tried = range(max(GRIDS))
        elif atom.kind == "thread":
            tried = sorted({*range(THREADS), top // 2, top})
        elif atom.kind == "lane":
            tried = sorted({0, 1, top // 2, top} & set(range(top + 1)))
        elif atom.kind == "counter":
            tried = range(ITERATIONS)
        elif atom.kind in UNIFORM:
            continue
        else:
            raise Opaque(name)
        values[name] = [v for v in tried if atom.lo <= v <= atom.hi]
    return values


def _points(x, space, uniform: list, launches: np.ndarray, domain: list):
    """(launch row, element indices, thread key, the per-thread values) of every point of
    access `x` that reaches an element inside the array, over the launches tried."""
    per_thread = _per_thread(x, space)
    names = list(per_thread)
    sizes = [len(launches)] + [len(per_thread[n]) for n in names]
    while np.prod(sizes, dtype=np.int64) > POINTS and sizes[0] > 1:
        sizes[0] //= 2
    if np.prod(sizes, dtype=np.int64) > POINTS:
        raise Opaque("too many threads to try")
    launches = launches[:sizes[0]]
    rank = len(sizes)
    grid = {n: launches[:, k].reshape((-1,) + (1,) * (rank - 1)) for k, n in enumerate(uniform)}
    for axis, n in enumerate(names, 1):
        shape = [1] * rank
        shape[axis] = sizes[axis]
        grid[n] = np.array(per_thread[n], np.int64).reshape(shape)
    with np.errstate(all="ignore"):
        ev = Evaluator(space, grid)
        reached = np.broadcast_to(ev.formula(x.pc), sizes)
        for f in domain:
            reached = reached & ev.formula(f)
        indices = [np.broadcast_to(ev.poly(p), sizes) for p in x.indices]
        for d, index in enumerate(indices):
            reached = reached & (0 <= index) & (index < ev.poly(space.shape(x.array, d)))
    at = np.nonzero(reached)
    thread = np.zeros(len(at[0]), np.int64)  # which thread (ids' positions, mixed radix)
    for n in space.identity():
        thread = thread * len(per_thread[n]) + at[names.index(n) + 1]
    return at[0], [index[at] for index in indices], thread, (names, per_thread, at)


def _collisions(found: list, alone: bool):
    """(launch row, point of the first access, point of the second) of an element two
    distinct threads reach, one for each launch that has one, smallest launch first."""
    launch = np.concatenate([f[0] for f in found])
    if not len(launch):
        return
    indices = [np.concatenate(parts) for parts in zip(*(f[1] for f in found))]
    thread = np.concatenate([f[2] for f in found])
    which = np.concatenate([np.full(len(f[0]), k) for k, f in enumerate(found)])
    row = np.concatenate([np.arange(len(f[0])) for f in found])
    order = np.lexsort(tuple(reversed([launch] + indices + [which])))
    launch, thread, which, row = launch[order], thread[order], which[order], row[order]
    indices = [i[order] for i in indices]
    change = np.zeros(len(launch), bool)
    change[0] = True
    for key in [launch] + indices:
        change[1:] |= key[1:] != key[:-1]
    starts = np.flatnonzero(change)
    big = np.iinfo(np.int64).max
    tag = np.zeros(len(which), np.int64) if alone else which
    lo = [np.minimum.reduceat(np.where(tag == k, thread, big), starts) for k in (0, 1 - alone)]
    hi = [np.maximum.reduceat(np.where(tag == k, thread, -1), starts) for k in (0, 1 - alone)]
    meet = (lo[0] < big) & (lo[1] < big) & ~((lo[0] == hi[0]) & (lo[1] == hi[1]) & (lo[0] == lo[1]))
    groups = np.flatnonzero(meet)
    firsts = groups[np.flatnonzero(np.diff(launch[starts[groups]], prepend=-1))]  # one a launch
    for g in firsts:
        pick = (lo[0][g], hi[1][g]) if lo[0][g] != hi[1][g] else (hi[0][g], lo[1][g])
        end = starts[g + 1] if g + 1 < len(starts) else len(launch)
        span = range(starts[g], end)
        first = next(i for i in span if tag[i] == 0 and thread[i] == pick[0])
        second = next(i for i in span if tag[i] == 1 - alone and thread[i] == pick[1])
        points = []
        for i in (first, second):
            names, per_thread, at = found[which[i]][3]
            points.append({n: per_thread[n][int(at[k + 1][row[i]])] for k, n in enumerate(names)})
        yield found[which[first]][0][row[first]], points[0], points[1]


def _exact(a, b, space, launch: dict, points: tuple, domain: list) -> Outcome | None:
    """The Outcome of threads `points` (per-thread values) of `launch` (uniform values) at `a`
    and `b`, if, evaluated with exact integers, they meet as the race query asks; else None."""
    elements, evaluators = [], []
    for x, point in zip((a, b), points):
        # (arrays of one element: NumPy turns the results of 0-d ones into int64 scalars)
        ev = Evaluator(space, {n: np.array([v], object) for n, v in {**launch, **point}.items()}, exact=True)
        index = tuple(_one(ev.poly(p)) for p in x.indices)
        shape = tuple(_one(ev.poly(space.shape(x.array, d))) for d in range(len(index)))
        if not (_one(ev.formula(x.pc)) and all(_one(ev.formula(f)) for f in domain)
                and all(0 <= i < n for i, n in zip(index, shape))):
            return None
        if not all(space.atoms[n].lo <= _one(v) <= space.atoms[n].hi
                   for values in (ev.grid, ev.memo) for n, v in values.items()):
            return None
        elements.append(index)
        evaluators.append(ev)
    ids = space.identity()
    if elements[0] != elements[1] or all(points[0].get(n, 0) == points[1].get(n, 0) for n in ids):
        return None
    wraps = sorted({space.atoms[n].label for ev in evaluators for n, v in ev.memo.items()
                    if space.atoms[n].kind == "wrap"
                    and _one(v) != _one(ev.poly(space.atoms[n].definition[0]))})
    sizes = {space.atoms[n].label: v for n, v in sorted(launch.items()) if space.atoms[n].kind != "size"}
    grid = tuple(launch.get(f"gdim{axis}", 1) for axis in range(3))
    block = space.block or tuple(launch.get(f"bdim{axis}", 1) for axis in range(3))
    return Outcome("sat", tuple({n: int(v) for n, v in p.items()} for p in points), elements[0],
                   sizes, (grid, tuple(block)), wraps=wraps)


def _one(value):
    """The Python value of an exact evaluation (an array of one element, or a constant)."""
    return np.asarray(value, object).reshape(-1)[0]
