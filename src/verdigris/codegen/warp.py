"""Warp operations and barriers: `WarpOp` and `Barrier` lowering for the SIMT track.

Takes: an `Emitter`, register values, and the warp's member mask (`member_mask`). Gives:
`OPERATIONS` (op -> f(em, node, value, argument, mask): the value of a `WarpOp`),
`barrier(em, scope, mask)`, `fence(em, scope)`, `member_mask(em, block)` and `lane_id(em)`.

Guarantees (the semantics of `ir.nodes.WarpOp`): a shuffle reads `value` from the source
position p+d (down), p-d (up), p^m (xor) or l (idx) of the caller's segment of `width`
lanes (p: the caller's position in it), and a source outside 0..width-1 gives the lane its
own value, for any int32 argument: a constant argument in 0..width-1 uses PTX's own mode
(`shfl.sync.down/up/bfly/idx`, whose clamp operand, segment mask included, gives exactly
that), any other argument computes the source lane and uses `shfl.sync.idx` (PTX would
otherwise keep only the argument's low 5 bits). Values of any register type move 32 bits
at a time (64-bit values as two shuffles; bool and 8/16-bit integers widened). Votes are
`vote.sync.ballot/any/all`, matches `match.any/all.sync.b32/b64` of the value's bits,
`activemask()` is `activemask.b32`. A reduction of an integer of 32 bits or fewer is one
`redux.sync` (sm_80+; narrower integers widened by their sign, the result wrapped back);
of a 64-bit integer or a float, a tree of `shfl.sync.down` in the IR's order (lane i takes
in lane i + d while the warp has it: the clamp operand keeps a partial warp's shuffles to
its lanes) and lane 0's result given to all, combined with `arith`'s and `mathlib`'s own
operators, so every step rounds as the cpu backend's does. Every collective names the
warp's existing lanes as its member mask: all 32 (a constant) when the block is known to
be a whole number of warps, else the lanes the block's last warp really has (computed
once per kernel), so a partial last warp neither waits for lanes that do not exist nor
counts them. `barrier(block)` is `bar.sync 0` (`llvm.nvvm.barrier0`), `barrier(warp)` is
`bar.warp.sync mask`, `barrier(grid)` is `gridsync`'s; a `Fence` is an LLVM `fence seq_cst`
at its scope.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from ..ir import nodes as N
from ..simt import warp_size as WARP_SIZE
from . import arith, gridsync, mathlib
from .dtypes import DOUBLE, FLOAT, I1, I32, I64
from .emitter import Emitter

FULL_MASK = ir.Constant(I32, -1)

# op -> (PTX mode of a constant argument in 0..width-1, its clamp, the source's position in
# the segment from the caller's position and a general argument)
_SHUFFLES = {
    "shfl_down": ("down", WARP_SIZE - 1, lambda b, position, arg: b.add(position, arg)),
    "shfl_up": ("up", 0, lambda b, position, arg: b.sub(position, arg)),
    "shfl_xor": ("bfly", WARP_SIZE - 1, lambda b, position, arg: b.xor(position, arg)),
    "shfl_idx": ("idx", WARP_SIZE - 1, lambda b, position, arg: arg),
}
_VOTES = {"ballot": ("ballot", I32), "any": ("any", I1), "all": ("all", I1)}
# combine -> redux.sync's operation on (signed, unsigned) integers
_REDUX = {"add": ("add", "add"), "min": ("min", "umin"), "max": ("max", "umax"),
          "and": ("and", "and"), "or": ("or", "or"), "xor": ("xor", "xor")}


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


def _shfl(em: Emitter, mode: str, value: ir.Value, arg: ir.Value, clamp: ir.Value,
          mask: ir.Value) -> ir.Value:
    """`shfl.sync.<mode>` of `value` of any register type."""
    def move(word: ir.Value) -> ir.Value:
        suffix = "f32" if isinstance(word.type, ir.FloatType) else "i32"
        return em.call(f"llvm.nvvm.shfl.sync.{mode}.{suffix}", word.type, mask, word, arg, clamp)

    return _words(em, value, move)


def shuffle(em: Emitter, node: N.WarpOp, value: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
    """`value` from another lane of the caller's segment (see the module docstring); `arg` is i32."""
    b, width = em.b, node.width
    mode, clamp, source = _SHUFFLES[node.op]
    if not (isinstance(arg, ir.Constant) and 0 <= arg.constant < width):
        lane = lane_id(em)
        position = b.and_(lane, ir.Constant(I32, width - 1))
        wanted = source(b, position, arg)
        inside = b.icmp_unsigned("<", wanted, ir.Constant(I32, width))
        arg = b.select(inside, b.add(b.sub(lane, position), wanted), lane)
        mode, clamp, width = "idx", WARP_SIZE - 1, WARP_SIZE
    # the clamp's bits 8..12 mark the lanes that pick a segment: those above its width
    return _shfl(em, mode, value, arg, ir.Constant(I32, (WARP_SIZE - width) << 8 | clamp), mask)


