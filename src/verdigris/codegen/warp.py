"""Warp collectives and barriers: `WarpOp` and `Barrier` lowering for the SIMT track.

Takes: an `Emitter`, register values, and the warp's member mask (`member_mask`). Gives:
`shuffle(...)` and `vote(...)` (the value of a `WarpOp`), `barrier(em, scope, mask)`,
`member_mask(em, block)` and `lane_id(em)`.

Guarantees (the semantics of `ir.nodes.WarpOp`): a shuffle reads `value` from lane
lane+d (down), lane-d (up), lane^m (xor) or l (idx), and a source outside 0..31 gives the
lane its own value, for any int32 argument: a constant argument in 0..31 uses PTX's own
mode (`shfl.sync.down/up/bfly/idx`, whose clamp gives exactly that), any other argument
computes the source lane and uses `shfl.sync.idx` (PTX would otherwise keep only the
argument's low 5 bits). Values of any register type move 32 bits at a time (64-bit values
as two shuffles; bool and 8/16-bit integers widened). Votes are `vote.sync.ballot/any/
all`. Every collective names the warp's existing lanes as its member mask: all 32
(a constant) when the block is known to be a whole number of warps, else the lanes the
block's last warp really has (computed once per kernel), so a partial last warp neither
waits for lanes that do not exist nor counts them in a vote. `barrier(block)` is
`bar.sync 0` (`llvm.nvvm.barrier0`), `barrier(warp)` is `bar.warp.sync mask`.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from .dtypes import I1, I32, I64
from .emitter import Emitter

WARP_SIZE = 32
FULL_MASK = ir.Constant(I32, -1)

# op -> (PTX mode of a constant argument in 0..31, its clamp operand, the source lane of a
# general argument)
_SHUFFLES = {
    "shfl_down": ("down", WARP_SIZE - 1, lambda b, lane, arg: b.add(lane, arg)),
    "shfl_up": ("up", 0, lambda b, lane, arg: b.sub(lane, arg)),
    "shfl_xor": ("bfly", WARP_SIZE - 1, lambda b, lane, arg: b.xor(lane, arg)),
    "shfl_idx": ("idx", WARP_SIZE - 1, lambda b, lane, arg: arg),
}
_VOTES = {"ballot": ("ballot", I32), "any": ("any", I1), "all": ("all", I1)}


def lane_id(em: Emitter) -> ir.Value:
    return em.call("llvm.nvvm.read.ptx.sreg.laneid", I32)


def member_mask(em: Emitter, block: tuple | None) -> ir.Value:
    """The lanes of the calling thread's warp that exist (all 32 unless the block's thread
    count is not a multiple of 32 and this is its last warp)."""
    if block is not None and prod(block) % WARP_SIZE == 0:
        return FULL_MASK
    b = em.b
    ntid = [em.call(f"llvm.nvvm.read.ptx.sreg.ntid.{a}", I32) for a in "xyz"]
    tid = [em.call(f"llvm.nvvm.read.ptx.sreg.tid.{a}", I32) for a in "xyz"]
    threads = b.mul(b.mul(ntid[0], ntid[1]), ntid[2])
    linear = b.add(tid[0], b.mul(ntid[0], b.add(tid[1], b.mul(ntid[1], tid[2]))))
    remaining = b.sub(threads, b.and_(linear, ir.Constant(I32, -WARP_SIZE)))
    partial = b.sub(b.shl(ir.Constant(I32, 1), remaining), ir.Constant(I32, 1))
    return b.select(b.icmp_unsigned(">=", remaining, ir.Constant(I32, WARP_SIZE)), FULL_MASK, partial)


def _words(em: Emitter, value: ir.Value, move) -> ir.Value:
    """`move(i32 or f32 word)` applied to `value` of any register type, 32 bits at a time."""
    b, ty = em.b, value.type
    if ty in (I32, ir.FloatType()):
        return move(value)
    if isinstance(ty, ir.DoubleType) or ty == I64:
        halves = b.bitcast(value, ir.VectorType(I32, 2))
        out = ir.Constant(ir.VectorType(I32, 2), ir.Undefined)
        for j in range(2):
            word = move(b.extract_element(halves, ir.Constant(I32, j)))
            out = b.insert_element(out, word, ir.Constant(I32, j))
        return b.bitcast(out, ty)
    return b.trunc(move(b.zext(value, I32)), ty)  # bool, 8- and 16-bit integers


def shuffle(em: Emitter, op: str, value: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
    """`value` from another lane of the warp (see the module docstring); `arg` is i32."""
    b = em.b
    mode, clamp, source = _SHUFFLES[op]
    if not (isinstance(arg, ir.Constant) and 0 <= arg.constant < WARP_SIZE):
        lane = lane_id(em)
        src = source(b, lane, arg)
        arg = b.select(b.icmp_unsigned("<", src, ir.Constant(I32, WARP_SIZE)), src, lane)
        mode, clamp = "idx", WARP_SIZE - 1

    def move(word: ir.Value) -> ir.Value:
        suffix = "f32" if isinstance(word.type, ir.FloatType) else "i32"
        return em.call(f"llvm.nvvm.shfl.sync.{mode}.{suffix}", word.type, mask, word, arg,
                       ir.Constant(I32, clamp))

    return _words(em, value, move)


def vote(em: Emitter, op: str, pred: ir.Value, mask: ir.Value) -> ir.Value:
    kind, ret = _VOTES[op]
    return em.call(f"llvm.nvvm.vote.{kind}.sync", ret, mask, pred)


def barrier(em: Emitter, scope: str, mask: ir.Value) -> None:
    if scope == "block":
        em.call("llvm.nvvm.barrier0", ir.VoidType())
    else:
        em.call("llvm.nvvm.bar.warp.sync", ir.VoidType(), mask)
