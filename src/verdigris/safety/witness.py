"""Races found by evaluating small launches: a counterexample before the solver is asked.

Takes: two global accesses of one array of a tile kernel (`tiles.TileAccess`, not a plain
scatter against itself) and their `Space`. Gives: `search(a, b, space) -> Outcome | None`
(`solver.Outcome`): "sat" with two distinct blocks that reach `a` and `b` at one element
inside the array, in a launch of small sizes (the extents, parameters and grid it chose,
which the message shows), or None where none of the launches tried has one (the solver
then decides, as it always did).

Why: the solver takes 1-2 s of CPU to find the example of a race in a grouped tile order
(divisions and remainders by run-time sizes), past a proof's time on a loaded machine
(VG205, "not proven", instead of VG202 with the blocks); the same race shows in a launch of
one or two tiles and two blocks, which evaluating every block of a few hundred small
launches at once (NumPy, `evaluate`) finds in milliseconds.

How: each value the two accesses depend on that nothing defines gets a few candidates: an
array extent 1, 0 (an empty array: a tile count of 0 divides by zero), E, E + 1, 2E,
2E + 1, ... up to five tiles (E: the accesses' tile extent along that axis, 1 for a
scalar access), a grid axis 2, 3, 4 or 8 blocks, an integer
parameter a few small values; every block of the grid, the first iterations of the loops
around each access, and the first, second, middle and last lane of each tile axis. The
launches are tried smallest first, at most `LAUNCHES` of them and `POINTS` points an
access. The launch-domain facts (`Space.domain`, `uniform_domain`) that involve these
values must hold; the others are about values the accesses do not read.

Guarantees: it only refuses, never proves. A point the NumPy search finds (int64, which may
overflow) is evaluated again with exact integers, and returned only if it satisfies every
constraint of the solver's race query: both path conditions, the launch domain, each
atom's interval, indices equal and inside the array, two distinct blocks. It gives up
(None) on what it cannot evaluate exactly (loaded values, trip counts of loops, truth
values, lock-held accesses, block tickets, barriers).
"""
from __future__ import annotations

import numpy as np

from .algebra import Poly, formula_atoms
from .encoder import _depends
from .evaluate import DEFINED, Evaluator, Opaque
from .solver import Outcome

POINTS = 1 << 19  # points of one access's search
LAUNCHES = 512  # launches (extents, parameters, grid) tried at most
TILES = 5  # an extent of up to this many tiles
GRIDS = (2, 3, 4, 8)  # blocks along a grid axis
PARAMS = (1, 2, 3, 4, 0, 5, 8, 16, 17)  # an integer parameter's candidates
ITERATIONS = 6  # of each loop around an access

UNIFORM = ("shape", "size", "param")  # kinds of atoms with one value for the whole launch
PER_BLOCK = ("thread", "lane", "counter")  # kinds with one a block (lanes, iterations: a point)


def search(a, b, space) -> Outcome | None:
    if a.locks or b.locks or space.tickets or space.claims or space.barriers:
        return None
    try:
        return _search(a, b, space)
    except (Opaque, ArithmeticError, ValueError):  # (ValueError: a shift by a negative amount)
        return None


def _search(a, b, space) -> Outcome | None:
    accesses = (a,) if a is b else (a, b)
    needed = {n for n in space.identity() if n.startswith("bid")}
    for x in accesses:
        needed |= _base(x.indices, (x.pc,), space)
        needed |= _base([space.shape(x.array, d) for d in range(len(x.indices))], (), space)
    domain = _connected(space, needed)
    for f in domain:
        needed |= _base((), (f,), space)
    if any(space.atoms[n].kind not in UNIFORM + PER_BLOCK for n in needed):
        raise Opaque("a value no launch chooses")
    uniform = sorted(n for n in needed if space.atoms[n].kind in UNIFORM)
    launches = _launches(a, b, space, uniform)
    found = [_points(x, space, uniform, launches, domain) for x in accesses]
    hit = _collision(found, a is b)
    if hit is None:
        return None
    row, first, second = hit
    return _exact(a, b, space, dict(zip(uniform, map(int, launches[row]))), (first, second), domain)


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
    elif atom.kind == "param":
        values = PARAMS
    else:
        raise Opaque(name)
    return [v for v in dict.fromkeys(values) if atom.lo <= v <= atom.hi]


