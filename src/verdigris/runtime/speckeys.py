"""What a kernel's specialization key says of its arguments, beside their types.

Takes: argument values and shapes. Gives: `MULTIPLE` and `OFF_GRID` (a tile kernel's
integer scalars and array extents specialize on being multiples of MULTIPLE, below 2**30),
`on_grid(shape, strides)`, `divisibility(entry)` (the fact a key entry holds, where its
kind has one: `FACT_AT`), `constexpr_entry(value)` and `type_tag(value)`. Guarantees: the
general path (`dispatch.spec_key`), the generated launchers (`fastpath`) and bundles read
one definition of each fact.
"""
from __future__ import annotations

from ..ir import nodes as N

MULTIPLE = 16  # a tile kernel's integer scalars specialize on being multiples of this
OFF_GRID = ~(N.ON_GRID_EXTENT - MULTIPLE)  # bits an on-grid extent lacks: below MULTIPLE, 2**30 and up


FACT_AT = {"s": 2, "a": 5}  # where a tile kernel's key entry (`spec_key`) holds its fact


def divisibility(entry: tuple) -> bool | None:
    """A specialization key entry's divisibility fact: whether a tile kernel's integer
    scalar is a multiple of MULTIPLE, or its array `on_grid`; None for entries without one
    (constexprs, floats, every SIMT entry)."""
    at = FACT_AT.get(entry[0])
    return entry[at] if at is not None and len(entry) > at else None


def on_grid(shape, strides) -> bool:
    """`ArrayType.on_grid`: every extent a multiple of MULTIPLE below 2**30
    (`ON_GRID_EXTENT`), every stride but the last a multiple of MULTIPLE."""
    extents = strides_left = 0
    for n in shape:
        extents |= n
    for s in strides[:-1]:
        strides_left |= s
    return not (extents & OFF_GRID or strides_left & (MULTIPLE - 1))


def constexpr_entry(value) -> tuple:
    """A constexpr's specialization key entry: its value and its type's name (100 and
    100.0 are equal, and hash alike, but compile to different code: int8 * 100 wraps,
    int8 * 100.0 is float32)."""
    return ("c", value, type_tag(value))


def type_tag(value):
    """The name of `value`'s type, element by element for a tuple."""
    return tuple(map(type_tag, value)) if isinstance(value, tuple) else type(value).__name__
