"""`TileReduce` on the GPU: within each thread, across lanes by shuffles, across warps
through shared memory (one barrier; a whole row's partials, one per warp, read back as
broadcast vectors: `_across_warps`; where every thread would read more than
`TWO_STAGE_AFTER` partials, one warp combines them and writes the results back, a second
barrier: `_two_stage`).

Takes: the `TileLowering` and a `TileReduce` node. Gives: `reduce(low, node)`: a
`TileValue` in the source layout sliced on the reduced axis (so a `keepdims` result
broadcasts back without moving data), or, over every axis, a scalar register.

Guarantees (`ir.tiles`, as the cpu backend): sums and products of float16/bfloat16 add in
float32 and round once at the end; integers wrap; float max/min are IEEE maxNum/minNum (a
NaN loses to a number), so their identity, for padded elements, is NaN; argmax/argmin give
the first position (row-major over every axis for axis None) of the largest/smallest
value, NaN counting as the smallest (argmax) or largest (argmin). Every thread holding an
element of the result holds the same bits: lanes combine in a butterfly (`shfl.sync.bfly`,
whose combining ops are commutative) and every thread combines the warps' partials in
one fixed order.
"""
from __future__ import annotations

from functools import reduce as reduce_left

from llvmlite import ir

from ..codegen.dtypes import DOUBLE, FLOAT, I1, I8, I32, const, round_narrow
from . import control
from .convert import _itemsize
from .layout import LANE_BITS, WARP_SIZE
from .operand import aligned
from .values import TileValue

FULL_MASK = ir.Constant(I32, 0xFFFFFFFF)
INT32_MAX = 2**31 - 1
CHAIN = 8  # partials a contracting float sum adds in one chain before the tree
# Partials per thread past which the warps' partials are combined once, by the first warps,
# not by every thread. LayerNorm with 2 rows of 8192 over 16 warps read 32 and combined 30
# per thread per reduction; in two stages it went from 3.57 to 3.70 TB/s on the H200
# (Triton's, also two stages: 3.84). A whole row over 16 warps (16 partials) stays one
# stage: there ours and Triton's were level.
TWO_STAGE_AFTER = 16


def _extremum(which: str):
    def combine(em, dt, a, b):
        if dt.is_float:
            return em.call(f"llvm.{which}num.{a.type.intrinsic_name}", a.type, a, b)
        return em.call(f"llvm.{'s' if dt.is_signed else 'u'}{which}.i{a.type.width}", a.type, a, b)
    return combine


def _integer_bound(dt, largest: bool):
    if dt.is_bool:
        return int(largest)
    bits = dt.bits - dt.is_signed
    return (1 << bits) - 1 if largest else (-(1 << bits) if dt.is_signed else 0)


# op -> (combine(em, dtype, a, b), identity(dtype) as a Python value)
_VALUE_OPS = {
    "sum": (lambda em, dt, a, b: em.flagged(em.b.fadd(a, b)) if dt.is_float else em.b.add(a, b), lambda dt: 0),
    "prod": (lambda em, dt, a, b: em.b.fmul(a, b) if dt.is_float else em.b.mul(a, b), lambda dt: 1),
    "max": (_extremum("max"), lambda dt: float("nan") if dt.is_float else _integer_bound(dt, False)),
    "min": (_extremum("min"), lambda dt: float("nan") if dt.is_float else _integer_bound(dt, True)),
}
_POSITION_OPS = {"argmax": ">", "argmin": "<"}  # the comparison by which a value wins


def _position_combine(op: str):
    def combine(em, dt, a, b):
        """(value, position) pairs: the winner, the earlier position among equals."""
        (va, ia), (vb, ib) = a, b
        bld = em.b
        if dt.is_float:
            wins = bld.fcmp_ordered(_POSITION_OPS[op], vb, va)
            ties = bld.fcmp_ordered("==", vb, va)
        else:
            cmp = bld.icmp_signed if dt.is_signed else bld.icmp_unsigned
            wins, ties = cmp(_POSITION_OPS[op], vb, va), bld.icmp_unsigned("==", vb, va)
        take = bld.or_(wins, bld.and_(ties, bld.icmp_signed("<", ib, ia)))
        return bld.select(take, vb, va), bld.select(take, ib, ia)
    return combine


