"""The algebra of the race checker: integer polynomials over atoms, formulas, and the
`Space` of atoms one analysis works in.

Takes: nothing. Gives: `Poly` (sums of integer multiples of products of atoms, with
`substitute`), formulas (tuples: ("true",), ("false",), ("cmp", op, poly) meaning `poly op 0`
with op in lt/le/eq/ne, ("and", ...), ("or", ...), ("not", f), ("bool", atom)) and their
constructors, with `relative` and `joined` for path conditions where paths part and meet,
`Atom` and `Space`: every atom's kind, interval, definition and label, the
launch-domain constraints, the launch registers (`register`), static shapes of shared
arrays, loops' trip counts (`trip_count`, and `trip_count_then` for another iteration of
the loops around), and for atoms that are equal across threads of a warp or block, their
*scope* (see `uniform`).

Atom names: a per-thread atom ends with `@` (thread and block ids, unknowns, loop counters;
renamed `@1`/`@2` for the two threads of a query); the others are shared by every thread of
the launch (`gdim0`, `bdim0`, `shape:out:0`, `param:n`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import types as T
from ..ir.limits import MAX_AXIS_THREADS, MAX_ELEMENTS, MAX_EXTENT, MODEL  # launches past these are refused

INF = math.inf
MAX_BLOCK = MODEL.block_threads
MAX_GRID = MODEL.grid
AXES = "xyz"


# ----------------------------------------------------------------------------- polynomials


class Poly:
    """An integer polynomial: {monomial (sorted tuple of atom names): coefficient}."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict):
        self.terms = terms  # no zero coefficients

    @classmethod
    def const(cls, value: int) -> "Poly":
        return cls({(): value} if value else {})

    @classmethod
    def atom(cls, name: str) -> "Poly":
        return cls({(name,): 1})

    def __add__(self, other: "Poly") -> "Poly":
        terms = dict(self.terms)
        for mono, coef in other.terms.items():
            total = terms.get(mono, 0) + coef
            if total:
                terms[mono] = total
            else:
                terms.pop(mono, None)
        return Poly(terms)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        result = Poly({})
        for m1, c1 in self.terms.items():
            result = result + Poly({tuple(sorted(m1 + m2)): c1 * c2 for m2, c2 in other.terms.items()})
        return result

    @property
    def value(self):
        """The constant this polynomial is, or None."""
        if any(self.terms.keys() - {()}):
            return None
        return self.terms.get((), 0)

    def atoms(self) -> set:
        return {a for mono in self.terms for a in mono}

    def substitute(self, mapping: dict) -> "Poly":
        """This polynomial with the atoms named in `mapping` replaced by its polynomials."""
        result = Poly({})
        for mono, coef in self.terms.items():
            term = Poly.const(coef)
            for name in mono:
                term = term * mapping.get(name, Poly.atom(name))
            result = result + term
        return result

    def rename(self, suffix: str) -> "Poly":
        return Poly({tuple(sorted(per_thread(a, suffix) for a in m)): c for m, c in self.terms.items()})

    def __eq__(self, other) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __repr__(self) -> str:
        parts = [("*".join([str(c)] * (c != 1 or not m) + list(m))) for m, c in sorted(self.terms.items())]
        return " + ".join(parts) or "0"


def per_thread(name: str, suffix: str) -> str:
    """The atom `name` of thread `suffix` ("1", "2"); shared atoms are unchanged."""
    return name + suffix if name.endswith("@") else name


def generic(name: str) -> str:
    """The atom that `name` is a thread's copy of (`per_thread`); other names unchanged."""
    return name[:-1] if name[-1:] in ("1", "2") and name[:-1].endswith("@") else name


# ----------------------------------------------------------------------------- formulas

TRUE, FALSE = ("true",), ("false",)
_NEGATED = {"lt": ("le", -1), "le": ("lt", -1), "gt": ("lt", -1), "ge": ("le", -1)}


def compare(op: str, lhs: Poly, rhs: Poly) -> tuple:
    """`lhs op rhs` as ("cmp", op, poly) with op in lt/le/eq/ne (gt/ge flipped)."""
    poly = lhs - rhs
    if op in ("gt", "ge"):
        op, poly = ("lt" if op == "gt" else "le"), -poly
    value = poly.value
    if value is not None:
        holds = {"lt": value < 0, "le": value <= 0, "eq": value == 0, "ne": value != 0}[op]
        return TRUE if holds else FALSE
    return ("cmp", op, poly)


