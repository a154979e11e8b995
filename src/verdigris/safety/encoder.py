"""Polynomials and formulas of one query as z3 terms (`_Encoder`), and how one is decided.

Takes: a `Space` (atoms with their intervals and definitions) and the `z3` module. Gives:
`_Encoder`: `poly`, `formula` and `atom` (each atom's interval and definition as side
constraints, in the query's own z3 context), `decide(facts, budget, seconds)` (z3's nlsat
first, briefly, where the query is polynomials and if-then-else alone; then the default solver, both within
the proof's time), `small()` (bounds for a readable counterexample). Guarantees: a query is
rebuilt from its text, so its verdict does not depend on what Python built before; the side
constraints are true of every launch (array extents below MAX_EXTENT, unless
`loose_extents`, which keeps them in `extents` for the caller to add).

Used by the race query (`solver`), the bounds prover, VG213's and divergence queries.
"""
from __future__ import annotations

from . import budgets
from .algebra import (INF, MAX_ELEMENTS, MAX_EXTENT, Poly, Space, formula_atoms, generic, per_thread,
                      rename_formula)

# bounds for readable examples, per kind of atom (tickets as a counter from zero hands them out)
SMALL = {"size": (-4, 4), "shape": (-1024, 1024), "param": (-1024, 1024),
         "unknown": (-1024, 1024), "ticket": (0, 1024), "claim": (0, 1024)}


def _depends(p: Poly, space: Space) -> set:
    """Every atom `p` depends on, through definitions."""
    seen, todo = set(), list(p.atoms())
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for part in space.atoms[name].definition:
            todo.extend(part.atoms() if isinstance(part, Poly) else formula_atoms(part, set()))
    return seen


