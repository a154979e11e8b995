"""The launch check of a kernel's `vg.assume` facts.

Takes: a kernel's `ir.Assumption`s and its parameter names (`of_kernel`), or their JSON form
(`from_json`, from a launch record or a bundle). Gives: `LaunchFacts`, with `check(...)`,
which refuses a launch that breaks a fact with `AssumptionError` (VG304) at the fact's line,
naming the condition and the values it read, and `holds(*atoms)`, the same test over the
launch values it reads (`atoms`: Python expressions over `values`, `infos`, `grid`,
`block`, as the bounds guard's; `runtime.fastpath` inlines them into its launchers).

Guarantees: the condition is evaluated in exact integers (Python's), with the kernel's
meaning of each operator (`//` and `%` floor, and give 0 for a zero divisor), every part of
it (both sides of `and`/`or`, both arms of `a if c else b`); a launch where a part of it
leaves its dtype is refused too, so on every launch that passes, each part has
the same value in exact arithmetic, in the kernel's wrapping arithmetic and in every model
of the proofs. A kernel without assumptions has no `LaunchFacts` (None): its launches do
not pay for them.
"""
from __future__ import annotations

import numpy as np

from ..errors import AssumptionError, Loc, user_call_site
from ..ir import nodes as N

EXTENT = (0, 2**63 - 1)  # an array extent's values
LAUNCH_SIZE = (1, 2**31 - 1)  # a grid or block size's


class _Overflow(Exception):
    """A part of an assumption left its dtype on this launch."""


def _fit(value: int, lo: int, hi: int) -> int:
    if lo <= value <= hi:
        return value
    raise _Overflow


def _floordiv(a: int, b: int) -> int:
    return a // b if b else 0


def _mod(a: int, b: int) -> int:
    return a % b if b else 0


HELPERS = {"_fit": _fit, "_floordiv": _floordiv, "_mod": _mod, "_Overflow": _Overflow, "int": int}


class LaunchFacts:
    """A kernel's assumptions as one host test. `entries`: per assumption, its condition
    (Python over `_a0, _a1, ...`), text, location and the names of the atoms it reads;
    `atoms`: the launch values read, as Python over `values`, `infos`, `grid`, `block`."""

    def __init__(self, entries: list, atoms: list, labels: list):
        self.entries, self.atoms, self.labels = entries, atoms, labels
        names = ", ".join(f"_a{i}" for i in range(len(atoms)))
        tests = " and ".join(f"({e['condition']})" for e in entries)
        source = (f"def holds({names}):\n    try:\n        return bool({tests})\n"
                  f"    except _Overflow:\n        return False\n")
        namespace: dict = {}
        exec(compile(source, "<vg.assume>", "exec"), dict(HELPERS), namespace)  # noqa: S102
        self.holds = namespace["holds"]
        self._values = eval(f"lambda values, infos, grid, block: ({''.join(a + ', ' for a in atoms)})",  # noqa: S307
                            {"int": int})

    def to_json(self) -> dict:
        return {"entries": self.entries, "atoms": self.atoms, "labels": self.labels}

    @classmethod
    def from_json(cls, data: dict | None) -> LaunchFacts | None:
        return None if data is None else cls(data["entries"], data["atoms"], data["labels"])

    def check(self, kernel_name: str, values, infos, grid, block) -> None:
        """Refuse (AssumptionError) a launch that breaks an assumption."""
        atoms = self._values(values, infos, grid, block)
        if self.holds(*atoms):
            return
        for entry in self.entries:
            single = LaunchFacts([entry], self.atoms, self.labels)
            if single.holds(*atoms):
                continue
            read = ", ".join(f"{self.labels[i]} = {atoms[i]}" for i in entry["reads"])
            try:
                eval(entry["condition"], dict(HELPERS), {f"_a{i}": v for i, v in enumerate(atoms)})  # noqa: S307
                broken = "is false"
            except _Overflow:
                broken = "overflows its dtype"
            site = user_call_site()
            raise AssumptionError(
                f"the launch of {kernel_name} breaks `vg.assume({entry['text']})`: it {broken} "
                f"with {read or 'these constants'}" + (f" (launched at {site})" if site else ""),
                Loc(*entry["loc"]), code="VG304",
                hint="the kernel's proofs rely on this fact: launch it with arguments that "
                     "satisfy it")


def of_kernel(kernel: N.Kernel, names: list, grid_name: str = "grid_dim") -> LaunchFacts | None:
    """The launch test of `kernel`'s assumptions, None if it has none. `names`: the
    parameters in launch order (`values` and `infos` follow it)."""
    if not kernel.assumptions:
        return None
    writer = _Writer({name: i for i, name in enumerate(names)}, kernel.track)
    entries = []
    for a in kernel.assumptions:
        writer.reads = []
        condition, _ = writer.source(a.cond)
        entries.append({"condition": condition, "text": a.text, "reads": sorted(set(writer.reads)),
                        "loc": [a.loc.file, a.loc.line, a.loc.col, a.loc.function]})
    return LaunchFacts(entries, writer.atoms, writer.labels)


