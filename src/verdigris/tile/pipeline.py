"""Streaming a loop's matrix operands straight into shared memory: TMA + mbarriers + wgmma.

Takes: the loops `streams.find` matched (the plan then sizes their stages, `matmul.plan`).
Gives:
- `Pipeline`, `Streamed`, `Invariant`, `TensorMap`: what a loop streams, and how;
- `run_body(low, p, invariants, operand_base)` and `stage_invariants(low, p)`, which both
  lowerings use;
- `lower_loop(low, loop, stream)`: a streamed loop as the threads that compute run it;
- `produce_loop(low, stream)`: the same loop as the producer warp of a warp-specialized
  kernel runs it (`specialize`): only the copies, ahead of the consumers;
- `init_barriers(low, stream)`.

A loop is streamed (sm_90a) when tiles loaded in its body feed wgmma products directly
(`streams`; on other targets than sm_90a, the loops whose products run on mma.sync, which
`cpasync` streams by per-thread `cp.async` copies):
    for k in range(start, stop, step):          # a constant positive step
        x = tile.load(A, index=(..k..), shape=(R, C))   # inline too, or `.T` of it, or a
        y = tile.load(B, index=(..k..), shape=(R', C'))  # (1, R, C) or (1, 1, R, C) load of
        acc = tile.mma(x, y, acc)                         # a 3-d or 4-d array reshaped to (R, C)
A streamed load reads a 2-d to 5-d array (any strides but a unit inner one: a torch view
such as attention's (batch, heads, seq, head_dim) of a (batch, seq, heads, head_dim)
tensor) of float16/bfloat16/fp8: a whole power-of-two tile of its last two axes (extent 1
along the others) with padding 0 (the copy engine fills what lies outside with zeros), at
an index that depends on nothing the body assigns but the loop variable and the scalars of
its index prefix, and its tile is used only as operands of products in
statements of the body itself (a variable several products read is copied once, each
product reading it K- or M/N-major as it needs). It then goes global -> shared by the copy engine
(`cp.async.bulk.tensor`), up to `stages` iterations ahead. The index prefix: scalar
statements at the top of the body that read only the loop variable, loop invariants and
arrays the kernel never writes, such as a page read from a block table (paged attention:
`page = tile.load(table, (b, k), shape=())`, then K's tile at `(page, ...)`); whoever
copies iteration i ahead runs them again for i first (`StreamLoop.at_iteration`), into
the body's own variables: the body recomputes them at its top, before anything reads them,
so a copy issued before the loop or between two iterations changes nothing the body sees,
as for the loop variable itself. A loop with an index prefix is not warp-specialized
(`specialize`). A product's other operand, when the body does not assign it (a loop
invariant, e.g. attention's Q), is staged into shared memory once before the loop;
otherwise it is staged each iteration, or taken from registers (`matmul`).

Two modes:
- accumulating (the body is the streamed loads and one `acc = tile.mma(x, y, acc)`): the
  wgmma of iteration i stays in flight while i+1's is issued (`wgmma.wait_group 1`); the
  stage of iteration i is released once that wait returns in iteration i+1;
- general (anything else: softmax between two products, ...): each product completes
  before its result is used, and a stage is released at the end of its iteration. In a
  warp-specialized kernel of several consumer warp groups, the groups issue their products
  in turns (group 0, 1, ..., 0, ...: a named barrier per group, `bar.sync` on its own
  before issuing, `bar.arrive` on the next one's after): they fall out of step, so one
  group's products keep the tensor cores busy while another computes on the CUDA cores
  (attention's softmax), instead of all waiting on the tensor cores, then all leaving them
  idle. Every group issues the same products (tile code is block-uniform), the last group
  gives the first its first turn, and group 0 takes the turn left over after the loop, so
  each barrier is balanced whenever the loop ends.

Stages are counted by a running iteration number c (across the tiles of a persistent
kernel): stage c % stages, parity (c / stages) & 1. A stage's `full` mbarrier completes
when its bytes have landed (one arrival with the transaction count, then the bytes); its
`empty` mbarrier when every computing warp has released it (lane 0 of each arrives).
Correct by construction: a stage is refilled only after its `empty` phase completed, and
read only after its `full` phase completed. Who copies: without warp specialization,
thread 0 (a prologue of `stages` iterations, then each released stage refilled); with it,
one thread of the producer warp group, which runs the same loop bounds.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..codegen.dtypes import FLOAT, I32, I64, i32
from ..ir import nodes as N
from ..ir import tiles as X
from . import control, operand, ptx

MAX_STAGES = {"wgmma": 6, "mma.sync": 4}  # per engine: mma.sync's stages (`cpasync`) are
# copied by the computing threads themselves, so fewer pay off
TURN_BARRIER = 8  # named barrier TURN_BARRIER + g: warp group g's turn (epilogue uses 2..)
TMA_TYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
MAX_TMA_RANK = 5  # the copy engine's tensor maps have 1 to 5 axes
BARRIER_BYTES = 8


@dataclass(frozen=True)
class TensorMap:
    """One TMA descriptor: array `param` (`dtype`) in boxes of `box` (one extent per array
    axis, outermost first; the last is one swizzle panel), swizzled `swizzle` bytes."""

    param: str
    dtype: str
    itemsize: int
    box: tuple
    swizzle: int  # panel bytes (128, 64, 32)


@dataclass
class Streamed:
    """One operand of a product streamed from global memory (its load's last two axes).
    A tile loaded into a variable that several products of the body read is copied once:
    its first use is `copied`, the others read the same bytes of the stage (each with its
    own `k_major`: wgmma's descriptors read one swizzled tile either way)."""

    load: X.TileLoad
    dot: X.TileDot
    which: int  # 0: A, 1: B
    stored: operand.Stored
    k_major: bool
    map_index: int  # position in `plan.tensor_maps`
    offset: int = 0  # bytes into a stage
    copied: bool = True  # False: another operand's copy brings this tile


@dataclass
class Invariant:
    """A product operand the loop does not assign: staged once, before the loop."""

    dot: X.TileDot
    which: int
    node: X.TileExpr
    nbytes: int
    offset: int = 0  # in dynamic shared memory


@dataclass
class Pipeline:
    loop: N.For
    operands: tuple  # Streamed
    invariants: tuple  # Invariant
    skipped: frozenset  # ids of body statements the stream replaces (loads into variables)
    accumulating: bool
    stage_bytes: int
    stages: int = 0
    base: int = 0  # offset of stage 0 in dynamic shared memory
    barriers: int = 0  # offset of the mbarriers
    specialized: bool = False  # a producer warp group copies (`specialize`)
    engine: str = "wgmma"  # "mma.sync": streamed by `cpasync`, without mbarriers
    index_prefix: tuple = ()  # body statements a streamed index reads (`streams._index_prefix`)

    @property
    def max_stages(self) -> int:
        return MAX_STAGES[self.engine]

    @property
    def dots(self) -> tuple:
        return tuple(dict.fromkeys(op.dot for op in self.operands))

    @property
    def accumulator(self) -> str:
        """The variable an accumulating loop accumulates into."""
        return self.loop.body[-1].name

    @property
    def copies(self) -> tuple:
        """The operands whose tiles are copied in (each tile once)."""
        return tuple(op for op in self.operands if op.copied)

    @property
    def stage_bytes_used(self) -> int:
        """The bytes the copy engine writes per stage (its transaction count)."""
        return sum(op.stored.nbytes for op in self.copies)

    @property
    def shared_bytes(self) -> int:
        barriers = 2 * self.stages * BARRIER_BYTES if self.engine == "wgmma" else 0
        return operand.aligned(self.stages * self.stage_bytes + barriers)

    def place(self, offset: int, stages: int) -> int:
        """Put the stages at `offset`; the end of the stages and barriers."""
        self.stages, self.base = stages, offset
        self.barriers = offset + stages * self.stage_bytes
        return offset + self.shared_bytes


# ----------------------------------------------------------------------------- lowering


class StreamLoop:
    """A streamed loop's trip count, loop variable and barriers, as one thread lowers them."""

    def __init__(self, low, p: Pipeline):
        b = low.b
        self.low, self.p, self.b = low, p, b
        loop = p.loop
        self.dt = low.kernel.locals[loop.var]
        widen = b.sext if self.dt.is_signed else b.zext
        self.start = widen(low.expr(loop.start), I64)
        stop = widen(low.expr(loop.stop), I64)
        step = self.step = loop.step.value
        span = b.sub(stop, self.start)
        trips = b.select(b.icmp_signed(">", span, ir.Constant(I64, 0)),
                         b.sdiv(b.add(span, ir.Constant(I64, step - 1)), ir.Constant(I64, step)),
                         ir.Constant(I64, 0))
        self.trips = b.trunc(trips, I32)
        self.full, self.empty = barrier_addresses(low, p) if p.engine == "wgmma" else ([], [])
        self.stage_base = ptx.shared_address(b, low.shared_dynamic(p.base))

    def leave_loop_var(self) -> None:
        """After the loop: the variable at its last value, as Python leaves it."""
        b = self.b
        control.when(self.low, b.icmp_signed(">", self.trips, i32(0)), lambda: self.set_var(b.sub(self.trips, i32(1))))

    def at_iteration(self, i: ir.Value) -> None:
        """The loop variable at iteration i, and the index prefix's scalars computed for it
        (what the streamed loads' indices read)."""
        self.set_var(i)
        self.low.stmts(list(self.p.index_prefix))

    def set_var(self, i: ir.Value) -> None:
        b = self.b
        value = b.add(self.start, b.mul(b.zext(i, I64), ir.Constant(I64, self.step)))
        b.store(b.trunc(value, ir.IntType(self.dt.bits)) if self.dt.bits < 64 else value,
                self.low.slots[self.p.loop.var])

    def stage_of(self, c: ir.Value) -> tuple:
        """(stage, parity) of running iteration number c."""
        stages = self.p.stages
        return self.b.urem(c, i32(stages)), self.b.and_(self.b.udiv(c, i32(stages)), i32(1))

    def produce(self, i: ir.Value, stage: ir.Value) -> None:
        """Copy iteration i's tiles into `stage` (i32 values); one thread runs it."""
        b, low, p = self.b, self.low, self.p
        self.at_iteration(i)
        bar = _select(b, self.full, stage)
        ptx.mbarrier_arrive_expect_tx(low.em, bar, p.stage_bytes_used)
        base = b.add(self.stage_base, b.mul(stage, i32(p.stage_bytes)))
        for op in p.copies:
            # element coordinates, innermost first: index[k] * shape[k]
            coords = [b.trunc(b.mul(low.expr(i), ir.Constant(I64, n)), I32)
                      for i, n in zip(op.load.index, op.load.shape)][::-1]
            rows = op.stored.rows
            for panel in range(op.stored.cols // op.stored.panel_cols):
                dst = b.add(base, i32(op.offset + panel * rows * op.stored.panel_bytes))
                moved = [b.add(coords[0], i32(panel * op.stored.panel_cols))] + coords[1:]
                ptx.tma_load(low.em, dst, low.tensor_map_args[op.map_index], moved, bar)

    def release(self, stage: ir.Value, when=None) -> None:
        """Lane 0 of every computing warp arrives on `stage`'s empty barrier."""
        low = self.low
        cond = self.b.icmp_unsigned("==", low.lane, i32(0))
        if when is not None:
            cond = self.b.and_(cond, when)
        control.when(low, cond, lambda: ptx.mbarrier_arrive(low.em, _select(self.b, self.empty, stage)))


def barrier_addresses(low, p: Pipeline) -> tuple:
    b = low.b
    full = [ptx.shared_address(b, low.shared_dynamic(p.barriers + s * BARRIER_BYTES)) for s in range(p.stages)]
    empty = [ptx.shared_address(b, low.shared_dynamic(p.barriers + (p.stages + s) * BARRIER_BYTES))
             for s in range(p.stages)]
    return full, empty


def init_barriers(low, p: Pipeline, warps: int) -> None:
    """Thread 0: every stage's barriers (full: 1 arrival + bytes; empty: one per warp),
    made visible to the copy engine. A block-wide barrier must follow."""
    em = low.em
    full, empty = barrier_addresses(low, p)
    tid = em.call("llvm.nvvm.read.ptx.sreg.tid.x", I32)
    control.when(low, low.b.icmp_unsigned("==", tid, i32(0)),
        lambda: ([ptx.mbarrier_init(em, bar, 1) for bar in full],
                 [ptx.mbarrier_init(em, bar, warps) for bar in empty], ptx.fence_mbarrier_init(em)))


def produce_loop(low, p: Pipeline) -> None:
    """The producer's loop (one thread of a warp-specialized kernel): for each iteration,
    wait until its stage is free, then copy into it. Its running count is
    `low.stream_count`, the consumers' count in their own registers."""
    s = StreamLoop(low, p)
    b = low.b
    base = b.load(low.stream_count, typ=I32)

    def iteration(i):
        stage, parity = s.stage_of(b.add(base, i))
        # The first pass finds every stage free: parity 1 of a fresh barrier has completed.
        ptx.mbarrier_wait(low.em, _select(b, s.empty, stage), b.xor(parity, i32(1)))
        s.produce(i, stage)
    control.counted(low, s.trips, iteration, "produce")
    b.store(b.add(base, s.trips), low.stream_count)


def lower_loop(low, loop: N.For, p: Pipeline) -> None:
    b, em = low.b, low.em
    if not p.specialized:  # every warp is past an earlier run of this loop: set up again
        low.barrier()
        init_barriers(low, p, low.num_warps)
        low.barrier()
    s = StreamLoop(low, p)
    trips = s.trips
    base = b.load(low.stream_count, typ=I32) if p.specialized else i32(0)
    leader = b.icmp_unsigned("==", em.call("llvm.nvvm.read.ptx.sreg.tid.x", I32), i32(0))
    if not p.specialized:
        control.when(low, leader, lambda: [control.when(low, b.icmp_signed("<", i32(k), trips), lambda k=k: s.produce(i32(k), i32(k)))
                                  for k in range(p.stages)])
    streams = stage_invariants(low, p)
    if p.accumulating:  # opaque to LLVM: no first iteration peeled off for a constant start
        _, slots = low.tile_slots[p.accumulator]
        for value, slot in zip(ptx.pin(em, [b.load(slot, typ=FLOAT) for slot in slots]), slots):
            b.store(value, slot)

    def iteration(i):
        c = b.add(base, i)
        stage, parity = s.stage_of(c)
        ptx.mbarrier_wait(em, _select(b, s.full, stage), parity)
        s.set_var(i)
        stage_addr = b.add(s.stage_base, b.mul(stage, i32(p.stage_bytes)))
        run_body(low, p, streams, lambda op: b.add(stage_addr, i32(op.offset)))
        if p.accumulating:
            # Iteration i-1's products are complete (wait_group 1): release its stage.
            previous = b.sub(i, i32(1))
            prev_stage, prev_parity = s.stage_of(b.sub(c, i32(1)))
            has_previous = b.icmp_signed(">=", previous, i32(0))
            s.release(prev_stage, has_previous)
            refill, freed, freed_parity, when = b.add(previous, i32(p.stages)), prev_stage, prev_parity, has_previous
        else:
            s.release(stage)
            refill, freed, freed_parity, when = b.add(i, i32(p.stages)), stage, parity, None
        if not p.specialized:  # thread 0 refills the released stage once every warp released it
            cond = b.and_(leader, b.icmp_signed("<", refill, trips))
            cond = cond if when is None else b.and_(cond, when)

            def reload():
                ptx.mbarrier_wait(em, _select(b, s.empty, freed), freed_parity)
                s.produce(refill, freed)
            control.when(low, cond, reload)
    if not p.accumulating:
        groups = low.num_warps // 4 if p.specialized else 1
        if groups > 1:
            low.turns = _take_turns(low, groups)
        try:
            control.counted(low, trips, iteration, "stream")
        finally:
            low.turns = None
        if groups > 1:
            control.when(low, b.icmp_unsigned("<", low.warp, i32(4)), lambda: ptx.named_barrier(em, TURN_BARRIER, 256))
    else:
        # Only the loop's exit reaches the final wait: a path from before the loop (no
        # trips) into it makes ptxas serialize every wgmma of the kernel.
        def run():
            control.counted(low, trips, iteration, "stream")
            _, slots = low.tile_slots[p.accumulator]
            acc = ptx.wgmma_wait(em, 0, [b.load(slot, typ=FLOAT) for slot in slots])
            for value, slot in zip(acc, slots):
                b.store(value, slot)
            if p.specialized:  # the last stage is free for the producer's next tile
                s.release(s.stage_of(b.add(base, b.sub(trips, i32(1))))[0])
        control.when(low, b.icmp_signed(">", trips, i32(0)), run)
    if p.specialized:
        b.store(b.add(base, trips), low.stream_count)
    s.leave_loop_var()


def _take_turns(low, groups: int) -> tuple:
    """(this warp group's turn barrier, the next group's), once group `groups - 1` has
    given group 0 its first turn (module docstring)."""
    b = low.b
    group = b.lshr(low.warp, i32(2))
    following = b.urem(b.add(group, i32(1)), i32(groups))
    control.when(low, b.icmp_unsigned("==", group, i32(groups - 1)),
        lambda: ptx.named_barrier(low.em, TURN_BARRIER, 256, arrive=True))
    return b.add(group, i32(TURN_BARRIER)), b.add(following, i32(TURN_BARRIER))


def run_body(low, p: Pipeline, invariants: dict, operand_base) -> None:
    """Lower the loop body (less the loads the stream replaces) with each product's
    streamed operands in shared memory at `operand_base(op)`, its loop-invariant ones at
    `invariants` (`stage_invariants`). An accumulating wgmma loop leaves its products in
    flight (`low.pending`)."""
    given: dict = {id(d): [None, None] for d in p.dots}
    for k, entry in invariants.items():
        given.setdefault(k[0], [None, None])[k[1]] = entry
    for op in p.operands:
        given[id(op.dot)][op.which] = (op.stored, operand_base(op), op.k_major)
    low.streams.update({k: tuple(v) for k, v in given.items()})
    low.pending = p.accumulating and p.engine == "wgmma"
    try:
        low.stmts([st for st in p.loop.body if id(st) not in p.skipped])
    finally:
        for k in given:
            del low.streams[k]
        low.pending = False


def stage_invariants(low, p: Pipeline) -> dict:
    """Stage the loop-invariant operands (after a barrier: an earlier pass of the code that
    holds this loop may still read them); (id(dot), which) -> (stored, base, k_major)."""
    if not p.invariants:
        return {}
    low.barrier()
    out = {}
    for inv in p.invariants:
        dot = low.plan.dots[id(inv.dot)]
        out[(id(inv.dot), inv.which)] = low.stage_operand(inv.node, inv.which, dot, low.tile(inv.node),
                                                          inv.offset)[:3]
    if p.engine == "wgmma":
        ptx.fence_proxy_async(low.em)
    low.barrier()
    return out


def _select(b, addresses: list, index: ir.Value) -> ir.Value:
    """addresses[index] for a run-time index: the barriers are evenly spaced."""
    if len(addresses) == 1:
        return addresses[0]
    step = b.sub(addresses[1], addresses[0])
    return b.add(addresses[0], b.mul(index, step))
