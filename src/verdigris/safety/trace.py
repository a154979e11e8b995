"""What symbolic execution gives: the accesses of one generic thread, the points a block or
warp must reach together, and the `Space` they are written in.

Takes: nothing (`symbolic.execute` builds them). Gives: `Access` (an access of a global
array: array, kind, index polynomials, path condition, loc, whether inside `vg.unsafe()`),
`Ordered` (the same, of global or shared memory, with its place in the block's order:
`barriers` epochs, program order, the loops around it, whether one can be left early),
`Checkpoint` (a barrier, a warp operation, or an exit from a loop containing one, with its
path condition) and `Trace`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Loc
from . import barriers
from .algebra import Space


@dataclass
class Access:
    array: str
    kind: str  # "read" | "write" | "atomic"
    indices: tuple  # of Poly, per-thread atoms marked with @
    pc: tuple  # path condition (formula)
    loc: Loc
    unsafe: bool


@dataclass
class Ordered(Access):
    """An access with its memory and its place in the order of the block's threads."""

    memory: str = "global"  # "global" | "shared"
    epochs: dict = field(default_factory=lambda: barriers.START)  # kind -> barriers.Alt tuple
    seq: int = 0  # program order
    loops: tuple = ()  # the counters of the loops around it, outermost first
    exact: bool = True  # no loop around it can be left early (break, return)


@dataclass
class Checkpoint:
    """A point every thread of a block (scope "block") or warp ("warp") must reach together."""

    what: str  # "barrier()", "syncwarp()", "shfl_down()", ..., "break", "return"
    scope: str
    pc: tuple
    loc: Loc
    loops: tuple  # the counters of the loops around it
    # of a shuffle: the lane it reads (a lane index, 0..31 where it reads another lane;
    # outside that it reads the thread's own value); None for anything else
    source: object = None


@dataclass
class Trace:
    space: Space
    accesses: list
    checkpoints: list = field(default_factory=list)
    origins: dict = field(default_factory=dict)  # condition formula -> the Loc it comes from
