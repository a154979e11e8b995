"""Definite assignment: no variable is read where some path to the read leaves it unassigned.

Takes: a translated kernel body (statements of `ir.nodes` and `ir.tiles`) and the
variables set before it runs (the scalar parameters). Gives `check(body, defined)`, which
raises a `SafetyError` (VG303) at the first read of a variable that not every path to it
assigns (VG303): assigned in one arm of an `if` only, in a loop body that may run no
times, or later in a loop body than the read (the first iteration reads it unassigned).
Python would raise `UnboundLocalError` there at run time, on the paths that reach the
read unassigned; a GPU kernel would read garbage, silently, so the compiler refuses it.

Guarantees: a `for` over a range of constant bounds that runs at least once, with no
`break` or `continue` of its own, counts as run: what its body assigns is assigned
after it. Code after `break`, `continue` or an early `return` is not reached, so it is
not checked. A helper's return value is assigned on every path that returns, or the
error says that the helper can end without returning.
"""
from __future__ import annotations

from ..errors import SafetyError
from ..ir import nodes as N
from ..ir import tiles as X
from ..ir.locks import Locked
from .bindings import display

Defined = frozenset  # the variables assigned on every path to a point; None: unreachable


def check(body: list, defined: set) -> None:
    _Flow().block(body, frozenset(defined))


def _join(*sets):
    reached = [s for s in sets if s is not None]
    return frozenset.intersection(*reached) if reached else None


def runs(s: N.For) -> bool:
    """Whether the loop's range is constant and not empty."""
    bounds = [e.value for e in (s.start, s.stop, s.step) if isinstance(e, N.Const)]
    return len(bounds) == 3 and bounds[2] != 0 and len(range(*bounds)) > 0


class _Flow:
    def __init__(self):
        self.exits: dict[str, list] = {}  # region label -> the sets at its Exits

    def block(self, stmts: list, defined):
        for s in stmts:
            if defined is None:  # after break, continue or exit: not reached
                return None
            defined = self.stmt(s, defined)
        return defined

    def stmt(self, s, defined):
        if isinstance(s, N.Assign):
            self.reads(s.value, defined)
            return defined | {s.name}
        if isinstance(s, N.If):
            self.reads(s.cond, defined)
            return _join(self.block(s.then, defined), self.block(s.orelse, defined))
        if isinstance(s, N.For):
            for e in (s.start, s.stop, s.step):
                self.reads(e, defined)
            after = self.block(s.body, defined | {s.var})
            return after if after is not None and runs(s) and not N.leaves_loop(s.body) else defined
        if isinstance(s, N.While):
            self.reads(s.cond, defined)
            self.block(s.body, defined)
            return defined
        if isinstance(s, (N.Break, N.Continue)):
            return None
        if isinstance(s, N.Region):
            self.exits[s.label] = []
            fallthrough = self.block(s.body, defined)
            return _join(fallthrough, *self.exits.pop(s.label))
        if isinstance(s, N.Exit):
            self.exits[s.label].append(defined)
            return None
        if isinstance(s, N.Unsafe):
            return self.block(s.body, defined)
        if isinstance(s, Locked):
            self.reads(s.acquire, defined)
            return self.block(s.body, defined)
        self.reads(s, defined)  # stores, tile stores, scatters, allocations, barriers
        return defined

    def reads(self, node, defined) -> None:
        from . import walk

        for n in walk([node]):
            if isinstance(n, (N.Var, X.TileVar)) and n.name not in defined:
                name = display(n.name)
                if name.startswith("return") and name[6:].isdigit():
                    raise SafetyError("this call's function can end without returning a value",
                                       n.loc, hint="end every path of the function with a return",
                                       code="VG303")
                raise SafetyError(f"variable {name!r} may be used before it is assigned: some "
                                   "path to this line does not assign it", n.loc,
                                   hint=f"give {name} a value on every path to this line, for "
                                        "example before the `if` or loop that assigns it",
                                   code="VG303")