def _launches(a, b, space, uniform: list) -> np.ndarray:
    """Up to LAUNCHES value tuples of the uniform atoms, smallest first (one row each)."""
    extents = {}
    for x in (a, b):
        for axis, e in enumerate(x.view.shape if x.view is not None else ()):
            extents[(x.array, axis)] = max(extents.get((x.array, axis), 1), e)
            extents[axis] = max(extents.get(axis, 1), e)
    choices = [_candidates(n, space, extents) for n in uniform]
    ranks = []
    for total in range(sum(len(c) - 1 for c in choices) + 1):
        ranks += sorted(_summing_to(total, [len(c) for c in choices]))
        if len(ranks) >= LAUNCHES:
            break
    return np.array([[c[i] for c, i in zip(choices, r)] for r in ranks[:LAUNCHES]],
                    np.int64).reshape(-1, len(uniform))


def _summing_to(total: int, lengths: list):
    """Each tuple of positions in lists of `lengths` whose positions add up to `total`."""
    if not lengths:
        if total == 0:
            yield ()
        return
    for first in range(min(total, lengths[0] - 1) + 1):
        for rest in _summing_to(total - first, lengths[1:]):
            yield (first,) + rest


def _per_block(x, space) -> dict:
    """The per-block atoms of access `x` -> the values tried: every block of the largest
    grid tried, the first iterations, four lanes of each tile axis."""
    names = _base(x.indices, (x.pc,), space) | {n for n in space.identity() if n.startswith("bid")}
    values = {}
    for name in sorted(names):
        atom = space.atoms[name]
        if atom.kind == "thread" and name.startswith("bid"):
            tried = range(max(GRIDS))
        elif atom.kind == "lane":
            top = int(atom.hi)
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
    """(launch row, element indices, block key, the per-block values) of every point of
    access `x` that reaches an element inside the array, over the launches tried."""
    per_block = _per_block(x, space)
    names = list(per_block)
    sizes = [len(launches)] + [len(per_block[n]) for n in names]
    while np.prod(sizes, dtype=np.int64) > POINTS and sizes[0] > 1:
        sizes[0] //= 2
    launches = launches[:sizes[0]]
    rank = len(sizes)
    grid = {n: launches[:, k].reshape((-1,) + (1,) * (rank - 1)) for k, n in enumerate(uniform)}
    for axis, n in enumerate(names, 1):
        shape = [1] * rank
        shape[axis] = sizes[axis]
        grid[n] = np.array(per_block[n], np.int64).reshape(shape)
    with np.errstate(all="ignore"):
        ev = Evaluator(space, grid)
        reached = np.broadcast_to(ev.formula(x.pc), sizes)
        for f in domain:
            reached = reached & ev.formula(f)
        indices = [np.broadcast_to(ev.poly(p), sizes) for p in x.indices]
        for d, index in enumerate(indices):
            reached = reached & (0 <= index) & (index < ev.poly(space.shape(x.array, d)))
    at = np.nonzero(reached)
    block = np.zeros(len(at[0]), np.int64)
    for n in names:
        if n.startswith("bid"):
            block += np.asarray(per_block[n], np.int64)[at[names.index(n) + 1]] << (21 * int(n[3]))
    return at[0], [index[at] for index in indices], block, (names, per_block, at)


