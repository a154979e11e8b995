"""Loops of the SIMT lowering: Python's `range`, and which loops are unrolled here.

Takes: the kernel lowering (`codegen.lower`: its builder, statements, variable slots, the
counters of the loops being unrolled) and a `For` or `While` statement. Gives
`lower_for(low, s)` and `lower_while(low, s)`, which emit the loop at the builder's
position (the lowering's `_for` and `_while`), and `MAX_UNROLL`.

Guarantees:
- `For` follows Python's `range`: bounds and step evaluated once, the direction from the
  step's sign (known when the step is a constant), no iteration for step 0, and no
  wrap-around past the last element of the range. With a constant step the loop counts
  its iterations (`_trip_count`, computed before it) and derives the variable from the
  count, a loop LLVM can unroll; with a run-time step the variable is the counter and
  stepping past its dtype's range ends the loop.
- A `For` with constant bounds, at most `MAX_UNROLL` iterations, and in its body a warp
  operation, a local array indexed by its counter, or a loop unrolled for these reasons,
  is unrolled here (and so is an innermost such loop of a SIMT kernel whose body holds an
  access that keeps a bounds check), its counter a constant in each copy: shuffle arguments such as
  `16 >> k` are then constants and take PTX's own shuffle modes (`warp`), and local arrays
  are indexed by constants, which keeps them in registers; a register-blocked loop nest
  becomes straight-line code that ptxas schedules as a whole (LLVM's unroller stops short
  of that); and the checked accesses of all iterations settle their fault records
  together (`builder`), so their loads issue together.
- A loop that is not unrolled runs inside `CheckingBuilder.carrying()`: a fault of its
  body is recorded at the loop's exit. `break` leaves for the loop's end, `continue` for
  its latch (`For`) or its condition (`While`).
"""
from __future__ import annotations

from llvmlite import ir

from ..ir import nodes as N
from ..types import DType
from .dtypes import const as make_const
from .dtypes import reg_type

MAX_UNROLL = 32


def _indexes_local_by(node, var: str) -> bool:
    """Whether `node` is an access to a local array with `var` in an index."""
    from ..frontend import walk

    return isinstance(node, (N.Load, N.Store)) and node.array.type.space == "local" and any(
        isinstance(n, N.Var) and n.name == var for i in node.indices for n in walk([i]))


def _in_range(b: ir.IRBuilder, dt: DType, i: ir.Value, stop: ir.Value, step: ir.Value) -> ir.Value:
    """Whether `i` is still inside `range(..., stop, step)` for a step known at run time only."""
    zero = ir.Constant(step.type, 0)
    icmp = b.icmp_signed if dt.is_signed else b.icmp_unsigned
    up = b.and_(icmp(">", step, zero), icmp("<", i, stop))
    if not dt.is_signed:
        return up
    return b.or_(up, b.and_(icmp("<", step, zero), icmp(">", i, stop)))


def _trip_count(b: ir.IRBuilder, dt: DType, start: ir.Value, stop: ir.Value, step: int) -> ir.Value:
    """How many iterations `range(start, stop, step)` has, for a constant `step`, as an
    unsigned number of the counter's width (exact: the span of a range fits it)."""
    if step == 0:
        return ir.Constant(start.type, 0)
    low, high = (start, stop) if step > 0 else (stop, start)
    one = ir.Constant(start.type, 1)
    trips = b.add(b.udiv(b.sub(b.sub(high, low), one), ir.Constant(start.type, abs(step))), one)
    nonempty = (b.icmp_signed if dt.is_signed else b.icmp_unsigned)(">", high, low)
    return b.select(nonempty, trips, ir.Constant(start.type, 0))


