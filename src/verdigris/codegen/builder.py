"""The lowering's instruction builder: bounds checks whose fault record waits for the next branch.

Takes: an `llvmlite.ir` block to build in, and three callbacks from the lowering:
`record(description)`, which emits the fault path where the builder stands for a fault
described by a tuple of i64 values (`checks`' record words: site, rank, indices, extents),
`expect(condition)`, which marks an i1 as likely true, and `slot(type, name, initial)`,
which makes a variable (an alloca in the entry block, set to `initial` there unless None).
Gives `CheckingBuilder`, an `ir.IRBuilder` with
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
- `carrying()`: a context for a loop that is not unrolled. Inside it, settling branches
  nowhere: it keeps the thread's first skipped access in variables (registers once
  promoted): a flag, the access's number, and the record words some access computes;
  words that are constants or parameters come back from the number at the record. One
  branch at the end of the outermost `carrying` (the loop's exit) records it. So the loop
  body holds no fault path, LLVM may unroll the loop, and ptxas issues its iterations'
  loads together.

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
stretch of straight-line code, the loads issue together. In a loop, a fault path in the
body kept LLVM from unrolling it: a gather over a run-time count of indices ran at 0.42-0.74
of the same loop in CUDA C without checks until its record was carried to the loop's exit.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from llvmlite import ir

I32 = ir.IntType(32)


@dataclass
class _Pending:
    inside: ir.Value
    description: tuple


@dataclass
class _Carried:
    """The variables that carry a fault out of loops (made on first use)."""
    skipped: ir.AllocaInstr | None = None  # whether some access was skipped
    which: ir.AllocaInstr | None = None  # the first skipped one's number in `descriptions`
    words: dict = field(default_factory=dict)  # word position -> variable, for computed words
    descriptions: list = field(default_factory=list)  # of every access carried so far
    since_record: bool = False  # whether a fault may be carried that no record path has seen


def _fixed(word: ir.Value) -> bool:
    """Whether `word` is the same wherever in the function it is read."""
    return isinstance(word, (ir.Constant, ir.Argument))


class CheckingBuilder(ir.IRBuilder):
    def __init__(self, block: ir.Block, record, expect, slot):
        super().__init__(block)
        self._record = record
        self._expect = expect
        self._slot = slot
        self._pending: list[_Pending] = []
        self._carrying = 0  # depth of `carrying` contexts
        self._carried = _Carried()

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

    @contextmanager
    def carrying(self):
        self._carrying += 1
        yield
        self.settle()
        self._carrying -= 1
        if not self._carrying and self._carried.since_record:
            self._record_if(self.not_(self.load(self._carried.skipped)), self._carried_description)
            self._carried.since_record = False

    def _settle(self, start: int) -> None:
        """Settles the pending checks from `start` on."""
        pending = self._pending[start:]
        if not pending:
            return
        del self._pending[start:]
        all_inside = pending[0].inside
        for p in pending[1:]:
            all_inside = self.and_(all_inside, p.inside)
        if self._carrying:
            self._carry(all_inside, pending)
        else:
            self._record_if(all_inside, lambda: self._first_skipped(pending))

    def _first_skipped(self, pending: list) -> tuple:
        """The description of the first skipped access, where one of `pending` was skipped."""
        first = pending[-1].description  # every earlier one inside: the last was skipped
        for p in reversed(pending[:-1]):
            first = tuple(self.select(p.inside, later, mine) for later, mine in zip(first, p.description))
        return first

    def _record_if(self, all_inside: ir.Value, description) -> None:
        """One branch, taken unless `all_inside`, to the record of `description()`."""
        records, resume = self.append_basic_block("fault"), self.append_basic_block("fault.done")
        super().cbranch(self._expect(all_inside), resume, records)
        self.position_at_end(records)
        self._record(description())
        super().branch(resume)
        self.position_at_end(resume)

    def _carry(self, all_inside: ir.Value, pending: list) -> None:
        """Keeps the first skipped of `pending` as the carried fault, unless all were inside or
        one is carried already. Carried: which description it is (a number) and the words
        that some description of `pending` computes; words that are constants or parameters
        are recovered from the number at the record."""
        carried = self._carried
        if carried.skipped is None:
            carried.skipped = self._slot(ir.IntType(1), "fault.skipped", ir.Constant(ir.IntType(1), False))
            carried.which = self._slot(I32, "fault.which", None)
        numbers = [ir.Constant(I32, len(carried.descriptions) + k) for k in range(len(pending))]
        carried.descriptions += [p.description for p in pending]
        computed = [k for k in range(len(pending[0].description))
                    if any(not _fixed(p.description[k]) for p in pending)]
        for k in computed:
            if k not in carried.words:
                carried.words[k] = self._slot(pending[0].description[k].type, f"fault.word{k}", None)
        first = self._first_skipped([_Pending(p.inside, (number, *(p.description[k] for k in computed)))
                                     for p, number in zip(pending, numbers)])
        before = self.load(carried.skipped)
        now = self.not_(all_inside)
        keep_new = self.and_(now, self.not_(before))
        for variable, word in zip((carried.which, *(carried.words[k] for k in computed)), first):
            self.store(self.select(keep_new, word, self.load(variable)), variable)
        self.store(self.or_(before, now), carried.skipped)
        carried.since_record = True

    def _carried_description(self) -> tuple:
        """The carried fault's description: carried words, and the fixed words of the
        description its number names."""
        carried = self._carried
        which = self.load(carried.which)
        words = []
        for k, template in enumerate(carried.descriptions[0]):
            word = self.load(carried.words[k]) if k in carried.words else ir.Constant(template.type, 0)
            for number, description in enumerate(carried.descriptions):
                if _fixed(description[k]):
                    word = self.select(self.icmp_unsigned("==", which, ir.Constant(I32, number)), description[k], word)
            words.append(word)
        return tuple(words)

    def branch(self, target):
        self.settle()
        return super().branch(target)

    def cbranch(self, cond, truebr, falsebr):
        self.settle()
        return super().cbranch(cond, truebr, falsebr)

    def ret_void(self):
        self.settle()
        return super().ret_void()
