"""Warp specialization and a persistent grid, for kernels with one streamed loop (sm_90a).

Takes: a tile kernel, its plan and the loops `pipeline` streams. Gives:
- `decide(kernel, pipelines, warps) -> Specialized | None`;
- `producer_code(kernel, p)`: what the producer runs to reach the streamed loop;
- `kernel_region(low, region, spec)`: the kernel body's code (`matmul.MmaLowering`).

When: the kernel takes no `tile.lock` and makes no one-element atomic (`tile.atomic_cas`,
`tile.atomic_xchg`: `locks` runs those with the block's thread 0 and barrier), and its one
streamed loop is reached from the kernel's body through inlined helpers, `for` loops and
`if`s only (not a while loop) whose bounds and conditions are computed from parameters,
block indices and scalars, as are the streamed loop's bounds and its streamed loads'
indices: the scalars that the statements before it compute (in a loop around it, any of
the loop's statements), as scalar code: assignments, ifs and while loops of scalars,
reading memory only in elements of arrays the kernel never writes (varlen attention's
search of its sequence offsets, the grouped GEMM's search of its group offsets). No
`return` before the streamed loop, and no `break` or `continue` of a loop around it, may
leave the way to it. The producer runs that way again (`producer_code`: the loops and ifs
with those statements in them, the streamed loop where it stands), so its copies follow
the consumers' runs of the loop one for one. Not from statements of the loop's body
(`pipeline`'s index prefix: such a loop is streamed, not specialized).

What the block then runs: the kernel's `num_warps` warps compute (the consumers: every
statement of the kernel, as written), and one more warp group, the producer, copies: one of
its threads runs the way to the streamed loop and issues each iteration's copies as soon as
the stage it goes to is free, so loads run ahead of the products by up to `stages`
iterations, across tiles too. Registers move to the consumers (`setmaxnreg`: the producer
keeps PRODUCER_REGISTERS, the consumers share the rest; the kernel is compiled with
`.maxntid` of the whole block and one block per multiprocessor). The consumers' barriers
are named barrier 1 over their threads only (the producer never joins them).

Persistent (accumulating loops: every tile costs the same): the launch starts one block
per multiprocessor (`runtime.tensormap`); block b runs tiles b, b + blocks, ... of the
grid the launch asked for, which the kernel takes as three extra parameters, in grouped
order (GROUP consecutive tiles along axis 0 for each tile along axis 1, so blocks running
together share operand panels in L2); `tile.bid` and `tile.num_blocks` read that virtual
grid. The producer's copies for the next tile then overlap the consumers' epilogue. Loops
of uneven work (causal attention) keep one block per tile, which the hardware balances.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..codegen.dtypes import I32, i32
from ..ir import nodes as N
from ..ir import tiles as X
from ..ir.locks import Locked
from . import control, pipeline, ptx

PRODUCER_WARPS = 4
PRODUCER_REGISTERS = 40
REGISTER_FILE = 65536
GROUP = 8
CONSUMER_BARRIER = 1
_PURE = (N.Const, N.Var, N.Binary, N.Unary, N.Compare, N.Logical, N.Select, N.Cast, N.Shape, N.MathCall)


@dataclass(frozen=True)
class Specialized:
    pipeline: pipeline.Pipeline
    consumer_warps: int
    persistent: bool
    producer: tuple  # the statements the producer runs (`producer_code`), the streamed loop among them

    @property
    def threads(self) -> int:
        return 32 * (self.consumer_warps + PRODUCER_WARPS)

    @property
    def register_cap(self) -> int:
        """Registers per thread ptxas allows at entry (`.maxntid` threads, one block)."""
        return min(255, REGISTER_FILE // self.threads) // 8 * 8

    @property
    def consumer_registers(self) -> int:
        left = REGISTER_FILE - 32 * PRODUCER_WARPS * PRODUCER_REGISTERS
        return min(256, left // (32 * self.consumer_warps) // 8 * 8)


def _pure(e, kernel: N.Kernel) -> bool:
    """Whether `e` is computed from parameters, block indices and scalars, reading at most
    elements of arrays the kernel never writes (a value the producer computes again equals
    the consumers'; a load's bounds check is the thread's own, as any scalar access's)."""
    from ..frontend import walk

    return all(isinstance(n, _PURE) or (isinstance(n, N.Special) and n.kind in ("block_id", "grid_dim"))
               or isinstance(n, N.ArrayRef) or (isinstance(n, N.Load) and n.array.name not in kernel.writes)
               for n in walk([e]))


def _scalar_code(s, kernel: N.Kernel) -> bool:
    """Whether statement `s` is scalar code the producer may run again: assignments of
    scalars `_pure` computes, and ifs and while loops of them on `_pure` conditions (with
    `break` and `continue`: a loop whose condition loads runs as `while True` and a break)."""
    if isinstance(s, (N.Break, N.Continue)):
        return True
    if isinstance(s, N.Assign):
        return not isinstance(kernel.locals.get(s.name), X.TileType) and _pure(s.value, kernel)
    if isinstance(s, (N.If, N.While)):
        body = s.then + s.orelse if isinstance(s, N.If) else s.body
        return _pure(s.cond, kernel) and all(_scalar_code(t, kernel) for t in body)
    return False


def _assigned(s) -> set:
    from ..frontend import walk

    return {n.name for n in walk([s]) if isinstance(n, N.Assign)} | \
        {n.var for n in walk([s]) if isinstance(n, N.For)}


def _free(e) -> set:
    from ..frontend import walk

    return {n.name for n in walk([e]) if isinstance(n, N.Var)}


@dataclass
class _Level:
    """One list of statements on the way from the kernel's body to the streamed loop."""

    body: list
    at: object  # the statement of `body` the way goes through; None: a branch beside it
    in_loop: bool  # inside a loop around the streamed one: each of its statements may run before it
    label: str = ""  # the label of the region whose body this is

    def candidates(self) -> list:
        """The statements that may run before the streamed loop (in this iteration, or the
        last one of a loop around it)."""
        if self.in_loop:
            return [s for s in self.body if s is not self.at]
        return [] if self.at is None else self.body[:next(k for k, s in enumerate(self.body) if s is self.at)]


