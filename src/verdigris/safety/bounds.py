"""Bounds proofs: which accesses of a kernel are in bounds, and on what launch condition.

Takes: a specialized `ir.Kernel`. Gives:
- `prove(kernel) -> Proof`: `in_bounds`, the ids (`id(node)`) of the Load, Store and Atomic
  nodes (of a tile kernel: the TileLoad and TileStore nodes whose whole tile lies inside
  the array) proven in bounds on every launch that satisfies `preconditions`; `preconditions`,
  polynomials over launch-uniform values (array shapes, integer scalar parameters, grid and
  block sizes), each meaning `poly <= 0`, with a readable form; `seconds`.
- `launch_guard(kernel, names)`: None when the proofs need no precondition, else a function
  `(values, infos, grid, block) -> bool` (arguments in parameter order, their `ArrayInfo`s,
  the grid and block 3-tuples) saying whether this launch satisfies them, a few integer
  compares. A launch that does not gets the fully checked kernel: an unchecked access is
  never one that could be out of bounds.

How: the race checker's symbolic execution (`symbolic`) of one generic thread gives each
access's index polynomials and path condition. For each axis, `0 <= index < extent` is
proven by, in order: the index's interval (ids are >= 0); a conjunct of the path condition
that bounds the same per-thread part of the index (`i < out.shape[0]` bounds `x[i]` and
`x[i + 1]` when `out.shape[0] + 1 <= x.shape[0] + 1`: the uniform remainder becomes a
precondition unless it is a constant, its interval settles it or a `vg.assume` fact
states it); the index's interval
when its top is below `SMALL_INDEX` (`x[i % 4]` when `4 <= x.shape[0]`, a shared array of
256 indexed by a uint8 element outright); the index's top over the launch, each block id at
`grid_dim - 1` and each lane of a tile at its last position (a tile kernel's
`tile.load(x, (tile.bid(0), 0), (1, C))` when `grid_dim(0) <= x.shape[0]` and
`C <= x.shape[1]`); else z3 (with the same
encoding as the race queries) proves it outright, or the access keeps its check. The model
is the race checker's (64-bit arithmetic wraps, in the tile track too, and so does a `while`
loop's 64-bit variable stepped past its dtype), loops are one arbitrary iteration. Accesses the executor never reaches keep their checks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir import nodes as N
from . import budgets
from .algebra import FALSE, Poly
from .symbolic import _Thread, execute

SMALL_INDEX = 1 << 20  # an index below this whatever the launch is compared with the extent as is


@dataclass
class Proof:
    in_bounds: frozenset = frozenset()
    preconditions: tuple = ()  # of (Poly, text): the launch must have poly <= 0
    seconds: float = 0.0
    solver_queries: int = 0
    narrow: tuple = ()  # "array:axis" (a JSON-safe fact) where checked indices are tested in 32 bits


@dataclass
class _Found:
    node: object
    array: N.ArrayRef
    indices: tuple  # of Poly
    pc: tuple


class Remembering:
    """An executor mixin remembering what runs: the value nodes of `VALUE_NODES` being
    evaluated (`evaluating`, innermost last) and the statement (`statement`), so that a
    recorder can name the node that made each access in `found`, as (node, array, indices,
    path condition)."""

    VALUE_NODES: tuple = ()

    def __init__(self, kernel, space):
        super().__init__(kernel, space)
        self.found: list = []
        self.evaluating: list = []
        self.statement = None

    def eval(self, e):
        if not isinstance(e, self.VALUE_NODES):
            return super().eval(e)
        self.evaluating.append(e)
        try:
            return super().eval(e)
        finally:
            self.evaluating.pop()

    def block(self, stmts) -> None:
        for s in stmts:
            self.statement = s  # a store's access happens while its own statement runs
            super().block([s])

    # A `while` loop's 64-bit variable stepped past its dtype wraps here (the race checker
    # takes it not to): an index the proof reasons about must be the one the kernel computes,
    # or a launch that passes the guard reads past the array.
    inductions_wrap = wraps_64 = True
    defers_64 = False  # every result wraps where it may leave its dtype, as it is made


class _Recorder(Remembering, _Thread):
    """The race checker's executor, remembering which node made each access (of any space)."""

    VALUE_NODES = (N.Load, N.Atomic)

    def access(self, array, kind, indices, loc) -> None:
        polys = self.indices(indices)
        node = self.statement if kind == "write" else self.evaluating[-1]
        if self.pc != FALSE:
            self.found.append((node, array, polys, self.pc))


