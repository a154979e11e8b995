"""Within one block of the tile track: which accesses may meet, for the lowering to order.

Takes: the trace of a tile kernel (`tiles.execute`) and a solver budget. Gives:
`of(kernel, budget, trace=None) -> Meets`, once per kernel (`safety.order_block` needs it
before the race checks, which then take it: the lowering may run beside them), and
`block_meets(trace, budget) -> Meets`: `pairs`, the pairs of IR nodes (as `pair(id, id)`)
of one array, at least one of them a plain write, that one block may make touch a common
element (in any iterations of the loops around them); `errors`, a `SafetyError` for each
tile atomic beside a plain access of one array that one block may make meet (VG204, with
the block, the element and both statements), or VG205 where the solver gave up on such a
pair; `queries`, how many solver queries it took.

Why: a tile kernel means its statements in program order for its block (docs/safety.md,
"One block's statements"). The lowering spreads each statement over the block's threads
by the tile's layout, so two statements that touch one element may do it from two
threads; the lowering (`tile.ordering`) puts a barrier between them unless both access it
from the same thread. A pair left out of `pairs` is proven never to meet in one block:
it costs nothing. Atomics are not ordered against each other (they commute, as between
blocks), and a tile atomic beside a plain access is refused, as the docs promise (VG204);
a one-element atomic (`tile.atomic_cas`, `tile.atomic_xchg`) runs once for the block, so
beside a plain access it is ordered as a store is.

Guarantees: sound. A pair is left out only on the solver's "unsat" (the same block ids,
each access with its own lanes, loop counters and loaded values: a superset of what one
block can do); accesses inside `vg.unsafe()` are taken to meet whatever they access (they
are ordered, never refused); one statement meets itself only in two iterations of the loops around it, as the lanes
of one execution are another rule's (a plain scatter's lanes
must write distinct elements, VG202).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from ..errors import SafetyError
from ..frontend.access_nodes import pair
from . import injective, solver
from .codes import CODES
from .diagnose import unproven_error

ORDERED = {("read", "write"), ("write", "write"), ("atomic", "read"), ("atomic", "write")}

HINT_MIXED = ("update {array} only with tile atomics (tile.atomic_add, tile.scatter_max, ...) in "
              "this kernel, write the plain result to another array, or do the plain accesses "
              "in a separate launch")


@dataclass
class Meets:
    pairs: frozenset = frozenset()
    errors: list = field(default_factory=list)
    queries: int = 0


_FOUND: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # kernel -> Meets


def of(kernel, budget: int, trace=None) -> Meets:
    """`block_meets` of `kernel` (`trace`: its `tiles.execute`, if made), once per kernel:
    the lowering may need it before the race checks run (beside the compile)."""
    found = _FOUND.get(kernel)
    if found is None:
        from .tiles import execute

        found = _FOUND[kernel] = block_meets(trace or execute(kernel), budget)
    return found


def block_meets(trace, budget: int) -> Meets:
    by_array: dict = {}
    for access in trace.accesses:
        by_array.setdefault(access.array, []).append(access)
    pairs, errors, queries = set(), [], 0
    for accesses in by_array.values():
        for i, a in enumerate(accesses):
            for b in accesses[i:]:
                kinds = tuple(sorted((a.kind, b.kind)))
                key = pair(a.node, b.node)
                if kinds not in ORDERED or key in pairs:  # (a node recorded on two paths: each)
                    continue
                outcome, again = None, a.node == b.node  # one statement, perhaps recorded twice
                if again and (not a.loops or _iterations_apart(a, trace.space)
                              or injective.iterations_apart(a, trace.space)):  # (its own lanes: another rule)
                    meet = False
                elif a.unsafe or b.unsafe:
                    meet = True
                else:
                    queries += 1
                    outcome = solver.collide(a, b, trace.space, budget, one_block=True,
                                             differ=a.loops if again else (),
                                             example="atomic" in kinds)  # (a refusal's example)
                    meet = outcome.status != "unsat"
                if not meet:
                    continue
                if "atomic" not in kinds or a.unsafe or b.unsafe or a.node == b.node \
                        or _once_per_block(a, b):
                    pairs.add(key)
                elif outcome.status == "sat":
                    errors.append(_mixed_error(a, b, outcome))
                else:
                    errors.append(unproven_error(a, b, outcome.reason, "the statements of one block",
                                                 HINT_MIXED.format(array=a.array)))
    return Meets(frozenset(pairs), errors, queries)


def _once_per_block(a, b) -> bool:
    """Whether the atomic of the pair is a one-element one (`tile.atomic_cas`,
    `tile.atomic_xchg`): it runs once for the block, in the block's program order (its
    lowering takes the block's order with every thread, then lets thread 0 run it), so
    beside a plain access it is ordered as a store would be."""
    atomic = a if a.kind == "atomic" else b
    return atomic.op == "" and atomic.shape == ()


def _unrolled(p, space):
    """`p` with each loop variable `start + k*step` written out, where the step is a constant."""
    for name in p.atoms():
        atom = space.atoms[name]
        if atom.kind == "loopvar":
            start, k, step = atom.definition
            if not step.atoms():
                p = p.substitute({name: start + k * step})
    return p


def _iterations_apart(a, space) -> bool:
    """Whether two iterations of the loops around `a`, a tile access, reach different tiles
    (so different elements): each loop counter is, alone, `c * counter + rest` along one
    axis of its tile index (c a nonzero constant), and nothing else in the index changes
    between iterations (block ids, sizes and parameters only). The fast path before the
    solver, for a loop over a row's tiles."""
    if a.view is None:
        return False
    tiles = [_unrolled(p, space) for p in a.view.tiles]
    steady = all(not n.endswith("@") or n.startswith("bid") or n in a.loops
                 for p in tiles for n in p.atoms())
    alone = set()
    for p in tiles:
        moving = [(m, c) for m, c in p.terms.items() if any(n in a.loops for n in m)]
        if len(moving) == 1 and len(moving[0][0]) == 1 and moving[0][1] != 0:
            alone.add(moving[0][0][0])
        elif moving:
            return False
    return steady and alone == set(a.loops)


def _mixed_error(a, b, outcome) -> SafetyError:
    """VG204 for an atomic `m` and a plain access `p` that one block makes meet."""
    from .tilerace import block_name

    (m, p) = (a, b) if a.kind == "atomic" else (b, a)
    block = block_name(outcome.threads[0])
    element = f"{a.array}[{', '.join(map(str, outcome.element))}]"
    verb = "writes" if p.kind == "write" else "reads"
    message = (f"{CODES['VG204'].title}: {block} updates {element} atomically at line "
               f"{m.loc.line} ({m.op or 'atomic'}) and {verb} it without an atomic at line "
               f"{p.loc.line} ({p.op or 'a scalar access'}), with {_sizes(outcome)}; atomics "
               "and plain accesses of one array are not ordered")
    return SafetyError(message, p.loc, HINT_MIXED.format(array=a.array), "VG204")


def _sizes(outcome) -> str:
    from .diagnose import _dims, _plural

    parts = [f"{label} = {value}" for label, value in outcome.sizes.items()]
    return ", ".join(parts + [f"a grid of {_plural(_dims(outcome.launch[0]), 'block')}"])
