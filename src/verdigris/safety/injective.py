"""Race proofs for block orders: the map from a block's linear tile index to its tile.

Takes: two tile accesses of one array with views of one shape (`tiles.View`) and their
`Space`. Gives: `distinct_tiles(a, b, space) -> bool`: True only when no two distinct blocks
reach `a` and `b` at one element; False means "not proven here" (the general query decides,
and gives the counterexample), never "racy".

The orders fast matrix products walk their tiles in (Triton's and cuTile's grouped, or
"swizzled", orders; either inside a persistent loop `for t in range(bid, tiles,
num_blocks)`) compute the tile indices from one linear index `t` through quotients and
remainders by run-time sizes. The general query, over the block ids and the loop's
iteration, multiplies run-time sizes by per-block values twice over and takes z3 minutes.
This proof splits it in two steps, each cheap:
1. The *roots* of each access: the per-block values its tile indices are functions of
   (through the definitions of the atoms they are written in), stopping at loop
   variables. Each root is a block id, or a loop variable `start + k*step` that the block
   ids and the iteration determine by a mixed-radix argument (`fastpath.radix`: `bid +
   k*num_blocks` with `0 <= bid < num_blocks`). Where both accesses have the same roots
   and these determine every block id, two distinct blocks have distinct roots; where each
   access is in a loop of its own over the same mixed radix (two persistent loops over one
   array), one value of the two loop variables means one block.
2. The tile map is injective: a query with the roots as plain variables (within their
   intervals), asking for roots that differ so (step 1) and give equal tile indices, each
   tile meeting its array (`0 <= tile`, `tile * extent < shape`: a tile with an element in
   bounds), under the conjuncts of the path conditions and the launch domain that speak of
   the roots and launch-uniform values only. The query is linear (`_LinearEncoder`): each
   quotient and remainder by a run-time size a variable with its defining facts, each
   product a variable with facts of multiplication. Each fact holds of any two blocks that
   collide, so "unsat" proves them apart; "sat" may be an artefact of what the query
   leaves out, and the general query decides.
The query gets a budget of its own (`budgets.ORDER`, a fifth of a second of the CI
machine; the proofs take a tenth of that); past it, the general query decides.
"""
from __future__ import annotations

import functools
import itertools
import re

from . import budgets, fastpath
from .algebra import Atom, Poly, Space, conj, formula_atoms, generic, rename_formula
from .encoder import _Encoder

ROOT_KINDS = ("thread", "loopvar")
FUNCTIONS = ("floordiv", "mod", "ite", "wrap", "pow2", "rshift")  # atoms defined by their parts


def distinct_tiles(a, b, space: Space) -> bool:
    """`a`, `b`: `tiles.TileAccess`es with views of one shape."""
    if len(a.view.tiles) != len(b.view.tiles) or not all(isinstance(n, int) and n >= 1 for n in a.view.shape):
        return False
    roots_a, roots_b = (_roots(x.view.tiles, space) for x in (a, b))
    guards = fastpath._guards(a.pc, space) & fastpath._guards(b.pc, space)
    apart = _blocks_apart(roots_a, roots_b, guards, space)
    if apart is None:
        return False
    z3 = budgets.z3()

    roots = roots_a | roots_b
    leafed = _with_leaves(space, roots)
    shared = {n for n in space.atoms if n.endswith("@") and n not in roots and _within({n}, set(), space)}
    enc = _LinearEncoder(leafed, z3, shared)
    facts = []
    for access, mine, copy in ((a, roots_a, "1"), (b, roots_b, "2")):
        facts.append(enc.formula(rename_formula(_about(access.pc, mine, space), copy)))
        facts += [enc.formula(rename_formula(f, copy)) for f in space.domain
                  if _within(formula_atoms(f, set()), mine, space)]
        for axis, (tile, extent) in enumerate(zip(access.view.tiles, access.view.shape)):
            at = enc.poly(tile.rename(copy))
            facts += [at >= 0, at * extent < enc.poly(leafed.shape(access.array, axis))]
    facts += [enc.formula(f) for f in space.uniform_domain]
    facts += [enc.poly(x.rename("1")) == enc.poly(y.rename("2")) for x, y in zip(a.view.tiles, b.view.tiles)]
    facts.append(enc.any([enc.atom(x + "1") != enc.atom(y + "2") for x, y in apart]))
    result, _ = enc.decide(facts + enc.products_facts(), budgets.ORDER)
    return result == z3.unsat


def iterations_apart(a, space: Space) -> bool:
    """Two iterations of the loops around `a` (a `tiles.TileAccess`) in one block reach
    distinct tiles: every loop counter around it is a digit of one of its roots (a loop
    variable `start + k*step`, a mixed radix of block ids and counters), so two iterations
    have distinct roots, and the tile map is injective in its roots (`distinct_tiles`'
    query). For a persistent loop's store in grouped order, which the general query takes
    seconds over."""
    if a.view is None or not a.loops:
        return False
    roots = _roots(a.view.tiles, space)
    guards = fastpath._guards(a.pc, space)
    digits = set()
    for name in roots:
        if space.atoms[name].kind == "loopvar":
            found = fastpath.radix(fastpath.expand(Poly.atom(name), space), space, guards)
            if found is None:
                return False
            digits |= found
    return set(a.loops) <= digits and distinct_tiles(a, a, space)