def _holds(s, target) -> bool:
    from ..frontend import walk

    return any(n is target for n in walk([s]))


def _path(body: list, target, in_loop: bool = False, label: str = "") -> list | None:
    """The levels from `body` down to `target` through inlined calls, `for` loops and `if`
    branches (an `if` gives two: the branch beside the way, then the branch on it); None
    when something else stands on the way (a while loop, a lock, vg.unsafe())."""
    s = next((s for s in body if s is target or _holds(s, target)), None)
    if s is None:
        return None
    level = _Level(body, s, in_loop, label)
    if s is target:
        return [level]
    if isinstance(s, N.Region):
        inner = _path(s.body, target, in_loop, s.label)
    elif isinstance(s, N.For):
        inner = _path(s.body, target, True)
    elif isinstance(s, N.If):
        inside_then = any(t is target or _holds(t, target) for t in s.then)
        beside = _Level(s.orelse if inside_then else s.then, None, in_loop)
        inner = _path(s.then if inside_then else s.orelse, target, in_loop)
        inner = None if inner is None else [beside] + inner
    else:
        return None
    return None if inner is None else [level] + inner


def _ending(body: list, label: str):
    """The `return` that ends region `label`'s body, if one does: it leaves nothing early."""
    last = body[-1] if body else None
    return last if isinstance(last, N.Exit) and last.label == label else None


def _leaves(stmts: list, labels: set, ending=None, looped: bool = False) -> bool:
    """Whether running `stmts` may leave a region of `labels` early (`return`, but for
    `ending`) or, outside a loop of theirs, the loop around them (`break`, `continue`):
    then the consumers could skip a run of the streamed loop that the producer makes."""
    for s in stmts:
        if isinstance(s, (N.Break, N.Continue)) and not looped or \
                isinstance(s, N.Exit) and s.label in labels and s is not ending:
            return True
        inner_ending = _ending(s.body, s.label) if isinstance(s, N.Region) else ending
        inner_looped = looped or isinstance(s, (N.For, N.While))
        if any(_leaves(getattr(s, part), labels, inner_ending, inner_looped)
               for part in ("then", "orelse", "body") if isinstance(getattr(s, part, None), list)):
            return True
    return False


def producer_code(kernel: N.Kernel, p: pipeline.Pipeline) -> tuple | None:
    """The statements the producer runs to make the streamed loop's copies: the loops and
    ifs on the way to it (their bounds and conditions computed as the consumers compute
    them) and the scalar statements that compute what those and the streamed loop read,
    with the streamed loop itself where it stands; None where that is not scalar code, or
    where the consumers might leave the way early."""
    region = kernel.body[0]
    levels = _path(region.body, p.loop, label=region.label) \
        if isinstance(region, N.Region) and region.label == "kernel" else None
    if levels is None:
        return None
    ways = [level.at for level in levels[:-1] if level.at is not None]
    labels = {level.label for level in levels if level.label}
    if any(_leaves(level.candidates(), labels, _ending(level.body, level.label)) for level in levels):
        return None
    needs = set().union(*(_free(e) for e in (p.loop.start, p.loop.stop, p.loop.step)),
                        *(_free(i) for op in p.operands for i in op.load.index)) - {p.loop.var}
    for s in ways:
        if isinstance(s, N.For):
            if not all(_pure(e, kernel) for e in (s.start, s.stop, s.step)):
                return None
            needs |= _free(s.start) | _free(s.stop) | _free(s.step)
        elif isinstance(s, N.If):
            if not _pure(s.cond, kernel):
                return None
            needs |= _free(s.cond)
    chosen: set = set()
    while True:  # each statement that sets a needed name, and what it reads
        more = [s for level in levels for s in level.candidates()
                if id(s) not in chosen and _assigned(s) & needs]
        if not more:
            break
        for s in more:
            if not _scalar_code(s, kernel):
                return None
            chosen.add(id(s))
            needs |= _free(s)
    return tuple(_code(levels, 0, chosen))