def _split(p: Poly) -> tuple:
    """(per-thread part, uniform part) of a polynomial."""
    thread = {m: c for m, c in p.terms.items() if any(a.endswith("@") for a in m)}
    return Poly(thread), Poly({m: c for m, c in p.terms.items() if m not in thread})


_NEGATED_CMP = {"lt": "le", "le": "lt"}  # not (p < 0) is -p <= 0; not (p <= 0) is -p < 0


def _conjuncts(f: tuple) -> list:
    """The facts `f` asserts, as a list that all hold (negations pushed into comparisons,
    so `if i >= n or j >= m: return` leaves `i < n` and `j < m`; of a disjunction, the facts
    common to every alternative)."""
    if f[0] == "and":
        return [c for part in f[1:] for c in _conjuncts(part)]
    if f[0] == "or":  # what every alternative asserts (paths that rejoin after an early exit)
        first, *others = [_conjuncts(part) for part in f[1:]]
        return [c for c in first if all(c in other for other in others)]
    if f[0] == "not":
        inner = f[1]
        if inner[0] == "or":
            return [c for part in inner[1:] for c in _conjuncts(("not", part))]
        if inner[0] == "cmp" and inner[1] in _NEGATED_CMP:
            return [("cmp", _NEGATED_CMP[inner[1]], -inner[2])]
        if inner[0] == "not":
            return _conjuncts(inner[1])
    return [f]