def _blocks_apart(roots_a: set, roots_b: set, guards: set, space: Space):
    """Pairs (x, y) of roots, of the first access and of the second, such that two distinct
    blocks have x of the first block unlike y of the second for one of them (None: none
    known). Roots of one access: equal roots mean equal block ids where together they
    determine every block id (`_determined`). Roots of two loops (`for t in range(bid, n,
    num_blocks)` twice): one value of both means one block where each is the same mixed
    radix of the block ids and its loop's counter."""
    if not roots_a or not roots_b:
        return None
    if roots_a == roots_b:
        return [(r, r) for r in sorted(roots_a)] if _determined(roots_a, guards, space) else None
    # (without guards: a guard bounds one loop's counter, not the other's)
    (x, *others_a), (y, *others_b) = roots_a, roots_b
    if others_a or others_b or not _determined({x}, set(), space) or not _determined({y}, set(), space):
        return None
    walks = [fastpath.expand(Poly.atom(r), space) for r in (x, y)]
    counters = [[n for n in w.atoms() if space.atoms[n].kind == "counter"] for w in walks]
    if len(counters[0]) != 1 or len(counters[1]) != 1:
        return None
    renamed = walks[1].substitute({counters[1][0]: Poly.atom(counters[0][0])})
    return [(x, y)] if renamed == walks[0] else None


def _roots(polys: list, space: Space) -> set:
    """The per-block atoms the polynomials depend on, through definitions, stopping at loop
    variables; none if one of them is neither a block id nor a loop variable (a loaded
    value, a ticket, a lane: this proof does not apply)."""
    roots, seen, todo = set(), set(), [n for p in polys for n in p.atoms()]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        atom = space.atoms[name]
        if name.endswith("@") and atom.kind in ROOT_KINDS:
            roots.add(name)
            continue
        if name.endswith("@") and atom.kind not in FUNCTIONS:
            return set()
        for part in atom.definition:
            todo.extend(part.atoms() if isinstance(part, Poly) else formula_atoms(part, set()))
    return roots


def _determined(roots: set, guards: set, space: Space) -> bool:
    """Equal roots mean equal block ids: each loop variable root's `start + k*step` is a
    mixed radix of block ids and counters (`fastpath.radix`, with the guards `guards`), and
    together they and the block id roots cover every block id."""
    covered = set()
    for name in roots:
        if space.atoms[name].kind == "thread":
            covered.add(name)
            continue
        digits = fastpath.radix(fastpath.expand(Poly.atom(name), space), space, guards)
        if digits is None:
            return False
        covered |= digits
    return set(space.identity()) <= covered


