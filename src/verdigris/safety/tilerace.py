"""The race rules of the tile track: pairs of block accesses, proven or refused.

Takes: a specialized tile-track `ir.Kernel`. Gives: `check_pairs(kernel, analysis,
budget)`, which appends each finding to `analysis.errors` (a `SafetyError` with a code,
at the user's line of one access, naming two blocks, the element they meet on and the tile
each one reaches it through) and records facts and counts in `analysis`.

The rule is the SIMT one with a block as the thread (`tiles` builds the accesses): two
distinct blocks must not touch one element of a global array with at least one plain write.
- a store's tile must be an injective function of the block ids (and of loop variables, so
  a persistent loop must step by `num_blocks`): two blocks storing one tile is VG202;
- a load of an array the kernel stores may only read elements no other block stores (in
  practice: the block's own tile): else VG203;
- tile atomics (`atomic_add/max/min`, `scatter_add/max/min`) never race with each other
  (whatever their ops); mixed with plain access of the same array, VG204;
- a plain scatter must write distinct elements across blocks and within its own block (the
  lanes of the scatter are then among the ids of the query: two lanes of one block writing
  one element is VG202, as the cpu backend reports it; lanes outside the array, which
  `skip_out_of_bounds=True` skips, are no access, as the query asks only about elements
  inside the array); an index the checker cannot see
  (loaded, gathered, carried by a loop) is VG205, never a pass. int32 index arithmetic
  wraps as the hardware's does (`symbolic`): blocks that meet only through a wrap-around
  are a race, named as such, with a hint to widen the index. Accesses inside
  `with vg.unsafe():` are neither proven nor reported;
- two accesses inside `with tile.lock(...)` of one lock array are ordered between blocks
  where the lock indices are equal (`locks.exclusion`: the query asks for indices that
  differ); a race found where a lock is held says which (`locks.held_apart`), and the races
  of a kernel that spins on `tile.atomic_cas` by hand point to `tile.lock`.
Within one block, `blockorder` finds the pairs of statements that may meet (the facts'
`block_meets`, which the lowering orders) and refuses a tile atomic beside a plain access
that may meet it (VG204).
Each pair goes first to the fast path: views (see `tiles`) of one shape, whose tile indices
`fastpath.disjoint` proves distinct for distinct blocks (and, for a scatter against itself,
whose lanes index distinct axes); a pair of axes `(t // C, t % C)` (a persistent loop over
a 2-D grid of tiles) counts as the one index `t` there. Then `injective.distinct_tiles`:
tile indices that are functions of linear tile indices (the grouped orders of matrix
products, in persistent loops or not), proven injective by a query of their own. Then
`witness.search`: two blocks of a small launch that meet, found by evaluation, is the
refusal's counterexample (the facts count them, `witnesses`). Else `solver.collide` on the
element indices decides it and gives the counterexample.
"""
from __future__ import annotations

import dataclasses
import itertools

from ..errors import SafetyError
from ..frontend.access_nodes import as_positions
from . import blockorder, fastpath, injective, locks, solver, witness
from .codes import CODES
from .diagnose import _dims, _plural, unproven_error, wrap_hint, wrap_note
from .algebra import MAX_AXIS_THREADS, Poly, Space
from .trace import Access
from .tiles import LANE, TileAccess, execute

UNIFORM_DEFINED = ("floordiv", "mod")  # kinds of atoms defined by their (Poly) parts alone