def _collision(found: list, alone: bool):
    """(launch row, point of the first access, point of the second) of the first element
    two distinct blocks reach, smallest launch first; None if there is none."""
    launch = np.concatenate([f[0] for f in found])
    if not len(launch):
        return None
    indices = [np.concatenate(parts) for parts in zip(*(f[1] for f in found))]
    block = np.concatenate([f[2] for f in found])
    which = np.concatenate([np.full(len(f[0]), k) for k, f in enumerate(found)])
    row = np.concatenate([np.arange(len(f[0])) for f in found])
    order = np.lexsort(tuple(reversed([launch] + indices + [which])))
    launch, block, which, row = launch[order], block[order], which[order], row[order]
    indices = [i[order] for i in indices]
    change = np.zeros(len(launch), bool)
    change[0] = True
    for key in [launch] + indices:
        change[1:] |= key[1:] != key[:-1]
    starts = np.flatnonzero(change)
    big = np.iinfo(np.int64).max
    tag = np.zeros(len(which), np.int64) if alone else which
    lo = [np.minimum.reduceat(np.where(tag == k, block, big), starts) for k in (0, 1 - alone)]
    hi = [np.maximum.reduceat(np.where(tag == k, block, -1), starts) for k in (0, 1 - alone)]
    meet = (lo[0] < big) & (lo[1] < big) & ~((lo[0] == hi[0]) & (lo[1] == hi[1]) & (lo[0] == lo[1]))
    groups = np.flatnonzero(meet)
    if not len(groups):
        return None
    g = groups[0]
    pick = (lo[0][g], hi[1][g]) if lo[0][g] != hi[1][g] else (hi[0][g], lo[1][g])
    end = starts[g + 1] if g + 1 < len(starts) else len(launch)
    span = range(starts[g], end)
    first = next(i for i in span if tag[i] == 0 and block[i] == pick[0])
    second = next(i for i in span if tag[i] == 1 - alone and block[i] == pick[1])
    points = []
    for i in (first, second):
        names, per_block, at = found[which[i]][3]
        points.append({n: per_block[n][int(at[k + 1][row[i]])] for k, n in enumerate(names)})
    return found[which[first]][0][row[first]], points[0], points[1]


def _exact(a, b, space, launch: dict, points: tuple, domain: list) -> Outcome | None:
    """The Outcome of blocks `points` (per-block values) of `launch` (uniform values) at `a`
    and `b`, if, evaluated with exact integers, they meet as the race query asks; else None."""
    elements, evaluators = [], []
    for x, point in zip((a, b), points):
        ev = Evaluator(space, {n: np.array(v, object) for n, v in {**launch, **point}.items()}, exact=True)
        index = tuple(int(ev.poly(p)) for p in x.indices)
        shape = tuple(int(ev.poly(space.shape(x.array, d))) for d in range(len(index)))
        if not (bool(ev.formula(x.pc)) and all(bool(ev.formula(f)) for f in domain)
                and all(0 <= i < n for i, n in zip(index, shape))):
            return None
        if not all(space.atoms[n].lo <= v <= space.atoms[n].hi
                   for values in (ev.grid, ev.memo) for n, v in values.items()):
            return None
        elements.append(index)
        evaluators.append(ev)
    ids = [n for n in space.identity() if n.startswith("bid")]
    if elements[0] != elements[1] or all(points[0].get(n, 0) == points[1].get(n, 0) for n in ids):
        return None
    wraps = sorted({space.atoms[n].label for ev in evaluators for n, v in ev.memo.items()
                    if space.atoms[n].kind == "wrap" and v != ev.poly(space.atoms[n].definition[0])})
    sizes = {space.atoms[n].label: v for n, v in sorted(launch.items()) if space.atoms[n].kind != "size"}
    grid = tuple(launch.get(f"gdim{axis}", 1) for axis in range(3))
    return Outcome("sat", tuple({n: int(v) for n, v in p.items()} for p in points), elements[0],
                   sizes, (grid, (1, 1, 1)), wraps=wraps)
