"""Integer operators as the race checker models them: `INT_OPS`, op name -> handler
`(thread, a, b, dtype) -> value` for `symbolic._Thread.e_binary` (and the tile checker).

Also `Wrapping`, the executor's mixin that gives results as the hardware holds them
(`fit`, `observe`: wrap-around modulo 2**bits).

Takes: the operands as polynomials (`algebra.Poly`) and the thread whose `space`,
`fit` and `scoped` the handlers use. Gives: a polynomial where the result is one exactly
(sums, products, a shift or xor by a constant, `1 << k` as a `pow2` atom), a fresh atom
defined by its operands (`//`, `%`, `128 >> k`), or an unknown of the result's range.
Guarantees: a result that may have wrapped past its dtype is a `wrap` atom of the exact
result, never the polynomial itself (`fit`), or, 64-bit, the exact polynomial that its
users wrap (`observe`: sums and products by constants commute with wrapping; a product of
two unknown values wraps where it is made).

Division by a constant d > 1 takes the terms that are multiples of d out first (exact), so
`i // 256` and `i % 4` of `i = 256 * block + thread` are `block` and `thread % 4`.

Powers of two: a `pow2` atom of exponent e is floor(2**e), 0 for e < 0 (what halving a
power of two reaches: `invariants` writes `j //= 2` from a power of two as one, with an
exponent that falls each iteration). `is_power_of_two` tells where a value surely is one: a
constant, or a power of two times `pow2` atoms whose intervals exclude 0 (`1 << k` for any
shift amount within the dtype's bits; a halving sequence where its loop's condition
`j > 0` holds). Such a value divided by a constant power of two is again a `pow2` atom
(`j = k // 2`), exactly, with the floor.

Bit operations with a power of two: `a ^ c`, `a | c` and `a & c` of a non-negative `a` and
a `c` known to be a power of two are `a` plus or minus `c`, or `c` or 0, by the bit
`(a >> log2(c)) % 2`: a lane's partner `t ^ 1`, a bitonic sort's `t ^ j` with
`j = 1 << jj`, or with `j` halving in a while loop. The masks around such a `c` are
remainders: `a & (c - 1)` is `a % c` (`t & 31`, the CUDA samples' bitonic sort's
`t & (stride - 1)`) and `a & ~(c - 1)` is `a - a % c`. Other bit operations are unknowns.
"""
from __future__ import annotations

import math

from .. import types as T
from .algebra import INF, Poly, compare, dtype_range


def wrapped(dtype) -> str:
    """How a diagnosis names an integer result that wrapped."""
    return f"{dtype.name} arithmetic"


class Wrapping:
    """The executor's integer results as the hardware holds them (a mixin of
    `symbolic._Thread`, which gives `space` and `wrapped`, (value, dtype name) -> its wrap
    atom): `fit` for the result of an operation, `observe` where a value is used."""

    # Whether 64-bit results wrap in the model (the tile track's race model leaves 64-bit
    # wrap-around out, as before: its symbolic-size proofs need products of extents).
    wraps_64 = True
    # Whether a 64-bit sum, difference or product stays the exact polynomial until its value
    # is used (`observe`): it equals the hardware's modulo 2**64, which sums and products
    # keep, so `(tile * 8 + warp) * 768 + lane` is one wrap, not four nested ones.
    defers_64 = True
    # While a `vg.assume` fact is evaluated (`symbolic._Thread.assumed`): the list its parts'
    # ranges go to. The launch check evaluates every part exactly and refuses a launch where
    # one leaves its dtype, so there each part is its exact value, stated within the dtype.
    exact: list | None = None

    def fit(self, p: Poly, dtype: T.DType) -> Poly:
        """The result `p` of an integer operation in `dtype`: `p` where it surely fits,
        else `p` wrapped into the dtype's range (`observe`); a 64-bit result is left exact
        where `defers_64` (its users observe it)."""
        if self.exact is not None:
            return self._within(p, dtype)
        if dtype.bits == 64 and self.defers_64:
            return p
        return self.observe(p, dtype)

    def observe(self, value, dtype: T.DType):
        """`value` as the `dtype` value the hardware holds, where what it is matters (compared,
        indexing, divided, shifted right, masked, a loop's bounds): `value` if it surely
        fits, else a `wrap` atom defined by it (the same one for the same value): a function
        of it, so two threads' results are equal exactly where the hardware's are, not
        wherever an unknown could make them."""
        if not isinstance(value, Poly) or not dtype.is_int:
            return value
        if self.exact is not None:
            return self._within(value, dtype)
        lo, hi = self.space.interval(value)
        rlo, rhi = dtype_range(dtype)
        if rlo <= lo and hi <= rhi or (dtype.bits == 64 and not self.wraps_64):
            return value
        key = (value, dtype.name)
        if key not in self.wrapped:
            self.wrapped[key] = self.space.fresh("wrap", rlo, rhi, (value, Poly.const(rhi - rlo + 1)),
                                                 wrapped(dtype))
        return self.wrapped[key]

    def _within(self, p: Poly, dtype: T.DType) -> Poly:
        """`p` exactly, with the fact that it lies within `dtype` (in `exact`)."""
        least, most = dtype_range(dtype)
        self.exact += [compare("le", Poly.const(least), p), compare("le", p, Poly.const(most))]
        return p