HINTS = {
    "VG202": "give each block its own tile (a store index built from tile.bid, or a loop "
             "stepping by tile.num_blocks), add partial results with tile.atomic_add or "
             "tile.scatter_add, or wrap the access in `with vg.unsafe():` if the race is "
             "intended",
    "VG203": "write to a separate output array, or read only the tile this block stores "
             "(the same index)",
    "VG204": "update {array} only with tile atomics (tile.atomic_add, tile.scatter_max, ...) "
             "in this kernel, or do the plain accesses in a separate launch",
    "VG205": "build the indices from tile.bid, tile.num_blocks and tile.arange (in int64, "
             "e.g. int(tile.bid(0)), where a product may pass 2**31), use tile.scatter_add, "
             "or wrap the access in `with vg.unsafe():`",
    "scatter": "use tile.scatter_add (or scatter_max, scatter_min) where lanes may combine "
               "into one element; where the loaded indices are distinct (a permutation), wrap "
               "the scatter in `with vg.unsafe():`; either way, a last tile that runs past the "
               "end of the indices needs mask= (e.g. tile.bid(0) * B + tile.arange(B) < n) or "
               "padding=-1 on the index load with skip_out_of_bounds=True on the scatter, or "
               "its padded lanes write their padding to the element the padding indexes",
    "wrap": "tile.bid and tile.num_blocks are int32, and so is arithmetic on them, which "
            "wraps past 2**31 on a grid that large: widen before multiplying, e.g. "
            "`int(tile.bid(0)) * 4096`",
    "wrap 64": "a 64-bit index wraps past 2**63 where the values shown make it that large, "
               "and the hardware's index is the wrapped one: no array is that long, so keep "
               "the index arithmetic below it (divide before multiplying; a tile index counts "
               "tiles, not elements)",
}


def check_pairs(kernel, analysis, budget: int) -> None:
    from . import CODE_OF_KINDS  # the package imports this module before it defines that

    trace = execute(kernel)
    space = trace.space
    analysis.facts.update(unit_grid_axes=space.unit_grid_axes, unit_block_axes=(),
                          max_axis_threads=MAX_AXIS_THREADS,
                          unsafe_accesses=sum(a.unsafe for a in trace.accesses))
    by_array: dict = {}
    for access in trace.accesses:
        if not access.unsafe:
            by_array.setdefault(access.array, []).append(access)
    fast, witnesses, errors = 0, 0, []
    for accesses in by_array.values():
        for i, a in enumerate(accesses):
            for b in accesses[i:]:
                code = CODE_OF_KINDS.get(tuple(sorted((a.kind, b.kind))))
                if code is None:
                    continue
                own = a is b and a.op == "scatter"  # its lanes must not meet either
                if _proven(a, b, space, own):
                    fast += 1
                    continue
                outcome = None if own else witness.search(a, b, space)
                if outcome is None:
                    analysis.solver_queries += 1
                    outcome = solver.collide(a, b, _with_lanes(space, a.lanes) if own else space,
                                             budget)
                else:
                    witnesses += 1
                if outcome.status == "sat" and outcome.unknowns:
                    errors.append(_data_error(a, b, outcome))
                elif outcome.status == "sat":
                    errors.append(_race_error(code, a, b, outcome))
                elif outcome.status == "unknown":
                    errors.append(unproven_error(a, b, outcome.reason, "blocks", HINTS["VG205"]))
    analysis.errors += locks.with_lock_hint(errors, kernel)
    analysis.facts.update(fast_proofs=fast, solver_queries=analysis.solver_queries, witnesses=witnesses)
    if errors:  # refused already: one block's own order is for a lowering that will not run
        return
    meets = blockorder.of(kernel, budget, trace)  # within one block: for the lowering to order
    analysis.errors += meets.errors
    analysis.solver_queries += meets.queries
    analysis.facts.update(block_meets=meets.pairs, block_meet_sites=as_positions(kernel, meets.pairs),
                          block_meet_queries=meets.queries)
    analysis.facts.update(fast_proofs=fast, solver_queries=analysis.solver_queries)


# ----------------------------------------------------------------------------- proofs


def _proven(a: TileAccess, b: TileAccess, space: Space, own: bool) -> bool:
    """Views of one shape, at tile indices no two distinct blocks share; for a scatter
    against itself, also lanes that index distinct axes (so its elements are distinct)."""
    if a.view is None or b.view is None or a.view.shape != b.view.shape:
        return False
    (tiles_a, pairs_a), (tiles_b, pairs_b) = (_combined(x, space) for x in (a, b))
    apart = pairs_a == pairs_b and fastpath.disjoint(
        Access(a.array, a.kind, tiles_a, a.pc, a.loc, a.unsafe),
        Access(b.array, b.kind, tiles_b, b.pc, b.loc, b.unsafe), space)
    if not apart and (own or not injective.distinct_tiles(a, b, space)):
        return False
    used = [n for n in a.view.lanes if n is not None]
    return not own or (len(set(used)) == len(used) and set(used) == set(a.lanes))


