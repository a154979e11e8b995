"""Streaming the operands of a K loop straight into shared memory: TMA + mbarrier + wgmma.

Takes: a tile kernel, the target and its `matmul.Plan`. Gives:
- `find(kernel, target, plan)`: records in `plan.pipelines` each loop it streams, and in
  `plan.tensor_maps` the TMA descriptors the kernel then takes (after the fault block, as
  `__grid_constant__` parameters; `runtime.tensormap` makes them at launch);
- `lower_loop(low, loop, stream)`: the loop's code.

A loop is streamed (sm_90a) when its body is a matrix product accumulated into a variable
from tiles loaded in the body and used nowhere else:
    for k in range(start, stop, step):         # a constant positive step
        x = tile.load(A, index=(..k..), shape=(R, C))   # or inline, or .T of it
        y = tile.load(B, index=(..k..), shape=(R', C'))
        acc = tile.mma(x, y, acc)              # the product runs on wgmma
where the loads read 2-d arrays of float16/bfloat16/fp8 with unit inner stride, whole
power-of-two tiles with padding 0 (the copy engine fills what lies outside with zeros), at
indices that depend on nothing the body assigns. Their tiles then go global -> shared by
the copy engine (`cp.async.bulk.tensor`), `stages` iterations ahead, each stage's arrival
counted by a `full` mbarrier (transaction bytes) and its release by an `empty` mbarrier
(one arrival per warp, after the warp's wgmma that read it completed); thread 0 issues the
copies. The wgmma of iteration i stays in flight while iteration i+1's is issued
(`wgmma.wait_group 1`), and the loop ends with every product complete. Correct by
construction: a stage is refilled only after its `empty` phase completed, and read only
after its `full` phase completed; phases alternate with each pass over the stages.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..codegen.dtypes import FLOAT, I32, I64
from ..ir import nodes as N
from ..ir import tiles as X
from . import operand, ptx
from .layout import padded

MAX_STAGES = 4
TMA_TYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
BARRIER_BYTES = 8


@dataclass(frozen=True)
class TensorMap:
    """One TMA descriptor: array `param` (2-d, `dtype`) in boxes of `box` (rows, cols)."""

    param: str
    dtype: str
    itemsize: int
    box: tuple
    swizzle: int  # panel bytes (128, 64, 32)


@dataclass
class Streamed:
    """One operand tile streamed from global memory."""

    load: X.TileLoad
    stored: operand.Stored
    k_major: bool
    map_index: int  # position in `plan.tensor_maps`
    offset: int  # bytes into a stage


@dataclass
class Pipeline:
    loop: N.For
    dot: X.TileDot
    operands: tuple  # (A, B) Streamed
    skipped: frozenset  # ids of body statements the stream replaces (loads into variables)
    stages: int
    stage_bytes: int
    base: int  # offset of stage 0 in dynamic shared memory
    barriers: int  # offset of the mbarriers

    @property
    def dots(self) -> tuple:
        return (self.dot,)

    @property
    def accumulator(self) -> str:
        """The variable the loop accumulates into."""
        return self.loop.body[-1].name

    @property
    def stage_bytes_used(self) -> int:
        """The bytes the copy engine writes per stage (its transaction count)."""
        return sum(op.stored.nbytes for op in self.operands)


def _resolve(e, assigned_in_body: dict):
    """The TileLoad an operand comes from, and whether it is transposed on the way, or None."""
    transposed = False
    while True:
        if isinstance(e, X.TileVar):
            e = assigned_in_body.get(e.name)
            if e is None:
                return None
        elif isinstance(e, X.Permute) and e.perm == (1, 0):
            transposed = not transposed
            e = e.value
        elif isinstance(e, X.TileLoad):
            return e, transposed
        else:
            return None


def _names(e) -> set:
    from ..frontend import walk

    return {n.name for n in walk([e]) if isinstance(n, N.Var)}


def _streamable(load: X.TileLoad, body_names: set, loop_var: str) -> bool:
    t = load.array.type
    return (load.array.dtype.name in TMA_TYPES and t.ndim == 2 and t.unit_inner_stride
            and tuple(load.shape) == padded(load.shape) and isinstance(load.padding, N.Const)
            and load.padding.value == 0 and max(load.shape) <= 256
            and not any(_names(i) & (body_names - {loop_var}) for i in load.index))


def find(kernel: N.Kernel, target: str, plan) -> None:
    from ..frontend import walk

    if target != "sm_90a":
        return
    reads: dict = {}
    for node in walk(kernel.body):
        if isinstance(node, X.TileVar):
            reads[node.name] = reads.get(node.name, 0) + 1
    offset = 0
    for loop in (n for n in walk(kernel.body) if isinstance(n, N.For)):
        found = _match(loop, plan, reads)
        if found is None:
            continue
        dot, loads, skipped = found
        operands, stage = [], 0
        for load, k_major in loads:
            rows, cols = load.shape
            size = load.array.dtype.itemsize
            stored = operand.Stored(rows, cols, size)
            plan.tensor_maps.append(TensorMap(load.array.name, load.array.dtype.name, size,
                                              (rows, stored.panel_cols), stored.panel_bytes))
            operands.append(Streamed(load, stored, k_major, len(plan.tensor_maps) - 1, stage))
            stage += _align(stored.nbytes)
        budget = 200 * 1024 - offset
        stages = max(2, min(MAX_STAGES, budget // stage))
        barriers = offset + stages * stage
        plan.pipelines[id(loop)] = Pipeline(loop, dot, tuple(operands), skipped, stages, stage,
                                            offset, barriers)
        offset = _align(barriers + 2 * stages * BARRIER_BYTES)
    plan.staging_offset = offset


def _align(n: int) -> int:
    return (n + operand.BASE_ALIGN - 1) // operand.BASE_ALIGN * operand.BASE_ALIGN


def _match(loop: N.For, plan, reads: dict):
    """(dot, [(load, k_major) of A and B], ids of skipped statements) or None."""
    if not (isinstance(loop.step, N.Const) and loop.step.value > 0):
        return None
    body = loop.body
    if not body or not all(isinstance(s, N.Assign) for s in body):
        return None
    last = body[-1]
    dot = last.value
    if not (isinstance(dot, X.TileDot) and plan.dots[id(dot)].engine == "wgmma"
            and isinstance(dot.acc, X.TileVar) and dot.acc.name == last.name
            and reads.get(last.name, 0) >= 1):
        return None
    assigned = {s.name: s.value for s in body[:-1]}
    if any(not isinstance(v, X.TileLoad) or reads.get(name, 0) != 1 for name, v in assigned.items()):
        return None
    names = {s.name for s in body}
    loads = []
    for which, e in (("a", dot.a), ("b", dot.b)):
        found = _resolve(e, assigned)
        if found is None or not _streamable(found[0], names, loop.var):
            return None
        load, transposed = found
        # The stored matrix is the load's tile (its columns contiguous); K runs along its
        # columns when A is not transposed, or B is.
        k_major = transposed == (which == "b")
        if not k_major and load.array.dtype.itemsize == 1:
            return None  # fp8 wgmma reads K-major operands only
        loads.append((load, k_major))
    if plan.dots[id(dot)].kind != loads[0][0].array.dtype.name:
        return None
    return dot, loads, frozenset(id(s) for s in body[:-1])


# ----------------------------------------------------------------------------- lowering


def _c(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def lower_loop(low, loop: N.For, p: Pipeline) -> None:
    b, em = low.b, low.em
    dt = low.kernel.locals[loop.var]
    start = b.sext(low.expr(loop.start), I64) if dt.is_signed else b.zext(low.expr(loop.start), I64)
    stop = b.sext(low.expr(loop.stop), I64) if dt.is_signed else b.zext(low.expr(loop.stop), I64)
    step = loop.step.value
    span = b.sub(stop, start)
    trips64 = b.select(b.icmp_signed(">", span, ir.Constant(I64, 0)),
                       b.sdiv(b.add(span, ir.Constant(I64, step - 1)), ir.Constant(I64, step)),
                       ir.Constant(I64, 0))
    trips = b.trunc(trips64, I32)
    tid = em.call("llvm.nvvm.read.ptx.sreg.tid.x", I32)
    leader = b.icmp_unsigned("==", tid, _c(0))
    stages = p.stages
    full = [ptx.shared_address(b, low.shared_dynamic(p.barriers + s * BARRIER_BYTES)) for s in range(stages)]
    empty = [ptx.shared_address(b, low.shared_dynamic(p.barriers + (stages + s) * BARRIER_BYTES))
             for s in range(stages)]
    stage_base = ptx.shared_address(b, low.shared_dynamic(p.base))
    maps = low.tensor_map_args

    def set_var(i: ir.Value) -> None:
        value = b.add(start, b.mul(b.zext(i, I64), ir.Constant(I64, step)))
        low.b.store(b.trunc(value, ir.IntType(dt.bits)) if dt.bits < 64 else value, low.slots[loop.var])

    def produce(i: ir.Value, stage: ir.Value) -> None:
        """Thread 0: copy iteration i's tiles into `stage` (i32 values)."""
        set_var(i)
        bar = _select(b, full, stage)
        ptx.mbarrier_arrive_expect_tx(em, bar, p.stage_bytes_used)
        base = b.add(stage_base, b.mul(stage, _c(p.stage_bytes)))
        for op in p.operands:
            rows, cols = op.load.shape
            row = b.trunc(b.mul(low.expr(op.load.index[0]), ir.Constant(I64, rows)), I32)
            col = b.trunc(b.mul(low.expr(op.load.index[1]), ir.Constant(I64, cols)), I32)
            for panel in range(cols // op.stored.panel_cols):
                dst = b.add(base, _c(op.offset + panel * rows * op.stored.panel_bytes))
                ptx.tma_load_2d(em, dst, maps[op.map_index], b.add(col, _c(panel * op.stored.panel_cols)),
                                row, bar)

    # Barriers: set up by thread 0, visible to the copy engine, then to every thread.
    _if(low, leader, lambda: ([ptx.mbarrier_init(em, full[s], 1) for s in range(stages)],
                              [ptx.mbarrier_init(em, empty[s], low.num_warps) for s in range(stages)],
                              ptx.fence_mbarrier_init(em)))
    low.barrier()
    _if(low, leader, lambda: [_if(low, b.icmp_signed("<", _c(s), trips), lambda s=s: produce(_c(s), _c(s)))
                              for s in range(stages)])

    # The loop: i from 0 to trips - 1.
    entry = b.block
    header, body, done = low._block("stream.k"), low._block("stream.body"), low._block("stream.done")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I32)
    i.add_incoming(_c(0), entry)
    b.cbranch(b.icmp_signed("<", i, trips), body, done)
    b.position_at_end(body)
    stage = b.urem(i, _c(stages))
    parity = b.and_(b.udiv(i, _c(stages)), _c(1))
    ptx.mbarrier_wait(em, _select(b, full, stage), parity)
    set_var(i)
    addresses = tuple((op.stored, b.add(stage_base, b.add(b.mul(stage, _c(p.stage_bytes)), _c(op.offset))),
                       op.k_major) for op in p.operands)
    low.streams[id(p.dot)] = addresses
    low.pending = 1
    try:
        low.stmts([s for s in loop.body if id(s) not in p.skipped])
    finally:
        del low.streams[id(p.dot)]
        low.pending = 0
    # Iteration i-1's products are complete (wait_group 1): release its stage; thread 0
    # refills it with iteration i-1+stages once every warp has released it.
    previous = b.sub(i, _c(1))
    has_previous = b.icmp_signed(">=", previous, _c(0))
    prev_stage = b.urem(b.add(previous, _c(stages)), _c(stages))
    lane0 = b.icmp_unsigned("==", low.lane, _c(0))
    _if(low, b.and_(has_previous, lane0), lambda: ptx.mbarrier_arrive(em, _select(b, empty, prev_stage)))
    refill = b.add(previous, _c(stages))

    def reload():
        ptx.mbarrier_wait(em, _select(b, empty, prev_stage), b.and_(b.udiv(previous, _c(stages)), _c(1)))
        produce(refill, prev_stage)
    _if(low, b.and_(b.and_(leader, has_previous), b.icmp_signed("<", refill, trips)), reload)
    i.add_incoming(b.add(i, _c(1)), b.block)
    b.branch(header)
    b.position_at_end(done)
    _, slots = low.tile_slots[p.accumulator]
    acc = ptx.wgmma_wait(em, 0, [b.load(slot, typ=FLOAT) for slot in slots])
    for value, slot in zip(acc, slots):
        b.store(value, slot)
    # Python leaves the loop variable at its last value.
    _if(low, b.icmp_signed(">", trips, _c(0)), lambda: set_var(b.sub(trips, _c(1))))


def _select(b, addresses: list, index: ir.Value) -> ir.Value:
    """addresses[index] for a run-time index: the barriers are evenly spaced."""
    if len(addresses) == 1:
        return addresses[0]
    step = b.sub(addresses[1], addresses[0])
    return b.add(addresses[0], b.mul(index, step))


def _if(low, cond: ir.Value, then) -> None:
    b = low.b
    then_bb, end_bb = low._block("stream.if"), low._block("stream.fi")
    b.cbranch(cond, then_bb, end_bb)
    b.position_at_end(then_bb)
    then()
    b.branch(end_bb)
    b.position_at_end(end_bb)
