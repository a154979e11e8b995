"""The lowering's instruction builder: bounds checks whose fault record waits for the next branch.

Takes: an `llvmlite.ir` block to build in, and two callbacks from the lowering:
`record(description)`, which emits the fault path where the builder stands for a fault
described by a tuple of i64 values (`checks`' record words: site, rank, indices, extents),
and `expect(condition)`, which marks an i1 as likely true. Gives `CheckingBuilder`, an
`ir.IRBuilder` with
- `around(condition, perform, name, otherwise)`: `perform()` only where `condition` holds,
  behind a branch around it that joins again at once (ptxas turns such a branch around one
  instruction into a predicated instruction); its value where it ran, else `otherwise`
  (None: `perform` gives no value); `name` labels the blocks;
- `checked(inside, description, perform, zero)`: an access that no proof covers, performed
  `around` its `inside` condition (every index within its extent), giving `zero` where it
  is skipped; its fault record is left pending;
- `settle()`: one branch, taken only when some pending access was skipped, to one record:
  the description of the first skipped access in program order, picked by selects. Checks
  made inside `around`'s `perform` settle at the end of that arm.

Guarantees: `branch`, `cbranch` and `ret_void` settle before they end a block, so a record
is never lost and is always written where the values it reads (computed before the
access) dominate it. Callers that add a phi's incoming value for the block they leave
take `self.block` after emitting their branch (settling may have moved the builder into a
block of its own). A thread's first skipped access is the one whose record it attempts,
as when each access branched to its record at once (the fault path keeps a launch's first
record only).

Why the wait: the record is the slow part of a check (a compare-and-swap, a dozen stores,
a system-scope fence). Behind a branch after every access it ended ptxas's scheduling
region at every access, so a run of checked loads issued one after another; measured,
a scan whose loads the checker could not prove ran 3.4x slower. With one branch per
stretch of straight-line code, the loads issue together.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir


@dataclass
class _Pending:
    inside: ir.Value
    description: tuple


class CheckingBuilder(ir.IRBuilder):
    def __init__(self, block: ir.Block, record, expect):
        super().__init__(block)
        self._record = record
        self._expect = expect
        self._pending: list[_Pending] = []

    def around(self, condition: ir.Value, perform, name: str = "guard", otherwise: ir.Value | None = None):
        before, outer = self.block, len(self._pending)
        then_bb, end_bb = self.append_basic_block(f"{name}.in"), self.append_basic_block(f"{name}.next")
        super().cbranch(condition, then_bb, end_bb)
        self.position_at_end(then_bb)
        value = perform()
        self._settle(outer)  # checks made inside: their values are defined only on this arm
        super().branch(end_bb)
        then_end = self.block
        self.position_at_end(end_bb)
        if otherwise is None:
            return None
        phi = self.phi(value.type)
        phi.add_incoming(value, then_end)
        phi.add_incoming(otherwise, before)
        return phi

    def checked(self, inside: ir.Value, description: tuple, perform, zero: ir.Value | None = None):
        value = self.around(inside, perform, "access", zero)
        self._pending.append(_Pending(inside, description))
        return value

    def settle(self) -> None:
        self._settle(0)

    def _settle(self, start: int) -> None:
        """Settles the pending checks from `start` on."""
        pending = self._pending[start:]
        if not pending:
            return
        del self._pending[start:]
        all_inside = pending[0].inside
        for p in pending[1:]:
            all_inside = self.and_(all_inside, p.inside)
        records, resume = self.append_basic_block("fault"), self.append_basic_block("fault.done")
        super().cbranch(self._expect(all_inside), resume, records)
        self.position_at_end(records)
        first = pending[-1].description  # every earlier one inside: the last was skipped
        for p in reversed(pending[:-1]):
            first = tuple(self.select(p.inside, later, mine) for later, mine in zip(first, p.description))
        self._record(first)
        super().branch(resume)
        self.position_at_end(resume)

    def branch(self, target):
        self.settle()
        return super().branch(target)

    def cbranch(self, cond, truebr, falsebr):
        self.settle()
        return super().cbranch(cond, truebr, falsebr)

    def ret_void(self):
        self.settle()
        return super().ret_void()
