"""Which shared elements the threads of one block touch, by enumeration: the fast way to
prove shared accesses apart and to decide reads of shared memory nothing wrote (VG213),
when the block shape is known.

Takes: `symbolic.Ordered` accesses of one shared array, and their `Space`. Gives:
- `meetings(a, b, space) -> list | None`: [] when no element is touched by two different
  threads of the block at `a` and `b` after one barrier instance (the barrier and its
  iteration: each point's epochs evaluated; where they cannot be, at any iterations), so
  they cannot race; else a `Meeting` of two threads that may (of two warps where any
  are), or None (the accesses do not fit);
- `decide(read, writes, space) -> Verdict | None` for a read and the writes that may
  precede it: None when the accesses do not fit (an index depends on a size, a parameter,
  a loaded value, or a loop whose range is unknown; or the points are too many; or some
  element the read may touch is written only by writes whose paths were not all evaluated),
  else either "covered" (every element the read may touch is surely written: by writes
  whose whole paths were evaluated, in loops that cannot be left early), or an element no
  write may write, with a thread that reads it (`exact` when the read's whole path
  condition was evaluated, so the read really happens).

How: the points are every thread of one block (`thread_id` ranges from the block shape) and
every iteration of the loops an access (or its epochs) depends on (a loop counter's range
from its loop variables: a constant step, and the intervals the executor proved); the indices and
path conditions are evaluated over all points at once with NumPy (`evaluate`: derived
atoms through their definitions, with the IR's semantics). A path condition conjunct that
cannot be evaluated counts as true (more accesses: a proof that they are apart, or a
finding that nothing wrote an element, stays sound); for the read of `decide` it makes the
verdict not `exact`, and a write with one proves nothing covered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import order
from .algebra import INF, Poly
from .evaluate import DEFINED, Evaluator, Opaque

LIMIT = 1 << 18  # points per access


@dataclass
class Verdict:
    covered: bool
    thread: dict = field(default_factory=dict)  # {"tid0@": value, ...} of a reader
    element: tuple = ()
    exact: bool = False


def decide(read, writes: list, space) -> Verdict | None:
    shape = tuple(space.shape(read.array, d).value for d in range(len(read.indices)))
    if None in shape or math.prod(shape) > LIMIT:
        return None
    ranges = _counter_ranges(space)
    try:
        # what the writes surely write (their whole paths evaluated, in loops that cannot
        # be left early), and what they may write (conditions not evaluated count as true)
        surely, maybe = np.zeros(shape, bool), np.zeros(shape, bool)
        given = _uniform_parts(read, space)
        for w in writes:
            elements, reached, exact = _Points(space, ranges, w).elements(w, given)
            inside = reached & _within(elements, shape)
            cells = tuple(e[inside] for e in elements)
            maybe[cells] = True
            if exact and w.exact:
                surely[cells] = True
        points = _Points(space, ranges, read)
        elements, reached, exact = points.elements(read)
    except Opaque:
        return None
    inside = reached & _within(elements, shape)
    clipped = tuple(np.where(inside, e, 0) for e in elements)
    if not (inside & ~surely[clipped]).any():
        return Verdict(True)
    missing = inside & ~maybe[clipped]
    if not missing.any():
        return None
    at = np.unravel_index(int(np.flatnonzero(missing)[0]), missing.shape)
    thread = {n: int(np.broadcast_to(v, missing.shape)[at]) for n, v in points.grid.items()
              if n.startswith("tid")}
    return Verdict(False, thread, tuple(int(e[at]) for e in elements), exact)


@dataclass
class Meeting:
    """Two threads of a block at one element after one barrier instance: the point of the
    first access and of the second (thread ids and loop counters: atom name -> value)."""

    first: dict
    second: dict


def meetings(a, b, space) -> list | None:
    """Where two threads of a block touch one element at `a` and `b` after one barrier
    instance (the same barrier, at the same iteration of the loops around it: the accesses'
    epochs, evaluated at every point): [] where nowhere, which proves they do not race (the
    solver's query asks the same, with more facts that only rule pairs out), else one
    `Meeting` (of two threads of different warps where any meets so); where the epochs
    cannot be evaluated, [] where no element is touched by two threads at any iterations
    at all; None where neither is found (too many points, or opaque values). Conditions
    that cannot be evaluated count as true: a meeting may be one the solver rules out."""
    shape = tuple(space.shape(a.array, d).value for d in range(len(a.indices)))
    if None in shape or space.block is None:
        return None
    ranges = _counter_ranges(space)
    for epochs in (True, False):  # the epochs' points may be too many, or opaque
        barriers: dict = {}  # (barrier, iteration depth) -> its number in the keys
        try:
            touched = [_Touched(access, space, ranges, shape, barriers if epochs else None)
                       for access in (a, b)]
        except Opaque:
            continue
        found = _meeting(*touched)
        return [] if found is None else [found] if epochs else None
    return None


class _Touched:
    """`keys` and `threads`: a row per point of `access` that reaches an element inside the
    array, its element's linear index last; before it, where `barriers` is given (numbering
    the barriers of both accesses), the barrier the point comes after and that barrier's
    iteration, one row per epoch it may be in. `at`: each row's point (a flat index of the
    points' grid)."""

    def __init__(self, access, space, ranges: dict, shape: tuple, barriers: dict | None):
        points = self.points = _Points(space, ranges, access, every_thread=True, epochs=barriers is not None)
        elements, reached, _ = points.elements(access)
        inside = reached & _within(elements, shape)
        cell = np.ravel_multi_index(tuple(np.where(inside, e, 0) for e in elements), shape)
        thread = np.broadcast_to(points.thread(), inside.shape)
        flat = np.arange(inside.size).reshape(inside.shape)
        keys, threads, at = [], [], []
        alts = order.epochs(access, "block") if barriers is not None else (None,)
        for x in alts:
            holds, columns = inside, [cell]
            if x is not None:
                number = barriers.setdefault((x.barrier, len(x.iters)), len(barriers))
                holds = inside & points.condition(x.cond)
                columns = [np.full(inside.shape, number)] + [
                    np.broadcast_to(points.poly(p), inside.shape) for p in x.iters] + columns
            keys.append(np.stack([c[holds] for c in columns], axis=1))
            threads.append(thread[holds])
            at.append(flat[holds])
        self.keys = _padded(keys)
        self.threads, self.at = np.concatenate(threads), np.concatenate(at)

    def point(self, row: int) -> dict:
        """The thread ids and loop counters of row `row`'s point."""
        where = np.unravel_index(int(self.at[row]), self.points.shape)
        return {name: int(i) for name, i in zip(self.points.grid, where)}


