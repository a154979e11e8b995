"""`tile.rand` on the GPU: Philox-4x32-10 per element, bit for bit `cpu.philox.uniform`.

Takes: the `TileLowering`, a `Rand` node and the layout wanted. Gives: `rand(low, node,
want) -> TileValue` of float32 in the layout of the offsets tile.

Guarantees: the mapping of `cpu.philox` (its module doc): key = the seed's two 32-bit
words, counter = (offset's low word, offset's high word, 0, 0), where an offset is taken as
its two's-complement 64-bit pattern (signed dtypes sign-extend, unsigned zero-extend); ten
rounds of `hi, lo = M * c` on 32-bit words (`mul.wide.u32`) with the key stepping by the
Weyl constants between rounds; the value is `(c0 >> 8) * 2^-24`, exact in float32. No state:
the same (seed, offset) gives the same value on every backend, in any order.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import FLOAT, I32, I64
from ..cpu.philox import MULTIPLIERS, ROUNDS, WEYL
from .values import TileValue


def _mulhilo(b, multiplier: int, word: ir.Value) -> tuple:
    product = b.mul(ir.Constant(I64, multiplier), b.zext(word, I64))
    return b.trunc(b.lshr(product, ir.Constant(I64, 32)), I32), b.trunc(product, I32)


def _words(b, value: ir.Value, signed: bool) -> tuple:
    """The low and high 32-bit words of `value`'s 64-bit two's-complement pattern."""
    if value.type != I64:
        value = (b.sext if signed else b.zext)(value, I64)
    return b.trunc(value, I32), b.trunc(b.lshr(value, ir.Constant(I64, 32)), I32)


def philox_word0(b, counter: tuple, keys: list) -> ir.Value:
    """Output word 0 of Philox-4x32 for `counter` under the per-round `keys`."""
    c0, c1, c2, c3 = counter
    for k0, k1 in keys:
        hi0, lo0 = _mulhilo(b, MULTIPLIERS[0], c0)
        hi1, lo1 = _mulhilo(b, MULTIPLIERS[1], c2)
        c0, c1, c2, c3 = b.xor(b.xor(hi1, c1), k0), lo1, b.xor(b.xor(hi0, c3), k1), lo0
    return c0


def rand(low, node, want):
    b = low.b
    offsets = low.tile(node.offsets, want)
    seed = _words(b, low.expr(node.seed), node.seed.dtype.is_signed)
    keys = [tuple(b.add(word, ir.Constant(I32, (r * step) & 0xFFFFFFFF)) for word, step in zip(seed, WEYL))
            for r in range(ROUNDS)]
    zero, signed = ir.Constant(I32, 0), node.offsets.dtype.is_signed
    scale = ir.Constant(FLOAT, 2.0 ** -24)
    regs = []
    for reg in offsets.regs:
        word0 = philox_word0(b, (*_words(b, reg, signed), zero, zero), keys)
        regs.append(b.fmul(b.uitofp(b.lshr(word0, ir.Constant(I32, 8)), FLOAT), scale))
    return TileValue(offsets.layout, regs, node.dtype)
