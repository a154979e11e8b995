"""Syntactic race-freedom proofs for the common index shapes, so most kernels never reach
the solver.

Takes: two accesses of one array (from `symbolic.execute`) and their `Space`. Gives:
`disjoint(a, b, space) -> bool`: True only when no two *distinct* threads can reach `a` and
`b` at the same element; False means "not proven here" (ask the solver), never "racy".

The proofs, per index dimension, after loop variables are expanded to `start + k*step`
(dimensions that fit none of them are skipped: the others may determine the thread):
- Mixed radix: the index is `U + sum_j m_j * d_j` where `U` is the same for every thread,
  each digit `d_j` is a thread id or a loop counter in `[0, R_j)`, and, with digits ordered
  by multiplier, `|m_0| >= 1` (by its range, or a guard `m_0 > 0` of both paths) and
  `|m_j| >= |m_{j-1}| * R_{j-1}` (only the last digit may be
  unbounded). Then the index determines every digit. If the digits of all dimensions cover
  every thread id, equal elements mean equal threads. This covers `out[global_id]`,
  `out[k*gid + c]`, grid-stride loops stepping by grid_dim*block_dim, (gid(1), gid(0)) 2-D
  stores, per-thread chunks, and reversals.
- Guarded rows: a group of low digits whose sum `D` is bounded by a guard `D < W` in both
  paths, with `W` the next multiplier, is one digit of range W (`r*W + c` with `c < W`).
- Split digits: a floor division or modulo with a known range [0, hi] (`t // 16`, `i % 4`)
  is a digit of extent hi + 1, and `t // c` and `t % c` together determine `t` (a thread's
  tile of C in register-blocked SGEMM: rows from `t // 16`, columns from `t % 16`).
- Wrapped indices: an int32 (or int64) index that may leave its dtype, `c + k*wrap(x)`, is
  read as `c + k*x` where `x` takes fewer values than the modulus (`unwrapped`): wrapping is
  one-to-one there (`b * num_blocks(1) + h` on the y and z axes).
- Residues: when the two indices differ by a constant `c` and every thread-dependent term's
  coefficient is a multiple of `g` with `c % g != 0`, they never meet (`out[2*i]` and
  `out[2*i + 1]`).
"""
from __future__ import annotations

import math

from .algebra import Poly, Space
from .trace import Access


def disjoint(a: Access, b: Access, space: Space, ids=None) -> bool:
    """`ids`: the thread ids that tell the two threads apart (default: all of them; the
    thread ids only, for two threads of one block)."""
    if len(a.indices) != len(b.indices):
        return False
    covered = set()
    for pa, pb in zip(a.indices, b.indices):
        exact = [expand(unwrapped(x, space), space) for x in (pa, pb)]
        # equal exact values stand for the wrapped ones (`unwrapped`); a constant gap between
        # them need not be the wrapped values' gap (it may differ by the modulus)
        pa, pb = exact if (exact[0] - exact[1]).value == 0 else (expand(pa, space), expand(pb, space))
        gap = (pa - pb).value
        if gap:
            step = _thread_gcd(pa)
            if step == 0 or gap % step != 0:
                return True
        # an axis whose index is not one of these shapes tells nothing: the others may
        digits = radix(pa, space, _guards(a.pc, space) & _guards(b.pc, space)) if gap == 0 else None
        covered |= digits or set()
    for name in list(covered):  # t // c and t % c together determine t
        part = _split_digit(name, space)
        if part is not None and any(_split_digit(other, space) == (part[0], 1 - part[1], part[2])
                                    for other in covered):
            covered.add(part[0])
    return set(space.identity() if ids is None else ids) <= covered


