"""The two-thread race query, decided by z3.

Takes: two accesses of one array (from `symbolic.execute`) and their `Space`. Gives:
`collide(a, b, space, budget) -> Outcome`: "unsat" (no two distinct threads reach `a`
and `b` at one element), "sat" with a concrete counterexample (thread ids, the element,
the sizes and parameters z3 chose, the narrow arithmetic that wrapped around on the way),
or "unknown" (gave up or spent its budget; the caller refuses).
Each query has a z3 context of its own and a budget of steps (`budgets`), so its verdict is
reproducible.

Why z3 (`z3-solver`): the index maps are integer polynomials in thread ids *and* run-time
sizes (`r * W + c` with `W = out.shape[1]`, `block_id * block_dim` when the block is not
specialized). Products of a variable and a run-time size are outside Presburger arithmetic,
so isl cannot take them; z3's nonlinear integer arithmetic proves the usual shapes in
milliseconds, and a satisfying assignment is exactly the counterexample users need. It is
imported lazily: kernels the fast path proves never load it.

Query: thread 1 reaches `a`, thread 2 reaches `b` (each path condition, with its own copy of
every per-thread atom), all indices are equal and in bounds (an out-of-bounds access faults
instead of touching memory), nothing orders the two threads (`order.unordered`: distinct
threads of different blocks, or of one block after the same barrier), plus each atom's
interval and definition (a remainder by a run-time divisor also with its range), and the
launch-domain constraints. A loop's trip count is one uninterpreted function of the block and
the iteration of the loops around it, so its value in another iteration
(`Space.trip_count_then`) is the one a thread there sees; for a `for` loop over a range
that nothing leaves early, whose ends are sizes, parameters and the loops' counters, it is
the range's length in that block and iteration (`Space.ranged`), a term that holds under
any quantifier (VG213's query), where a fact about a function would not.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import budgets, locks, order
from .algebra import (INF, MAX_ELEMENTS, MAX_EXTENT, Poly, Space, formula_atoms, generic, per_thread,
                      rename_formula)
from .trace import Access

COPIES = ("1", "2")
# bounds for readable examples, per kind of atom (tickets as a counter from zero hands them out)
SMALL = {"size": (-4, 4), "shape": (-1024, 1024), "param": (-1024, 1024),
         "unknown": (-1024, 1024), "ticket": (0, 1024), "claim": (0, 1024)}


@dataclass
class Outcome:
    status: str  # "sat" | "unsat" | "unknown"
    threads: tuple = ()  # per copy: {"tid0@": value, "bid0@": value, ...}
    element: tuple = ()  # the index per dimension
    sizes: dict = field(default_factory=dict)  # label -> value, for shapes and parameters
    launch: tuple = ()  # (grid, block), 3 ints each
    unknowns: list = field(default_factory=list)  # labels of loaded values the indices depend on
    wraps: list = field(default_factory=list)  # labels of the wrap-arounds the example takes
    reason: str = ""


def situation_of(model, enc, space: Space, ids, copies: tuple = COPIES):
    """From a model of a query about the threads `copies` (two, or one): (value of a term,
    the threads' ids, the sizes it chose, its (grid, block))."""
    value = model.int
    # a block's ticket, else a thread's, if any
    tickets = sorted(n for n in enc.used if n in space.tickets)[:1] or sorted(n for n in enc.used if n in space.claims)[:1]
    threads = tuple({**{n: value(enc.atom(per_thread(n, c))) for n in ids},
                     **{"ticket@": value(enc.atom(per_thread(n, c))) for n in tickets}} for c in copies)
    sizes = {space.atoms[n].label: value(enc.consts[n]) for n in sorted(enc.used)
             if space.atoms[n].kind in ("shape", "param")}
    launch = tuple(tuple(value(enc.poly(space.register(kind, axis))) for axis in range(3))
                   for kind in ("grid_dim", "block_dim"))
    return value, threads, sizes, launch


def collide(a: Access, b: Access, space: Space, budget: int, apart: bool = False,
            one_block: bool = False, differ: tuple = ()) -> Outcome:
    """`apart`: only threads of different warps (see `order.unordered`). `one_block`: any
    two executions of `a` and `b` by one block of the tile track, ordered or not (its lanes
    and loop counters are each access's own), instead of unordered threads; `differ`: atoms
    (loop counters) not all equal in the two (two iterations of one statement)."""
    if budgets.spent():  # the kernel's time is up: no query is built
        return Outcome("unknown", reason=out_of_time())
    z3 = budgets.z3()

    enc = _Encoder(space, z3, loose_extents=True)
    ia = [enc.poly(p.rename("1")) for p in a.indices]
    ib = [enc.poly(p.rename("2")) for p in b.indices]
    shapes = [enc.poly(space.shape(a.array, d)) for d in range(len(ia))]
    ids = space.identity()
    facts = [enc.formula(rename_formula(a.pc, "1")), enc.formula(rename_formula(b.pc, "2"))]
    facts += [x == y for x, y in zip(ia, ib)]
    facts += [z3.And(0 <= x, x < s) for x, s in zip(ia, shapes)]
    for copy in COPIES:
        facts += [enc.formula(rename_formula(f, copy)) for f in space.domain]
    facts += [enc.formula(f) for f in space.uniform_domain]
    if one_block:
        facts += [enc.atom(per_thread(n, "1")) == enc.atom(per_thread(n, "2")) for n in ids if n.startswith("bid")]
        if differ:
            facts.append(enc.any([enc.atom(per_thread(n, "1")) != enc.atom(per_thread(n, "2")) for n in differ]))
    else:
        facts.append(order.unordered(enc, a, b, space, apart))
        facts += locks.exclusion(enc, a, b)  # blocks holding one lock element are ordered
    turns = [_turns(enc, x, y) for x, y in zip(ia, ib)]
    # without the extents' bound first, briefly, then with it: z3 found some races' examples
    # only one way or the other within the proof's time (each a fraction of a second)
    result, solver = _decide_by_turns(enc, facts, turns, budget, budgets.LOOSE_S) if enc.extents \
        else (z3.unknown, None)
    if result == z3.unknown or result == z3.sat and not Found(solver.model()).true(z3.And(*enc.extents)):
        result, solver = _decide_by_turns(enc, facts + enc.extents, turns, budget)
    if result == z3.unsat:
        return Outcome("unsat")
    if result != z3.sat:
        return Outcome("unknown", reason=gave_up(solver, budget))
    model = readable(solver, enc, ids, one_block or getattr(a, "memory", "global") == "shared", budget)
    value, threads, sizes, launch = situation_of(model, enc, space, ids)
    unknowns = sorted({space.atoms[n].label for p in a.indices + b.indices
                       for n in _depends(p, space) if space.atoms[n].kind == "unknown"} - {""})
    wraps = sorted({label for label, wrapped, exact in enc.wraps if value(wrapped) != value(exact)})
    return Outcome("sat", threads, tuple(value(x) for x in ia), sizes, launch, unknowns, wraps)


def _turns(enc, x, y):
    """(the multiples of the modulus that wrapping took off `x` and `y`), where both index
    terms are wrap atoms; None otherwise."""
    tx, ty = enc.turns.get(str(x)), enc.turns.get(str(y))
    return None if tx is None or ty is None else (tx, ty)


def _decide_by_turns(enc, facts: list, turns: list, budget: int, seconds: float | None = None) -> tuple:
    """`enc.decide(facts)` (with a quarter of the budget), then split where indices are
    wrapped values: the two threads' indices
    wrapped by different multiples of the modulus (their exact values a multiple of it
    apart: where a wrap-around makes a race, z3 finds it here), or by the same (the exact
    indices' question). z3 settles each case quickly but searched the two together past
    its budget (a 64-bit ticket times 6144)."""
    z3 = enc.z3
    pairs = [p for p in turns if p is not None]
    if not pairs:
        return enc.decide(facts, budget, seconds)
    result, solver = enc.decide(facts, budget // 4, seconds)
    if result != z3.unknown:
        return result, solver
    same = enc.all([tx == ty for tx, ty in pairs])
    result, solver = enc.decide(facts + [z3.Not(same)], budget, seconds)
    if result != z3.unsat:
        return result, solver
    return enc.decide(facts + [same], budget, seconds)


def readable(solver, enc, ids: list, one_block: bool, budget: int):
    """A model (`Found`) of the satisfiable `solver` (from `_Encoder.decide`) that a user can
    picture: run-time divisors not zero (a division by zero is no launch to show), block 0
    where the two threads share a block (`one_block`), small sizes and values, each where it
    still holds."""
    z3 = enc.z3
    model = solver.model()
    solver.set("rlimit", min(budget, budgets.READABLE))
    first_block = [enc.atom(per_thread(n, c)) == 0 for n in ids if n.startswith("bid") for c in COPIES]
    nonzero = [d != 0 for d in enc.divisors]
    lower_first = [_before(enc, ids)]  # thread 1 the lower of the two (by block, then thread)
    started = None  # divisors not zero within the proof's time; the rest within READABLE_S
    for preference in [nonzero] + ([first_block] if one_block else []) + [enc.small(), lower_first]:
        try:  # past the proof's time (z3 interrupted, in a check or a push): the model as it is
            if not preference:  # nothing to ask (no run-time divisor)
                continue
            if preference is not nonzero and started is None:
                started = time.process_time()
            left = None if started is None else budgets.READABLE_S - (time.process_time() - started)
            if budgets.spent() or left is not None and left <= 0:
                break
            solver.push()
            solver.add(*[term.translate(solver.ctx) for term in preference])
            with budgets.watch(solver.ctx, left):
                found = solver.check()
            if found == z3.sat:
                model = solver.model()
                continue
            solver.pop()
        except z3.Z3Exception:
            break
    return Found(model)


def _before(enc, ids: list):
    """Thread 1 comes before thread 2 (blocks first, then threads, axis by axis)."""
    order = [n for n in ids if n.startswith("bid")] + [n for n in ids if n.startswith("tid")]
    z3, before = enc.z3, enc.constant(False)
    for n in reversed(order):
        mine, theirs = enc.atom(per_thread(n, "1")), enc.atom(per_thread(n, "2"))
        before = z3.Or(mine < theirs, z3.And(mine == theirs, before))
    return before


class Found:
    """A model of a query `_Encoder.decide` decided, for the encoder's terms (which live in
    the encoder's context, not the one the query was decided in)."""

    def __init__(self, model):
        self.model = model

    def eval(self, term):
        return self.model.eval(term.translate(self.model.ctx), model_completion=True)

    def int(self, term) -> int:
        return self.eval(term).as_long()

    def true(self, formula) -> bool:
        z3 = budgets.z3()

        return z3.is_true(self.eval(formula))


def out_of_time() -> str:
    """Why a query of a proof whose time is spent (`budgets`) is undecided."""
    return f"the proof ran past its time limit of {budgets.KERNEL_S:g} s (of CPU) for a kernel"


def gave_up(solver, budget: int) -> str:
    """Why `solver` answered unknown, in words a refusal can carry."""
    if budgets.spent():
        return out_of_time()
    reason = solver.reason_unknown() or "unknown"
    if reason == "timeout":
        return f"the solver ran past {budgets.BACKSTOP_MS // 1000} s"
    if "resource limit" in reason or reason == "canceled":  # z3 says either when the rlimit is reached
        return f"the solver spent its budget of {budget:,} steps"
    return f"the solver gave up ({reason})"


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
        return self.z3.If(span > 0, (span + abs(step) - 1) / abs(step), self.constant(0))

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
        seed); parsed, the same text is numbered the same way every time."""
        z3 = self.z3
        if budgets.spent():  # the kernel's time is up: undecided, at once
            return z3.unknown, z3.Solver(ctx=self.ctx)
        draft = z3.Solver(ctx=self.ctx)
        draft.add(*facts, *self.side)
        text = draft.sexpr()
        if not any(word in text for word in _NOT_NLSAT):
            # polynomials alone: z3's nlsat first, briefly; it decides at once many queries
            # z3's default solver takes a second for (`r * W + c` with c <= W, which is sat)
            quick = z3.Tactic("qfnra-nlsat", ctx=z3.Context()).solver()
            quick.set("rlimit", budget)
            quick.from_string(text)
            with budgets.watch(quick.ctx, budgets.NLSAT_S):
                result = quick.check()
            try:
                # unsat over the reals is unsat over the integers; a model must be integral
                if result == z3.unsat or result == z3.sat and _integral(quick.model(), z3):
                    return result, quick
            except z3.Z3Exception:  # interrupted as the check ended: the default solver decides
                pass
        solver = z3.Solver(ctx=z3.Context())
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
        z3 = self.z3
        terms = []
        for mono, coef in p.terms.items():
            factors = [self.atom(n) for n in mono]
            product = factors[0] if len(factors) == 1 else z3.Product(*factors) if factors else None
            terms.append(self.constant(coef) if product is None else product if coef == 1 else coef * product)
        return self.constant(0) if not terms else terms[0] if len(terms) == 1 else z3.Sum(*terms)

    def formula(self, f: tuple):
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
        does. An iteration passes one exactly when one of the inner `loops` runs in it
        (`barriers.passing_loops`), whose trip counts are one function of the iteration."""
        z3 = self.z3
        around = [self.poly(p) for p in outer]

        def passes(k):
            return self.any([self.trip_count(loop, around + [k], suffix) >= 1 for loop in loops])

        a, i = self.poly(after), self.poly(index)
        if tag == "passes":
            return passes(a)
        k = z3.Int("k!later", self.ctx)
        return z3.ForAll([k], z3.Implies(z3.And(a < k, k <= i), z3.Not(passes(k))))

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


# what z3's nlsat does not take (divisions, remainders, quantifiers, functions: trip counts)
_NOT_NLSAT = ("(div ", "(mod ", "(forall ", "(declare-fun trips:", "(ite ")

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