def _shuffle(em, value: ir.Value, mask: int) -> ir.Value:
    """`value` of lane (lane ^ mask): any register type, 32 bits at a time."""
    b, ty = em.b, value.type
    if ty == FLOAT:
        return em.call("llvm.nvvm.shfl.sync.bfly.f32", FLOAT, FULL_MASK, value, ir.Constant(I32, mask),
                       ir.Constant(I32, WARP_SIZE - 1))
    if ty in (DOUBLE, ir.IntType(64)):
        halves = b.bitcast(value, ir.VectorType(I32, 2))
        out = ir.Constant(ir.VectorType(I32, 2), ir.Undefined)
        for j in range(2):
            word = _shuffle(em, b.extract_element(halves, ir.Constant(I32, j)), mask)
            out = b.insert_element(out, word, ir.Constant(I32, j))
        return b.bitcast(out, ty)
    wide = value if ty == I32 else b.zext(value, I32)
    got = em.call("llvm.nvvm.shfl.sync.bfly.i32", I32, FULL_MASK, wide, ir.Constant(I32, mask),
                  ir.Constant(I32, WARP_SIZE - 1))
    return got if ty == I32 else b.trunc(got, ty)


def _slot_type(ty: ir.Type) -> ir.Type:
    """The type a partial travels through shared memory in: narrow integers as i32."""
    return I32 if isinstance(ty, ir.IntType) and ty.width < 32 else ty


def reduce(low, node):
    source = low.tile(node.value)
    layout, dt, b, em = source.layout, node.value.dtype, low.b, low.em
    axes = tuple(range(layout.rank)) if node.axis is None else (node.axis,)
    positional = node.op in _POSITION_OPS
    if positional:
        combine = _position_combine(node.op)
        worst = float("-inf" if node.op == "argmax" else "inf") if dt.is_float \
            else _integer_bound(dt, node.op == "argmin")
        identity = (const(dt, worst), ir.Constant(I32, INT32_MAX))
    else:
        value_combine, make_identity = _VALUE_OPS[node.op]
        combine = lambda em, dt, a, b: (value_combine(em, dt, a[0], b[0]),)  # noqa: E731
        identity = (const(dt, make_identity(dt)),)

    # Each register as a partial: (value,) or (value, position); padded elements neutral.
    logical = node.value.shape
    partials = []
    for r, reg in enumerate(source.regs):
        coords = low.coords(layout, r)
        part = (reg,)
        if positional:
            if dt.is_float:
                part = (b.select(b.fcmp_unordered("uno", reg, reg), identity[0], reg),)
            position = ir.Constant(I32, 0)
            for k in axes:
                position = b.add(b.mul(position, ir.Constant(I32, logical[k])), coords[k])
            part += (position,)
        padded_axes = [k for k in axes if logical[k] != layout.shape[k]]
        if padded_axes:
            valid = ir.Constant(I1, True)
            for k in padded_axes:
                valid = b.and_(valid, b.icmp_unsigned("<", coords[k], ir.Constant(I32, logical[k])))
            part = tuple(b.select(valid, v, i) for v, i in zip(part, identity))
        partials.append(part)

    # Within the thread: registers along the reduced axes merge (a tree, for ILP; a float
    # sum that may contract into multiply-adds first runs chains, so that each product of a
    # `sum(x * y)` after a chain's first fuses into the add that takes it).
    merged_bits = layout.reduced_register_bits(axes)
    kept_bits = [i for i in range(len(layout.regs)) if i not in merged_bits]
    chain = CHAIN if node.op == "sum" and dt.is_float and em.float_flags else 1
    outputs = []
    for o in range(1 << len(kept_bits)):
        base = sum(1 << bit for j, bit in enumerate(kept_bits) if o >> j & 1)
        group = [partials[base + sum(1 << bit for j, bit in enumerate(merged_bits) if m >> j & 1)]
                 for m in range(1 << len(merged_bits))]
        group = [reduce_left(lambda acc, part: combine(em, dt, acc, part), group[i:i + chain])
                 for i in range(0, len(group), chain)]
        while len(group) > 1:
            group = [combine(em, dt, group[i], group[i + 1]) for i in range(0, len(group), 2)]
        outputs.append(group[0])

    # Across lanes: a butterfly over the lane bits along the reduced axes.
    for bit in range(LANE_BITS):
        if any(layout.lanes[bit][k] for k in axes):
            outputs = [combine(em, dt, part, tuple(_shuffle(em, v, 1 << bit) for v in part)) for part in outputs]

    # Across warps: partials through shared memory, read back in warp order.
    warp_bits = [bit for bit, basis in enumerate(layout.warps) if any(basis[k] for k in axes)]
    if warp_bits:
        same_in_every_lane = all(any(basis[k] for k in axes) or not any(basis) for basis in layout.lanes)
        outputs = _across_warps(low, outputs, warp_bits, dt, combine, same_in_every_lane)

    result = [round_narrow(b, node.dtype, part[-1]) if node.dtype.is_float else part[-1] for part in outputs]
    if node.axis is None:
        return result[0]
    return TileValue(layout.sliced(axes).squeezed(node.axis), result, node.dtype)