def _unrolled_range(low, s: N.For, for_checks: bool = True) -> range | None:
    """The iterations of `s` when it is unrolled (see the module docstring), else None.
    A checked access unrolls an innermost loop only (`for_checks`: `s` is not inside a
    loop being considered), so that a nest of checked loops does not multiply out."""
    bounds = [low._fold(e) for e in (s.start, s.stop, s.step)]
    if None in bounds or bounds[2] == 0 or len(range(*bounds)) > MAX_UNROLL:
        return None
    from ..frontend import walk

    nodes = list(walk(s.body))
    if N.leaves_loop(s.body) or any((n.name if isinstance(n, N.Assign) else n.var) == s.var
                               for n in nodes if isinstance(n, (N.Assign, N.For))):
        return None
    if any(isinstance(n, N.WarpOp) or _indexes_local_by(n, s.var) for n in nodes):
        return range(*bounds)
    # (a tile kernel's loads are whole tiles already: copies of a loop over row tiles
    # multiply its live tiles, and 32 of a LayerNorm backward's spilt 840 bytes a thread)
    if for_checks and low.kernel.track == "simt" and any(map(low._checked, nodes)) \
            and not any(isinstance(n, N.For) for n in nodes):
        return range(*bounds)
    low.unrolled[s.var] = bounds[0]  # as the inner loops would see it
    try:
        inner = any(isinstance(n, N.For) and _unrolled_range(low, n, for_checks=False) is not None
                    for n in nodes)
    finally:
        del low.unrolled[s.var]
    return range(*bounds) if inner else None


def lower_for(low, s: N.For) -> None:
    iterations = _unrolled_range(low, s)
    if iterations is not None:
        for value in iterations:
            low.unrolled[s.var] = value
            low.b.store(make_const(low.kernel.locals[s.var], value), low.slots[s.var])
            low.stmts(s.body)
        del low.unrolled[s.var]
        return
    b, dt = low.b, low.kernel.locals[s.var]
    start, stop, step = low.expr(s.start), low.expr(s.stop), low.expr(s.step)
    constant_step = low._fold(s.step)
    counter = low._alloca(reg_type(dt), f"{s.var}.range")
    header, body, latch, exit_bb = (low._block(f"for.{n}") for n in ("cond", "body", "next", "end"))
    with b.carrying():
        if constant_step is None:  # the counter is the variable; stepping past dt's range ends it
            b.store(start, counter)
            b.branch(header)
            b.position_at_end(header)
            i = b.load(counter, typ=reg_type(dt))
            b.cbranch(_in_range(b, dt, i, stop, step), body, exit_bb)
        else:  # the counter counts iterations: a loop LLVM can unroll
            trips = _trip_count(b, dt, start, stop, constant_step)
            b.store(ir.Constant(trips.type, 0), counter)
            b.branch(header)
            b.position_at_end(header)
            done = b.load(counter, typ=trips.type)
            b.cbranch(b.icmp_unsigned("<", done, trips), body, exit_bb)
            b.position_at_end(body)
            i = b.add(start, b.mul(done, ir.Constant(trips.type, constant_step)))
        b.position_at_end(body)
        b.store(i, low.slots[s.var])
        low.loops.append((latch, exit_bb))
        low.stmts(s.body)
        low.loops.pop()
        low._branch_if_open(latch)
        b.position_at_end(latch)
        if constant_step is None:
            advanced = (b.sadd_with_overflow if dt.is_signed else b.uadd_with_overflow)(
                b.load(counter, typ=reg_type(dt)), step)
            b.store(b.extract_value(advanced, 0), counter)
            b.cbranch(b.extract_value(advanced, 1), exit_bb, header)
        else:
            b.store(b.add(b.load(counter, typ=trips.type), ir.Constant(trips.type, 1), flags=["nuw"]), counter)
            b.branch(header)
        b.position_at_end(exit_bb)


def lower_while(low, s: N.While) -> None:
    header, body, exit_bb = (low._block(f"while.{n}") for n in ("cond", "body", "end"))
    b = low.b
    with b.carrying():
        b.branch(header)
        b.position_at_end(header)
        b.cbranch(low.expr(s.cond), body, exit_bb)
        b.position_at_end(body)
        low.loops.append((header, exit_bb))
        low.stmts(s.body)
        low.loops.pop()
        low._branch_if_open(header)
        b.position_at_end(exit_bb)