def _add(t, a, b, dtype):
    return t.fit(a + b, dtype)


def _sub(t, a, b, dtype):
    return t.fit(a - b, dtype)


def _mul_op(t, a, b, dtype):
    # a product of two values the solver does not know wraps where it is made: z3 finds a
    # wrap-around of `i * s` with s = 2**62 in `i * s * 4`, not in one wrap of the whole
    if a.value is None and b.value is None:
        return t.observe(a * b, dtype)
    return t.fit(a * b, dtype)


def _multiples(a: Poly, d: int) -> tuple:
    """`a` as (the sum of its terms whose coefficients are multiples of d, the rest)."""
    multiple = Poly({m: c for m, c in a.terms.items() if c % d == 0})
    return multiple, a - multiple


def _divmod(op: str):
    def handler(t, a, b, dtype):
        d = b.value
        if op == "floordiv" and d is not None and is_power_of_two(t.space, b) and is_power_of_two(t.space, a):
            return power_of_two(t.space, log2(t.space, a) - log2(t.space, b))  # `k // 2`
        if d is not None and d > 1:
            # (d*m + r) // d is m + r // d, and (d*m + r) % d is r % d: `i // 256` and
            # `i % 4` of i = 256*block + thread are the block and thread % 4, exactly,
            # and r itself where 0 <= r < d, which leaves the solver no division to split on
            multiple, rest = _multiples(a, d)
            if multiple.terms:
                rlo, rhi = t.space.interval(rest)
                if op == "mod":
                    return rest if 0 <= rlo and rhi < d else handler(t, rest, b, dtype)
                whole = Poly({m: c // d for m, c in multiple.terms.items()})
                return whole if 0 <= rlo and rhi < d else whole + handler(t, rest, b, dtype)
        lo, hi = t.space.interval(a)
        if d is not None and d > 0:
            bounds = (math.floor(lo / d) if lo != -INF else -INF, math.floor(hi / d) if hi != INF else INF) \
                if op == "floordiv" else (0, d - 1)
        elif op == "mod":  # the divisor's sign, below its magnitude; 0 for a zero divisor
            blo, bhi = t.space.interval(b)
            rlo, rhi = dtype_range(dtype)
            bounds = (max(rlo, min(0, blo + 1)), min(rhi, max(0, bhi - 1)))
        else:  # |a // b| <= |a| (0 for b == 0); only INT_MIN // -1 leaves the dtype, and wraps
            blo = t.space.interval(b)[0]
            most = max(abs(lo), abs(hi))
            bounds = (min(lo, 0), max(hi, 0)) if blo >= 0 else (-most, most)
            return t.fit(t.space.defined(op, bounds[0], bounds[1], (a, b)), dtype)
        return t.space.defined(op, bounds[0], bounds[1], (a, b))
    return handler


def _shift(direction: str):
    def handler(t, a, b, dtype):
        amount = b.value
        if amount is None:
            blo, bhi = t.space.interval(b)
            if not (0 <= blo and bhi < dtype.bits):
                return t.scoped(dtype, "a shift", a, b)
            if direction == "lshift":  # `1 << k` in a loop over k: a product, as in `_mul_op`
                return _mul_op(t, a, power_of_two(t.space, b), dtype)
            lo, hi = _shifted_bounds(t, a, b) or dtype_range(dtype)  # `128 >> k`
            return t.space.fresh("rshift", lo, hi, (a, b))
        if not 0 <= amount < dtype.bits:
            return t.scoped(dtype, "a shift", a, b)
        if direction == "lshift":
            return t.fit(a * Poly.const(2**amount), dtype)
        return _divmod("floordiv")(t, a, Poly.const(2**amount), dtype)
    return handler


def power_of_two(space, exponent: Poly) -> Poly:
    """floor(2**exponent), for an exponent whose range is below a dtype's bits: a constant
    where the exponent is one, else a `pow2` atom defined by it, so the solver knows its
    value, and bit operations know where it is a power of two."""
    if exponent.value is not None:
        return Poly.const(_floor_power(exponent.value))
    lo, hi = space.interval(exponent)
    return space.fresh("pow2", _floor_power(lo), _floor_power(hi), (exponent,))


def _floor_power(e) -> int:
    return 2 ** int(e) if e >= 0 else 0


def _shifted_bounds(t, a, b) -> tuple | None:
    """The range of a non-negative `a` shifted right by a non-negative amount `b`; None
    where `a` may be negative or unbounded."""
    (alo, ahi), (blo, bhi) = t.space.interval(a), t.space.interval(b)
    if alo < 0 or ahi == INF:
        return None
    return int(alo) >> int(bhi), int(ahi) >> int(blo)


def is_power_of_two(space, p: Poly) -> bool:
    """Whether `p` is a power of two wherever it is evaluated: a constant one, or one times
    `pow2` atoms that are not 0 there (`1 << k`; `j` halving while `j > 0`)."""
    if len(p.terms) != 1:
        return False
    (mono, coef), = p.terms.items()
    return coef > 0 and coef & (coef - 1) == 0 and all(
        space.atoms[n].kind == "pow2" and space.atoms[n].lo >= 1 for n in mono)


def _selected_bit(t, a: Poly, c: Poly, dtype) -> Poly:
    """The bit of a non-negative `a` that the power of two `c` selects: (a >> log2(c)) % 2."""
    return _divmod("mod")(t, _shift("rshift")(t, a, log2(t.space, c), dtype), Poly.const(2), dtype)


def log2(space, c: Poly) -> Poly:
    """log2 of a power of two (`is_power_of_two`) as a polynomial."""
    (mono, coef), = c.terms.items()
    exponent = Poly.const(coef.bit_length() - 1)
    for name in mono:
        exponent = exponent + space.atoms[name].definition[0]
    return exponent


def _bitand(t, a, b, dtype):
    for mask, other in ((b, a), (a, b)):
        if t.space.interval(other)[0] < 0:
            continue
        if is_power_of_two(t.space, mask):  # `t & k` with k = 1 << kk: k where t has that bit, else 0
            return mask * _selected_bit(t, other, mask, dtype)
        below = mask + Poly.const(1)
        if is_power_of_two(t.space, below):  # `t & (c - 1)`, the bits below c: t % c
            return _divmod("mod")(t, other, below, dtype)
        above = -mask
        if is_power_of_two(t.space, above):  # `t & ~(c - 1)` (two's complement: -c): t rounded down to c
            return t.fit(other - _divmod("mod")(t, other, above, dtype), dtype)
    return t.scoped(dtype, "a bitwise and", a, b)


def _powers(space, c: Poly) -> list | None:
    """The powers of two that add up to `c`: `c` itself where it is one (constant or not),
    the set bits of a positive constant; None otherwise."""
    if is_power_of_two(space, c):
        return [c]
    if c.value is not None and c.value > 0:
        return [Poly.const(1 << k) for k in range(c.value.bit_length()) if c.value >> k & 1]
    return None


def _bit_set(op: str):
    """`a ^ c` and `a | c` of a non-negative `a` and a power of two `c`, constant or not (a
    lane's partner `t ^ 1`, `t | 16`, a bitonic sort's `t ^ j` with j = 1 << jj), or a
    positive constant `c` (`lane ^ 5`): `a` plus or minus each power of two of `c`, by the
    bit of `a` that it selects."""
    def handler(t, a, b, dtype):
        for c, other in ((b, a), (a, b)):
            powers = _powers(t.space, c) if t.space.interval(other)[0] >= 0 else None
            if powers:
                # bit 0: both add the power; bit 1: xor takes it away, or leaves a as it is
                taken = Poly.const(2 if op == "xor" else 1)
                result = other
                for power in powers:
                    result = result + power - taken * power * _selected_bit(t, other, power, dtype)
                return t.fit(result, dtype)
        return t.scoped(dtype, f"a bitwise {op}", a, b)
    return handler


INT_OPS = {"add": _add, "sub": _sub, "mul": _mul_op, "floordiv": _divmod("floordiv"),
            "mod": _divmod("mod"), "lshift": _shift("lshift"), "rshift": _shift("rshift"),
            "and": _bitand, "xor": _bit_set("xor"), "or": _bit_set("or")}