def _padded(keys: list):
    width = max(k.shape[1] for k in keys)
    return np.concatenate([np.pad(k, ((0, 0), (0, width - k.shape[1]))) for k in keys])


def _meeting(a: _Touched, b: _Touched) -> Meeting | None:
    """Two points of `a` and `b` of different threads with one key, of different warps
    where any are; None where the points that share a key are all of one thread."""
    if not len(a.keys) or not len(b.keys):
        return None
    keys = _padded([a.keys, b.keys])
    side = np.r_[np.zeros(len(a.keys), np.int64), np.ones(len(b.keys), np.int64)]
    threads = np.concatenate([a.threads, b.threads])
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    met = [_mixed(side, group, ids) for ids in (threads, threads // 32)]  # (threads, warps)
    if not met[0].any():
        return None
    chosen = np.flatnonzero(met[1] if met[1].any() else met[0])[0]
    rows = np.flatnonzero(group == chosen)
    first = [r for r in rows if side[r] == 0]
    second = [r for r in rows if side[r] == 1]
    warps = met[1].any()
    i, j = next((i, j) for i in first for j in second
                if threads[i] != threads[j] and (not warps or threads[i] // 32 != threads[j] // 32))
    return Meeting(a.point(i), b.point(j - len(a.keys)))


def _mixed(side, group, ids):
    """Per key, whether points of both sides with different `ids` share it."""
    count = int(group.max()) + 1
    lo = np.full((2, count), np.iinfo(np.int64).max)
    hi = np.full((2, count), -1)
    np.minimum.at(lo, (side, group), ids)
    np.maximum.at(hi, (side, group), ids)
    both = (hi[0] >= 0) & (hi[1] >= 0)
    return both & ~((lo[0] == hi[0]) & (lo[1] == hi[1]) & (lo[0] == lo[1]))


def _within(elements, shape):
    return np.logical_and.reduce([(0 <= e) & (e < n) for e, n in zip(elements, shape)])


def _counter_ranges(space) -> dict:
    """counter -> how many iterations to enumerate: what its loop variables' intervals and
    constant steps allow (from the lowest start), else the length of a progression spelled
    out on it (past it, its values repeat the last one), unless another variable of that
    loop goes on changing without bound (the loop then runs past the spelled-out part)."""
    bounded, spelled, endless = {}, {}, set()
    for atom in space.atoms.values():
        if atom.kind == "loopvar":
            start, k, step = atom.definition
            counter = next(iter(k.atoms()), None)
            first, d = space.interval(start)[0 if (step.value or 0) > 0 else 1], step.value
            if counter is None or not d or INF in (abs(first), abs(atom.lo), abs(atom.hi)):
                endless |= {counter} - {None}
                continue
            count = max(int((atom.hi - first) // d + 1 if d > 0 else (atom.lo - first) // d + 1), 0)
            bounded[counter] = min(bounded.get(counter, count), count)
        elif atom.kind == "ite" and atom.definition[0][0] == "cmp" and atom.definition[0][1] == "eq":
            k = atom.definition[0][2]  # k - i == 0, a term of a progression
            names = [m[0] for m in k.terms if m]
            if len(names) == 1 and space.atoms[names[0]].kind == "counter":
                spelled[names[0]] = max(spelled.get(names[0], 0), 2 - k.terms.get((), 0))
    spelled = {c: n for c, n in spelled.items() if c not in endless}
    return {c: n for c, n in {**spelled, **bounded}.items() if n <= LIMIT}


def _conjuncts(pc: tuple) -> tuple:
    return pc[1:] if pc[0] == "and" else () if pc == ("true",) else (pc,)


class _Points(Evaluator):
    """Every thread of a block and every iteration of the loops an access depends on."""

    def __init__(self, space, ranges: dict, access, every_thread: bool = False, epochs: bool = False):
        """`every_thread`: a point per thread even where the access does not depend on it;
        `epochs`: points for every iteration its epochs' barrier iterations depend on."""
        super().__init__(space, {})
        countable = lambda name: name.startswith("tid") or name in ranges  # noqa: E731
        alts = order.epochs(access, "block") if epochs else ()
        names = set().union(*(self._free(p) for p in access.indices), *(self._free(p) for x in alts for p in x.iters))
        if every_thread:
            names |= {n for n in space.identity() if n.startswith("tid")}
        if not all(map(countable, names)):
            raise Opaque("an index")
        self.parts = _conjuncts(access.pc)
        # the others cannot be evaluated: `elements` and `condition` see that
        for part in self.parts + tuple(f for x in alts for f in _conjuncts(x.cond)):
            free = self._free_formula(part)
            if all(map(countable, free)) and not self._opaque_formula(part):
                names |= free
        names = sorted(names)
        sizes = [space.block[int(n[3])] if n.startswith("tid") else ranges[n] for n in names]
        if math.prod(sizes) > LIMIT:
            raise Opaque("too many points")
        axes = np.meshgrid(*(np.arange(n, dtype=np.int64) for n in sizes), indexing="ij", sparse=True)
        self.grid = dict(zip(names, axes))
        self.shape = tuple(sizes)

    def thread(self):
        """The linear index of each point's thread in its block."""
        index, stride = np.int64(0), 1
        for axis in range(3):
            index = index + stride * self.grid.get(f"tid{axis}@", np.int64(0))
            stride *= self.space.block[axis]
        return index

    def _free(self, p: Poly) -> set:
        """The thread ids and loop counters `p` depends on."""
        into = set()
        for name in p.atoms():
            atom = self.space.atoms[name]
            if atom.kind in DEFINED or atom.kind == "trips":  # (a trip count: of its iteration)
                for part in atom.definition:
                    into |= self._free(part) if isinstance(part, Poly) else self._free_formula(part)
            elif name.startswith("tid") or atom.kind == "counter":
                into.add(name)
        return into

    def _opaque(self, p: Poly) -> bool:
        """Whether `p` depends on anything but thread ids, loop counters and constants."""
        for name in p.atoms():
            atom = self.space.atoms[name]
            if atom.kind == "trips" and self.space.loops_counted.get(name) not in self.space.ranges:
                return True
            if atom.kind in DEFINED or atom.kind == "trips":
                if any(self._opaque(x) if isinstance(x, Poly) else self._opaque_formula(x)
                       for x in atom.definition):
                    return True
            elif not (name.startswith("tid") or atom.kind == "counter"):
                return True
        return False

    def _opaque_formula(self, f: tuple) -> bool:
        if f[0] == "cmp":
            return self._opaque(f[2])
        return any(map(self._opaque_formula, f[1:])) if f[0] in ("and", "or", "not") else f[0] == "bool"

    def _free_formula(self, f: tuple) -> set:
        if f[0] == "cmp":
            return self._free(f[2])
        return set().union(*(self._free_formula(g) for g in f[1:])) if f[0] in ("and", "or", "not") else set()

    def elements(self, access, given: frozenset = frozenset()):
        """(index arrays, where the path condition holds, whether all of it was evaluated);
        a conjunct that cannot be evaluated counts as true, and as evaluated where it is one
        of `given` (known to hold: see `_uniform_parts`)."""
        indices = [np.broadcast_to(self.poly(p), self.shape) for p in access.indices]
        reached, complete = np.ones(self.shape, bool), True
        for part in self.parts:
            try:
                reached = reached & self.formula(part)
            except Opaque:
                complete = complete and part in given
        return indices, reached, complete

    def condition(self, f: tuple):
        """Where the formula `f` holds, its conjuncts that cannot be evaluated counting as
        true."""
        holds = np.ones(self.shape, bool)
        for part in _conjuncts(f):
            try:
                holds = holds & self.formula(part)
            except Opaque:
                pass
        return holds


def _uniform_parts(read, space) -> frozenset:
    """The conjuncts of the read's path condition that are the same for every thread of its
    block (no thread id, no loaded value: sizes, parameters, block ids, loop counters, the
    trip counts of loops with barriers, which the divergence proofs make the block's, and
    functions of them). Where the read runs they hold, in its iteration, for every thread,
    so a write earlier in that iteration under the same conjunct surely made it (`decide`:
    `k0 < depth` around a tiled loop's stores and loads)."""
    def uniform(p: Poly) -> bool:
        for name in p.atoms():
            atom = space.atoms[name]
            if atom.kind in ("floordiv", "mod", "ite", "pow2", "loopvar"):  # functions of their parts
                if not all(uniform(x) if isinstance(x, Poly) else uniform_formula(x)
                           for x in atom.definition):
                    return False
            elif not (atom.kind in ("shape", "size", "param", "counter", "trips")
                      or atom.kind == "thread" and name.startswith("bid")):
                return False
        return True

    def uniform_formula(f: tuple) -> bool:
        if f[0] == "cmp":
            return uniform(f[2])
        return all(map(uniform_formula, f[1:])) if f[0] in ("and", "or", "not") else f[0] in ("true", "false")

    return frozenset(part for part in _conjuncts(read.pc) if uniform_formula(part))