def conj(*parts) -> tuple:
    items = []
    for p in parts:
        if p == FALSE:
            return FALSE
        if p != TRUE:
            items.extend(p[1:] if p[0] == "and" else (p,))
    return TRUE if not items else items[0] if len(items) == 1 else ("and", *items)


def disj(*parts) -> tuple:
    items = []
    for p in parts:
        if p == TRUE:
            return TRUE
        if p != FALSE:
            items.extend(p[1:] if p[0] == "or" else (p,))
    return FALSE if not items else items[0] if len(items) == 1 else ("or", *items)


def neg(f: tuple) -> tuple:
    if f in (TRUE, FALSE):
        return FALSE if f == TRUE else TRUE
    return f[1] if f[0] == "not" else ("not", f)


def formula_atoms(f: tuple, into: set) -> set:
    tag = f[0]
    if tag == "cmp":
        into |= f[2].atoms()
    elif tag == "bool":
        into.add(f[1])
    elif tag in ("and", "or", "not"):
        for sub in f[1:]:
            formula_atoms(sub, into)
    elif tag in ("passes", "quiet"):  # (tag, suffix, after, index, outer iteration, loops): `barriers`
        for p in (f[2], f[3], *f[4]):
            into |= p.atoms()
    return into


def rename_formula(f: tuple, suffix: str) -> tuple:
    tag = f[0]
    if tag == "cmp":
        return ("cmp", f[1], f[2].rename(suffix))
    if tag == "bool":
        return ("bool", per_thread(f[1], suffix))
    if tag in ("and", "or", "not"):
        return (tag, *(rename_formula(sub, suffix) for sub in f[1:]))
    if tag in ("passes", "quiet"):
        return (tag, suffix, f[2].rename(suffix), f[3].rename(suffix),
                tuple(p.rename(suffix) for p in f[4]), f[5])
    return f


def _since(pc: tuple, base: tuple):
    """`pc` without the conjuncts of `base` it starts with, or None if it does not."""
    if pc == base or base == TRUE:
        return TRUE if pc == base else pc
    items = base[1:] if base[0] == "and" else (base,)
    return conj(*pc[1 + len(items):]) if pc[0] == "and" and pc[1:1 + len(items)] == items else None


def relative(pc: tuple, base: tuple) -> tuple:
    """The condition of the path `pc` since it parted from others at `base` (else all of it)."""
    rest = _since(pc, base)
    return pc if rest is None else rest


def joined(a: tuple, b: tuple, base: tuple) -> tuple:
    """The path condition where paths `a` and `b`, parted at `base`, meet again
    (`if c:` and its else meet at `base`)."""
    ra, rb = _since(a, base), _since(b, base)
    if ra is None or rb is None:
        return disj(a, b)
    return base if ra == neg(rb) else conj(base, disj(ra, rb))


# ----------------------------------------------------------------------------- atoms


@dataclass
class Atom:
    name: str
    kind: str  # thread size param shape unknown counter trips ite floordiv mod loopvar wrap pow2 rshift bool
    # ticket (a block's) claim (a thread's ticket, `tickets`) table (a tuple constant's entry)
    lo: float = -INF
    hi: float = INF
    # ite: (cond, a, b); floordiv/mod: (x, y); loopvar: (start, k, step); wrap: (x, modulus),
    # x less a multiple of the modulus, in [lo, hi]; pow2 (floor(2**e), 0 for e < 0): (e,);
    # rshift (x >> e): (x, e); table: (index, value 0, value 1, ...); trips: the counters of the loops around the loop it counts
    definition: tuple = ()
    label: str = ""  # what a user calls it ("out.shape[0]", "idx[...]")


def _mul(a, b):
    return 0 if a == 0 or b == 0 else a * b


def _imul(x: tuple, y: tuple) -> tuple:
    products = [_mul(a, b) for a in x for b in y]
    return min(products), max(products)


