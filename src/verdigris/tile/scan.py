"""`TileScan` (cumsum) on the GPU, in the source's own layout, along any axis.

Takes: the `TileLowering` and a `TileScan` node. Gives: `scan(low, node) -> TileValue` in
the layout the operand is in (no data moves to another layout first).

How: along the scan axis an element's coordinate is the sum of the bases of its register,
lane and warp bits (`layout.Layout`). Taking those bits from the least significant
coordinate bit up, every element keeps `prefix` (the inclusive sum of its aligned run of
2^k elements up to itself) and `total` (the sum of that whole run). One more bit doubles
the run: the partner is the element with that coordinate bit flipped, and
    total  <- total + partner's total
    prefix <- partner's total + prefix     where the bit is 1 (the partner's run is earlier)
The partner is another register of the same thread (no instruction), another lane (one
`shfl.sync.bfly` per register), or another warp: a run of consecutive warp bits goes
through shared memory at once (each warp writes its totals, one barrier, each thread adds
the totals of the warps before it in the run). So a block-wide scan of a blocked layout is
register steps, five shuffle steps, one shared-memory step, register steps.

Guarantees (`ir.tiles`, the cpu backend): inclusive sums; float16/bfloat16 add in float32
and round once at the end; integers wrap. Floats are added in another order than NumPy's
sequential cumsum, so the last bits may differ. Elements past the logical shape (the
padding) only ever feed later elements, never valid ones. Threads holding the same element
compute the same bits (float addition is commutative, and every thread adds in one order).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32, I64, const, round_narrow
from . import reduce
from .convert import _itemsize

_SOURCES = ("register", "lane", "warp")


def _bits_along(layout, axis: int) -> list:
    """[(kind, bit)] of the layout bits that move along `axis`, least significant first."""
    found = []
    for kind, bases in zip(_SOURCES, (layout.regs, layout.lanes, layout.warps)):
        found.extend((basis[axis], kind, bit) for bit, basis in enumerate(bases) if basis[axis])
    return [(kind, bit) for _, kind, bit in sorted(found)]


class _Scan:
    def __init__(self, low, layout, dtype, regs: list):
        self.low, self.b, self.layout, self.dtype = low, low.b, layout, dtype
        self.prefix, self.total = list(regs), list(regs)
        self.done_regs = 0  # register bits already taken (a mask)
        self.done_lanes = 0  # lane bits already taken

    def add(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.fadd(a, b) if self.dtype.is_float else self.b.add(a, b)

    def register_step(self, bit: int) -> None:
        prefix, total = self.prefix, self.total
        self.total = [self.add(total[r & ~(1 << bit)], total[r | 1 << bit]) for r in range(len(total))]
        self.prefix = [self.add(total[r ^ 1 << bit], prefix[r]) if r >> bit & 1 else prefix[r]
                       for r in range(len(prefix))]
        self.done_regs |= 1 << bit

    def lane_step(self, bit: int) -> None:
        b, low = self.b, self.low
        high = b.icmp_unsigned("!=", b.and_(low.lane, ir.Constant(I32, 1 << bit)), ir.Constant(I32, 0))
        others = [reduce._shuffle(low.em, t, 1 << bit) for t in self.total]
        self.prefix = [b.select(high, self.add(o, p), p) for o, p in zip(others, self.prefix)]
        self.total = [self.add(t, o) for t, o in zip(self.total, others)]  # commutative: same bits
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
        lanes, per_warp = 1 << len(open_lanes), len(canonical) << len(open_lanes)
        smem = low.shared(low.num_warps * per_warp * _itemsize(ty))

        def slot(warp: ir.Value, c: int) -> ir.Value:
            index = b.add(b.mul(warp, ir.Constant(I32, per_warp)), ir.Constant(I32, c * lanes))
            return b.gep(smem, [b.zext(b.add(index, lane), I64)], inbounds=True, source_etype=ty)

        for c, r in enumerate(canonical):
            b.store(self.total[r], slot(low.warp, c))
        low.barrier()
        run_mask = sum(1 << bit for bit in bits)
        mine = ir.Constant(I32, 0)  # this warp's position in the run
        for j, bit in enumerate(bits):
            mine = b.or_(mine, b.shl(b.and_(b.lshr(low.warp, ir.Constant(I32, bit)), ir.Constant(I32, 1)),
                                     ir.Constant(I32, j)))
        base = b.and_(low.warp, ir.Constant(I32, ~run_mask & 0xFFFFFFFF))
        running, before = [None] * len(canonical), [const(self.dtype, 0)] * len(canonical)
        for g in range(1 << len(bits)):
            warp = b.or_(base, ir.Constant(I32, sum(1 << bit for j, bit in enumerate(bits) if g >> j & 1)))
            earlier = b.icmp_unsigned(">", mine, ir.Constant(I32, g))
            for c in range(len(canonical)):
                got = b.load(slot(warp, c), typ=ty)
                running[c] = got if running[c] is None else self.add(running[c], got)
                before[c] = b.select(earlier, running[c], before[c])
        low.release_shared()
        first = b.icmp_unsigned("==", mine, ir.Constant(I32, 0))
        self.prefix = [b.select(first, p, self.add(before[slot_of[r]], p)) for r, p in enumerate(self.prefix)]
        self.total = [running[slot_of[r]] for r in range(regs)]


def scan(low, node):
    from .lower import TileValue

    source = low.tile(node.value)
    layout, dtype = source.layout, node.dtype
    state = _Scan(low, layout, dtype, source.regs)
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