class _Encoder:
    """Polynomials and formulas of one query as z3 terms, with each atom's constraints, in
    the query's own z3 context (`context`: another encoder's, for terms of one query)."""

    def __init__(self, space: Space, z3, context=None, loose_extents: bool = False):
        self.space, self.z3 = space, z3
        self.loose_extents = loose_extents
        self.ctx = context or z3.Context()
        self.consts: dict = {}
        self.side: list = []
        self.divisors: list = []  # run-time divisors: a readable model keeps them nonzero
        self.wraps: list = []  # (label, wrapped term, exact term): which wrapped in a model
        self.turns: dict = {}  # a wrap atom's term (by name) -> how many moduli it took off
        self.used: set = set()
        # each polynomial's and formula's term, once a query: the shared-memory proofs of a
        # kernel encode the same path conditions and epochs many times over (a bitonic
        # sort's 15 queries spent more time in z3's Python API than in z3)
        self.terms: dict = {}
        # `loose_extents` (`collide`): each array extent below MAX_EXTENT (a launch refuses
        # longer ones) kept apart: told to z3 from the start, it slowed the search for a
        # race's example past the proof's time (`i * s * 4` of a run-time s: 0.2 s to 2 s+),
        # so `collide` adds them only where a first example needs a longer extent
        self.extents: list = []

    def atom(self, name: str):
        term = self.consts.get(name)
        if term is not None:
            return term
        atom = self.space.atoms[generic(name)]
        suffix = name[len(atom.name):]
        self.used.add(atom.name)
        z3 = self.z3
        if atom.kind == "bool":
            term = self.consts[name] = z3.Bool(name, self.ctx)
            return term
        term = self.consts[name] = z3.Int(name, self.ctx)
        if atom.lo != -INF:
            self.side.append(term >= atom.lo)
        if self.loose_extents and atom.kind == "shape" and atom.hi == MAX_EXTENT:
            self.side.append(term <= MAX_ELEMENTS)
            self.extents.append(term <= atom.hi)
        elif atom.hi != INF:
            self.side.append(term <= atom.hi)
        define = _DEFINITIONS.get(atom.kind)
        parts = [p.rename(suffix) if isinstance(p, Poly) else rename_formula(p, suffix)
                 for p in atom.definition] if suffix else list(atom.definition)
        if define is not None:
            self.side.append(define(self, term, *parts))
            if atom.kind == "wrap":
                self.wraps.append((atom.label, term, self.poly(parts[0])))
        if atom.kind == "trips":
            self.side.append(term == self.trip_count(self.space.loops_counted[atom.name],
                                                     [self.poly(p) for p in parts], suffix))
        return term

    def trip_count(self, loop: str, iteration: list, suffix: str):
        """The trip count of `loop` in a block and an iteration (z3 terms) of the loops
        around it: the length of its range where the loop runs exactly that
        (`Space.ranged`) and the range's ends are terms of those, else one function of
        both, so a trip count of another iteration (`Space.trip_count_then`) is the one a
        thread in that iteration sees."""
        z3 = self.z3
        bids = [n for n in self.space.identity() if n.startswith("bid")]
        args = [self.atom(per_thread(n, suffix)) for n in bids] + list(iteration)
        if loop in self.space.ranges:
            counters = [next(iter(p.atoms())) for p in self.space.atoms[loop].definition]
            length = self.range_length(loop, dict(zip(bids + counters, args)))
            if length is not None:
                return length
        if not args:
            return z3.Int(f"trips:{loop}", self.ctx)
        count = z3.Function(f"trips:{loop}", *[z3.IntSort(self.ctx)] * (len(args) + 1))
        return count(*args)

    def range_length(self, loop: str, at: dict):
        """len(range(start, stop, step)) of the loop (`Space.ranged`) in the block and
        iteration `at` gives (atom name -> z3 term), or None where its start or stop
        depends on more than those and the kernel's sizes and parameters."""
        start, stop, step = self.space.ranges[loop]
        start, stop = self.at(start, at), self.at(stop, at)
        if start is None or stop is None:
            return None
        span = stop - start if step > 0 else start - stop
        length = span if abs(step) == 1 else (span + abs(step) - 1) / abs(step)  # (no division by 1)
        return self.z3.If(span > 0, length, self.constant(0))

    def at(self, p: Poly, at: dict):
        """`p` as a z3 term where the atoms in `at` take those terms, loop variables are
        `start + k*step`, and every other atom is one of the whole launch (no per-thread
        copy: a size or a parameter); None where `p` depends on any other."""
        z3, terms = self.z3, []
        for mono, coef in p.terms.items():
            factors = [self.constant(coef)]
            for name in mono:
                atom = self.space.atoms[name]
                if name in at:
                    factors.append(at[name])
                elif atom.kind == "loopvar":
                    start, k, step = atom.definition
                    factors.append(self.at(start + k * step, at))
                elif not any(n.endswith("@") for n in _depends(Poly.atom(name), self.space)):
                    factors.append(self.atom(name))
                else:
                    return None
                if factors[-1] is None:
                    return None
            terms.append(z3.Product(*factors) if len(factors) > 1 else factors[0])
        return z3.Sum(*terms) if len(terms) > 1 else terms[0] if terms else self.constant(0)

    def decide(self, facts: list, budget: int, seconds: float | None = None) -> tuple:
        """(z3's verdict on `facts` with the atoms' constraints, the solver that reached it),
        giving up after `budget` steps (or `seconds` of CPU, where given). The query is rebuilt from its text in a context of its
        own: z3's search follows the numbering of its terms, which here would depend on what
        Python built and freed before (the same query took 3.7M or 36M steps with the hash
        seed); parsed, the same text is numbered the same way every time. One context for
        the first try and the default solver (the second parse finds the first's terms:
        still a function of the text), since each context costs a millisecond or more."""
        z3 = self.z3
        if budgets.spent():  # the kernel's time is up: undecided, at once
            return z3.unknown, z3.Solver(ctx=self.ctx)
        draft = z3.Solver(ctx=self.ctx)
        draft.add(*facts, *self.side)
        text = draft.sexpr()
        context = z3.Context()
        if not any(word in text for word in _NOT_NLSAT):
            # polynomials (and if-then-else) alone: z3's nlsat first, briefly; it decides at
            # once many queries z3's default solver takes a second for (`r * W + c` with
            # c <= W, which is sat; a row index loaded under a lock, `if in bounds: value
            # else 0`, beside a product of extents: 0.4 s or more, and 3 ms here)
            result, quick = self.first_try(z3.Tactic("qfnra-nlsat", ctx=context), text,
                                           min(budget, budgets.NLSAT), budgets.NLSAT_S)
            try:
                # unsat over the reals is unsat over the integers; a model must be integral
                if result == z3.unsat or result == z3.sat and _integral(quick.model(), z3):
                    return result, quick
            except z3.Z3Exception:  # interrupted as the check ended: the default solver decides
                pass
        elif "(forall " in text or "(exists " in text:
            # quantifiers over loop iterations (`barrier_passed`): z3's quantifier elimination
            # first, briefly; it removes at once the linear ones of a triangular loop nest, on
            # which the default solver's instantiation took a second (a proof only: a model
            # comes from the default solver)
            result, quick = self.first_try(z3.Then("simplify", "qe", "smt", ctx=context), text,
                                           min(budget, budgets.QE), budgets.QE_S)
            if result == z3.unsat:
                return result, quick
        solver = z3.Solver(ctx=context)
        solver.set("rlimit", budget)
        solver.set("timeout", budgets.BACKSTOP_MS)
        solver.from_string(text)
        with budgets.watch(solver.ctx, seconds):
            result = solver.check()
        try:
            if result == z3.sat:
                solver.model()
        except z3.Z3Exception:  # interrupted as the check ended: undecided
            return z3.unknown, solver
        return result, solver

    def first_try(self, tactic, text: str, budget: int, seconds: float) -> tuple:
        """(the verdict, the solver) of `tactic` on the query `text`, within `budget` steps
        and `seconds` of CPU."""
        quick = tactic.solver()
        quick.set("rlimit", budget)
        quick.from_string(text)
        with budgets.watch(quick.ctx, seconds):
            return quick.check(), quick

    def any(self, terms: list):
        """The disjunction of `terms`, false if there are none, in this query's context."""
        return self.z3.Or(*terms, self.ctx)

    def all(self, terms: list):
        """The conjunction of `terms`, true if there are none, in this query's context."""
        return self.z3.And(*terms, self.ctx)

    def constant(self, value):
        """An integer or truth value as a term of this query."""
        z3 = self.z3
        return z3.BoolVal(value, self.ctx) if isinstance(value, bool) else z3.IntVal(value, self.ctx)

    def small(self) -> list:
        """Bounds that keep a counterexample's sizes and values small."""
        z3, bounds = self.z3, []
        for name, term in self.consts.items():
            limits = SMALL.get(self.space.atoms[generic(name)].kind)
            if limits is not None:
                bounds.append(z3.And(term >= limits[0], term <= limits[1]))
        return bounds

    def poly(self, p: Poly):
        term = self.terms.get(p)
        if term is None:
            term = self.terms[p] = self._poly(p)
        return term

    def _poly(self, p: Poly):
        z3 = self.z3
        terms = []
        for mono, coef in p.terms.items():
            factors = [self.atom(n) for n in mono]
            product = factors[0] if len(factors) == 1 else z3.Product(*factors) if factors else None
            terms.append(self.constant(coef) if product is None else product if coef == 1 else coef * product)
        return self.constant(0) if not terms else terms[0] if len(terms) == 1 else z3.Sum(*terms)

    def formula(self, f: tuple):
        term = self.terms.get(f)
        if term is None:
            term = self.terms[f] = self._formula(f)
        return term

    def _formula(self, f: tuple):
        z3 = self.z3
        tag = f[0]
        if tag in ("true", "false"):
            return self.constant(tag == "true")
        if tag == "cmp":
            x = self.poly(f[2])
            return {"lt": x < 0, "le": x <= 0, "eq": x == 0, "ne": x != 0}[f[1]]
        if tag == "bool":
            return self.atom(f[1])
        if tag in ("passes", "quiet"):
            return self.barrier_passed(*f)
        parts = [self.formula(sub) for sub in f[1:]]
        return {"and": z3.And, "or": z3.Or}[tag](parts) if tag != "not" else z3.Not(parts[0])

    def barrier_passed(self, tag: str, suffix: str, after, index, outer: tuple, loops: tuple):
        """("passes", ..., k, k, ...): iteration k of a loop (in iteration `outer` of the loops
        around it) passes a barrier; ("quiet", ..., a, i, ...): no iteration after a up to i
        does. An iteration passes one exactly when one of the inner `loops` runs an
        iteration that passes one (`barriers.passing_loops`): (its trip count, a loop's
        name or a constant, a function of the iteration; how its own iterations pass one,
        or None: each does)."""
        z3 = self.z3
        a, i = self.poly(after), self.poly(index)
        around = [self.poly(p) for p in outer]
        if tag == "passes":
            return self.passes(around, a, loops, suffix)
        k = z3.Int(f"k!later{len(around)}", self.ctx)
        return self.bounded(z3.ForAll, k, a, i, z3.Not(self.passes(around, k, loops, suffix)))

    def passes(self, around: list, k, loops: tuple, suffix: str):
        """Iteration `k` (a z3 term) of a loop in iteration `around` of the loops around it
        passes a barrier: one of its inner `loops` runs one that does."""
        z3 = self.z3
        ran = []
        for loop, inner in loops:
            trips = self.constant(loop) if isinstance(loop, int) else \
                self.trip_count(loop, around + [k], suffix)
            if inner is None:
                ran.append(trips >= 1)
                continue
            j = z3.Int(f"k!inner{len(around) + 1}", self.ctx)
            ran.append(self.bounded(z3.Exists, j, self.constant(-1), trips - 1,
                                    self.passes(around + [k], j, inner, suffix)))
        return self.any(ran)

    def bounded(self, quantifier, k, after, upto, body):
        """`quantifier` (z3.ForAll or z3.Exists) over `k` in after < k <= upto of `body`;
        where `body` does not depend on `k` (trip counts that are the same in every
        iteration: a range over the kernel's sizes), said without a quantifier (z3 took
        seconds on the nested ones of a rectangular nest)."""
        z3 = self.z3
        within = z3.And(after < k, k <= upto)
        if z3.substitute(body, (k, self.constant(0))).eq(body):
            k, within = None, after < upto  # some k is within: whatever it is, `body` is the same
        if quantifier is z3.ForAll:
            return z3.Implies(within, body) if k is None else z3.ForAll([k], z3.Implies(within, body))
        return z3.And(within, body) if k is None else z3.Exists([k], z3.And(within, body))

    def floordiv(self, x, y):
        z3, d = self.z3, y.value
        if d is not None:
            return self.poly(x) / d if d > 0 else (-self.poly(x)) / -d if d < 0 else self.constant(0)
        xv, yv = self.poly(x), self.poly(y)
        self.divisors.append(yv)
        lo = self.space.interval(y)[0]
        positive = xv / yv  # the signs the divisor cannot take need no case
        return positive if lo >= 1 else z3.If(yv > 0, positive, 0) if lo >= 0 else \
            z3.If(yv > 0, positive, z3.If(yv < 0, (-xv) / (-yv), 0))

    def power_of_two(self, exponent):
        """floor(2**exponent), spelled out for each value in the exponent's range (`intops`
        keeps it below a dtype's bits), 0 below 0 (a halving sequence's end): z3 splits on
        them where a proof needs one, and each case is linear."""
        e = self.poly(exponent)
        lo, hi = self.space.interval(exponent)
        if hi < 0:
            return self.constant(0)
        value = self.constant(2 ** int(hi))
        for i in reversed(range(max(int(lo), 0) if lo != -INF else 0, int(hi))):
            value = self.z3.If(e == i, self.constant(2**i), value)
        return self.z3.If(e < 0, self.constant(0), value) if lo < 0 else value

    def shifted_right(self, term, x, exponent):
        """`term` is x >> exponent, floor(x / 2**exponent): its multiple of 2**exponent is at
        most x, and the next one above it (z3 proves little about a division by a term)."""
        power, xv = self.power_of_two(exponent), self.poly(x)
        return self.z3.And(term * power <= xv, xv < term * power + power)

    def mod(self, x, y):
        z3 = self.z3
        if y.value is not None and y.value > 0:
            return self.poly(x) % y.value
        xv, yv = self.poly(x), self.poly(y)
        if self.space.interval(y)[0] >= 1:  # z3's mod by a positive divisor is the floor one
            self.side.append(z3.And(0 <= xv % yv, xv % yv < yv))
            return xv % yv
        rest = z3.If(yv == 0, 0, xv - yv * self.floordiv(x, y))
        # its range, stated: z3 would have to derive it from nonlinear terms (a grouped GEMM
        # ordering's `% group_size_m` was out of budget without it)
        self.side.append(z3.If(yv > 0, z3.And(0 <= rest, rest < yv),
                               z3.If(yv < 0, z3.And(yv < rest, rest <= 0), rest == 0)))
        return rest

    def entry(self, index, values: tuple):
        """`values[index]` (Polys), the last one past the end (an index outside the table
        faults before its value is used)."""
        i, value = self.poly(index), self.poly(values[-1])
        for k in reversed(range(len(values) - 1)):
            value = self.z3.If(i == k, self.poly(values[k]), value)
        return value

    def wrap(self, x, modulus, name: str = ""):
        """`x` less some multiple of `modulus` (the atom's interval, one modulus wide, makes
        it the one two's complement or unsigned wrap-around gives); how many multiples is
        bounded by the interval of `x` (z3 searches a few, not all integers)."""
        turns = self.turns[name] = self.z3.FreshInt("turns", self.ctx)
        lo, hi = self.space.interval(x)
        if lo != -INF:
            self.side.append(turns >= int(lo) // modulus.value - 1)
        if hi != INF:
            self.side.append(turns <= int(hi) // modulus.value + 1)
        return self.poly(x) - modulus.value * turns


def _integral(model, z3) -> bool:
    """Whether every value of `model` is an integer (a counterexample of threads and sizes)."""
    return all(z3.is_int_value(model[d]) or z3.is_true(model[d]) or z3.is_false(model[d])
               for d in model.decls())


# what z3's nlsat does not take (divisions, remainders, quantifiers, functions: trip counts;
# its tactic turns if-then-else terms into cases)
_NOT_NLSAT = ("(div ", "(mod ", "(forall ", "(exists ", "(declare-fun trips:")

# atom kind -> (encoder, the atom's term, its definition) -> the constraint that defines it
_DEFINITIONS = {
    "ite": lambda enc, term, cond, a, b: term == enc.z3.If(enc.formula(cond), enc.poly(a), enc.poly(b)),
    "floordiv": lambda enc, term, x, y: term == enc.floordiv(x, y),
    "mod": lambda enc, term, x, y: term == enc.mod(x, y),
    "loopvar": lambda enc, term, start, k, step: term == enc.poly(start + k * step),
    "wrap": lambda enc, term, x, modulus: term == enc.wrap(x, modulus, str(term)),
    "pow2": lambda enc, term, exponent: term == enc.power_of_two(exponent),
    "rshift": _Encoder.shifted_right,
    "table": lambda enc, term, index, *values: term == enc.entry(index, values),
}
