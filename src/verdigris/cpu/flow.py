"""Control flow of the SIMT interpreter: how lanes leave a statement and rejoin later.

Takes: the interpreter's compiler (`simt._Compiler`: `expr`, `block`, `_slot`, and its
stacks `loops` of (break slot, continue slot) and `regions` of (label, slot)) and an
`If`, `While`, `For`, `Break`, `Continue`, `Region` or `Exit` node. Gives
`compile_if`, `compile_while`, `compile_for`, `compile_break`, `compile_continue`,
`compile_region` and `compile_exit`: each (f(frame, mask) -> the mask of lanes that fall
through, escapes: the slots its lanes may be parked in), the compiler's statement form.

Guarantees: lanes that `break`, `continue` or `exit` are parked in their loop's or
region's slot of the frame and rejoin where the IR says: after the loop, at its next
iteration, after the region. A loop iterates while any lane remains in it. `For` follows
Python's `range`: bounds and step evaluated once, direction from the step's sign, and
stepping past the counter's dtype ends the range. A `While` iteration that begins from
the state the previous one began from (no memory changed, the same lanes, the same
variables) would repeat forever here, where the blocks of a chunk run in lock step and
chunks one after another: it raises `LaunchError` instead of hanging.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError, LaunchError
from . import ops
from .frames import assign


def _same_state(a: tuple, b: tuple) -> bool:
    """Whether two iterations of a while loop began from the same state: no memory changed
    in between, the same lanes entered and every variable holds the same values. The
    interpreter is deterministic, so from such a state the loop repeats forever."""
    (changes_a, enter_a, env_a), (changes_b, enter_b, env_b) = a, b
    return changes_a == changes_b and np.array_equal(enter_a, enter_b) and env_a.keys() == env_b.keys() \
        and all(v is env_b[k] or np.array_equal(v, env_b[k]) for k, v in env_a.items())


def _spin_error(fr, node, enter) -> LaunchError:
    lane = int(np.argmax(enter))
    return LaunchError(
        f"kernel {fr.kernel_name}: the loop at line {node.loc.line} made an iteration that "
        f"changed nothing ({fr.describe(lane)} and others): it waits for another block or "
        "the host to change memory. The cpu backend runs the blocks of a chunk in lock step "
        "and chunks one after another, so what it waits for may never come: it would hang",
        node.loc, hint="run it on the GPU (the cpu backend cannot run blocks that wait for "
        "one another), or write the kernel without the wait")


def _park(slot):
    def park(fr, mask):
        parked = fr.slots[slot]
        fr.slots[slot] = mask if parked is None else parked | mask
        return np.zeros_like(mask)
    return park


def _run_loop(fr, mask, begin, advance, body, brk, cont):
    """Iterate while lanes remain: `begin(live)` gives the lanes entering an iteration,
    `advance()` runs after each. Returns the lanes that left by the condition or `break`."""
    live, done = mask, None
    while True:
        enter = begin(live)
        left = live & ~enter
        done = left if done is None else done | left
        if not enter.any():
            return done
        fr.slots[brk] = fr.slots[cont] = None
        live = body(fr, enter)
        if fr.slots[brk] is not None:
            done = done | fr.slots[brk]
        if fr.slots[cont] is not None:
            live = live | fr.slots[cont]
        if advance is not None:
            advance()


def compile_if(compiler, node):
    cond = compiler.expr(node.cond)
    then, then_escapes = compiler.block(node.then)
    orelse, else_escapes = compiler.block(node.orelse)
    escapes = then_escapes | else_escapes

    def run_if(fr, mask):
        c = cond(fr, mask)
        taken, skipped = mask & c, mask & ~c
        taken = then(fr, taken) if taken.any() else taken
        skipped = orelse(fr, skipped) if skipped.any() else skipped
        return taken | skipped if escapes else mask
    return run_if, escapes


def _loop_body(compiler, body):
    brk, cont = compiler._slot(), compiler._slot()
    compiler.loops.append((brk, cont))
    run, escapes = compiler.block(body)
    compiler.loops.pop()
    return run, brk, cont, escapes - {brk, cont}


def compile_while(compiler, node):
    cond = compiler.expr(node.cond)
    body, brk, cont, escapes = _loop_body(compiler, node.body)

    def run_while(fr, mask):
        before = [None]  # the state an iteration started from

        def begin(live):
            enter = live & cond(fr, live)
            state = (fr.changes, enter, dict(fr.env))
            if before[0] is not None and _same_state(before[0], state):
                raise _spin_error(fr, node, enter)
            before[0] = state
            return enter
        done = _run_loop(fr, mask, begin, None, body, brk, cont)
        return done if escapes else mask
    return run_while, escapes


def compile_for(compiler, node):
    var, var_dtype = node.var, node.start.dtype
    start, stop, step = (compiler.expr(e) for e in (node.start, node.stop, node.step))
    undefined = ops.constant(0, var_dtype)
    body, brk, cont, escapes = _loop_body(compiler, node.body)

    def run_for(fr, mask):
        counter, end, by = start(fr, mask), stop(fr, mask), step(fr, mask)
        upward, downward = by > 0, by < 0
        wrapped = np.False_  # stepping past the dtype's range ends the range, as in Python

        def begin(live):
            inside = np.where(upward, counter < end, downward & (counter > end))
            enter = live & inside & ~wrapped
            assign(fr, var, counter, enter, undefined)
            return enter

        def advance():
            nonlocal counter, wrapped
            stepped = counter + by
            wrapped = wrapped | np.where(upward, stepped < counter, stepped > counter)
            counter = stepped

        done = _run_loop(fr, mask, begin, advance, body, brk, cont)
        return done if escapes else mask
    return run_for, escapes


def _innermost_loop(compiler, node):
    if not compiler.loops:
        raise CompileError("break or continue outside a loop", node.loc)
    return compiler.loops[-1]


def compile_break(compiler, node):
    slot = _innermost_loop(compiler, node)[0]
    return _park(slot), frozenset({slot})


def compile_continue(compiler, node):
    slot = _innermost_loop(compiler, node)[1]
    return _park(slot), frozenset({slot})


def compile_region(compiler, node):
    slot = compiler._slot()
    compiler.regions.append((node.label, slot))
    body, escapes = compiler.block(node.body)
    compiler.regions.pop()
    escapes = escapes - {slot}

    def run_region(fr, mask):
        fr.slots[slot] = None
        out = body(fr, mask)
        if not escapes:
            return mask
        exited = fr.slots[slot]
        return out if exited is None else out | exited
    return run_region, escapes


def compile_exit(compiler, node):
    slot = next((s for label, s in reversed(compiler.regions) if label == node.label), None)
    if slot is None:
        raise CompileError(f"exit from region {node.label!r}, which does not enclose it",
                           node.loc)
    return _park(slot), frozenset({slot})
