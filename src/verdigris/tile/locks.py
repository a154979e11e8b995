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
the launch reports it).
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


def _by_first_thread(low, e: N.Atomic, perform) -> None:
    """`perform(element pointer)` of atomic `e` by thread 0 alone, its operands computed
    (and its access ordered) with the whole block."""
    index = [low.expr(i) for i in e.indices]
    low._accessing(e, e.array)
    low.b.around(_first_thread(low), lambda: low.access_at(e, e.array, index, perform), "first")


def block_atomic(low, e: N.Atomic) -> ir.Value:
    value = low.expr(e.value)
    compare = None if e.compare is None else low.expr(e.compare)
    slot = low.shared(8)
    b = low.b

    def perform(ptr) -> None:
        b.store(atomics.atomic(low.em, e.op, e.dtype, ptr, value, compare, "acq_rel"), slot)

    _by_first_thread(low, e, perform)
    low.barrier()
    old = b.load(slot, typ=value.type)
    low.release_shared()
    return old


def locked(low, s: Locked) -> None:
    b = low.b

    def spin(ptr) -> None:
        head, done = low._block("lock.spin"), low._block("lock.taken")
        b.branch(head)
        b.position_at_end(head)
        zero, one = (ir.Constant(I32, v) for v in (0, 1))
        old = atomics.atomic(low.em, "cas", s.acquire.dtype, ptr, one, zero, "acquire")
        b.cbranch(b.icmp_unsigned("==", old, zero), done, head)
        b.position_at_end(done)

    _by_first_thread(low, s.acquire, spin)
    low.barrier()
    low.stmts(s.body)
    low.barrier()
    _by_first_thread(low, s.release, lambda ptr: atomics.atomic(
        low.em, "exch", s.release.dtype, ptr, ir.Constant(I32, 0), None, "release"))
