"""Benchmark cases: what they measure, how they register, and how `bench/` is searched.

Takes: `@case(...)`-decorated setup functions, in `bench/*.py` scripts. Gives: `KINDS` (what
each kind of case measures, in which unit, against which roofline), `ROOFLINES` (the
ceilings a case may be compared with), `Case`, `Impl`, `REGISTRY` (name -> Case, in
registration order), `discover(bench_dir)` (imports every script of a bench directory that
uses this package, so its cases register; scripts that cannot be imported here are
returned with the reason, never raised), `load_script(path)` (a bench script's module, for
a case that borrows another script's peer kernels) and `select(pattern, cases)`.

Guarantees: registering needs nothing but this module (no GPU, no torch), so a script that
registers cases still runs standalone and imports on any machine its own imports allow;
the setup function runs only when the suite measures the case. A name registered twice
from one file (a script imported again) replaces the first; from two files it is an error.
Scripts that never mention `benchsuite` cannot register a case and are not imported (they
are standalone; importing them would only cost their imports). A script is imported once
per process, by discovery or `load_script`, whichever comes first.

A case, in a bench script::

    from verdigris.benchsuite import case

    @case("vector add f32", kind="memory", sizes=[1 << 24, 1 << 28], quick=[1 << 26],
          work=lambda n: 3 * 4 * n)            # bytes read + written per call
    def vector_add(n):
        a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        out = torch.empty_like(a)
        return {"verdigris": {"BLOCK=1024": lambda: add[vg.cdiv(n, 1024)](a, b, out, BLOCK=1024)},
                "torch": lambda: torch.add(a, b, out=out)}

The setup function gets one size and returns, per peer, a zero-argument callable (or an
`Impl` with a correctness check, or a dict of configurations of either: the suite chooses
the best and re-times it, `runner`). Peers are named as in `peers.PEERS`; `"roofline"` is the case's own ceiling where the
kind has no global one (the raw driver launch for launch overhead).
"""
from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

OURS = "verdigris"  # the peer whose figures the ratios are about
ROOFLINE = "roofline"


@dataclass(frozen=True)
class Kind:
    name: str
    unit: str
    higher_is_better: bool
    what: str  # how the value is obtained, for the JSON and the docs
    roofline: str | None  # key of the run's ceilings (None: the case supplies its own)


KINDS = {k.name: k for k in (
    Kind("memory", "TB/s", True, "bytes read + written per call over the median device time",
         "copy_tbs"),
    Kind("compute", "TFLOP/s", True, "floating-point operations per call over the median "
         "device time", "dense_tflops"),
    Kind("launch", "us/call", False, "host time per launch of a tiny kernel, over many "
         "back-to-back launches", None),
    Kind("compile", "ms", False, "time to the end of the first call, in a fresh process", None),
)}


# The ceilings a memory or compute case can be compared with: keys of the run's ceilings
# (see `ceilings.measure`), with what they are, for the table and the plots.
ROOFLINES = {
    "copy_tbs": "device copy",
    "dense_tflops": "dense bf16 peak",
    "dense_fp8_tflops": "dense fp8 peak",
    "fp32_tflops": "fp32 CUDA-core peak",
}
assert all(k.roofline in ROOFLINES for k in KINDS.values() if k.roofline)


@dataclass
class Impl:
    """One way to run a case: `run()` does one call (for `compile` cases it returns the
    milliseconds it measured); `check()` runs it once and returns None when the result is
    right, else what is wrong (the suite then skips timing it)."""
    run: Callable[[], object]
    check: Callable[[], str | None] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    setup: Callable[[object], Mapping] = field(repr=False)
    sizes: tuple
    quick_sizes: tuple
    work: Callable[[object], float] | None = field(repr=False)
    requires: tuple
    plot: str  # cases with the same plot share a figure
    source: str  # the file that registered it
    size_label: Callable[[object], str] = field(repr=False)
    roofline: str | None = None  # a key of ROOFLINES (None: the case supplies its own)

    @property
    def unit(self) -> str:
        return KINDS[self.kind].unit


REGISTRY: dict[str, Case] = {}


def default_size_label(size) -> str:
    """2^k for powers of two from 2^16 up, AxB for tuples, else the number."""
    if isinstance(size, tuple):
        return "x".join(default_size_label(s) if not isinstance(s, int) else str(s) for s in size)
    if isinstance(size, int) and size >= 1 << 16 and size & (size - 1) == 0:
        return f"2^{size.bit_length() - 1}"
    return str(size)


