"""GPU lowering of the tile track's one-element atomics and critical sections.

Takes: the `TileLowering` and an `ir.nodes.Atomic` (`tile.atomic_cas`, `tile.atomic_xchg`)
or an `ir.locks.Locked`. Gives: `block_atomic(low, e)`, the element's old value in every
thread's register, and `locked(low, s)`, which emits the critical section.

Guarantees (docs/api.md, "Compare-and-swap, exchange and locks"):
- an atomic runs once for the block, by its first thread (thread 0), with acquire-release
  ordering at GPU scope (`atom.acq_rel.gpu.cas`; an exchange between `fence.acq_rel.gpu`s,
  `codegen.atomics`: Triton's default `sem="acq_rel"`); its old
  value reaches the other threads through shared memory, after a block barrier;
- a critical section: thread 0 repeats `atom.cas` of the lock element from 0 to 1 with
  acquire ordering until it gives 0; a block barrier lets the other threads in (`bar.sync`
  orders their accesses after thread 0's acquire); the body runs with every thread; a
  block barrier waits for all of them; thread 0 frees the element with `atom.exch` to 0
  with release ordering, which publishes what the whole block wrote before that barrier;
- the block's order of statements (`tile.ordering`) sees each atomic as one access, taken
  with every thread, before the branch that only thread 0 runs (no barrier inside it).
An index outside the lock array is a bounds fault as any access's (the access is skipped,
the launch reports it), and a block that could not take the lock skips the body and the
release: no body runs unheld (the cpu backend stops at that fault too).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen import atomics
from ..codegen.dtypes import I32
from ..ir import nodes as N
from ..ir.locks import Locked


def _first_thread(low) -> ir.Value:
    b = low.b
    return b.icmp_unsigned("==", b.or_(low.lane, low.warp), ir.Constant(I32, 0))


def _by_first_thread(low, e: N.Atomic, perform, slot=None) -> None:
    """`perform(element pointer)` of atomic `e` by thread 0 alone, its operands computed
    (and its access ordered) with the whole block; with `slot`, thread 0 stores there what
    it gives (`e`'s dtype; 0 where the index lies outside the array and nothing ran)."""
    index = [low.expr(i) for i in e.indices]
    low._accessing(e, e.array)
    if slot is None:
        low.b.around(_first_thread(low), lambda: low.access_at(e, e.array, index, perform), "first")
    else:
        low.b.around(_first_thread(low), lambda: low.b.store(
            low.access_at(e, e.array, index, perform, e.dtype), slot), "first")


def block_atomic(low, e: N.Atomic) -> ir.Value:
    """`tile.atomic_cas`/`tile.atomic_xchg`: thread 0's old value, in every thread."""
    value = low.expr(e.value)
    compare = None if e.compare is None else low.expr(e.compare)
    slot = low.shared(8)
    _by_first_thread(low, e, lambda ptr: atomics.atomic(low.em, e.op, e.dtype, ptr, value, compare,
                                                        "acq_rel"), slot)
    low.barrier()
    old = low.b.load(slot, typ=value.type)
    low.release_shared()
    return old


def locked(low, s: Locked) -> None:
    """`with tile.lock(...)`: take the lock (thread 0), the body (every thread), give it back."""
    b = low.b
    zero, one = (ir.Constant(I32, v) for v in (0, 1))

    def spin(ptr) -> ir.Value:
        head, done = low._block("lock.spin"), low._block("lock.taken")
        b.branch(head)
        b.position_at_end(head)
        old = atomics.atomic(low.em, "cas", s.acquire.dtype, ptr, one, zero, "acquire")
        b.cbranch(b.icmp_unsigned("==", old, zero), done, head)
        b.position_at_end(done)
        return one  # taken (0: the index lies outside the lock array, nothing taken)

    def holding() -> None:
        low.stmts(s.body)
        low.barrier()
        _by_first_thread(low, s.release, lambda ptr: atomics.atomic(
            low.em, "exch", s.release.dtype, ptr, zero, None, "release"))

    slot = low.shared(4)
    _by_first_thread(low, s.acquire, spin, slot)
    low.barrier()
    taken = b.icmp_unsigned("!=", b.load(slot, typ=I32), zero)
    low.release_shared()
    low.depth += 1  # the body runs only where the lock was taken: a branch
    try:
        with low.order.fork(exhaustive=False):
            b.around(taken, lambda: low.order.arm(holding)(), "locked")
    finally:
        low.depth -= 1
