"""One block's statements in program order: the barriers the tile lowering puts between them.

Takes: the `TileLowering` (its kernel's facts: `block_meets` from `safety.blockorder`, the
pairs of IR nodes that one block may make touch a common element). Gives: `BlockOrder`,
which the lowering tells of every global memory access it emits, before emitting it
(`access(node, array, kind, layout, shape)`), and of its control flow (`fork`/`arm` around
the arms of a branch, `around(nodes)` for a loop or an inlined function); it emits
`bar.sync` before an access that may meet one emitted since the last barrier on some
path, from another thread.

Why: the lowering spreads each statement over the block's threads by a layout and puts
nothing between statements, but a tile kernel means its statements in program order for
its block (docs/safety.md). Two accesses of one element by one thread are ordered by that
thread's program order; by two threads, only a barrier orders them. The PTX ISA (9.7.15.1,
`bar`, `barrier`): "The barrier{.cta}.sync ... instruction guarantees that when the barrier
completes, prior memory accesses requested by this thread are performed relative to all
threads participating in the barrier", and "further guarantees that no new memory access
is requested by this thread before the barrier completes", where a read (`ld`, `atom`) is
performed when its value "cannot be modified by another thread participating in the
barrier" and a write (`st`, `red`, `atom`) when "the previous value can no longer be read".
That holds for global memory as for shared, and for a named barrier of some warps (the
matrix products' consumers, `MmaLowering.barrier`) among those warps.

When two accesses come from one thread: both are tile loads or stores (`memory`) of one
shape (tiles of one shape are aligned alike, so a common element sits at one position in
both), laid out alike, with no broadcast (a broadcast layout's threads all read what only
its first thread writes). Gathers, scatters, atomics and scalar accesses (every thread
makes a scalar access) come from no known thread. An access whose layout is not yet known
(later in a loop's body, met again in the next iteration) counts as from no known thread.

Guarantees: every pair of accesses in `block_meets` (every pair of one array with a plain
write, when the kernel was not checked) that can run one after the other with no barrier
between them, from different threads, gets one. Others may too, where the tracking is
coarse: at a loop's start (every access of its body counts as just done, from no known
thread) and within a streamed loop's stages (`kept`). Barriers sit only where
control flow is block-uniform (tile kernels branch on scalars, which every thread of the
block computes alike), never behind a store's owner test or a masked element's branch.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..frontend import walk
from ..ir import nodes as N
from ..ir import tiles as X
from ..frontend.access_nodes import ACCESSING, pair
from ..safety.blockorder import ORDERED


@dataclass(frozen=True)
class _Done:
    """An access emitted since the last barrier (on some path to the point being emitted)."""

    node: int  # id of its IR node
    array: str
    kind: str  # "read", "write" or "atomic"
    layout: object = None  # the tile load's or store's layout; None: no known thread
    shape: tuple = ()


class BlockOrder:
    def __init__(self, low):
        self.low = low
        self.meets = low.kernel.facts.get("block_meets")  # None: not checked, all may meet
        self.done: set = set()
        self.forks: list = []  # per open branch: (the accesses at its start, what its arms left)
        self.barriers = 0
        self.keep = 0  # inside `kept`: a barrier leaves what was done

    def access(self, node, array: str, kind: str, layout=None, shape: tuple = ()) -> None:
        if array not in self.low.kernel.writes:  # only read: nothing to order
            return
        new = _Done(id(node), array, kind, layout, tuple(shape))
        if any(self._conflict(old, new) for old in self.done):
            self.low.barrier()
            self.barriers += 1
            if not self.keep:
                self.done = set()
        self.done.add(new)

    def _conflict(self, old: _Done, new: _Done) -> bool:
        if old.array != new.array or tuple(sorted((old.kind, new.kind))) not in ORDERED:
            return False
        if self.meets is not None and pair(old.node, new.node) not in self.meets:
            return False
        return not _same_thread(old, new)

    # ---------------------------------------------------------------- control flow

    @contextlib.contextmanager
    def fork(self, exhaustive: bool):
        """Around a branch: its arms (each under `arm`) start from what came before; after
        it, whatever any arm left (and what came before, unless the arms are `exhaustive`:
        one of them always runs)."""
        self.forks.append((self.done, set() if exhaustive else set(self.done)))
        try:
            yield
        finally:
            _, left = self.forks.pop()
            self.done = left

    def arm(self, lower):
        """`lower` as one arm of the innermost `fork`."""
        def run(*args):
            start, left = self.forks[-1]
            self.done = set(start)
            try:
                return lower(*args)
            finally:
                left |= self.done
        return run

    @contextlib.contextmanager
    def kept(self):
        """Where statements are lowered in an order of the lowering's own (a streamed loop's
        stages), a barrier orders what comes after it but forgets nothing done before."""
        self.keep += 1
        try:
            yield
        finally:
            self.keep -= 1

    @contextlib.contextmanager
    def around(self, body):
        """Around a loop or an inlined function (`body`: its statements): an iteration may
        meet the next one, and `break`, `continue` or `return` may leave from anywhere, so
        every access in it counts as just done, from no known thread, at its start and
        after it."""
        inside = {_Done(id(n), n.array.name, _kind(n)) for n in walk(body)
                  if isinstance(n, ACCESSING) and n.array.name in self.low.kernel.writes}
        self.done |= inside
        yield
        self.done |= inside


def _kind(node) -> str:
    if isinstance(node, (N.Atomic, X.TileAtomic)) or isinstance(node, X.Scatter) and node.atomic:
        return "atomic"
    return "write" if isinstance(node, (N.Store, X.TileStore, X.Scatter)) else "read"


def _same_thread(a: _Done, b: _Done) -> bool:
    return (a.layout is not None and a.layout == b.layout and a.shape == b.shape
            and "atomic" not in (a.kind, b.kind) and a.layout.owner_bits() == (0, 0))
