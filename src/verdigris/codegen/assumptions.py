"""What a kernel's launch guarantees, told to LLVM.

Takes: a kernel lowering (`codegen.lower`: its entry block, arrays, scalar parameters and
the kernel's facts). Gives `assume_launch_conditions(low)`: at the kernel's entry, an
`llvm.assume` of each launch condition of the bounds proofs (`facts["launch_conditions"]`)
in the variant that uses the proofs. Guarantees: nothing in the checked variant (it runs
exactly the launches that break the conditions), and only conditions over values the
kernel reads at entry (array extents, integer scalar parameters, grid and block sizes).
"""
from __future__ import annotations

from llvmlite import ir

from .dtypes import I32, I64


def assume_launch_conditions(low) -> None:
    """The bounds proofs' launch conditions (`sum of terms <= 0`, `facts["launch_conditions"]`,
    each term a monomial of launch values and its coefficient), which hold on every launch of
    the variant that uses the proofs (the launch guard sends the others to the checked
    variant, which has none), as `llvm.assume`s: LLVM may fold the tests they settle,
    such as a mask `arange(C) < x.shape[1]` under `C <= x.shape[1]`. Each is stated as
    `positive terms <= negative terms` in arithmetic that does not wrap (the values are
    shapes, sizes and small products of them), the form LLVM's range analysis reads."""
    if not low.proven:
        return
    for terms in low.kernel.facts.get("launch_conditions", ()):  # ((atoms, coef), ...)
        sides = [_launch_sum(low, {m: c for m, c in terms if c > 0}),
                 _launch_sum(low, {m: -c for m, c in terms if c < 0})]
        if None not in sides:
            low.entry.call("llvm.assume", ir.VoidType(), low.entry.b.icmp_signed("<=", *sides))


def _launch_sum(low, terms: dict) -> ir.Value | None:
    """Sum of `coef * atoms...` over `terms`, in i64 (None: an atom the kernel cannot read
    at entry)."""
    b, total = low.entry.b, ir.Constant(I64, 0)
    for mono, coef in sorted(terms.items()):
        term = ir.Constant(I64, coef)
        for atom in mono:
            value = _launch_value(low, atom)
            if value is None:
                return None
            term = b.mul(term, value, flags=["nsw"])
        total = b.add(total, term, flags=["nsw"])
    return total


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
    sreg = {"gdim": "nctaid", "bdim": "ntid"}.get(atom[:-1])
    if sreg is None:
        return None
    return b.zext(low.entry.call(f"llvm.nvvm.read.ptx.sreg.{sreg}.{'xyz'[int(atom[-1])]}", I32), I64)