def case(name: str, *, kind: str, sizes, quick=None, work=None, requires=(), plot=None,
         size_label=default_size_label, roofline=None):
    """Register the decorated setup function as the benchmark case `name`.

    kind: a key of KINDS. sizes: the sizes a full run measures (ints or tuples, passed to
    the setup function one at a time); quick: the sizes of a `--quick` run (default: the
    largest). work: bytes (memory) or floating-point operations (compute) of one call at a
    size. requires: peers the case cannot be set up without (e.g. "torch"). plot: the
    figure it is drawn in (default: its kind; e.g. "gemm" and "attention" for compute).
    roofline: the ceiling it is compared with, a key of ROOFLINES (default: its kind's;
    e.g. "dense_fp8_tflops" for an fp8 GEMM, "fp32_tflops" for an SGEMM on CUDA cores).
    """
    if kind not in KINDS:
        raise ValueError(f"case {name!r}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if roofline is not None and KINDS[kind].roofline is None:
        raise ValueError(f"case {name!r}: a {kind} case has no roofline= (its setup returns "
                         f"a {ROOFLINE!r} entry instead)")
    if roofline is not None and roofline not in ROOFLINES:
        raise ValueError(f"case {name!r}: roofline must be one of {', '.join(ROOFLINES)}, "
                         f"not {roofline!r}")
    sizes = tuple(sizes)
    if not sizes:
        raise ValueError(f"case {name!r}: give at least one size")
    if KINDS[kind].roofline and work is None:
        raise ValueError(f"case {name!r}: a {kind} case needs work= (per-call "
                         f"{'bytes' if kind == 'memory' else 'flops'} at a size)")

    def register(setup):
        file = getattr(sys.modules.get(setup.__module__), "__file__", None)
        source = str(Path(file).resolve()) if file else setup.__module__
        previous = REGISTRY.get(name)
        if previous is not None and previous.source != source:
            raise ValueError(f"benchmark case {name!r} is registered by both "
                             f"{previous.source} and {source}; give one a new name")
        REGISTRY[name] = Case(name, kind, setup, sizes, tuple(quick) if quick else sizes[-1:],
                              work, tuple(requires), plot or kind, source, size_label,
                              roofline or KINDS[kind].roofline)
        return setup

    return register


def registers_cases(path) -> bool:
    """Whether the script at `path` uses this package: the only way to register a case."""
    return "benchsuite" in Path(path).read_text(errors="replace")


def load_script(path):
    """The module of the bench script at `path`, imported once per process (under the name
    discovery gives it, so both share one module; its `if __name__ == "__main__":` part
    does not run). Raises what importing it raises (e.g. ModuleNotFoundError for torch)."""
    path = Path(path).resolve()
    module_name = f"_verdigris_bench_{path.stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def discover(bench_dir) -> dict[str, str]:
    """Import every `*.py` of `bench_dir` that uses this package (not those starting with
    `_`) so that its cases register. Returns {script: reason} for those that could not be
    imported."""
    problems = {}
    bench_dir = Path(bench_dir)
    sys.path.insert(0, str(bench_dir.resolve()))
    try:
        for path in sorted(bench_dir.glob("*.py")):
            if path.name.startswith("_") or not registers_cases(path):
                continue
            try:
                load_script(path)
            except BaseException as exc:  # a script's own imports: report, go on
                if isinstance(exc, KeyboardInterrupt):
                    raise
                problems[path.name] = _reason(exc)
    finally:
        sys.path.remove(str(bench_dir.resolve()))
    return problems


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"needs {exc.name.split('.')[0]}, which is not installed"
    return f"{type(exc).__name__}: {exc}"


def select(pattern: str | None, cases=None) -> list[Case]:
    """The cases whose name or kind matches `pattern` (a case-insensitive regular
    expression, searched anywhere in the name; None: all), kind by kind in the order of
    KINDS (memory, compute, launch, compile), each kind in registration order."""
    order = list(KINDS)
    cases = sorted(REGISTRY.values() if cases is None else cases, key=lambda c: order.index(c.kind))
    if not pattern:
        return cases
    try:
        regex = re.compile(pattern, re.I)
    except re.error as err:
        raise ValueError(f"--filter {pattern!r} is not a regular expression: {err}") from None
    return [c for c in cases if regex.search(c.name) or regex.fullmatch(c.kind)
            or regex.fullmatch(c.plot)]
