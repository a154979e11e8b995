"""What `verdigris check` found, and how it prints it.

Takes: the findings, notes and verdicts `scan` records while it checks files. Gives:
`Finding` (a refusal or an error at a place in the source), `Note` (what holds but is worth
knowing: unsafe regions, accesses checked at run time), `Verdict` (one per kernel, and one
per file or launch that could not be checked) and `Report` (all of them, `format()`, the
command's output, and `status`, its exit status).

Guarantees:
- Every kernel found gets exactly one verdict line: `proven` (race-free for every
  specialization checked; accesses no proof covers keep their bounds check at run time,
  listed as notes), `refused` (a race, an aliased launch or a safety rule, with its
  findings), `not compilable` (no launch could compile it: Python no kernel can have, a
  signature such as `*args`, a file that does not parse or an import that fails) or
  `not proven` (check could not decide: types it could not infer, a kernel defined inside a
  function, a failure of the checker itself).
- `status` is 1 if any finding, or any verdict but `proven` (with `allow_unproven`, `not
  proven` alone does not count); else 0. Nothing is reported as fine that was not proven.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Loc

PROVEN, REFUSED, NOT_COMPILABLE, NOT_PROVEN = "proven", "refused", "not compilable", "not proven"
VERDICTS = (PROVEN, REFUSED, NOT_COMPILABLE, NOT_PROVEN)
RUNTIME_CHECK = "bounds check kept at run time"  # the start of such a note
ASSUMED = "assumed"  # the start of a note on a `vg.assume` fact the proofs took as given
NARROW = "int32 range"  # the start of a note on 64-bit scalars checked for int32's values


@dataclass(frozen=True)
class Finding:
    code: str  # "VG2xx"/"VG3xx", or "" for an error that makes its kernel not compilable
    loc: Loc
    message: str
    hint: str = ""

    def format(self) -> str:
        lines = [f"{self.loc}: {self.code or 'error'}: {self.message}"]
        excerpt = self.loc.excerpt()
        if excerpt:
            lines.append(excerpt)
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Note:
    loc: Loc
    text: str  # names its own location where it has one

    def format(self) -> str:
        return f"note: {self.text}"


@dataclass(frozen=True)
class Verdict:
    loc: Loc  # the kernel's `def` line, the launch, or the file's first bad line
    subject: str  # "kernel 'k'", "launch of 'k'", or "file"
    verdict: str  # one of VERDICTS
    detail: str = ""
    seconds: float | None = None  # how long checking it took, shown with `--time`

    def format(self, timed: bool = False) -> str:
        text = f"{self.loc.file}:{self.loc.line}: {self.subject}: {self.verdict}"
        if self.detail:
            text += f" ({self.detail})" if self.verdict in (PROVEN, REFUSED) else f": {self.detail}"
        if timed and self.seconds is not None:
            text += f" [{self.seconds * 1e3:.1f} ms]"
        return text


@dataclass
class Report:
    findings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    verdicts: list = field(default_factory=list)
    files: int = 0
    launches: int = 0  # launch sites whose arguments were compared
    allow_unproven: bool = False  # `--allow-unproven`: "not proven" alone exits 0
    timed: bool = False  # `--time`: each verdict line gives the time its check took

    def count(self, verdict: str) -> int:
        return sum(v.verdict == verdict for v in self.verdicts)

    @property
    def status(self) -> int:
        failing = {REFUSED, NOT_COMPILABLE} | (set() if self.allow_unproven else {NOT_PROVEN})
        return 1 if self.findings or any(v.verdict in failing for v in self.verdicts) else 0

    def format(self) -> str:
        order = {Verdict: 0, Finding: 1, Note: 2}
        items = sorted(dict.fromkeys(self.verdicts + self.findings + self.notes),
                       key=lambda i: (i.loc.file, i.loc.line, order[type(i)], i.loc.col))
        lines = [i.format(self.timed) if isinstance(i, Verdict) else i.format() for i in items]
        return "\n".join(lines + [self.summary()]) + "\n"

    def summary(self) -> str:
        counts: dict = {}
        for f in self.findings:
            if f.code:
                counts[f.code] = counts.get(f.code, 0) + 1
        for verdict in (NOT_COMPILABLE, NOT_PROVEN):
            if self.count(verdict):
                counts[verdict] = self.count(verdict)
        problems = sum(counts.values())
        head = (f"{problems} problem{'s' * (problems != 1)} ("
                + ", ".join(f"{n} {c}" for c, n in sorted(counts.items())) + ")"
                if problems else "no problems")
        files = f"{self.files} file{'s' * (self.files != 1)}"
        kernels = sum(v.subject.startswith("kernel") for v in self.verdicts)
        checked = f"{kernels} kernel{'s' * (kernels != 1)} and {self.launches} " \
                  f"launch{'es' * (self.launches != 1)} checked"
        verdicts = "verdicts: " + ", ".join(f"{self.count(v)} {v}" for v in VERDICTS
                                             if self.count(v)) if self.verdicts else ""
        unsafe = sum(n.text.startswith("unsafe region") for n in set(self.notes))
        runtime = sum(n.text.startswith(RUNTIME_CHECK) for n in set(self.notes))
        assumed = sum(n.text.startswith(ASSUMED) for n in set(self.notes))
        extras = [f"{n} {one if n == 1 else many}" for n, one, many in (
            (unsafe, "unsafe region", "unsafe regions"),
            (runtime, "access checked at run time", "accesses checked at run time"),
            (assumed, "fact assumed", "facts assumed")) if n]
        seconds = sum(v.seconds or 0 for v in self.verdicts)
        timing = [f"{seconds * 1e3:.1f} ms checking"] if self.timed else []
        return f"verdigris check: {head} in {files}; " + "; ".join(
            [checked] + ([verdicts] if verdicts else []) + extras + timing)