def dtype_range(dtype) -> tuple:
    if dtype.is_bool:
        return 0, 1
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


class _Writer:
    """Python source of an assumption's condition over atoms `_a0, _a1, ...`, with the
    interval of each part: a part whose interval may leave its dtype is tested (`_fit`)."""

    def __init__(self, slots: dict, track: str):
        self.slots, self.track = slots, track
        self.atoms: list = []
        self.labels: list = []
        self.reads: list = []

    def atom(self, source: str, label: str, span: tuple) -> tuple:
        if source not in self.atoms:
            self.atoms.append(source)
            self.labels.append(label)
        index = self.atoms.index(source)
        self.reads.append(index)
        return f"_a{index}", span

    def fitted(self, source: str, span: tuple, dtype) -> tuple:
        lo, hi = dtype_range(dtype)
        if lo <= span[0] and span[1] <= hi:
            return source, span
        return f"_fit({source}, {lo}, {hi})", (max(lo, span[0]), min(hi, span[1]))

    def source(self, e: N.Expr) -> tuple:
        """(Python source of `e`, its interval)."""
        return getattr(self, f"e_{type(e).__name__}")(e)

    def e_Const(self, e):
        value = int(e.value)
        return (repr(bool(value)) if e.dtype.is_bool else repr(value)), (value, value)

    def e_Var(self, e):
        if e.known is not None:
            return repr(e.known), (e.known, e.known)
        return self.atom(f"int(values[{self.slots[e.name]}])", e.name, dtype_range(e.dtype))

    def e_Shape(self, e):
        return self.atom(f"infos[{self.slots[e.array.name]}].shape[{e.axis}]",
                         f"{e.array.name}.shape[{e.axis}]", EXTENT)

    def e_Special(self, e):
        if e.kind == "grid_dim":
            label = f"tile.num_blocks({e.axis})" if self.track == "tile" else f"grid_dim({e.axis})"
            return self.atom(f"grid[{e.axis}]", label, LAUNCH_SIZE)
        return self.atom(f"block[{e.axis}]", f"block_dim({e.axis})", LAUNCH_SIZE)

    def e_Unary(self, e):
        x, (lo, hi) = self.source(e.operand)
        if e.op == "not":
            return f"(not {x})", (0, 1)
        return self.fitted(f"(-{x})", (-hi, -lo), e.dtype)  # neg (`~` is refused)

    def e_Binary(self, e):
        (a, sa), (b, sb) = self.source(e.lhs), self.source(e.rhs)
        if e.op in ("add", "sub", "mul"):
            symbol = {"add": "+", "sub": "-", "mul": "*"}[e.op]
            if e.op == "sub":
                sb = (-sb[1], -sb[0])
            ends = [x * y for x in sa for y in sb] if e.op == "mul" else [x + y for x in sa for y in sb]
            return self.fitted(f"({a} {symbol} {b})", (min(ends), max(ends)), e.dtype)
        if e.op == "floordiv":
            most = max(abs(sa[0]), abs(sa[1]))
            return self.fitted(f"_floordiv({a}, {b})", (-most, most), e.dtype)
        if e.op == "mod":
            most = max(abs(sb[0]), abs(sb[1]))
            return f"_mod({a}, {b})", (-most, most)
        symbol = {"and": "&", "or": "|", "xor": "^"}[e.op]  # exact on values in their dtype
        span = (0, min(sa[1], sb[1])) if e.op == "and" and sa[0] >= 0 and sb[0] >= 0 else dtype_range(e.dtype)
        return f"({a} {symbol} {b})", span

    def e_Compare(self, e):
        (a, _), (b, _) = self.source(e.lhs), self.source(e.rhs)
        symbol = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[e.op]
        return f"({a} {symbol} {b})", (0, 1)

    def e_Logical(self, e):  # both sides, always: every part is tested (`_fit`)
        (a, _), (b, _) = self.source(e.lhs), self.source(e.rhs)
        return f"(bool({a}) {'&' if e.op == 'and' else '|'} bool({b}))", (0, 1)

    def e_Select(self, e):  # both arms, always, as for `e_Logical`
        (c, _), (a, sa), (b, sb) = self.source(e.cond), self.source(e.a), self.source(e.b)
        return f"({a}, {b})[0 if {c} else 1]", (min(sa[0], sb[0]), max(sa[1], sb[1]))

    def e_Cast(self, e):
        x, span = self.source(e.value)
        if e.dtype.is_bool:
            return f"({x} != 0)", (0, 1)
        if e.value.dtype.is_bool:
            return f"int({x})", (0, 1)
        return self.fitted(x, span, e.dtype)

    def e_MathCall(self, e):
        parts = [self.source(a) for a in e.args]
        if e.func == "abs":
            x, (lo, hi) = parts[0]
            top = max(abs(lo), abs(hi))
            return self.fitted(f"abs({x})", (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), top), e.dtype)
        (a, sa), (b, sb) = parts
        pick = min if e.func == "min" else max
        return f"{e.func}({a}, {b})", (pick(sa[0], sb[0]), pick(sa[1], sb[1]))