def _combined(x: TileAccess, space: Space) -> tuple:
    """The view's tile indices with each pair of axes `(t // y, t % y)` as the one index `t`
    (and 0 in the second axis): equal pairs mean equal `t` where `y` is one value for every
    block and not 0 on the access's path. Gives (indices, the pairs combined)."""
    tiles, pairs = list(x.view.tiles), set()
    atoms = space.atoms
    for i, j in itertools.permutations(range(len(tiles)), 2):
        q, r = (atoms.get(_atom_of(tiles[k])) for k in (i, j))
        if q is None or r is None or (q.kind, r.kind) != ("floordiv", "mod") \
                or q.definition != r.definition:
            continue
        t, y = q.definition
        if _uniform(y, space) and _nonzero(y, x.pc, space):
            tiles[i], tiles[j] = t, Poly.const(0)
            pairs.add((i, j, y))
    return tuple(tiles), pairs


def _atom_of(p: Poly):
    """The name of the atom `p` is, or None."""
    (mono, coef), = p.terms.items() if len(p.terms) == 1 else (((), 0),)
    return mono[0] if coef == 1 and len(mono) == 1 else None


def _uniform(p: Poly, space: Space) -> bool:
    """`p` has one value for every block (no per-block atom, through definitions)."""
    return all(not n.endswith("@") or space.atoms[n].kind in UNIFORM_DEFINED
               and all(_uniform(part, space) for part in space.atoms[n].definition)
               for n in p.atoms())


def _nonzero(y: Poly, pc: tuple, space: Space) -> bool:
    """`y != 0` wherever `pc` holds: by its interval, or by a conjunct `X + y*Z < 0` of the
    path condition with `X >= 0` (with y = 0 it would read X < 0)."""
    lo, hi = space.interval(y)
    if lo >= 1 or hi <= -1:
        return True
    name = _atom_of(y)
    if name is None:
        return False
    for part in pc[1:] if pc[0] == "and" else (pc,):
        if part[0] == "cmp" and part[1] in ("lt", "le"):
            rest = Poly({m: c for m, c in part[2].terms.items() if name not in m})
            if space.interval(rest)[0] >= (0 if part[1] == "lt" else 1):
                return True
    return False


@dataclasses.dataclass
class _LaneSpace(Space):
    """The space of a plain scatter against itself: its lanes tell writers apart too."""

    lanes: tuple = ()

    def identity(self) -> list:
        return super().identity() + list(self.lanes)


def _with_lanes(space: Space, lanes: tuple) -> Space:
    fields = {f.name: getattr(space, f.name) for f in dataclasses.fields(Space)}
    return _LaneSpace(**fields, lanes=lanes)  # shares the atoms and constraints


# ----------------------------------------------------------------------------- messages


def block_name(ids: dict) -> str:
    """`block 1`, or `block (1, 0)` on a grid of more axes (as the cpu backend says it)."""
    axes = 1 + max((int(n[3]) for n in ids if n.startswith("bid")), default=0)
    coords = [ids.get(f"bid{a}@", 0) for a in range(axes)]
    return f"block {coords[0]}" if axes == 1 else f"block ({', '.join(map(str, coords))})"


_VERBS = {"write": "writes", "read": "reads", "atomic": "updates"}
_THROUGH = {"load": ("loads", "load"), "store": ("stores", "store"),  # op -> its verb after
            "atomic_add": ("adds into", "add into"),  # one block, after both
            "atomic_max": ("takes the maximum into", "take the maximum into"),
            "atomic_min": ("takes the minimum into", "take the minimum into")}


