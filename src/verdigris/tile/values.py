"""Tile values as the block's threads hold them, during the GPU lowering.

Takes nothing. Gives `TileValue` (a tile in registers: its layout, one entry per register,
its dtype), `Lazy` (a register computed where first used), `forced(reg)` and
`forced_all(value)` (the registers computed). Guarantees: a `Lazy` is computed once, at its
first use; only straight-line consumers take lazy registers, so that use dominates the
others (`lower`'s "Register pressure and latency").
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..types import DType
from .layout import Layout


@dataclass
class TileValue:
    """A tile in registers: `regs[r]` is register r of `layout` (register form of dtype),
    or, in what `TileLowering.tile(..., lazy=True)` gives, a `Lazy` that computes it."""

    layout: Layout
    regs: list
    dtype: DType


class Lazy:
    """A register computed where it is first used, once (`get`). Elementwise results and
    loaded vectors' elements are lazy, so a chain of elementwise ops runs register by
    register (each value dies soon after it is made, and a load's bfloat16 pair stays
    packed in 32 bits until its use) instead of op by op over the whole tile. Only
    straight-line consumers take lazy registers, so the first use dominates the others."""

    __slots__ = ("make", "value")

    def __init__(self, make):
        self.make, self.value = make, None

    def get(self) -> ir.Value:
        if self.value is None:
            self.value = self.make()
        return self.value


def forced(reg) -> ir.Value:
    return reg.get() if isinstance(reg, Lazy) else reg


def forced_all(value: TileValue) -> TileValue:
    if not any(isinstance(r, Lazy) for r in value.regs):
        return value
    return TileValue(value.layout, [forced(r) for r in value.regs], value.dtype)