def vote(em: Emitter, node: N.WarpOp, pred: ir.Value, arg, mask: ir.Value) -> ir.Value:
    kind, ret = _VOTES[node.op]
    return em.call(f"llvm.nvvm.vote.{kind}.sync", ret, mask, pred)


def activemask(em: Emitter, node: N.WarpOp, value, arg, mask) -> ir.Value:
    return em.call("llvm.nvvm.activemask", I32)


def match(em: Emitter, node: N.WarpOp, value: ir.Value, arg, mask: ir.Value) -> ir.Value:
    """`match.any/all.sync` of the bits of `value` (bool and narrow integers widened by
    zeros, floats as their bits), as 32 or 64 bits."""
    b = em.b
    bits = {FLOAT: lambda: b.bitcast(value, I32), DOUBLE: lambda: b.bitcast(value, I64),
            I32: lambda: value, I64: lambda: value}.get(value.type, lambda: b.zext(value, I32))()
    width = bits.type.width
    if node.op == "match_any":
        return em.call(f"llvm.nvvm.match.any.sync.i{width}", I32, mask, bits)
    both = em.call(f"llvm.nvvm.match.all.sync.i{width}p", ir.LiteralStructType([I32, I1]), mask, bits)
    return b.extract_value(both, 0)


def reduce(em: Emitter, node: N.WarpOp, value: ir.Value, arg, mask: ir.Value) -> ir.Value:
    """The warp's `value`s combined (see the module docstring), the same on every lane."""
    b, dt, combine = em.b, node.dtype, N.REDUCTIONS[node.op]
    if dt.is_int and dt.bits <= 32:
        wide = value if dt.bits == 32 else (b.sext if dt.is_signed else b.zext)(value, I32)
        got = em.call(f"llvm.nvvm.redux.sync.{_REDUX[combine][not dt.is_signed]}", I32, wide, mask)
        return got if dt.bits == 32 else b.trunc(got, value.type)
    whole = mask is FULL_MASK
    lanes = ir.Constant(I32, WARP_SIZE) if whole else em.call("llvm.ctpop.i32", I32, mask)
    last = b.sub(lanes, ir.Constant(I32, 1))
    lane = lane_id(em)
    d = WARP_SIZE // 2
    while d:
        step = ir.Constant(I32, d)
        other = _shfl(em, "down", value, step, last, mask)  # own value past the last lane
        merged = arith.binary(em, combine, dt, value, other) if arith.supports_binary(combine, dt) \
            else mathlib.call(em, combine, dt, (value, other))
        # with whole warps, lanes i + d >= 32 combine with themselves: those results go unused
        value = merged if whole else b.select(b.icmp_unsigned("<", b.add(lane, step), lanes),
                                              merged, value)
        d //= 2
    zero = ir.Constant(I32, 0)
    return _shfl(em, "idx", value, zero, ir.Constant(I32, WARP_SIZE - 1), mask)


# op -> f(emitter, node, value, argument, member mask): the value of a `WarpOp`
OPERATIONS = {**dict.fromkeys(N.SHUFFLES, shuffle), **dict.fromkeys(N.VOTES, vote),
              "activemask": activemask, **dict.fromkeys(N.MATCHES, match),
              **dict.fromkeys(N.REDUCTIONS, reduce)}


_SYNC_SCOPES = {"block": "block", "gpu": "device", "system": None}  # a `Fence` scope: NVPTX's name


def fence(em: Emitter, scope: str) -> None:
    """A sequentially consistent fence at `scope` (`fence.sc.cta/gpu/sys`, what CUDA's
    `__threadfence*()` are): an LLVM fence, which no memory access moves across, even one
    through a `noalias` pointer."""
    em.b.fence("seq_cst", _SYNC_SCOPES[scope])


def barrier(em: Emitter, scope: str, mask: ir.Value) -> None:
    if scope == "grid":
        gridsync.grid_barrier(em)
    elif scope == "block":
        em.call("llvm.nvvm.barrier0", ir.VoidType())
    else:
        em.call("llvm.nvvm.bar.warp.sync", ir.VoidType(), mask)