def _code(levels: list, k: int, chosen: set) -> list:
    """Level k's chosen statements in order, and the way on at its place."""
    level, out = levels[k], []
    for s in level.body:
        if s is not level.at:
            out += [s] if id(s) in chosen else []
        elif k == len(levels) - 1 or isinstance(s, N.Region):
            out += [s] if k == len(levels) - 1 else _code(levels, k + 1, chosen)
        elif isinstance(s, N.For):
            out.append(N.For(s.loc, s.var, s.start, s.stop, s.step, _code(levels, k + 1, chosen)))
        else:  # an if: the branch beside the way (its chosen statements), the branch on it
            beside = [t for t in levels[k + 1].body if id(t) in chosen]
            way = _code(levels, k + 2, chosen)
            then, orelse = (beside, way) if levels[k + 1].body is s.then else (way, beside)
            out.append(N.If(s.loc, s.cond, then, orelse))
    return out


def decide(kernel: N.Kernel, pipelines: list, warps: int):
    from ..frontend import walk

    if len(pipelines) != 1 or warps % 4 or len(kernel.body) != 1:
        return None
    if any(isinstance(n, (Locked, N.Atomic)) for n in walk(kernel.body)):
        return None  # a lock or a one-element atomic is the whole block's (`locks`)
    p = pipelines[0]
    if p.index_prefix:  # the producer would need the body's statements, which read memory
        return None
    code = producer_code(kernel, p)
    if code is None:
        return None
    p.specialized = True
    return Specialized(p, warps, p.accumulating, code)


def kernel_region(low, region: N.Region, spec: Specialized) -> None:
    """Barriers set up by the whole block, then the producer's and the consumers' roles,
    each one branch that ends the kernel."""
    from . import epilogue
    from .lower import TileLowering

    b, em = low.b, low.em
    p = spec.pipeline
    pipeline.init_barriers(low, p, spec.consumer_warps)
    em.call("llvm.nvvm.barrier0", ir.VoidType())
    low.stream_count = low._alloca(I32, "stream.count")
    b.store(i32(0), low.stream_count)
    producer, consumer = low._block("producer"), low._block("consumer")
    b.cbranch(b.icmp_unsigned(">=", low.warp, i32(spec.consumer_warps)), producer, consumer)

    b.position_at_end(producer)
    if PRODUCER_REGISTERS < spec.register_cap:
        ptx.setmaxnreg(em, PRODUCER_REGISTERS, increase=False)
    tid = em.call("llvm.nvvm.read.ptx.sreg.tid.x", I32)

    def produce():
        low.producing = True  # the streamed loop lowers as its copies (`produce_loop`)
        try:
            low.stmts(list(spec.producer))
        finally:
            low.producing = False
    control.when(low, b.icmp_unsigned("==", tid, i32(32 * spec.consumer_warps)),
                 lambda: _tiles(low, spec, produce))
    b.ret_void()

    b.position_at_end(consumer)
    if spec.consumer_registers > spec.register_cap:
        ptx.setmaxnreg(em, spec.consumer_registers, increase=True)
    low.depth += 1  # the body runs once per tile: every shared-memory user ends with a barrier
    try:
        _tiles(low, spec, lambda: TileLowering._region(low, region))
    finally:
        low.depth -= 1
    if low.plan.stores:
        epilogue.drain(low)


def _tiles(low, spec: Specialized, body) -> None:
    """body() once per tile of this block: once, or (persistent) for tiles b, b + blocks, ...
    with the virtual block indices set first."""
    if not spec.persistent:
        return body()
    b, em = low.b, low.em
    gx, gy, gz = low.virtual_grid
    per_slice = b.mul(gx, gy)
    total = b.mul(per_slice, gz)
    first = em.call("llvm.nvvm.read.ptx.sreg.ctaid.x", I32)
    stride = em.call("llvm.nvvm.read.ptx.sreg.nctaid.x", I32)
    entry = b.block
    header, block, done = low._block("tiles"), low._block("tile"), low._block("tiles.done")
    b.branch(header)
    b.position_at_end(header)
    t = b.phi(I32)
    t.add_incoming(first, entry)
    b.cbranch(b.icmp_signed("<", t, total), block, done)
    b.position_at_end(block)
    z = b.udiv(t, per_slice)
    r = b.urem(t, per_slice)
    width = b.mul(gy, i32(GROUP))  # tiles per group: GROUP rows of axis 0, every column
    start = b.mul(b.udiv(r, width), i32(GROUP))
    rows = b.sub(gx, start)
    size = b.select(b.icmp_unsigned("<", rows, i32(GROUP)), rows, i32(GROUP))
    within = b.urem(r, width)
    for slot, value in zip(low.virtual_bid, (b.add(start, b.urem(within, size)), b.udiv(within, size), z)):
        b.store(value, slot)
    body()
    following = b.add(t, stride)
    b.branch(header)
    t.add_incoming(following, b.block)
    b.position_at_end(done)
