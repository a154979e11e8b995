"""A specialization's safety verdict, from the disk cache when this compiler reached it before.

Takes: a freshly built, unchecked `ir.Kernel`, its specialization key and the kernel's
parameter names. Gives `start(kernel, key, names, beside_compile) -> Verdict`, which runs
`safety.check` unless the disk cache holds the verdict for this exact kernel, and either way
leaves the checker's facts in `kernel.facts` (`in_bounds`; the preconditions' texts, without
their polynomials, after a hit). `Verdict.settle()` gives the bounds guard
(`safety.bounds.launch_guard`'s function, with its `.condition`; None without
preconditions) or raises the checker's `SafetyError`. With `beside_compile`, the check may
run on a thread beside the compile that follows, where the compiled code does not depend on
it (see `start`; the compiler begins the thread after its lowering, `Verdict.start`).

A refusal stays with its specialization in memory: each launch is refused with the same
error, without checking again. A refusal with a counterexample (every code but VG205) is
recorded on disk too, so a later process refuses the kernel at once with the same error
(where the kernel is in the same file and the lines the error quotes read the same);
VG205 ("not proven": a time limit, values the checker cannot see) is not: the time a proof
may take depends on the machine, so a later process checks again. Guarantees: verdicts
are recorded under a key made of the printed IR (which holds everything the
checker reads: the body, the types, the block and one-block grid axes, `vg.unsafe`
regions), the specialization key and the compiler's fingerprint (`cache`), so a hit gives
the verdict the checker would give. A hit imports neither the
checker nor the solver: with the compiled image also cached, a specialization costs the
frontend and two small file reads. A miss on the cuda backend means a compile follows:
the code generator's setup starts on a thread first (`codegen.prefetch`), beside the check.
Nothing runs on the GPU before its verdict is settled: the runtime settles a verdict
before it loads the compiled module.
"""
from __future__ import annotations

import json
import linecache
import threading
import time

from ..codegen import checks
from ..errors import Loc, SafetyError
from ..ir.printer import format_kernel
from . import backend, cache


class Verdict:
    """A safety verdict: settled, or to be reached on a thread beside a compile (`threaded`),
    which `start` begins: the compiler calls it when its own Python work (the lowering) is
    done and LLVM and ptxas, which run outside the GIL, take over, so the checker's Python
    runs beside them rather than taking turns with the lowering. `settle()` starts it if
    nobody did, waits, and gives the bounds guard or raises the checker's error, every time
    it is asked. `guard` is the bounds guard as soon as it is known: for a tile kernel
    checked beside its compile, before the thread starts (a launch chooses its variant by
    it before the verdict settles)."""

    __slots__ = ("guard", "seconds", "_thread", "_error")

    def __init__(self, guard=None, seconds: float = 0.0):
        self.guard, self.seconds, self._thread, self._error = guard, seconds, None, None

    @classmethod
    def beside(cls, prove) -> Verdict:
        verdict = cls()

        def run():
            start = time.perf_counter()
            try:
                verdict.guard = prove()
            except BaseException as error:  # noqa: BLE001 -- handed to whoever settles
                verdict._error = error
            verdict.seconds = time.perf_counter() - start

        verdict._thread = threading.Thread(target=run, daemon=True, name="verdigris-safety")
        return verdict

    @property
    def threaded(self) -> bool:
        """Whether it is (or was) reached on a thread, beside a compile."""
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None and self._thread.ident is None:
            self._thread.start()

    def settle(self):
        if self._thread is not None:
            self.start()
            self._thread.join()
        if self._error is not None:
            raise self._error.with_traceback(None)
        return self.guard


