"""Concrete values of a `Space`'s polynomials and formulas, at many points at once.

Takes: a `Space` and values for the atoms left free (`grid`: atom name -> a NumPy array;
the arrays broadcast together, one axis per atom enumerated; int64 for a search, dtype
object for exact integers). Gives: `Evaluator(space, grid)` with `poly(p)`, `formula(f)`
and `atom(name)`: each derived atom through its definition, with the IR's semantics
(floor division and modulo, by zero giving 0; `pow2` of e is floor(2**e), 0 for e < 0;
`x >> k`; loop variables `start + k*step`; a wrapped value is the one of its atom's
interval congruent to the exact value, as two's complement wrap-around gives; the trip
count of a `for` loop over a range nothing leaves early (`Space.ranged`) in the iteration
its atom names, the range's length, as the solver's encoder states it), and `Opaque` for
any other atom that `grid` does not give (a loaded value, any other trip count, a truth
value). Derived values are memoized per evaluator.

Used by `coverage` (every thread of one block) and `witness` (blocks of small launches).
"""
from __future__ import annotations

import functools

import numpy as np

from .algebra import Poly


class Opaque(Exception):
    """A value enumeration cannot give."""


class Evaluator:
    """`exact`: the grid's arrays hold Python integers (dtype object), and so do constants
    (no int64 overflow); else int64 throughout."""

    def __init__(self, space, grid: dict, exact: bool = False):
        self.space, self.grid, self.memo = space, grid, {}
        self.number = int if exact else np.int64

    def poly(self, p: Poly):
        total = self.number(0)
        for mono, coef in p.terms.items():
            term = self.number(coef)
            for name in mono:
                term = term * self.atom(name)
            total = total + term
        return total

    def atom(self, name: str):
        if name in self.grid:
            return self.grid[name]
        if name in self.memo:
            return self.memo[name]
        atom = self.space.atoms[name]
        if atom.kind == "trips":
            value = self._trip_count(name)
        elif atom.kind in DEFINED:
            value = DEFINED[atom.kind](self, *atom.definition)
        else:
            raise Opaque(name)
        modulus = atom.definition[1].value if atom.kind == "wrap" else None
        if modulus is not None and (self.number is int or modulus < 2**63):
            value = atom.lo + (value - atom.lo) % modulus  # the value of [lo, hi] congruent to it
            # (`%`: a modulus of 2**64 is no int64, and exact values are Python integers)
        # (a 64-bit wrap in int64: the arithmetic wrapped already, as two's complement does)
        self.memo[name] = value
        return value

    def _trip_count(self, name: str):
        """len(range(start, stop, step)) of the loop the trip count atom `name` counts, in
        the iteration of the loops around it that the atom names (`encoder.range_length`)."""
        loop = self.space.loops_counted.get(name)
        if loop not in self.space.ranges:
            raise Opaque(name)
        counters = [next(iter(p.atoms())) for p in self.space.atoms[loop].definition]
        at = {c: self.poly(p) for c, p in zip(counters, self.space.atoms[name].definition)}
        start, stop, step = self.space.ranges[loop]
        start, stop = self._at(start, at), self._at(stop, at)
        span = stop - start if step > 0 else start - stop
        return np.where(span > 0, (span + abs(step) - 1) // abs(step), 0)

    def _at(self, p: Poly, at: dict):
        """`p` where the loop counters in `at` take those values (loop variables as
        `start + k*step`); its block ids and the launch's values as they are."""
        total = self.number(0)
        for mono, coef in p.terms.items():
            term = self.number(coef)
            for name in mono:
                atom = self.space.atoms[name]
                if name in at:
                    term = term * at[name]
                elif atom.kind == "loopvar":
                    start, k, step = atom.definition
                    term = term * self._at(start + k * step, at)
                elif name.startswith("bid") or not name.endswith("@"):
                    term = term * self.atom(name)
                else:  # a value of one iteration the range's ends cannot depend on
                    raise Opaque(name)
            total = total + term
        return total

    def formula(self, f: tuple):
        tag = f[0]
        if tag in ("true", "false"):
            return np.bool_(tag == "true")
        if tag == "cmp":
            x = self.poly(f[2])
            return {"lt": x < 0, "le": x <= 0, "eq": x == 0, "ne": x != 0}[f[1]]
        if tag == "not":
            return ~np.asarray(self.formula(f[1]), bool)
        if tag in ("and", "or"):
            parts = [self.formula(g) for g in f[1:]]  # (of shapes that broadcast together)
            return functools.reduce(np.logical_and if tag == "and" else np.logical_or, parts)
        raise Opaque(tag)


def _floordiv(points, x, y):
    a, b = points.poly(x), points.poly(y)
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.floor_divide(a, safe))


def _mod(points, x, y):
    a, b = points.poly(x), points.poly(y)
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.mod(a, safe))


def _floor_power(points, exponent):
    """floor(2**e): 0 where e < 0 (a shift by a negative amount is no such thing)."""
    e = points.poly(exponent)
    return np.where(e < 0, 0, np.left_shift(points.number(1), np.maximum(e, 0)))


DEFINED = {  # atom kind -> (evaluator, *its definition) -> its values
    "floordiv": _floordiv,
    "mod": _mod,
    "ite": lambda points, c, a, b: np.where(points.formula(c), points.poly(a), points.poly(b)),
    "loopvar": lambda points, start, k, step: points.poly(start + k * step),
    "pow2": _floor_power,
    "rshift": lambda points, x, exponent: np.right_shift(points.poly(x), points.poly(exponent)),
    "wrap": lambda points, x, modulus: points.poly(x),  # (`Evaluator.atom` wraps it)
}