def _across_warps(low, outputs: list, warp_bits: list, dt, combine, same_in_every_lane: bool) -> list:
    """Each warp's partials through shared memory, one barrier; every thread then reads the
    partials of the warps it combines with and combines them in one fixed order (a tree
    over warp order). Where every lane of a warp holds the same partials (a reduction over
    every lane's elements: a whole row), one copy per warp is kept, the warps' copies side
    by side, so a thread reads them as broadcast vectors of up to 16 bytes (2 loads for 8
    warps of float32, not 8); otherwise each lane has a slot of its own in each warp's
    row, so that a warp's reads of one warp's partials are one conflict-free access. Where
    every warp's partials join and each thread would read more than TWO_STAGE_AFTER of
    them, they are combined once instead (`_two_stage`)."""
    b, em = low.b, low.em
    warps, slots = low.num_warps, len(outputs)
    lanes = 1 if same_in_every_lane else WARP_SIZE
    types = [_slot_type(v.type) for v in outputs[0]]
    sizes = [_itemsize(ty) for ty in types]
    starts = [0]  # each component's slots, 16-byte aligned
    for size in sizes:
        starts.append(starts[-1] + aligned(warps * slots * lanes * size, 16))
    count = 1 << len(warp_bits)
    # reduced warp bits 0..k-1: the warps a thread combines are consecutive slots
    consecutive = same_in_every_lane and warp_bits == list(range(len(warp_bits)))
    two_stage = consecutive and count == warps and count * slots > TWO_STAGE_AFTER
    results = [starts[-1]]  # `_two_stage`'s results, after the partials, 16-byte aligned
    for size in sizes:
        results.append(results[-1] + aligned(slots * size, 16))
    smem = low.shared(results[-1] if two_stage else starts[-1])
    reduced_mask = sum(1 << bit for bit in warp_bits)

    def at(byte: ir.Value) -> ir.Value:
        return b.gep(smem, [b.zext(byte, ir.IntType(64))], inbounds=True, source_etype=I8)

    def slot(c: int, warp: ir.Value, o) -> ir.Value:
        """Component c of warp `warp`'s partial of output `o` (an int, or an i32 value where
        `same_in_every_lane`)."""
        o = ir.Constant(I32, o) if isinstance(o, int) else o
        if same_in_every_lane:
            index = b.add(b.mul(o, ir.Constant(I32, warps)), warp)
        else:
            index = b.add(b.mul(b.add(b.mul(warp, ir.Constant(I32, slots)), o),
                                ir.Constant(I32, WARP_SIZE)), low.lane)
        return at(b.add(b.mul(index, ir.Constant(I32, sizes[c])), ir.Constant(I32, starts[c])))

    for o, part in enumerate(outputs):
        for c, (v, ty) in enumerate(zip(part, types)):
            b.store(_widened(b, v, ty), slot(c, low.warp, o))
    low.barrier()
    if two_stage:
        combined = _two_stage(low, outputs, dt, combine, types, sizes, slot, at, results[:-1])
        low.release_shared()
        return combined
    mine = b.and_(low.warp, ir.Constant(I32, ~reduced_mask & 0xFFFFFFFF))
    combined = []
    for o, part in enumerate(outputs):
        read = [[] for _ in range(count)]  # per warp in combining order: its components
        for c, (v, ty) in enumerate(zip(part, types)):
            width = min(count, 16 // sizes[c]) if consecutive else 1
            for m0 in range(0, count, width):
                other = b.or_(mine, ir.Constant(I32, sum(1 << bit for j, bit in enumerate(warp_bits) if m0 >> j & 1)))
                if width == 1:
                    got = [b.load(slot(c, other, o), typ=ty)]
                else:
                    vector = b.load(slot(c, other, o), typ=ir.VectorType(ty, width), align=width * sizes[c])
                    got = [b.extract_element(vector, ir.Constant(I32, j)) for j in range(width)]
                for j, value in enumerate(got):
                    read[m0 + j].append(_narrowed(b, value, v.type))
        group = [tuple(r) for r in read]
        while len(group) > 1:
            group = [combine(em, dt, group[i], group[i + 1]) for i in range(0, len(group), 2)]
        combined.append(group[0])
    low.release_shared()
    return combined


def _two_stage(low, outputs: list, dt, combine, types: list, sizes: list, slot, at, results: list) -> list:
    """The warps' stored partials of every output combined once, where every warp's join
    (`_across_warps` with `two_stage`): thread t = o * warps + w of the first warps loads
    warp w's partial of output o, the `warps` lanes of one output combine theirs in a
    butterfly (each gets the same bits: the combining ops are commutative) and the first
    of them stores the result after the partials; a second barrier, then every thread
    reads the results (`results`: each component's first byte). slots * warps is a multiple
    of 32 (both powers of two, the product above TWO_STAGE_AFTER), so the combining warps
    are whole and every shuffle has its warp's lanes."""
    b, em = low.b, low.em
    warps = low.num_warps
    sample = outputs[0]

    def result(c: int, o) -> ir.Value:
        o = ir.Constant(I32, o) if isinstance(o, int) else o
        return at(b.add(b.mul(o, ir.Constant(I32, sizes[c])), ir.Constant(I32, results[c])))

    def combine_and_store():
        thread = b.add(b.mul(low.warp, ir.Constant(I32, WARP_SIZE)), low.lane)
        output, warp = b.udiv(thread, ir.Constant(I32, warps)), b.urem(thread, ir.Constant(I32, warps))
        part = tuple(_narrowed(b, b.load(slot(c, warp, output), typ=ty), v.type)
                     for c, (v, ty) in enumerate(zip(sample, types)))
        for bit in range(warps.bit_length() - 1):
            part = combine(em, dt, part, tuple(_shuffle(em, v, 1 << bit) for v in part))

        def store():
            for c, (v, ty) in enumerate(zip(part, types)):
                b.store(_widened(b, v, ty), result(c, output))

        control.when(low, b.icmp_unsigned("==", warp, ir.Constant(I32, 0)), store)

    combining = b.icmp_unsigned("<", low.warp, ir.Constant(I32, len(outputs) * warps // WARP_SIZE))
    control.when(low, combining, combine_and_store)
    low.barrier()
    return [tuple(_narrowed(b, b.load(result(c, o), typ=ty), v.type) for c, (v, ty) in enumerate(zip(sample, types)))
            for o in range(len(outputs))]


def _narrowed(b, value: ir.Value, ty: ir.Type) -> ir.Value:
    return value if value.type == ty else b.trunc(value, ty)


def _widened(b, value: ir.Value, ty: ir.Type) -> ir.Value:
    return value if ty == value.type else b.zext(value, ty)