def unwrapped(p: Poly, space: Space) -> Poly:
    """An index `c + k*wrap(x)` (`c`, `k` one value for every thread; `wrap`: a narrow result
    that may leave its dtype) as `c + k*x'`, where `x'` is `x` with its own wraps of a
    multiple modulus undone (`wrap(h + wrap(b*n)) == wrap(h + b*n)`) and takes fewer values
    than the modulus: wrapping is one-to-one there, so two threads' indices are equal only
    where the exact ones are (`b * num_blocks(1) + h` in int32, below 65535**2 < 2**32).
    Else `p` itself. (Only for one index against the same: indices a constant apart may
    meet where their exact values are that constant plus the modulus apart.)"""
    wraps = {x for mono in p.terms for x in mono if space.atoms[x].kind == "wrap"}
    if len(wraps) != 1:
        return p
    (name,) = wraps
    if any(x.endswith("@") and x != name for mono in p.terms for x in mono) \
            or any(mono.count(name) > 1 for mono in p.terms):
        return p
    inner, modulus = space.atoms[name].definition
    exact = _undo_wraps(inner, modulus.value, space)
    lo, hi = space.interval(exact)
    if hi - lo >= modulus.value:
        return p
    result = Poly({})
    for mono, coef in p.terms.items():
        if name in mono:
            result = result + Poly({tuple(x for x in mono if x != name): coef}) * exact
        else:
            result = result + Poly({mono: coef})
    return result


def _undo_wraps(p: Poly, modulus: int, space: Space) -> Poly:
    """`p` with each wrap of a modulus `modulus` divides replaced by the value it wraps (one
    residue modulo `modulus`: sums and products keep it)."""
    result = Poly({})
    for mono, coef in p.terms.items():
        term = Poly.const(coef)
        for name in mono:
            atom = space.atoms[name]
            if atom.kind == "wrap" and atom.definition[1].value % modulus == 0:
                term = term * _undo_wraps(atom.definition[0], modulus, space)
            else:
                term = term * Poly.atom(name)
        result = result + term
    return result


def _bounded_part(name: str, space: Space) -> bool:
    """Whether `name` is a floor division or modulo with a known range [0, hi]."""
    atom = space.atoms[name]
    return atom.kind in ("floordiv", "mod") and atom.lo >= 0 and atom.hi != math.inf


def _split_digit(name: str, space: Space):
    """(thread id atom, 0 for floor division or 1 for modulo, c) for `t // c` or `t % c`
    with a constant c > 0, else None."""
    atom = space.atoms[name]
    if atom.kind not in ("floordiv", "mod"):
        return None
    x, c = atom.definition
    ids = list(x.terms)
    if c.value is None or c.value < 1 or x.terms != {ids[0]: 1} or len(ids[0]) != 1 \
            or not ids[0][0].startswith("tid"):
        return None
    return ids[0][0], 0 if atom.kind == "floordiv" else 1, c.value


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
        if len(mine) != 1 or mine[0] in {d for _, d, *_ in digits} or not (
                space.atoms[mine[0]].kind in ("thread", "counter") or _bounded_part(mine[0], space)):
            return None
        multiplier = Poly({tuple(x for x in mono if x != mine[0]): abs(coef)})
        digits.append((multiplier, mine[0], _extent(mine[0], space, guards), coef > 0))
    if not digits:
        return set()
    # |m_j| >= |m_{j-1}| * R_{j-1} >= 1 (or the guard) makes every later multiplier positive;
    # the first is at least 1 by its interval, or by a guard `-m_0 < 0` of both paths (a
    # run-time `s` under `if s > 0:`, in `out[i * s]`: multipliers are the launch's values)
    # among equal multipliers, the digit of fewest values first (a loop of one trip, `bid + k`
    # with k < 1, is the digits k then bid); only the last may be unbounded
    digits.sort(key=lambda d: (max(len(m) for m in d[0].terms), sum(d[0].terms.values()),
                               math.inf if d[2] is None or d[2].value is None else d[2].value, d[2] is None))
    if space.interval(digits[0][0])[0] < 1 and -digits[0][0] not in guards:
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


def _extent(name: str, space: Space, guards: set = frozenset()):
    """The number of values a digit takes (None: unbounded). A loop counter k has the bound
    a guard `a*k < b` gives it (a loop over range(0, 32, 8): 8*k < 32, four values)."""
    atom = space.atoms[name]
    if atom.kind == "counter":
        bounds = [-(g.terms.get((), 0)) // g.terms[(name,)] + (-(g.terms.get((), 0)) % g.terms[(name,)] > 0)
                  for g in guards if set(g.terms) <= {(name,), ()} and g.terms.get((name,), 0) > 0]
        return Poly.const(min(bounds)) if bounds else None
    if _bounded_part(name, space):  # x // c or x % c, in [0, hi]
        return Poly.const(atom.hi + 1)
    axis = int(name[3])
    return space.register("block_dim" if name.startswith("tid") else "grid_dim", axis)