def start(kernel, key: tuple, names: list, beside_compile: bool) -> Verdict:
    """The kernel's safety verdict; on a thread when it is not cached, the cuda backend compiles
    next and the code generator needs nothing the thread gives: the kernel holds no access
    whose bounds check the proofs could drop (`checks.sites` is empty), or it is a tile
    kernel, whose bounds proofs (which tiles need no mask) are reached first, without the
    solver. The compile then runs while the checker works (both mostly outside the GIL:
    LLVM, ptxas and the solver), and the launch settles the verdict before it loads the
    module."""
    started = time.perf_counter()
    record_key = cache.key(format_kernel(kernel), ("safety verdict", key), "any target")
    record = _read(cache.get(record_key))
    if record is not None and "refusal" in record:
        refusal = _refusal(record["refusal"], kernel)
        if refusal is not None:
            verdict = Verdict(seconds=time.perf_counter() - started)
            verdict._error = refusal
            return verdict
        record = None  # it would point elsewhere: checked again
    if record is not None:
        unproven = set(record["checked"])
        kernel.facts.update({k: _tuples(v) for k, v in record["facts"].items()})
        kernel.facts["in_bounds"] = frozenset(
            id(site) for i, site in enumerate(checks.sites(kernel)) if i not in unproven)
        kernel.facts["bounds_preconditions"] = tuple((None, text) for text in record["texts"])
        if "block_meet_sites" in kernel.facts:  # ids do not outlive the process: positions do
            from ..frontend.access_nodes import from_positions

            kernel.facts["block_meets"] = from_positions(kernel, kernel.facts["block_meet_sites"])
        return Verdict(guard(record["guard"]), time.perf_counter() - started)
    compiles_next = backend.current() == "cuda"
    if compiles_next:
        from .. import codegen

        codegen.prefetch(kernel)

    # A tile kernel's bounds proofs take no solver (milliseconds): they come first, for the
    # code generator, and its race checks may then run beside the compile.
    tiles_beside = beside_compile and compiles_next and kernel.track == "tile"
    if tiles_beside:
        from .. import safety

        safety.prove_bounds(kernel)
        safety.order_block(kernel)  # which statements the lowering orders (`tile.ordering`)
        early_guard = safety.bounds.launch_guard(kernel, names)  # the first launch needs it

    def prove():
        from .. import safety

        try:
            safety.check_races(kernel)
        except SafetyError as refusal:
            if refusal.code != "VG205":
                cache.put(record_key, json.dumps({"refusal": _written(refusal, kernel)}).encode())
            raise
        if not tiles_beside:
            safety.prove_bounds(kernel)
        launch_guard = safety.bounds.launch_guard(kernel, names)
        facts = {k: v for k, v in kernel.facts.items() if _plain(v)}
        cache.put(record_key, json.dumps({
            "checked": list(checks.checked_sites(kernel)), "facts": facts,
            "texts": [text for _, text in kernel.facts.get("bounds_preconditions", ())],
            "guard": None if launch_guard is None else launch_guard.condition}).encode())
        return launch_guard

    if tiles_beside:
        verdict = Verdict.beside(prove)
        verdict.guard = early_guard
        return verdict
    if beside_compile and compiles_next and not checks.sites(kernel):
        return Verdict.beside(prove)
    try:
        return Verdict(prove(), time.perf_counter() - started)
    except SafetyError as refusal:  # kept: each later launch is refused with it, unchecked
        verdict = Verdict(seconds=time.perf_counter() - started)
        verdict._error = refusal
        return verdict


def _tuples(value):
    """A fact read back from JSON: its lists tuples again, at every depth."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _plain(value) -> bool:
    """Whether a fact survives JSON (numbers, strings, flags and tuples of them)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def guard(condition: str | None):
    """The launch guard function of a recorded condition (as `safety.bounds.launch_guard`
    makes it: over `values`, `infos`, `grid`, `block`)."""
    if condition is None:
        return None
    function = eval(f"lambda values, infos, grid, block: {condition}", {"int": int})  # noqa: S307
    function.condition = condition
    return function


def _written(refusal: SafetyError, kernel) -> dict:
    """A refusal as JSON can hold it: its location with the chain of calls it was inlined
    through, and what makes it the same error for another kernel of the same IR (the
    kernel's file, the text of each line it quotes)."""
    def place(loc):
        return None if loc is None else [loc.file, loc.line, loc.col, loc.function, place(loc.call_site)]

    return {"message": refusal.message, "loc": place(refusal.loc), "hint": refusal.hint,
            "code": refusal.code, "kernel": kernel.loc.file, "lines": _quoted(refusal.loc)}


def _refusal(written: dict, kernel) -> SafetyError | None:
    """The refusal `_written` recorded, or None where it would point elsewhere than the
    checker would now: the IR (the record's key) has no file names or columns, so the same
    kernel in another file, or its line edited within, is checked again."""
    def place(loc):
        return None if loc is None else Loc(*loc[:4], place(loc[4]))

    loc = place(written["loc"])
    if written["kernel"] != kernel.loc.file or written["lines"] != _quoted(loc):
        return None
    return SafetyError(written["message"], loc, written["hint"], written["code"])


def _quoted(loc) -> list:
    """The source line of `loc` and of each call site it was inlined through."""
    lines = []
    while loc is not None:
        lines.append(linecache.getline(loc.file, loc.line))
        loc = loc.call_site
    return lines


def _read(data: bytes | None):
    if data is None:
        return None
    try:
        record = json.loads(data)
        refused = set(record.get("refusal", ())) == {"message", "loc", "hint", "code", "kernel", "lines"}
        return record if refused or {"checked", "facts", "texts", "guard"} <= set(record) else None
    except (ValueError, AttributeError, TypeError):
        return None