@dataclass
class Space:
    """The atoms of one analysis, and the launch-domain constraints between them."""

    block: tuple | None  # the specialized block shape, or None
    unit_grid_axes: tuple
    unit_block_axes: tuple
    atoms: dict = field(default_factory=dict)
    domain: list = field(default_factory=list)  # per-thread formulas (with @ atoms)
    uniform_domain: list = field(default_factory=list)
    counter: int = 0
    static_shapes: dict = field(default_factory=dict)  # shared array -> shape (None: dynamic)
    scopes: dict = field(default_factory=dict)  # per-thread atom -> (scope, loop counters)
    barriers: frozenset = frozenset()  # the scopes of the kernel's barriers ("grid", "block", "warp")
    tickets: dict = field(default_factory=dict)  # ticket atom -> its counter (`block_ticket`)
    claims: dict = field(default_factory=dict)  # claim atom -> (counter, indices, memory, step) (`tickets`)
    made: dict = field(default_factory=dict)  # (kind, definition) -> its atom (`defined`)
    loops_counted: dict = field(default_factory=dict)  # trip count atom -> the loop's (`trip_count`)
    ranges: dict = field(default_factory=dict)  # a loop's trip count atom -> its range (`ranged`)
    assumed: list = field(default_factory=list)  # formulas of the kernel's `vg.assume`s (also in domain)

    def add(self, atom: Atom) -> Poly:
        self.atoms.setdefault(atom.name, atom)
        return Poly.atom(atom.name)

    def fresh(self, kind: str, lo=-INF, hi=INF, definition=(), label="") -> Poly:
        self.counter += 1
        return self.add(Atom(f"{kind}{self.counter}@", kind, lo, hi, definition, label))

    def defined(self, kind: str, lo, hi, definition: tuple) -> Poly:
        """An atom of `kind` defined by `definition` (a function of it: `floordiv`, `mod`):
        the one made before for the same definition, so that a kernel computing
        `pid % groups` twice gives the solver one division, not two."""
        key = (kind, definition)
        if key not in self.made:
            self.made[key] = self.fresh(kind, lo, hi, definition)
        return self.made[key]

    def fresh_bool(self, label="") -> tuple:
        self.counter += 1
        name = f"b{self.counter}@"
        self.atoms[name] = Atom(name, "bool", label=label)
        return ("bool", name)

    def trip_count(self, iteration: tuple, once: bool, label: str, most: float = INF) -> Poly:
        """The trip count of a loop in the iteration `iteration` (counter names) of the
        loops around it: block-uniform, at least 1 if the loop surely runs `once`, at most
        `most`."""
        trips = self.fresh("trips", 1 if once else 0, most, tuple(map(Poly.atom, iteration)), label)
        name = next(iter(trips.atoms()))
        self.scopes[name] = ("block", iteration)
        self.loops_counted[name] = name
        return trips

    def ranged(self, trips: Poly, start: Poly, stop: Poly, step: int) -> None:
        """That the loop counted by `trips` (a `trip_count`) runs exactly the iterations of
        `range(start, stop, step)` (a `for` loop nothing leaves early; `start` and `stop`
        as its iteration of the loops around it sees them): the solver then knows its trip
        count in every iteration, not only that it is at least the body's counter."""
        name = next(iter(trips.atoms()), None)
        if name in self.loops_counted and step != 0:
            self.ranges[name] = (start, stop, step)

    def trip_count_then(self, name: str, mapping: dict) -> Poly:
        """The trip count atom `name` of a loop, in the iteration of the loops around it
        that `mapping` (counter -> Poly) gives: the solver knows both as one function of the
        block and the iteration."""
        atom = self.atoms[name]
        iteration = tuple(p.substitute(mapping) for p in atom.definition)
        then = self.fresh("trips", atom.lo, atom.hi, iteration, atom.label)
        self.loops_counted[next(iter(then.atoms()))] = self.loops_counted[name]
        return then

    def interval(self, p: Poly) -> tuple:
        lo = hi = 0
        terms = dict(p.terms)
        for axis in range(3):
            # c * (block_id(a) * block_dim(a) + thread_id(a)), the thread tid's global id on
            # the axis, is below c * grid_dim(a) * block_dim(a) <= c * MAX_AXIS_THREADS:
            # a launch guarantee that the interval of each term apart cannot see
            coef = terms.pop(tuple(sorted((f"bdim{axis}", f"bid{axis}@"))), None)
            if coef is not None:
                if terms.get((f"tid{axis}@",)) == coef:
                    del terms[(f"tid{axis}@",)]
                lo, hi = (x + y for x, y in zip((lo, hi), _imul((coef, coef), (0, MAX_AXIS_THREADS - 1))))
        for mono, coef in terms.items():
            m = (coef, coef)
            factors, joint = self.tiles_of_one_array(_merge_axis_products(mono))
            for bound in joint:
                m = _imul(m, bound)
            for name in factors:
                m = _imul(m, self.bounds(name))
            lo, hi = lo + m[0], hi + m[1]
        return lo, hi

    def tiles_of_one_array(self, factors: list) -> tuple:
        """(the other factors, the bounds of products) of a monomial's factors, where two or
        more are counts along distinct axes of one array (`x.shape[k]`, or
        `(x.shape[k] + c) // d`, the number of tiles along k): their product is below the
        array's elements, not the product of each one's bound (`rows * cols` of a
        persistent loop over a matrix's tiles fits in int64)."""
        by_array: dict = {}
        for name in factors:
            count = self.extent_count(name) if factors.count(name) == 1 else None
            if count is not None:
                by_array.setdefault(count[0], {}).setdefault(count[1], (name, count[2], count[3]))
        joint, taken = [], set()
        for counts in by_array.values():
            if len(counts) < 2:
                continue
            parts = list(counts.values())
            taken.update(name for name, _, _ in parts)
            most = 0
            for subset in range(1 << len(parts)):  # the product of (shape + c) over the axes
                chosen = [k for k in range(len(parts)) if subset >> k & 1]
                extents = MAX_EXTENT if len(chosen) == 1 else min(MAX_ELEMENTS, MAX_EXTENT ** len(chosen))
                most += math.prod(parts[k][1] for k in range(len(parts)) if k not in chosen) * \
                    (extents if chosen else 1)
            each = math.prod(self.atoms[name].hi for name, _, _ in parts)
            joint.append((0, min(each, most // math.prod(d for _, _, d in parts))))
        return [f for f in factors if f not in taken], joint

    def extent_count(self, name) -> tuple | None:
        """(array, axis, c, d) where atom `name` is at most `(array.shape[axis] + c) // d`
        (c >= 0, d >= 1) and never negative: the extent itself, or a count of its tiles."""
        atom = self.atoms.get(name) if isinstance(name, str) else None
        if atom is None or atom.lo < 0:
            return None
        if atom.kind == "shape":
            _, array, axis = name.rsplit(":", 2)
            return array, axis, 0, 1
        if atom.kind != "floordiv" or atom.definition[1].value is None or atom.definition[1].value < 1:
            return None
        top, d = atom.definition[0], atom.definition[1].value
        c = top.terms.get((), 0)
        shapes = [mono[0] for mono, coef in top.terms.items() if mono and coef == 1 and len(mono) == 1]
        if len(top.terms) - (c != 0) != 1 or len(shapes) != 1 or c < 0 or self.atoms[shapes[0]].kind != "shape":
            return None
        _, array, axis = shapes[0].rsplit(":", 2)
        return array, axis, c, d

    def bounds(self, name) -> tuple:
        if isinstance(name, tuple):  # gdim(a) * bdim(a): at most MAX_AXIS_THREADS
            return 1, MAX_AXIS_THREADS
        atom = self.atoms[generic(name)]  # a thread's copy has its atom's bounds
        return atom.lo, atom.hi

    def shape(self, array: str, axis: int) -> Poly:
        static = self.static_shapes.get(array)
        if static is not None:
            return Poly.const(static[axis])
        name = f"shape:{array}:{axis}"
        if name not in self.atoms:  # an array holds fewer than 2**63 elements in all
            others = [Poly.atom(n) for n in self.atoms if n.startswith(f"shape:{array}:")]
            for other in others:
                self.uniform_domain.append(compare("le", other * Poly.atom(name), Poly.const(MAX_ELEMENTS)))
        return self.add(Atom(name, "shape", 0, MAX_EXTENT, label=f"{array}.shape[{axis}]"))

    # ------------------------------------------------------------ launch registers

    def register(self, kind: str, axis: int) -> Poly:
        if kind == "lane_id":
            return self.warp_position("lane@", "mod", 31, "lane_id()")
        block = None if self.block is None else self.block[axis]
        if kind == "block_dim":
            if block is not None or axis in self.unit_block_axes:
                return Poly.const(block or 1)
            name = f"bdim{axis}"
            if name not in self.atoms:
                dim = self.add(Atom(name, "size", 1, MODEL.block[axis], label=f"block_dim({axis})"))
                dims = [Poly.atom(f"bdim{a}") for a in range(3) if f"bdim{a}" in self.atoms]
                if len(dims) > 1:  # a block has at most MAX_BLOCK threads in all
                    threads = dims[0]
                    for d in dims[1:]:
                        threads = threads * d
                    self.uniform_domain.append(compare("le", threads, Poly.const(MAX_BLOCK)))
                return dim
            return Poly.atom(name)
        if kind == "grid_dim":
            if axis in self.unit_grid_axes:
                return Poly.const(1)
            top = MAX_GRID[axis] if block is None else min(MAX_GRID[axis], MAX_AXIS_THREADS // block)
            name = f"gdim{axis}"
            if name not in self.atoms:
                self.add(Atom(name, "size", 1, top, label=f"grid_dim({axis})"))
                bdim = self.register("block_dim", axis)
                self.uniform_domain.append(compare("le", Poly.atom(name) * bdim, Poly.const(MAX_AXIS_THREADS)))
            return Poly.atom(name)
        if kind == "thread_id":
            extent = self.register("block_dim", axis)
            if extent.value == 1:
                return Poly.const(0)
            name = f"tid{axis}@"
            if name not in self.atoms:
                self.add(Atom(name, "thread", 0, (extent.value or MAX_BLOCK) - 1, label=f"thread_id({axis})"))
                self.domain.append(compare("lt", Poly.atom(name), extent))
            return Poly.atom(name)
        # block_id
        extent = self.register("grid_dim", axis)
        if extent.value == 1:
            return Poly.const(0)
        name = f"bid{axis}@"
        if name not in self.atoms:
            self.add(Atom(name, "thread", 0, self.atoms[f"gdim{axis}"].hi - 1, label=f"block_id({axis})"))
            self.scopes[name] = ("block", ())
            self.domain.append(compare("lt", Poly.atom(name), extent))
        return Poly.atom(name)

    def linear(self) -> Poly:
        """The thread's linear index in its block (x fastest), as warps are formed."""
        index, stride = Poly({}), Poly.const(1)
        for axis in range(3):
            index = index + stride * self.register("thread_id", axis)
            stride = stride * self.register("block_dim", axis)
        return index

    def warp(self) -> Poly:
        """The index of the thread's warp in its block (the same for its 32 lanes)."""
        return self.warp_position("warp@", "floordiv", MAX_BLOCK // 32 - 1, "the warp")

    def warp_position(self, name: str, kind: str, top: int, label: str) -> Poly:
        if name not in self.atoms:
            self.add(Atom(name, kind, 0, top, (self.linear(), Poly.const(32)), label))
            if kind == "floordiv":
                self.scopes[name] = ("warp", ())
        return Poly.atom(name)

    def identity(self) -> list:
        """The per-thread id atoms that tell two threads apart (tid before bid, by axis)."""
        for axis in range(3):
            for kind in ("thread_id", "block_id"):
                self.register(kind, axis)
        return [n for kind in ("tid", "bid") for n in (f"{kind}{a}@" for a in range(3)) if n in self.atoms]


def _merge_axis_products(mono: tuple) -> list:
    """Factors of a monomial, with each gdim(a)*bdim(a) pair as one bounded factor."""
    factors = list(mono)
    for axis in range(3):
        g, b = f"gdim{axis}", f"bdim{axis}"
        while g in factors and b in factors:
            factors.remove(g)
            factors.remove(b)
            factors.append((g, b))
    return factors


def dtype_range(dtype: T.DType) -> tuple:
    """The values of an integer dtype (two's complement where signed)."""
    if dtype.is_signed:
        return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1
    return 0, 2**dtype.bits - 1