def _through(x: TileAccess, element: tuple, ids: dict, both: bool = False) -> str:
    """How an access reaches `element`: the tile it loads or stores, the scatter's lane."""
    if x.op in _THROUGH:
        tile = tuple(e // n for e, n in zip(element, x.shape))
        return f"{_THROUGH[x.op][both]} the tile at index {tile} of shape {x.shape}"
    if x.lanes and all(n in ids for n in x.lanes):
        return f"{x.op}s it from tile element {_position(x, ids)}"
    return ""


def _position(x: TileAccess, ids: dict) -> tuple:
    """The tile element (one number per axis) of a counterexample's lanes."""
    return tuple(int(ids.get(f"{LANE}{k}x{n}@", 0)) for k, n in enumerate(x.shape))


def _situation(outcome) -> str:
    parts = [f"{label} = {value}" for label, value in outcome.sizes.items()]
    grid = _dims(outcome.launch[0])
    parts.append(f"a grid of {_plural(grid, 'block')}")
    return "with " + ", ".join(parts)


def _race_error(code: str, a: TileAccess, b: TileAccess, outcome) -> SafetyError:
    """`a` ran on the first block of the counterexample, `b` on the second."""
    ids1, ids2 = outcome.threads
    b1, b2 = block_name(ids1), block_name(ids2)
    element = f"{a.array}[{', '.join(map(str, outcome.element))}]"
    if code == "VG202" and b1 == b2:  # one plain scatter, two of its lanes
        p1, p2 = (_position(a, ids) for ids in (ids1, ids2))
        what = f"{b1} writes {element} from tile elements {p1} and {p2} of one scatter"
        return _error(code, a, a, what, outcome)
    if code == "VG202":
        what, loc, other = f"{b1} and {b2} both write {element}", a, b
    elif code == "VG203":
        (w, bw), (r, br) = ((a, b1), (b, b2)) if a.kind == "write" else ((b, b2), (a, b1))
        what, loc, other = f"{bw} writes {element} while {br} reads it", r, w
    else:
        (m, bm), (p, bp) = ((a, b1), (b, b2)) if a.kind == "atomic" else ((b, b2), (a, b1))
        what = f"{bm} updates {element} atomically while {bp} {_VERBS[p.kind]} it without an atomic"
        loc, other = p, m
    what += locks.held_apart(a, b)
    hows = [_through(x, outcome.element, ids) for x, ids in ((a, ids1), (b, ids2))]
    if hows[0] and hows[0] == hows[1] and a.op in _THROUGH:
        what += f" (both {_through(a, outcome.element, ids1, both=True)})"
    elif any(hows):
        what += f" ({' and '.join(f'{n} {h}' for n, h in zip((b1, b2), hows) if h)})"
    return _error(code, loc, other, what, outcome, locks.hint(a, b))


def _error(code: str, at: TileAccess, other: TileAccess, what: str, outcome,
           hint: str = "") -> SafetyError:
    line = other.loc.line
    where = f"; the other access is at line {line}" if line != at.loc.line else ""
    message = f"{CODES[code].title}: {what}{wrap_note(outcome)} ({_situation(outcome)}){where}"
    hint = HINTS[wrap_hint(outcome)] if wrap_hint(outcome) else hint or HINTS[code]
    return SafetyError(message, at.loc, hint.format(array=at.array), code)


def _data_error(a: TileAccess, b: TileAccess, outcome) -> SafetyError:
    """A collision that needs values the checker cannot see (loaded, or carried by a loop)."""
    ids1, ids2 = outcome.threads
    b1, b2 = block_name(ids1), block_name(ids2)
    element = f"{a.array}[{', '.join(map(str, outcome.element))}]"
    if b1 == b2:  # one plain scatter, two of its lanes
        example = (f"{b1} writes {element} from tile elements {_position(a, ids1)} and "
                   f"{_position(a, ids2)} of one scatter")
    else:
        example = f"{b1} {_VERBS[a.kind]} {element} and {b2} {_VERBS[b.kind]} it"
    example += f" if those values allow{wrap_note(outcome)} ({_situation(outcome)})"
    reason = (f"the index depends on {', '.join(outcome.unknowns)}, which the checker cannot "
              f"see; {example}")
    scatter = "scatter" in (a.op, b.op)
    return unproven_error(a, b, reason, "blocks",
                          HINTS[wrap_hint(outcome) or ("scatter" if scatter else "VG205")])

