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
from .algebra import Space, per_thread, rename_formula
from .encoder import _depends, _Encoder
from .trace import Access

COPIES = ("1", "2")


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
            one_block: bool = False, differ: tuple = (), at: tuple = (), example: bool = True) -> Outcome:
    """`apart`: only threads of different warps (see `order.unordered`). `one_block`: any
    two executions of `a` and `b` by one block of the tile track, ordered or not (its lanes
    and loop counters are each access's own), instead of unordered threads; `differ`: atoms
    (loop counters) not all equal in the two (two iterations of one statement); `at`: the
    values of some atoms of thread 1 and of thread 2 (atom name -> value, each), a point
    to decide at (its "unsat" is about that point alone); `example` False: a "sat"
    without its counterexample (whether the two meet is all the caller needs; the readable
    example took a block order's query from 0.05 s to 0.45 s)."""
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
    facts += [enc.atom(per_thread(n, c)) == v for c, point in zip(COPIES, at) for n, v in point.items()]
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
    if not example:
        return Outcome("sat")
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