def _within(names: set, roots: set, space: Space) -> bool:
    """The atoms `names` are the roots, launch-uniform values, or functions of these."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen or name in roots:
            continue
        seen.add(name)
        atom = space.atoms[name]
        if name.endswith("@") and atom.kind not in FUNCTIONS:
            return False
        for part in atom.definition:
            todo.extend(part.atoms() if isinstance(part, Poly) else formula_atoms(part, set()))
    return True


def _about(pc: tuple, roots: set, space: Space) -> tuple:
    """The conjuncts of the path condition `pc` that speak of the roots and uniform values
    only (dropping the others weakens the query: its unsat still proves the accesses apart)."""
    parts = pc[1:] if pc[0] == "and" else (pc,)
    return conj(*[p for p in parts if _within(formula_atoms(p, set()), roots, space)])


def _with_leaves(space: Space, roots: set) -> Space:
    """A copy of `space` in which each root is a plain variable in its interval (a loop
    variable without its definition by the counter), sharing everything else."""
    atoms = dict(space.atoms)
    for name in roots:
        atom = atoms[name]
        atoms[name] = Atom(name, "thread", atom.lo, atom.hi, (), atom.label)
    copy = Space(space.block, space.unit_grid_axes, space.unit_block_axes)
    copy.__dict__.update({**space.__dict__, "atoms": atoms})
    return copy


class _LinearEncoder(_Encoder):
    """An encoder whose query is linear: each product of two non-constant terms is a fresh
    variable (`product`), with facts of multiplication that hold of any integers
    (`products_facts`), and each quotient and remainder by a run-time divisor a fresh pair
    with its defining facts (`x = q*y + r`, `r` between 0 and `y`; both 0 for `y = 0`, as
    `_Encoder` defines them), one pair per dividend and divisor. Dropping the rest of what a
    product is only weakens the query, so its "unsat" stands; z3 decides linear queries
    quickly, where its nonlinear search over the same facts took minutes. Atoms that are
    functions of launch-uniform values (`(out.shape[1] + BN - 1) // BN`) are one term for
    both blocks, so that products of the two blocks share that factor."""

    def __init__(self, space: Space, z3, shared: set):
        super().__init__(space, z3)
        self.shared = shared
        self.divisions: dict = {}  # (dividend, divisor) -> (quotient, remainder)
        self.division_numbers: dict = {}  # the same, of either block -> a number
        self.products: dict = {}  # the factors' text -> (factor, factor, the product's term)

    def atom(self, name: str):
        return super().atom(generic(name) if generic(name) in self.shared else name)

    def poly(self, p: Poly):
        terms = []
        for mono, coef in p.terms.items():
            factors = [self.atom(n) for n in mono]
            term = functools.reduce(self.product, factors) if factors else None
            terms.append(self.constant(coef) if term is None else term if coef == 1 else coef * term)
        return self.constant(0) if not terms else terms[0] if len(terms) == 1 else self.z3.Sum(*terms)

    def product(self, x, y):
        factors = tuple(sorted((x.sexpr(), y.sexpr())))
        found = self.products.get(factors)
        if found is None:
            found = self.products[factors] = (x, y, self.z3.Int(f"product{len(self.products)}", self.ctx))
        return found[2]

    def _division(self, x: Poly, y: Poly) -> tuple:
        found = self.divisions.get((x, y))
        if found is None:
            z3 = self.z3
            # named alike in both blocks' copies (`_both_copies` pairs their products)
            number = self.division_numbers.setdefault((_generic(x), _generic(y)), len(self.division_numbers))
            copy = next((n[-1] for n in x.atoms() | y.atoms() if n[-2:] in ("@1", "@2")), "")
            q, r = (z3.Int(f"{kind}{number}@{copy}", self.ctx) for kind in ("quotient", "remainder"))
            xv, yv = self.poly(x), self.poly(y)
            self.divisors.append(yv)
            self.side.append(z3.If(yv == 0, z3.And(q == 0, r == 0), z3.And(
                xv == self.product(q, yv) + r,
                z3.If(yv > 0, z3.And(0 <= r, r < yv), z3.And(yv < r, r <= 0)))))
            found = self.divisions[(x, y)] = (q, r)
        return found

    def floordiv(self, x, y):
        return super().floordiv(x, y) if y.value is not None else self._division(x, y)[0]

    def mod(self, x, y):
        return super().mod(x, y) if y.value is not None else self._division(x, y)[1]

    def products_facts(self) -> list:
        """Facts of each product `p = x*y` (its sign and size against a factor: x >= 1 and
        y > 0 give p >= y) and of each product of one block with the same product of the
        other (`_both_copies`), for each factor `s` they may have in common (equal other
        factors give equal products, other factors apart by at least 1 give products apart
        by at least |s|): what the proofs of block orders need of multiplication."""
        z3, facts = self.z3, []
        for x, y, p in self.products.values():
            for a, b in ((x, y), (y, x)):
                facts += [z3.Implies(a == 0, p == 0),
                          z3.Implies(z3.And(a >= 1, b > 0), p >= b),
                          z3.Implies(z3.And(a <= -1, b > 0), p <= -b),
                          z3.Implies(z3.And(a >= 1, b < 0), p <= b),
                          z3.Implies(z3.And(a <= -1, b < 0), p >= -b)]
        for (x1, y1, p1), (x2, y2, p2) in _both_copies(self.products.values()):
            for (a1, s1), (a2, s2) in itertools.product(((x1, y1), (y1, x1)), ((x2, y2), (y2, x2))):
                same = self.constant(True) if s1.eq(s2) else s1 == s2
                facts += [z3.Implies(z3.And(same, a1 == a2), p1 == p2),
                          z3.Implies(z3.And(same, s1 > 0, a1 > a2), p1 - p2 >= s1),
                          z3.Implies(z3.And(same, s1 < 0, a1 > a2), p1 - p2 <= s1),
                          z3.Implies(z3.And(same, s1 > 0, a2 > a1), p2 - p1 >= s1),
                          z3.Implies(z3.And(same, s1 < 0, a2 > a1), p2 - p1 <= s1)]
        return facts


def _generic(p: Poly) -> Poly:
    """`p` with each block's copy of an atom as the atom itself."""
    return Poly({tuple(sorted(generic(n) for n in mono)): c for mono, c in p.terms.items()})


def _both_copies(products) -> list:
    """The pairs of products that are one product of the program in the two blocks: their
    factors' texts agree but for the copy (`@1`, `@2`) each term is of."""
    by_shape: dict = {}
    for x, y, p in products:
        shape = tuple(sorted(re.sub(r"@[12]\b", "@", f.sexpr()) for f in (x, y)))
        by_shape.setdefault(shape, []).append((x, y, p))
    return [pair for same in by_shape.values() for pair in itertools.combinations(same, 2)]
