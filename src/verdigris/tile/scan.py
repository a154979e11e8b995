"""`TileScan` (cumsum, cumprod, cummax, cummin; from either end) on the GPU, in the source's
own layout, along any axis.

Takes: the `TileLowering` and a `TileScan` node. Gives: `scan(low, node) -> TileValue` in
the layout the operand is in (no data moves to another layout first).

How: a scan runs the combining op of its reduction (`ir.tiles.SCAN_OPS`, `reduce`'s
table: add, multiply, maxNum/minNum, signed or unsigned max/min). Along the scan axis an
element's coordinate is the sum of the bases of its register, lane and warp bits
(`layout.Layout`). Taking those bits from the least significant coordinate bit up, every
element keeps `prefix` (the inclusive combination of its aligned run of 2^k elements up
to itself, in scan order) and `total` (the combination of that whole run). One more bit
doubles the run: the partner is the element with that coordinate bit flipped, and
    total  <- total . partner's total
    prefix <- partner's total . prefix     where the partner's run comes first
In a forward scan the partner's run comes first where the bit is 1; in a reverse scan
(from the last element) where it is 0. The partner is another register of the same thread
(no instruction), another lane (one `shfl.sync.bfly` per register), or another warp: a
run of consecutive warp bits goes through shared memory at once (each warp writes its
totals, one barrier, each thread combines the totals of the warps before it, in scan
order, in the run). So a block-wide scan of a blocked layout is register steps, five
shuffle steps, one shared-memory step, register steps.

Guarantees (`ir.tiles`, the cpu backend): inclusive scans; float16/bfloat16 combine in
float32 and round once at the end; integers wrap. Floats are added and multiplied in
another order than NumPy's sequential cumsum/cumprod, so the last bits may differ (max and
min are exact). Elements past the logical shape (the padding) never feed valid ones: in a
forward scan they come after every valid element; a reverse scan starts at the last valid
element, the padding taking the op's identity first (0, 1, or for max/min NaN, which
maxNum/minNum pass over, or the integer dtype's bound). Threads holding the same element compute
the same bits (the ops are commutative, and every thread combines in one order).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32, I64, const, round_narrow
from ..ir import tiles as X
from . import reduce
from .convert import _itemsize
from .values import TileValue

_SOURCES = ("register", "lane", "warp")


def _bits_along(layout, axis: int) -> list:
    """[(kind, bit)] of the layout bits that move along `axis`, least significant first."""
    found = []
    for kind, bases in zip(_SOURCES, (layout.regs, layout.lanes, layout.warps)):
        found.extend((basis[axis], kind, bit) for bit, basis in enumerate(bases) if basis[axis])
    return [(kind, bit) for _, kind, bit in sorted(found)]


class _Scan:
    def __init__(self, low, dtype, regs: list, combine, reverse: bool):
        self.low, self.b, self.dtype = low, low.b, dtype
        self.combine = lambda a, b: combine(low.em, dtype, a, b)
        self.reverse = reverse
        self.first_where = 0 if reverse else 1  # a step's bit where the partner's run comes first
        self.prefix, self.total = list(regs), list(regs)
        self.done_regs = 0  # register bits already taken (a mask)
        self.done_lanes = 0  # lane bits already taken

    def register_step(self, bit: int) -> None:
        prefix, total = self.prefix, self.total
        self.total = [self.combine(total[r & ~(1 << bit)], total[r | 1 << bit]) for r in range(len(total))]
        self.prefix = [self.combine(total[r ^ 1 << bit], prefix[r]) if (r >> bit & 1) == self.first_where
                       else prefix[r] for r in range(len(prefix))]
        self.done_regs |= 1 << bit

    def lane_step(self, bit: int) -> None:
        b, low = self.b, self.low
        receives = b.icmp_unsigned("==", b.and_(low.lane, ir.Constant(I32, 1 << bit)),
                                   ir.Constant(I32, self.first_where << bit))
        others = [reduce._shuffle(low.em, t, 1 << bit) for t in self.total]
        self.prefix = [b.select(receives, self.combine(o, p), p) for o, p in zip(others, self.prefix)]
        self.total = [self.combine(t, o) for t, o in zip(self.total, others)]  # commutative: same bits
        self.done_lanes |= 1 << bit

    def warp_step(self, bits: list) -> None:
        """The warp bits `bits` (least significant first) at once, through shared memory."""
        b, low = self.b, self.low
        regs = len(self.total)
        canonical = [r for r in range(regs) if not r & self.done_regs]  # one per distinct total
        slot_of = {r: canonical.index(r & ~self.done_regs) for r in range(regs)}
        open_lanes = [bit for bit in range(5) if not self.done_lanes >> bit & 1]
        lane = ir.Constant(I32, 0)  # the lane's open bits, packed: lanes that differ only in
        for j, bit in enumerate(open_lanes):  # taken bits hold the same totals
            lane = b.or_(lane, b.shl(b.and_(b.lshr(low.lane, ir.Constant(I32, bit)), ir.Constant(I32, 1)),
                                     ir.Constant(I32, j)))
        ty = self.total[0].type
        slot_type = reduce._slot_type(ty)
        lanes, per_warp = 1 << len(open_lanes), len(canonical) << len(open_lanes)
        smem = low.shared(low.num_warps * per_warp * _itemsize(slot_type))

        def slot(warp: ir.Value, c: int) -> ir.Value:
            index = b.add(b.mul(warp, ir.Constant(I32, per_warp)), ir.Constant(I32, c * lanes))
            return b.gep(smem, [b.zext(b.add(index, lane), I64)], inbounds=True, source_etype=slot_type)

        for c, r in enumerate(canonical):
            b.store(reduce._widened(b, self.total[r], slot_type), slot(low.warp, c))
        low.barrier()
        mine = ir.Constant(I32, 0)  # this warp's position in the run
        for j, bit in enumerate(bits):
            mine = b.or_(mine, b.shl(b.and_(b.lshr(low.warp, ir.Constant(I32, bit)), ir.Constant(I32, 1)),
                                     ir.Constant(I32, j)))
        base = b.and_(low.warp, ir.Constant(I32, ~sum(1 << bit for bit in bits) & 0xFFFFFFFF))
        order = list(range(1 << len(bits)))[::-1 if self.reverse else 1]  # the run's warps, in scan order
        running, before = [None] * len(canonical), [const(self.dtype, 0)] * len(canonical)
        for g in order:
            warp = b.or_(base, ir.Constant(I32, sum(1 << bit for j, bit in enumerate(bits) if g >> j & 1)))
            comes_first = b.icmp_unsigned("<" if self.reverse else ">", mine, ir.Constant(I32, g))
            for c in range(len(canonical)):
                got = reduce._narrowed(b, b.load(slot(warp, c), typ=slot_type), ty)
                running[c] = got if running[c] is None else self.combine(running[c], got)
                before[c] = b.select(comes_first, running[c], before[c])
        low.release_shared()
        first = b.icmp_unsigned("==", mine, ir.Constant(I32, order[0]))
        self.prefix = [b.select(first, p, self.combine(before[slot_of[r]], p)) for r, p in enumerate(self.prefix)]
        self.total = [running[slot_of[r]] for r in range(regs)]


def _without_padding(low, layout, regs: list, axis: int, extent: int, identity: ir.Value) -> list:
    """`regs` with the elements at or past `extent` along `axis` replaced by `identity`."""
    if extent == layout.shape[axis]:
        return regs
    b = low.b
    kept = []
    for r, reg in enumerate(regs):
        inside = b.icmp_unsigned("<", low.coords(layout, r)[axis], ir.Constant(I32, extent))
        kept.append(b.select(inside, reg, identity))
    return kept


def scan(low, node):
    source = low.tile(node.value)
    layout, dtype = source.layout, node.dtype
    combine, identity = reduce._VALUE_OPS[X.SCAN_OPS[node.op]]
    regs = source.regs
    if node.reverse:  # the scan starts at the last valid element, not in the padding
        regs = _without_padding(low, layout, regs, node.axis, node.shape[node.axis], const(dtype, identity(dtype)))
    state = _Scan(low, dtype, regs, combine, node.reverse)
    bits = _bits_along(layout, node.axis)
    while bits:
        kind, bit = bits.pop(0)
        if kind == "warp":
            run = [bit]
            while bits and bits[0][0] == "warp":
                run.append(bits.pop(0)[1])
            state.warp_step(run)
        else:
            getattr(state, f"{kind}_step")(bit)
    regs = [round_narrow(low.b, dtype, p) for p in state.prefix] if dtype.is_float else state.prefix
    return TileValue(layout, regs, dtype)
