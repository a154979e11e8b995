"""What a kernel's launch guarantees, told to LLVM.

Takes: a kernel lowering (`codegen.lower`: its entry block, arrays, scalar parameters and
the kernel's facts). Gives `assume_launch_conditions(low)`: at the kernel's entry, an
`llvm.assume` of each launch condition of the bounds proofs (`facts["launch_conditions"]`)
in the variant that uses the proofs. Guarantees: nothing in the checked variant (it runs
exactly the launches that break the conditions), and only conditions over values the
kernel reads at entry (array extents, integer scalar parameters, grid and block sizes).
"""
from __future__ import annotations

from itertools import accumulate

import numpy as np
from llvmlite import ir

from .dtypes import I64


def assume_launch_conditions(low) -> None:
    """The bounds proofs' launch conditions (`sum of terms <= 0`, `facts["launch_conditions"]`,
    each term a monomial of launch values and its coefficient), which hold on every launch of
    the variant that uses the proofs (the launch guard sends the others to the checked
    variant, which has none), as `llvm.assume`s: LLVM may fold the tests they settle,
    such as a mask `arange(C) < x.shape[1]` under `C <= x.shape[1]`. Each is stated as
    `positive terms <= negative terms` in arithmetic that does not wrap (`nsw`), the form
    LLVM's range analysis reads. The guard compares exact integers: a condition whose
    sides could leave int64 on a launch that passes it (`x.shape[0] + z.shape[0]` of
    broadcast views 2**63 - 1 long) is not assumed, as a side that overflowed would be
    poison."""
    if not low.proven:
        return
    for terms in low.kernel.facts.get("launch_conditions", ()):  # ((atoms, coef), ...)
        right = _launch_sum(low, {m: -c for m, c in terms if c < 0})
        left = right and _launch_sum(low, {m: c for m, c in terms if c > 0}, right[1])
        if left:
            low.entry.call("llvm.assume", ir.VoidType(), low.entry.b.icmp_signed("<=", left[0], right[0]))


def _launch_sum(low, terms: dict, ceiling: tuple | None = None) -> tuple | None:
    """(sum of `coef * atoms...` over `terms` in i64, its interval); None where an atom
    cannot be read at entry, or a product or partial sum could leave int64. `ceiling`:
    the interval of a sum the guard puts this one below (partial sums of terms that are
    never negative stay below it too)."""
    b, total, spans = low.entry.b, ir.Constant(I64, 0), []
    for mono, coef in sorted(terms.items()):
        term, span = ir.Constant(I64, coef), (coef, coef)
        for atom in mono:
            value = _launch_value(low, atom)
            span = _times(span, _launch_range(low, atom))
            if value is None or not _in_int64(span):
                return None
            term = b.mul(term, value, flags=["nsw"])
        total = b.add(total, term, flags=["nsw"])
        spans.append(span)
    partial = list(accumulate(spans, lambda a, s: (a[0] + s[0], a[1] + s[1]), initial=(0, 0)))
    reach = partial[-1]
    if ceiling is not None and all(s[0] >= 0 for s in spans):
        partial = [(lo, min(hi, ceiling[1])) for lo, hi in partial]
    return (total, reach) if all(map(_in_int64, partial)) else None


def _launch_value(low, atom: str) -> ir.Value | None:
    """The i64 value of a launch-uniform atom of the safety model (`shape:x:1`,
    `param:n`, `gdim0`, `bdim0`); None for one this kernel cannot read at entry."""
    b = low.entry.b
    if atom.startswith("shape:"):
        _, name, axis = atom.rsplit(":", 2)
        array = low.arrays.get(name)
        return None if array is None or int(axis) >= len(array.shape) else array.shape[int(axis)]
    if atom.startswith("param:"):
        value, dtype = low.params.get(atom[6:]), low.kernel.param(atom[6:]).dtype
        if value is None or not dtype.is_int or dtype.bits >= 64:
            return value if value is not None and dtype.is_int and dtype.is_signed else None
        return (b.sext if dtype.is_signed else b.zext)(value, I64)
    kind = {"gdim": "grid_dim", "bdim": "block_dim"}.get(atom[:-1])
    return None if kind is None else b.zext(low.launch_dim(kind, int(atom[-1])), I64)


def _launch_range(low, atom: str) -> tuple:
    """The values a launch-uniform atom (`_launch_value`'s) may take: a parameter its
    dtype's, an extent any int64 >= 0, a grid or block size a positive int32."""
    if atom.startswith("param:"):
        info = np.iinfo(low.kernel.param(atom[6:]).dtype.np)
        return int(info.min), int(info.max)
    return (0, 2**63 - 1) if atom.startswith("shape:") else (1, 2**31 - 1)


def _times(a: tuple, b: tuple) -> tuple:
    """The interval of the products of two intervals."""
    products = [x * y for x in a for y in b]
    return min(products), max(products)


def _in_int64(span: tuple) -> bool:
    return -2**63 <= span[0] and span[1] < 2**63
