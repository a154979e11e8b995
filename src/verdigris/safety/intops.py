"""Integer operators as the race checker models them: `INT_OPS`, op name -> handler
`(thread, a, b, dtype) -> value` for `symbolic._Thread.e_binary` (and the tile checker).

Takes: the operands as polynomials (`algebra.Poly`) and the thread whose `space`,
`fit` and `scoped` the handlers use. Gives: a polynomial where the result is one exactly
(sums, products, a shift or xor by a constant), a fresh atom defined by its operands
(`//`, `%`), or an unknown of the result's range (bounded where the operands' ranges
bound it: `128 >> k`). Guarantees: a result that may have wrapped past its dtype is a
`wrap` atom of the exact result, never the polynomial itself (`fit`).
"""
from __future__ import annotations

import math

from .algebra import INF, Poly, dtype_range


def _add(t, a, b, dtype):
    return t.fit(a + b, dtype)


def _sub(t, a, b, dtype):
    return t.fit(a - b, dtype)


def _mul_op(t, a, b, dtype):
    return t.fit(a * b, dtype)


def _divmod(op: str):
    def handler(t, a, b, dtype):
        lo, hi = t.space.interval(a)
        d = b.value
        if d is not None and d > 0:
            bounds = (math.floor(lo / d) if lo != -INF else -INF, math.floor(hi / d) if hi != INF else INF) \
                if op == "floordiv" else (0, d - 1)
        else:
            blo, bhi = t.space.interval(b)
            bounds = dtype_range(dtype) if op == "floordiv" or blo < 1 else (0, bhi - 1)
        return t.space.fresh(op, bounds[0], bounds[1], (a, b))
    return handler


def _shift(direction: str):
    def handler(t, a, b, dtype):
        amount = b.value
        if amount is None:  # `128 >> k` in a loop over k: bounded, if not known exactly
            return t.scoped(dtype, "a shift", a, b, bounds=_shifted_bounds(t, a, b, dtype, direction))
        if not 0 <= amount < dtype.bits:
            return t.scoped(dtype, "a shift", a, b)
        if direction == "lshift":
            return t.fit(a * Poly.const(2**amount), dtype)
        return _divmod("floordiv")(t, a, Poly.const(2**amount), dtype)
    return handler


def _shifted_bounds(t, a, b, dtype, direction: str) -> tuple | None:
    """The range of a non-negative `a` shifted by an amount `b` whose range is within the
    dtype's bits, where it fits the dtype; else None (the dtype's range)."""
    (alo, ahi), (blo, bhi) = t.space.interval(a), t.space.interval(b)
    if alo < 0 or ahi == INF or blo < 0 or bhi >= dtype.bits:
        return None
    lo, hi = (alo >> bhi, ahi >> blo) if direction == "rshift" else (alo << blo, ahi << bhi)
    return (lo, hi) if hi <= dtype_range(dtype)[1] else None


def _bitand(t, a, b, dtype):
    mask = b.value if b.value is not None else a.value
    other = a if b.value is not None else b
    if mask is not None and mask >= 0 and (mask + 1) & mask == 0 and t.space.interval(other)[0] >= 0:
        return _divmod("mod")(t, other, Poly.const(mask + 1), dtype)
    return t.scoped(dtype, "a bitwise and", a, b)


def _bit_set(op: str):
    """`a ^ c` and `a | c` of a non-negative `a` and a power of two `c` (a lane's partner
    `t ^ 1`, `t | 16`): `a` plus or minus `c`, by the bit of `a` that `c` selects."""
    def handler(t, a, b, dtype):
        c = b.value if b.value is not None else a.value
        other = a if b.value is not None else b
        if not (c and c > 0 and c & (c - 1) == 0 and t.space.interval(other)[0] >= 0):
            return t.scoped(dtype, f"a bitwise {op}", a, b)
        bit = _divmod("mod")(t, _divmod("floordiv")(t, other, Poly.const(c), dtype), Poly.const(2), dtype)
        # bit 0: both add c; bit 1: xor takes c away, or leaves a as it is
        return t.fit(other + Poly.const(c) - Poly.const(2 * c if op == "xor" else c) * bit, dtype)
    return handler


INT_OPS = {"add": _add, "sub": _sub, "mul": _mul_op, "floordiv": _divmod("floordiv"),
            "mod": _divmod("mod"), "lshift": _shift("lshift"), "rshift": _shift("rshift"),
            "and": _bitand, "xor": _bit_set("xor"), "or": _bit_set("or")}
