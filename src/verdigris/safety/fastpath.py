"""Syntactic race-freedom proofs for the common index shapes, so most kernels never reach
the solver.

Takes: two accesses of one array (from `symbolic.execute`) and their `Space`. Gives:
`disjoint(a, b, space) -> bool`: True only when no two *distinct* threads can reach `a` and
`b` at the same element; False means "not proven here" (ask the solver), never "racy".

The proofs, per index dimension, after loop variables are expanded to `start + k*step`:
- Mixed radix: the index is `U + sum_j m_j * d_j` where `U` is the same for every thread,
  each digit `d_j` is a thread id or a loop counter in `[0, R_j)`, and, with digits ordered
  by multiplier, `|m_0| >= 1` and `|m_j| >= |m_{j-1}| * R_{j-1}` (only the last digit may be
  unbounded). Then the index determines every digit. If the digits of all dimensions cover
  every thread id, equal elements mean equal threads. This covers `out[global_id]`,
  `out[k*gid + c]`, grid-stride loops stepping by grid_dim*block_dim, (gid(1), gid(0)) 2-D
  stores, per-thread chunks, and reversals.
- Guarded rows: a group of low digits whose sum `D` is bounded by a guard `D < W` in both
  paths, with `W` the next multiplier, is one digit of range W (`r*W + c` with `c < W`).
- Residues: when the two indices differ by a constant `c` and every thread-dependent term's
  coefficient is a multiple of `g` with `c % g != 0`, they never meet (`out[2*i]` and
  `out[2*i + 1]`).
"""
from __future__ import annotations

import math

from .symbolic import Access, Poly, Space


def disjoint(a: Access, b: Access, space: Space, ids=None) -> bool:
    """`ids`: the thread ids that tell the two threads apart (default: all of them; the
    thread ids only, for two threads of one block)."""
    if len(a.indices) != len(b.indices):
        return False
    covered = set()
    for pa, pb in zip(a.indices, b.indices):
        pa, pb = expand(pa, space), expand(pb, space)
        gap = (pa - pb).value
        if gap is None:
            return False
        if gap:
            step = _thread_gcd(pa)
            return step == 0 or gap % step != 0
        digits = radix(pa, space, _guards(a.pc, space) & _guards(b.pc, space))
        if digits is None:
            return False
        covered |= digits
    return set(space.identity() if ids is None else ids) <= covered


def expand(p: Poly, space: Space) -> Poly:
    """`p` with every loop variable replaced by `start + k*step`."""
    result = Poly({})
    for mono, coef in p.terms.items():
        term = Poly.const(coef)
        for name in mono:
            atom = space.atoms[name]
            if atom.kind == "loopvar":
                start, k, step = atom.definition
                term = term * expand(start + k * step, space)
            else:
                term = term * Poly.atom(name)
        result = result + term
    return result


def _thread_gcd(p: Poly) -> int:
    """The gcd of the coefficients of the terms that depend on the thread."""
    return math.gcd(*(c for m, c in p.terms.items() if any(a.endswith("@") for a in m))) or 0


def _guards(pc: tuple, space: Space) -> set:
    """Conjuncts `D < W` (as the polynomial D - W) that the path condition implies."""
    parts = pc[1:] if pc[0] == "and" else (pc,)
    return {expand(p[2], space) for p in parts if p[0] == "cmp" and p[1] == "lt"}


def radix(p: Poly, space: Space, guards: set):
    """The thread ids that `p` determines by a mixed-radix argument, or None."""
    digits = []  # (|multiplier|, digit atom, its extent (a Poly, None: unbounded), coef > 0)
    for mono, coef in p.terms.items():
        mine = [x for x in mono if x.endswith("@")]
        if not mine:
            continue
        if len(mine) != 1 or mine[0] in {d for _, d, *_ in digits} \
                or space.atoms[mine[0]].kind not in ("thread", "counter"):
            return None
        multiplier = Poly({tuple(x for x in mono if x != mine[0]): abs(coef)})
        digits.append((multiplier, mine[0], _extent(mine[0], space), coef > 0))
    if not digits:
        return set()
    # |m_j| >= |m_{j-1}| * R_{j-1} >= 1 (or the guard) makes every later multiplier positive
    digits.sort(key=lambda d: (max(len(m) for m in d[0].terms), sum(d[0].terms.values())))
    if space.interval(digits[0][0])[0] < 1:
        return None
    low = Poly({})  # the digits below the current one, as a polynomial (for guards)
    for j in range(1, len(digits)):
        low = low + digits[j - 1][0] * Poly.atom(digits[j - 1][1])
        below, extent = digits[j - 1][0], digits[j - 1][2]
        if extent is not None and space.interval(digits[j][0] - below * extent)[0] >= 0:
            continue
        # else a guard `low < m_j`, with low a sum of non-negative terms (0 <= low < m_j)
        if low - digits[j][0] not in guards or not all(positive for *_, positive in digits[:j]):
            return None
    return {d for _, d, _, _ in digits}


def _extent(name: str, space: Space):
    """The number of values a digit takes (None: unbounded)."""
    atom = space.atoms[name]
    if atom.kind == "counter":
        return None
    axis = int(name[3])
    return space.register("block_dim" if name.startswith("tid") else "grid_dim", axis)