@dataclass
class _Prover:
    kernel: N.Kernel
    space: object
    preconditions: dict = field(default_factory=dict)  # non-constant part -> `poly <= 0`
    queries: int = 0
    # whether z3 may settle what the rules do not: not for tiles, whose proofs the code
    # generator waits for (a tile index the rules miss keeps its mask)
    solver: bool = True

    def extent(self, array: N.ArrayRef, axis: int) -> Poly:
        if array.type.shape is not None:  # local and shared arrays: static shapes
            return Poly.const(array.type.shape[axis])
        return self.space.shape(array.name, axis)

    def settle(self, need: Poly, pending: dict) -> bool:
        """Whether `need <= 0` holds, or can be a launch precondition (added to `pending`)."""
        lo, hi = self.space.interval(need)
        if hi <= 0 or self.assumed(need):
            return True
        if lo > 0 or need.value is not None or not self.launch_visible(need):
            return False
        pending[need] = need
        return True

    def assumed(self, need: Poly) -> bool:
        """Whether a `vg.assume` fact gives `need <= 0` outright: `need` is `q + k` for a
        fact `q <= 0` (k <= 0), `q < 0` (k <= 1) or `q == 0` (either sign of q, k <= 0)."""
        slack = {"le": 0, "lt": 1, "eq": 0}
        for fact in (c for f in self.space.assumed for c in _conjuncts(f)):
            if fact[0] != "cmp" or fact[1] not in slack:
                continue
            sides = (fact[2], -fact[2]) if fact[1] == "eq" else (fact[2],)
            if any((need - q).value is not None and (need - q).value <= slack[fact[1]] for q in sides):
                return True
        return False

    def launch_visible(self, need: Poly) -> bool:
        """Whether a launch can evaluate `need` (see `launch_guard`): not, for instance,
        when it holds the extent of the dynamic shared array, which no argument carries."""
        params = {p.name for p in self.kernel.array_params}
        return all(not atom.startswith("shape:") or atom.rsplit(":", 2)[1] in params
                   for mono in need.terms for atom in mono)

    def bound(self, index: Poly, extent: Poly, pc: tuple, pending: dict) -> bool:
        """`0 <= index < extent` on every path through `pc`, perhaps under preconditions."""
        thread, offset = _split(index)
        lower = self.space.interval(index)[0] >= 0
        upper = self.space.interval(index - extent)[1] < 0
        for c in _conjuncts(pc):
            if c[0] != "cmp" or c[1] not in ("lt", "le"):
                continue
            c_thread, c_uniform = _split(c[2])
            strict = 1 if c[1] == "lt" else 0
            if not upper and thread and c_thread == thread:
                # thread < -c_uniform + (1 - strict)  =>  index <= offset - c_uniform - strict
                upper = self.settle(offset - c_uniform - Poly.const(strict) - extent + Poly.const(1), pending)
            if not lower and thread and c_thread == -thread:
                # thread >= c_uniform + strict  =>  index >= offset + c_uniform + strict
                lower = self.settle(-(offset + c_uniform + Poly.const(strict)), pending)
        if not upper:
            upper = self.below_its_bound(index, extent, pending) or self.below_its_top(index, extent, pending)
        if not lower and self.solver:
            lower = self.solve(pc, index, Poly.const(0), "lt")
        if not upper and lower and self.solver:
            upper = self.solve(pc, index, extent, "ge")
        return lower and upper

    def below_its_bound(self, index: Poly, extent: Poly, pending: dict) -> bool:
        """`index < extent` where the index's own interval is small (a lane, a thread id of a
        known block, `i % 4`, an element of a uint8 array): under the precondition that the
        extent exceeds its top, if the extent is not a constant that settles it."""
        top = self.space.interval(index)[1]
        return top < SMALL_INDEX and self.settle(Poly.const(top + 1) - extent, pending)

    def below_its_top(self, index: Poly, extent: Poly, pending: dict) -> bool:
        """`index < extent` where the index is a sum of per-thread atoms with non-negative
        coefficients, each with a top the launch knows (a block id's is `grid_dim - 1`, a
        lane's or a thread id's a constant), plus a uniform part: under the precondition
        that the extent exceeds that top."""
        top = Poly({})
        for mono, coef in index.terms.items():
            part = Poly({mono: coef})
            if any(a.endswith("@") for a in mono):
                most = self.atom_top(mono[0]) if len(mono) == 1 and coef >= 0 else None
                if most is None:
                    return False
                part = Poly.const(coef) * most
            top = top + part
        return self.settle(top - extent + Poly.const(1), pending)

    def atom_top(self, name: str) -> Poly | None:
        if name.startswith("bid") and f"gdim{name[3]}" in self.space.atoms:
            return Poly.atom(f"gdim{name[3]}") - Poly.const(1)
        lo, hi = self.space.bounds(name)
        return Poly.const(int(hi)) if 0 <= lo and hi < SMALL_INDEX else None

    def solve(self, pc: tuple, index: Poly, limit: Poly, violation: str) -> bool:
        """Whether z3 proves `index <violation> limit` impossible under `pc`."""
        z3 = budgets.z3()

        from .encoder import _Encoder

        self.queries += 1
        enc = _Encoder(self.space, z3)
        i, bound = enc.poly(index), enc.poly(limit)
        facts = [enc.formula(pc), i < bound if violation == "lt" else i >= bound]
        facts += [enc.formula(f) for f in self.space.domain + self.space.uniform_domain]
        return enc.decide(facts, budgets.BOUNDS)[0] == z3.unsat

    def prove(self, found: _Found) -> dict | None:
        """The launch conditions (each `need <= 0`) under which `found` is in bounds, or None."""
        pending: dict = {}
        for axis, index in enumerate(found.indices):
            if not self.bound(index, self.extent(found.array, axis), found.pc, pending):
                return None
        return pending

    def require(self, need: Poly) -> None:
        """`need <= 0` as a launch precondition; of `v + c <= 0` and `v + d <= 0`, the stronger."""
        variable = Poly({m: c for m, c in need.terms.items() if m})
        known = self.preconditions.get(variable)
        if known is None or need.terms.get((), 0) > known.terms.get((), 0):
            self.preconditions[variable] = need


def _executors(track: str):
    """(the race checker's execution, the recorder of nodes) of a track; the tile
    checker's modules are imported only for tile kernels."""
    if track == "simt":
        return execute, _Recorder
    from .tiles import Recorder, execute as execute_tiles

    return execute_tiles, Recorder


