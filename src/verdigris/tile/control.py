"""Control flow for the tile lowering: the branches and loops its modules build in LLVM IR.

Takes: a lowering (`low`: its builder `b`, `em`, and `_block(name)` for new blocks) and
callables that emit the code of a branch or a loop body. Gives `when(low, cond, then)`
(`if cond: then()`), `choose(low, cond, then, otherwise, name)` (either arm, their values
merged by phi), `counted(low, trips, body, name)` (`for i in range(trips)`, a run-time i32 count)
and `rolled(low, count, body, name)` (a constant count LLVM keeps rolled). Guarantees: each
leaves the builder at the end of the code it built, in a block every path reaches.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import I32, i32


def when(low, cond: ir.Value, then) -> None:
    """`if cond: then()`."""
    b = low.b
    then_bb, end_bb = low._block("if"), low._block("fi")
    b.cbranch(cond, then_bb, end_bb)
    b.position_at_end(then_bb)
    then()
    b.branch(end_bb)
    b.position_at_end(end_bb)


def choose(low, condition: ir.Value, then, otherwise, name: str, arms=("then", "else")) -> list:
    """`then()` where `condition` holds, else `otherwise()`, behind a branch; each gives a
    list of values (or None), merged by phi."""
    b = low.b
    then_bb, else_bb, end_bb = (low._block(f"{name}.{n}") for n in (*arms, "end"))
    b.cbranch(condition, then_bb, else_bb)
    results = []
    for bb, arm in ((then_bb, then), (else_bb, otherwise)):
        b.position_at_end(bb)
        values = arm()
        b.branch(end_bb)
        results.append((values, b.block))
    b.position_at_end(end_bb)
    merged = []
    for k in range(len(results[0][0] or ())):
        phi = b.phi(results[0][0][k].type)
        for values, bb in results:
            phi.add_incoming(values[k], bb)
        merged.append(phi)
    return merged


def counted(low, trips: ir.Value, body, name: str) -> None:
    """for i in range(trips): body(i) (i an i32 value)."""
    b = low.b
    entry = b.block
    header, block, done = low._block(f"{name}.k"), low._block(f"{name}.body"), low._block(f"{name}.done")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I32)
    i.add_incoming(i32(0), entry)
    b.cbranch(b.icmp_signed("<", i, trips), block, done)
    b.position_at_end(block)
    body(i)
    following = b.add(i, i32(1))
    b.branch(header)
    i.add_incoming(following, b.block)
    b.position_at_end(done)


def rolled(low, count: int, body, name: str) -> None:
    """`body(v)` for v = 0 .. count - 1 (i32), in a loop LLVM keeps rolled: the trip count
    comes out of an inline-assembly `mov`, which the optimizer cannot see through."""
    b = low.b
    trips = b.call(ir.InlineAsm(ir.FunctionType(I32, []), f"mov.u32 $0, {count};", "=r"), [])
    before, loop_bb, done_bb = b.block, low._block(f"{name}.loop"), low._block(f"{name}.done")
    b.branch(loop_bb)
    b.position_at_end(loop_bb)
    v = b.phi(I32)
    v.add_incoming(i32(0), before)
    body(v)
    following = b.add(v, i32(1))
    b.cbranch(b.icmp_unsigned("<", following, trips), loop_bb, done_bb)
    v.add_incoming(following, b.block)
    b.position_at_end(done_bb)
