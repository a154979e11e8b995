"""Barrier divergence: every thread of the grid reaches each grid_barrier() together, every
thread of a block each barrier(), every lane of a warp each syncwarp(), shuffle, vote, match
and reduction.

Takes: a `symbolic.Trace` (its `Checkpoint`s: barriers, warp operations, and `break`s and
`return`s that leave loops containing them, each with its path condition and the loops
around it). Gives: `check(trace, budget) -> (errors, solver queries)`: a `SafetyError`
VG210 (grid or block) or VG214 (warp) for each checkpoint two threads of the grid (of one
block, of one warp) may disagree on: one reaches it, the other does not, at the same
iteration of the loops around it. The error names both threads, and the condition that splits them, at its source line.

Partial warps: in a block whose thread count is not a multiple of 32, the last warp has
fewer lanes. Votes, matches, reductions and syncwarp() name only the lanes it has
(`codegen.warp.member_mask`), but a shuffle that reads a lane it lacks reads nothing
defined on a GPU (the cpu backend stops there). A shuffle whose source lane may be one of
those (`Checkpoint.source`: lane + d, lane ^ m, or the lane given; with a width below 32,
that position in the lane's segment where it is inside it, else the lane's own) for a
thread of that warp is VG214 too, naming the thread, the lane it reads and the lanes the
warp has.
A block that is not specialized (`verdigris check` of a launch without a literal block,
`verdigris compile` without --block) is assumed to be whole warps (the `whole_warps` fact):
no launch runs such a proof, since each launch specializes its kernel on its block, and
that check sees the partial warp.

How: a path condition that is uniform by its atoms (`uniform.Scopes`: only sizes,
parameters, block ids, uniform loads and loop counters; for a grid barrier only sizes,
parameters and loop counters) passes without a solver; otherwise z3 looks for two threads
of one block (one warp; for a grid barrier, any two threads of the grid) at equal loop
counters, with the facts of uniformity between them where they share a block, where the
condition holds for one and not the other. For a
partial warp, z3 looks for one thread of it under the path condition whose shuffle reads a
missing lane. A timeout is a
refusal too, with the reason.
"""
from __future__ import annotations

import linecache
import math
import re

from ..errors import SafetyError
from ..ir import nodes as N
from ..simt import warp_size
from . import budgets, diagnose
from .algebra import per_thread, rename_formula
from .codes import CODES
from .encoder import _Encoder
from .solver import COPIES, Outcome, gave_up, readable, situation_of
from .uniform import Scopes, at_least, equalities

CODE = {"grid": "VG210", "block": "VG210", "warp": "VG214"}
UNIFORM_OVER = {"grid": "launch", "block": "block", "warp": "warp"}  # what a checkpoint needs


def check(trace, budget: int) -> tuple:
    scopes = Scopes(trace.space)
    lanes = _last_warp_lanes(trace.space)
    errors, queries, seen = [], 0, set()
    for point in trace.checkpoints:
        if (point.loc, point.scope) in seen:
            continue
        error = None
        if lanes and point.source is not None:
            queries += 1
            error = _in_partial_warp(point, trace, lanes, budget)
        if error is None and not at_least(scopes.of(point.pc), UNIFORM_OVER[point.scope]):
            queries += 1
            error = _split(point, trace, budget)
        if error is not None:
            seen.add((point.loc, point.scope))
            errors.append(error)
    return errors, queries


def _last_warp_lanes(space) -> int:
    """The lanes of the block's last warp where it has fewer than 32, else 0 (also for a
    block that is not specialized: assumed to be whole warps)."""
    if space.block is None:
        return 0
    return math.prod(space.block) % warp_size


