"""Tickets: the old values an atomic counter hands out, distinct across threads.

Takes: a SIMT kernel's IR and its launch `Space` (`counters`), then, per race query, a z3
encoder over two threads (`apart`). Gives:
- `counters(kernel, space) -> dict`: the arrays whose atomics' old values are *tickets*,
  each with the step all its tickets lie apart by (a multiple of);
- `apart(enc, space)`: z3 facts that two threads' tickets of one counter element differ
  (by a nonzero multiple of that step).

The rule (docs/safety.md, "Patterns the checker accepts"): `t = simt.atomic_add(counter, i,
c)` returns the element's old value. Where every write of `counter` in the kernel is an
atomic add (or sub) of a nonzero integer constant, all moving it the same way, each write
moves the element strictly further from where it started, so no two writes of one element
return the same old value: two threads (or one thread twice) never hold equal tickets of
one element. Where every constant is a multiple of a power of two g, tickets of one element
also lie a multiple of g apart (adds of 2: `out[t]` and `out[t + 1]` are a thread's own).
That holds while the element does not wrap around its dtype: the adds of a
whole launch (threads * the sum of |c| over the sites) must stay within 2**bits. A counter
qualifies only where that is certain: every site outside loops (a thread runs it at most
once) and the launch's threads bounded: a shared counter by its block (at most 1024 threads),
a global one by the launch guarantee grid_dim(a) * block_dim(a) < 2**31 on each grid axis
with more than one block (a 32-bit counter: one such axis). A 64-bit counter never wraps in
the model (its arithmetic is modelled without wrap-around everywhere). Shared counters are
one per block, so only threads of one block hold distinct tickets of them.

A counter that does not qualify gives plain unknown values, as any atomic's result does.
"""
from __future__ import annotations

import math

from ..ir import nodes as N
from .algebra import MAX_AXIS_THREADS, MAX_BLOCK, per_thread

_MOVES = {"add": 1, "sub": -1}  # op -> the sign a positive value moves the element by


def _constant(e: N.Expr):
    """The integer value of a constant expression (a literal, cast or negated), in its dtype
    (a cast wraps: uint64 2**64 - 1 as int64 is -1, 2**32 as int32 is 0), else None."""
    value = None
    if isinstance(e, N.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        value = e.value
    elif isinstance(e, N.Cast) and e.dtype.is_int and e.value.dtype.is_int:
        value = _constant(e.value)
    elif isinstance(e, N.Unary) and e.op == "neg":
        value = _constant(e.operand)
        value = None if value is None else -value
    if value is None or e.dtype is None or not e.dtype.is_int:
        return value
    lo = -2 ** (e.dtype.bits - 1) if e.dtype.is_signed else 0
    return (value - lo) % 2**e.dtype.bits + lo


def _writes(nodes, in_loop: bool = False):
    """(node, whether it runs inside a loop) for every write of an array under `nodes`."""
    from ..frontend import WRITE_NODES

    for node in nodes:
        if isinstance(node, WRITE_NODES):
            yield node, in_loop
        children = []
        for value in vars(node).values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            children += [v for v in items if isinstance(v, (N.Expr, N.Stmt))]
        yield from _writes(children, in_loop or isinstance(node, (N.For, N.While)))


def _launch_threads(space, memory: str) -> float:
    """At most how many threads of a launch (a block, for shared memory) run the kernel."""
    threads = 1
    for axis in range(3):
        block = space.block[axis] if space.block is not None else \
            1 if axis in space.unit_block_axes else MAX_BLOCK
        one_block = memory == "shared" or axis in space.unit_grid_axes
        threads *= block if one_block else MAX_AXIS_THREADS
    return min(threads, MAX_BLOCK) if memory == "shared" else threads


def counters(kernel: N.Kernel, space) -> dict:
    sites: dict = {}  # array -> [(step or None, in a loop)]
    arrays = {}
    for node, in_loop in _writes(kernel.body):
        arrays[node.array.name] = node.array
        step = _constant(node.value) if isinstance(node, N.Atomic) and node.op in _MOVES else None
        sites.setdefault(node.array.name, []).append(
            (None if not step else step * _MOVES[node.op], in_loop))
    out = {}
    for name, writes in sites.items():
        array = arrays[name]
        steps = [step for step, _ in writes]
        if None in steps or not array.type.dtype.is_int or array.type.space not in ("global", "shared"):
            continue
        if len({step > 0 for step in steps}) != 1:
            continue
        bits = array.type.dtype.bits
        if bits < 64:
            if any(in_loop for _, in_loop in writes):
                continue
            if _launch_threads(space, array.type.space) * sum(map(abs, steps)) > 2**bits:
                continue
        g = math.gcd(*steps)
        out[name] = g & -g  # the largest power of two dividing every step
    return out


def apart(enc, space) -> list:
    """Facts of a query about two distinct threads "1" and "2": tickets of one counter
    element differ (of a shared counter: where the threads share a block)."""
    z3 = enc.z3
    used = [n for n in enc.used if n in space.claims]
    facts = []
    for x in used:
        for y in used:
            array, ix, memory, step = space.claims[x]
            other, iy, _, _ = space.claims[y]
            if array != other:
                continue
            same = [enc.poly(p.rename("1")) == enc.poly(q.rename("2")) for p, q in zip(ix, iy)]
            if memory == "shared":
                same += [enc.atom(per_thread(n, "1")) == enc.atom(per_thread(n, "2"))
                         for n in space.identity() if n.startswith("bid")]
            mine, theirs = enc.atom(per_thread(x, "1")), enc.atom(per_thread(y, "2"))
            differ = mine != theirs if step == 1 else z3.And(mine != theirs, (mine - theirs) % step == 0)
            facts.append(z3.Implies(enc.all(same), differ))
    return facts