def prove(kernel: N.Kernel) -> Proof:
    start = time.perf_counter()
    if kernel.track not in ("simt", "tile"):
        return Proof()
    trace, recorder = _executors(kernel.track)
    try:
        space = trace(kernel).space  # the launch domain, as the race checker sets it up
        run = recorder(kernel, space)
        run.block(kernel.body)
    except Exception:  # a construct the model lacks: no proofs, every access keeps its check
        return Proof(seconds=time.perf_counter() - start)
    found = [_Found(*f) for f in run.found]  # (node, array, indices, pc) from either recorder
    prover = _Prover(kernel, space, solver=kernel.track == "simt")
    # node id -> the launch conditions its accesses need; None once one of them is not proven
    # (the conditions of a node that keeps its check are not required of launches)
    verdict: dict = {}
    for access in found:
        key = id(access.node)
        if verdict.get(key, {}) is not None:
            needs = _proves(prover, access)
            verdict[key] = None if needs is None else {**verdict.get(key, {}), **needs}
    for needs in verdict.values():
        for need in needs or ():
            prover.require(need)
    narrow = narrow_axes([f for f in found if verdict[id(f.node)] is None]) if kernel.track == "simt" else []
    for name, axis in narrow:
        prover.require(space.shape(name, axis) - Poly.const(N.NARROW_EXTENT))
    preconditions = tuple((p, _describe(p, space)) for p in prover.preconditions.values())
    return Proof(frozenset(k for k, needs in verdict.items() if needs is not None), preconditions,
                 time.perf_counter() - start, prover.queries,
                 tuple(f"{name}:{axis}" for name, axis in narrow))


def _proves(prover: _Prover, found: _Found) -> dict | None:
    """The launch conditions under which `found` is proven in bounds, or None: an index the
    model cannot take keeps its check."""
    try:
        return prover.prove(found)
    except Exception:
        return None


def narrow_axes(checked: list) -> list:
    """(array, axis) of the global arrays' axes that a checked access indexes with an
    integer of 32 bits or fewer: under the precondition that the extent is at most
    N.NARROW_EXTENT, the code generator tests such an index in 32 bits (one compare, where a
    64-bit test of a sign-extended index takes three instructions). Global arrays only:
    a launch cannot state a condition on the dynamic shared array, whose extent no
    argument carries."""
    return sorted({(f.array.name, k) for f in checked if f.array.type.space == "global"
                   for k, index in enumerate(f.node.indices)
                   if isinstance(index, N.Cast) and index.value.dtype.is_int and index.value.dtype.bits <= 32})


def _describe(p: Poly, space) -> str:
    """`p <= 0` as the user would write it: positive terms on the left, the rest right."""
    def side(terms):
        parts = []
        for mono, coef in sorted(terms):
            names = [space.atoms[a].label or a for a in mono]
            parts.append("*".join(([str(coef)] if coef != 1 or not names else []) + names))
        return " + ".join(parts) or "0"
    left = [(m, c) for m, c in p.terms.items() if c > 0]
    right = [(m, -c) for m, c in p.terms.items() if c < 0]
    return f"{side(left)} <= {side(right)}"


# ----------------------------------------------------------------------------- launch guard


def _atom_source(name: str, slots: dict) -> str:
    """A Python expression for a uniform atom's value at a launch (see `launch_guard`)."""
    if name.startswith("shape:"):
        _, array, axis = name.rsplit(":", 2)
        return f"infos[{slots[array]}].shape[{axis}]"
    if name.startswith("param:"):
        return f"int(values[{slots[name[6:]]}])"
    kind, axis = name[:-1], name[-1]
    return {"gdim": f"grid[{axis}]", "bdim": f"block[{axis}]"}[kind]


def launch_guard(kernel: N.Kernel, names: list):
    conditions = kernel.facts.get("bounds_preconditions", ())
    if not conditions:
        return None
    slots = {name: i for i, name in enumerate(names)}
    checks = []
    for poly, _ in conditions:
        terms = [" * ".join([str(c)] + [_atom_source(a, slots) for a in m]) for m, c in sorted(poly.terms.items())]
        checks.append(f"({' + '.join(terms)}) <= 0")
    source = f"lambda values, infos, grid, block: {' and '.join(checks)}"
    guard = eval(source, {"int": int})  # noqa: S307 -- built above from the kernel's own atoms
    guard.condition = " and ".join(checks)  # runtime.fastpath inlines it into launchers
    return guard
