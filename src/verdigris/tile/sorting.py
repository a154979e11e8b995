"""`TileSort` (tile.sort, tile.argsort) on the GPU: a bitonic sorting network run in the
operand's own layout, along any axis.

Takes: the `TileLowering` and a `TileSort` node. Gives: `sort(low, node) -> TileValue` in
the layout the operand is in (no data moves to another layout first).

How: every element becomes an item: its key (`_KEYS`: an unsigned integer of 32 or 64 bits
that orders as `ir.tiles.TileSort` orders the elements, complemented when descending, all
ones for the padding past the logical length) and, for argsort, its position along the
axis. Items compare as (key, position) pairs, so argsort's items are unique and equal keys
keep their positions' order. A bitonic network with every comparator ascending sorts them
(2^m the padded length): for k = 1 .. m, the item at coordinate c meets the one at
c ^ (2^k - 1) (the mirror: two sorted runs of 2^(k-1) become one bitonic run of 2^k, cut
into a lower and an upper half), then, for j = k - 2 .. 0, the one at c ^ 2^j; of two
items that meet, the one at the higher coordinate keeps the larger. Coordinate bit j along
the axis is one bit of the register, lane or warp number (`scan._bits_along`), so a step's
partner is another register of the same thread (a min and a max, nothing moves), or the
register r ^ (its register bits) of another lane (one `shfl.sync.bfly` per 32-bit word)
or warp (through shared memory: every thread writes its items, one barrier, each reads
its partner's, in rounds of at most `ROUND_BYTES`).

Guarantees: the order of `ir.tiles.TileSort`, bit for bit as the cpu backend: every
comparison is of whole unsigned keys, so NaN, -0.0 and descending need no case of their
own. Padding never reaches a valid position: its keys are the largest, and where a valid
key is as large (all ones: uint32's largest, ...) the two are the same bits (sort) or the
padding's positions are the larger (argsort). Threads holding the same element compute
the same bits (every step is a comparison of the same two items).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32, I64, reg_type
from . import reduce
from .convert import _itemsize
from .layout import LANE_BITS, WARP_SIZE
from .scan import _SOURCES, _bits_along
from .values import TileValue

# Bytes of items a warp step moves through shared memory between two barriers (tile code's
# two buffers then take 2 * ROUND_BYTES of static shared memory: `STATIC_BYTES`).
ROUND_BYTES = 16 * 1024
STATIC_BYTES = 2 * ROUND_BYTES


def _resized(b, value: ir.Value, ty: ir.IntType, signed: bool) -> ir.Value:
    if value.type == ty:
        return value
    if value.type.width > ty.width:
        return b.trunc(value, ty)
    return b.sext(value, ty) if signed else b.zext(value, ty)


def _top(ty: ir.IntType) -> ir.Constant:
    return ir.Constant(ty, 1 << ty.width - 1)


def _float_key(b, reg: ir.Value, ty: ir.IntType, zero_equal: bool) -> ir.Value:
    """The bits with the sign bit flipped, and every bit when it was set; NaN made the
    canonical NaN first (and -0.0 made +0.0 when `zero_equal`)."""
    reg = b.select(b.fcmp_unordered("uno", reg, reg), ir.Constant(reg.type, float("nan")), reg)
    if zero_equal:
        reg = b.select(b.fcmp_ordered("==", reg, ir.Constant(reg.type, 0.0)), ir.Constant(reg.type, 0.0), reg)
    bits = b.bitcast(reg, ty)
    return b.xor(bits, b.or_(b.ashr(bits, ir.Constant(ty, ty.width - 1)), _top(ty)))


def _float_value(b, key: ir.Value, ty: ir.Type) -> ir.Value:
    negative = b.not_(b.ashr(key, ir.Constant(key.type, key.type.width - 1)))  # all ones where the sign was set
    return b.bitcast(b.xor(key, b.or_(negative, _top(key.type))), ty)


# dtype kind -> (key(builder, register, key type, zero_equal), value(builder, key, register type))
_KEYS = {
    "float": (_float_key, _float_value),
    "signed": (lambda b, reg, ty, zero_equal: b.xor(_resized(b, reg, ty, True), _top(ty)),
               lambda b, key, ty: _resized(b, b.xor(key, _top(key.type)), ty, True)),
    "unsigned": (lambda b, reg, ty, zero_equal: _resized(b, reg, ty, False),
                 lambda b, key, ty: _resized(b, key, ty, False)),
}


class _Network:
    """The items of one tile, `items[r]` register r's ((key,) or (key, position)), and the
    compare-exchange steps that sort them along `axis`."""

    def __init__(self, low, layout, axis: int, items: list):
        self.low, self.b, self.layout, self.axis, self.items = low, low.b, layout, axis, items
        self.bits = _bits_along(layout, axis)  # coordinate bit j -> (kind, bit)
        assert 1 << len(self.bits) == layout.shape[axis]
        self.flags: dict = {}

    def coordinate_bit(self, r: int, j: int):
        """Bit j of register r's coordinate along the axis: an int (a register bit) or an
        i1 of this thread's lane or warp number."""
        kind, bit = self.bits[j]
        if kind == "register":
            return self.layout.register_coords(r)[self.axis] >> j & 1
        if (kind, bit) not in self.flags:
            b, number = self.b, {"lane": self.low.lane, "warp": self.low.warp}[kind]
            self.flags[kind, bit] = b.icmp_unsigned("!=", b.and_(number, ir.Constant(I32, 1 << bit)),
                                                    ir.Constant(I32, 0))
        return self.flags[kind, bit]

    def less(self, a: tuple, b: tuple) -> ir.Value:
        """a < b, comparing the components in order as unsigned integers."""
        bld = self.b
        result = bld.icmp_unsigned("<", a[-1], b[-1])
        for x, y in zip(reversed(a[:-1]), reversed(b[:-1])):
            result = bld.or_(bld.icmp_unsigned("<", x, y), bld.and_(bld.icmp_unsigned("==", x, y), result))
        return result

    def step(self, flipped: range) -> None:
        """Every item against the one whose coordinate differs in the bits `flipped` (a run
        j0 .. j1 - 1): the item with bit j1 - 1 set keeps the larger of the two."""
        masks = {kind: 0 for kind in _SOURCES}
        for j in flipped:
            kind, bit = self.bits[j]
            masks[kind] |= 1 << bit
        regs = masks["register"]
        if masks["warp"]:
            others = self.across_warps(masks)
        elif masks["lane"]:
            others = [tuple(reduce._shuffle(self.low.em, v, masks["lane"]) for v in self.items[r ^ regs])
                      for r in range(len(self.items))]
        else:
            others = [self.items[r ^ regs] for r in range(len(self.items))]
        b = self.b
        for r, (mine, other) in enumerate(zip(self.items, others)):
            smaller = self.less(other, mine)  # whether the other is the one to keep, keeping the smaller
            larger = self.coordinate_bit(r, flipped[-1])  # whether this item keeps the larger
            if isinstance(larger, int):
                take = b.not_(smaller) if larger else smaller
            else:
                take = b.xor(smaller, larger)
            self.items[r] = tuple(b.select(take, x, y) for x, y in zip(other, mine))

    def across_warps(self, masks: dict) -> list:
        """The partner's items through shared memory (warp ^ masks["warp"], lane ^
        masks["lane"], register r ^ masks["register"]): per component, in rounds of as
        many registers as ROUND_BYTES hold; each round, every thread writes those
        registers, one barrier, and reads its partner's."""
        low, b, items = self.low, self.b, self.items
        threads = low.num_warps * WARP_SIZE
        me = b.add(b.shl(low.warp, ir.Constant(I32, LANE_BITS)), low.lane)
        partner = b.xor(me, ir.Constant(I32, masks["warp"] << LANE_BITS | masks["lane"]))
        others = [[None] * len(item) for item in items]
        for c, ty in enumerate(v.type for v in items[0]):
            per_round = max(1, ROUND_BYTES // (threads * _itemsize(ty)))
            for start in range(0, len(items), per_round):
                written = range(start, min(start + per_round, len(items)))
                smem = low.shared(len(written) * threads * _itemsize(ty))

                def slot(i: int, thread: ir.Value) -> ir.Value:
                    index = b.add(ir.Constant(I32, i * threads), thread)
                    return b.gep(smem, [b.zext(index, I64)], inbounds=True, source_etype=ty)

                for i, r in enumerate(written):
                    b.store(items[r][c], slot(i, me))
                low.barrier()
                for i, r in enumerate(written):
                    others[r ^ masks["register"]][c] = b.load(slot(i, partner), typ=ty)
                low.release_shared()
        return [tuple(o) for o in others]


def sort(low, node):
    source = low.tile(node.value)
    layout, dtype, b, axis = source.layout, node.value.dtype, low.b, node.axis
    key_type = I64 if dtype.bits == 64 else I32
    to_key, from_key = _KEYS["float" if dtype.is_float else "signed" if dtype.is_signed else "unsigned"]
    argsort, length = node.op == "argsort", node.value.shape[axis]

    def flip(key: ir.Value) -> ir.Value:
        return b.not_(key) if node.descending else key

    items = []
    for r, reg in enumerate(source.regs):
        key = flip(to_key(b, reg, key_type, argsort))
        position = low.coords(layout, r)[axis]
        if length != layout.shape[axis]:  # padding: the largest key
            key = b.select(b.icmp_unsigned("<", position, ir.Constant(I32, length)), key, ir.Constant(key_type, -1))
        items.append((key, position) if argsort else (key,))
    network = _Network(low, layout, axis, items)
    for k in range(1, len(network.bits) + 1):
        network.step(range(k))  # the mirror: runs of 2^k, each as two sorted halves, merged
        for j in reversed(range(k - 1)):
            network.step(range(j, j + 1))
    if argsort:
        return TileValue(layout, [item[1] for item in network.items], node.dtype)
    ty = reg_type(dtype)
    return TileValue(layout, [from_key(b, flip(item[0]), ty) for item in network.items], node.dtype)