def _in_partial_warp(point, trace, lanes: int, budget: int):
    """A refusal if a thread of the block's last warp, which has only `lanes` lanes, may
    reach the warp operation `point`, else None."""
    z3 = budgets.z3()

    space = trace.space
    enc = _Encoder(space, z3)
    facts = [enc.formula(rename_formula(f, "1")) for f in (point.pc, *space.domain)]
    facts += [enc.formula(f) for f in space.uniform_domain]
    facts.append(enc.poly(space.linear().rename("1")) >= math.prod(space.block) - lanes)
    source = enc.poly(point.source.rename("1"))  # a lane the warp lacks: undefined on a GPU
    facts += [lanes <= source, source < warp_size]
    result, solver = enc.decide(facts, budget)
    if result == z3.unsat:
        return None
    if result != z3.sat:
        return SafetyError(f"{CODES['VG214'].title}: could not prove that no lane of the block's "
                           f"last warp, which has {lanes} lanes, reads a missing lane with {point.what}: "
                           f"{gave_up(solver, budget)}", point.loc, diagnose.HINTS["VG214 partial"],
                           "VG214")
    ids = space.identity()
    model = readable(solver, enc, ids, True, budget)
    _, threads, sizes, launch = situation_of(model, enc, space, ids, ("1",))
    outcome = Outcome("sat", threads, (), sizes, launch)
    return diagnose.partial_warp_error(point.what, point.loc, lanes, outcome, model.int(source))


def _split(point, trace, budget: int):
    z3 = budgets.z3()

    space = trace.space
    enc = _Encoder(space, z3)
    reach = [enc.formula(rename_formula(point.pc, c)) for c in COPIES]
    facts = [reach[0], z3.Not(reach[1])]
    for copy in COPIES:
        facts += [enc.formula(rename_formula(f, copy)) for f in space.domain]
    facts += [enc.formula(f) for f in space.uniform_domain]
    ids = space.identity()
    same_block = enc.all([enc.atom(per_thread(n, "1")) == enc.atom(per_thread(n, "2"))
                          for n in ids if n.startswith("bid")])
    threads_differ = enc.any([enc.atom(per_thread(n, "1")) != enc.atom(per_thread(n, "2"))
                              for n in ids if n.startswith("tid")])
    facts += [enc.atom(per_thread(k, "1")) == enc.atom(per_thread(k, "2")) for k in point.loops]
    together = None
    if point.scope == "grid":  # any two threads; uniformity facts only where they share a block
        facts.append(z3.Or(z3.Not(same_block), threads_differ))
        facts.append(z3.Implies(same_block, enc.all(equalities(enc, space))))
    else:
        facts += [same_block, threads_differ]
        if point.scope == "warp":
            warp = space.warp()
            together = enc.poly(warp.rename("1")) == enc.poly(warp.rename("2"))
            facts.append(together)
        facts += equalities(enc, space, together)
    result, solver = enc.decide(facts, budget)
    if result == z3.unsat:
        return None
    code = CODE[point.scope]
    if result != z3.sat:
        reason = gave_up(solver, budget)
        return SafetyError(f"{CODES[code].title}: could not prove that {_subject(point)} is reached "
                           f"by all of them together: {reason}", point.loc, diagnose.HINTS[code], code)
    model = readable(solver, enc, ids, True, budget)
    _, threads, sizes, launch = situation_of(model, enc, space, ids)
    culprit = _culprit(point.pc, trace.origins, enc, model)
    outcome = Outcome("sat", threads, (), sizes, launch)
    return diagnose.divergence_error(code, _subject(point), point.loc,
                                     culprit and _condition(culprit), outcome, point.scope)


def _subject(point) -> str:
    if point.what in ("break", "return"):
        barrier = f"{N.BARRIER_NAMES[point.scope]}()" + \
            (" or a warp operation" if point.scope == "warp" else "")
        return f"this `{point.what}` (it leaves a loop with {barrier} inside)"
    return point.what


def _culprit(f: tuple, origins: dict, enc, model):
    """The Loc of a part of `f` (with a known origin) that the two threads disagree on."""
    if f in origins:
        one, two = (model.true(enc.formula(rename_formula(f, c))) for c in COPIES)
        if one != two:
            return origins[f]
    if f[0] in ("and", "or", "not"):
        for part in f[1:]:
            found = _culprit(part, origins, enc, model)
            if found is not None:
                return found
    return None


def _condition(loc) -> tuple:
    """(the condition's source text, loc): `i < n` for `if i < n:`, else the statement."""
    text = linecache.getline(loc.file, loc.line).strip()
    match = re.match(r"(?:if|elif|while)\s+(.*?)\s*:\s*(#.*)?$", text)
    return (match.group(1) if match else text.rstrip(":")), loc
