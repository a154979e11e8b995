"""wgmma's A operand from registers: the 32-bit words of each fragment, made from the float32
registers of an earlier product's accumulator (attention's probabilities, P @ V).

Takes: the lowering (its builder `b`, emitter `em` and `lane`), A's kind, and per fragment
the registers `mma_layout.a_fragments` names: for each 8-column block j of the k step, rows
+0 and +8 (h), columns 8j + 2 * (lane % 4) + e, j-major. Gives `words(low, kind, regs)`: per
fragment the four words `ptx.wgmma_ra` takes.

- 16-bit kinds (k16): pair (j, h) is word 2j + h as it stands (mma.sync's A layout),
  rounded by one `cvt.rn.{bf16,f16}x2`.
- fp8 (k32): word v1 + 2 * v2 holds row +8 * v1, columns 16 * v2 + 4 * (lane % 4) + 0..3
  (CUTLASS's ALayout_64x32), four consecutive columns where a lane holds pairs 8 apart:
  lane t's columns 4t .. 4t + 3 of each half are pair t // 2 of lanes 2 * (t % 2) and
  2 * (t % 2) + 1 of its quad. Each pair is rounded to fp8 by one `cvt.rn.satfinite` (the
  cast's rounding: to nearest-even, saturating), and each row of a fragment takes two
  `shfl.sync.idx` and four `prmt` within the quad. Staged through shared memory instead,
  P cost every consumer warp group two block-wide barriers per product and, in software,
  three conversions per element (sm_90a's fp8 attention ran at 0.44x the bfloat16 one).

Guarantees: the words hold A's elements each rounded once to A's dtype, the bits a cast
then a shared-memory staging would give (an fp8 NaN may lose its sign: a NaN either way).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32, i32
from . import ptx

KINDS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")  # what A may be from registers
FULL_MASK = ir.Constant(I32, 0xFFFFFFFF)
# `prmt` selectors: result byte i is byte (selector >> 4i) & 7 of the two words a:b (b: 4-7).
LOW_HALVES, HIGH_HALVES = 0x5410, 0x7632  # a's and b's low 16 bits; their high 16 bits
SWAPPED_LOW, SWAPPED_HIGH = 0x1054, 0x3276  # the same with b's first


def words(low, kind: str, fragments: list) -> list:
    """Per fragment (a list of registers, `mma_layout.a_fragments`' order) its four words."""
    if kind.startswith("float8"):
        return _fp8_words(low, kind, fragments)
    ptx_type = ptx.WGMMA[kind][1]
    return [[ptx.pack_half2(low.em, regs[2 * w], regs[2 * w + 1], ptx_type) for w in range(4)]
            for regs in fragments]


def _prmt(low, a: ir.Value, b: ir.Value, selector: ir.Value) -> ir.Value:
    return low.em.call("llvm.nvvm.prmt", I32, a, b, selector)


def _fp8_pair(low, kind: str, first: ir.Value, second: ir.Value) -> ir.Value:
    """Two float32 values rounded to fp8, `first` in the low byte, as an i32."""
    return low.b.zext(ptx.cvt_fp8x2(low.em, first, second, kind), I32)


def _fp8_words(low, kind: str, fragments: list) -> list:
    b = low.b
    quad = b.and_(low.lane, i32(3))
    odd, upper = b.and_(quad, i32(1)), b.lshr(quad, i32(1))
    # Lane t reads its columns 4t, 4t + 1 from lane `even` and 4t + 2, 4t + 3 from
    # `even` + 1. Each lane offers its pairs (0, 2) and (1, 3), wanted by the lanes t of
    # t // 2 = 0 and 1 respectively; so that one shuffle serves both, odd lanes offer
    # (1, 3) first, and lane t takes its first word from the lane of its quad whose first
    # offer is what t wants: `even` + t // 2.
    even = b.add(b.sub(low.lane, quad), b.shl(odd, i32(1)))
    first_from = b.add(even, upper)
    second_from = b.add(even, b.sub(i32(1), upper))
    is_odd, is_upper = b.icmp_unsigned("!=", odd, i32(0)), b.icmp_unsigned("!=", upper, i32(0))
    first_offer = b.select(is_odd, i32(HIGH_HALVES), i32(LOW_HALVES))
    second_offer = b.select(is_odd, i32(LOW_HALVES), i32(HIGH_HALVES))
    # what came from `even` is the first word for t // 2 = 0, the second for t // 2 = 1
    columns_low = b.select(is_upper, i32(SWAPPED_LOW), i32(LOW_HALVES))
    columns_high = b.select(is_upper, i32(SWAPPED_HIGH), i32(HIGH_HALVES))
    out = []
    for regs in fragments:
        fragment = [None] * 4
        for h in (0, 1):
            pairs = [_fp8_pair(low, kind, regs[4 * j + 2 * h], regs[4 * j + 2 * h + 1]) for j in range(4)]
            front = b.or_(pairs[0], b.shl(pairs[1], i32(16)))  # pairs 0, 1
            back = b.or_(pairs[2], b.shl(pairs[3], i32(16)))  # pairs 2, 3
            first = _shuffle(low, _prmt(low, front, back, first_offer), first_from)
            second = _shuffle(low, _prmt(low, front, back, second_offer), second_from)
            fragment[h] = _prmt(low, first, second, columns_low)
            fragment[2 + h] = _prmt(low, first, second, columns_high)
        out.append(fragment)
    return out


def _shuffle(low, value: ir.Value, source: ir.Value) -> ir.Value:
    return low.em.call("llvm.nvvm.shfl.sync.idx.i32", I32, FULL_MASK, value, source, i32(31))
