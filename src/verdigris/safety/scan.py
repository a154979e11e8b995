"""`verdigris check`: kernels and launch sites found in source files, checked without
running the files.

Takes: paths of `.py` files or of directories (searched recursively, skipping hidden ones
and `__pycache__`). Gives: `check_paths(paths, allow_unproven, timed) -> Report`
(`checkreport`: findings, notes, one verdict per kernel) and `Report.format()`, the
command's output. Guarantees:

- No user file is imported or run. Each file is parsed with `ast`, and only a filtered copy
  of its top level is executed (`statics.load_definitions`), statement by statement, in a
  fresh namespace, to get real kernel objects for the frontend: the imports whose names the
  definitions or launch sites below use; the `@...kernel` and `@...func` function
  definitions, when their decorators, defaults and annotations are inert (names,
  attributes, literals, arithmetic and calls of the standard `math` module's functions);
  and assignments of inert values. No other top-level statement runs and no function body
  runs (imported modules do run, as any import does). A statement that fails is skipped
  (remembered: a kernel whose definition fails, or that follows a failing import, is not
  compilable). Kernels defined inside functions are not proven.
- Racy kernels: every kernel defined at the top level of a file is specialized through the
  real frontend and given to the static checker, `verdigris.safety.analyze`. The specs come
  from the file's launch sites (`launchsites`; at any depth, lambdas included, and launches written with a
  helper's parameter that the file calls with a kernel) where they are literal
  (constexpr arguments and block shapes, also through names bound once to a literal, or
  looped over a literal tuple), else defaults. An array's element type is what its launch
  argument's source states (`elements`: `np.zeros(n, np.int32)`, `x.astype(np.uint8)`, a
  name bound once to such an expression, `vg.asarray(...)` of one); else what the body
  shows (`usage`: arrays float32, int64 where their elements serve as indices, of the rank
  their subscripts show; scalars int64 where used as integers). Launches without a literal
  block shape specialize without one. A launch specializes its kernel wherever the kernel
  is defined (matched by `defined_at`): in another of the files, or in a module a file
  imports, whose launched kernels are then checked too, at their own lines.
- Aliased launches (VG201): at each launch site `k[grid, block](args)`, the argument of
  every parameter the kernel writes (`ir.writes`) is compared with every other argument:
  the same name, or views of one name (subscripts, `.T`, `.reshape(...)`...) that are not
  provably disjoint, are reported. Literal or shared bounds prove disjointness (`x[:n]` and
  `x[n:]`, `x[:4]` and `x[4:8]`, `x[0]` and `x[1]`, `x[::2]` and `x[1::2]`); different
  names are assumed to be different arrays.
- Accesses of a race-free SIMT kernel that the bounds prover (`bounds.prove`) does not
  cover, such as a gather through indices read from memory, are notes: they keep their
  bounds check at run time; so are its shared reads that the checker neither proves
  written nor refuses (VG213: `note: shared read not proven written: ...`), which only the
  cpu backend checks, and make its verdict not proven.
- `vg.assume(...)` facts are notes (`note: assumed: n % 32 == 0 at file:line (kernel k),
  checked at every launch`): the verdicts hold for launches that satisfy them.
- An int64 or uint64 scalar is checked in the variant its launch gets (`ir.nodes.Param.
  narrow`): where a launch site's literal values (`possible_values`) include one beyond
  int32's range, the wide variant (any value); else, values check does not see included,
  the narrow one (values in int32's range), with a note (`note: int32 range: n checked
  for values in int32's range (kernel k); ...`): a launch with a larger value gets the
  wide variant, proven or refused at that launch.
- `with vg.unsafe():` regions are notes (`note: unsafe region at file:line`), not findings.
- Every kernel gets one verdict (`checkreport.Verdict`): refused where a race or a safety
  code the frontend enforces is found; not compilable where the frontend refused it as
  Python no kernel can have (a `print`, a `try`, a call of a NumPy function:
  `errors.UnsupportedConstruct`, each also a finding), or where a specialization fails the
  same way with the inferred types and with integers for every type the source does not
  state (a float index, `return value`); not proven where it fails with the inferred types
  only (and the integer build fails otherwise), where check cannot evaluate its definition
  or has no constexpr value, or where check itself fails; else proven. A specialization
  that builds with integers only is checked with them.
- Whatever fails in one kernel, launch or file (an `Error`, or any exception of the
  checker), the run goes on to the next.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import time
from dataclasses import replace
from pathlib import Path

from .. import types as T
from ..errors import Error, Loc, UndefinedName, UnsupportedConstruct
from ..frontend import walk
from ..ir import nodes as N
from ..codegen import checks
from . import analyze, bounds
from .checkreport import (ASSUMED, NARROW, NOT_COMPILABLE, NOT_PROVEN, PROVEN, REFUSED, RUNTIME_CHECK, Finding,
                          Note, Report, Verdict)
from .launchsites import (LaunchSite, autotuned, candidate_launches, default_configs, launch_sites,
                          launched_kernel, root_name)
from .statics import is_definition, load_definitions, store_counts
from .usage import param_usage
from .views import View, as_view, overlap

SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}
UNPROVEN_READ = "shared read not proven written"  # VG213 neither proven nor refused
ANY_BLOCK = ("no launch in these files gives it a literal block; a kernel written for one "
             "block size is checked for it where a launch writes it, e.g. k[grid, 256](...)")

def check_paths(paths, allow_unproven: bool = False, timed: bool = False) -> Report:
    """Check every `.py` file under `paths` (FileNotFoundError for a path that is missing).
    A launch specializes its kernel wherever the kernel is defined: in another of the files,
    or in a module one of them imports, whose launched kernels are then checked as well.
    `allow_unproven`, `timed`: see `Report`."""
    report = Report(allow_unproven=allow_unproven, timed=timed)
    files = [FileCheck(file, report) for file in source_files(paths)]
    for check in files:
        check.load()
    sites = [site for check in files for site in check.sites]
    checked = set()
    for check in files:
        checked |= check.check_kernels(sites)
    imported: dict = {}  # file -> the kernels launched here that it defines
    for site in sites:
        where = defined_at(site.kernel)
        if where not in checked and where[0].endswith(".py") and Path(where[0]).is_file():
            imported.setdefault(where[0], set()).add(where)
    for file, launched in imported.items():
        check = FileCheck(Path(file), report)
        check.load()
        check.check_kernels(sites, launched)
    for check in files:
        check.check_launches()
    return report


def defined_at(kernel) -> tuple:
    """(the absolute path of the file, the line) where `kernel`'s function is defined: the
    kernel's identity across the namespaces check builds and the modules files import;
    ("", 0) for a kernel without Python source (a bundle's)."""
    code = getattr(getattr(kernel, "fn", None), "__code__", None)
    return (str(Path(code.co_filename).resolve()), code.co_firstlineno) if code else ("", 0)


def source_files(paths) -> list:
    files = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.py") if not any(
                part.startswith(".") or part in SKIPPED_DIRS for part in p.relative_to(path).parts)))
        elif path.is_file():
            if path.suffix != ".py":
                raise ValueError(f"{raw} is not a Python source file (.py)")
            files.append(path)
        else:
            raise FileNotFoundError(raw)
    return list(dict.fromkeys(files))


# ----------------------------------------------------------------------------- one file


class FileCheck:
    """One file: `load` it, then `check_kernels` (with the launch sites of every file) and
    `check_launches`."""

    def __init__(self, path: Path, report: Report):
        self.file = str(path)
        self.report = report
        # (kernel, launch, constexprs, elements, integers) -> (ir, None) | (None, Error)
        self.builds: dict = {}
        self.unproven_reads: dict = {}  # id(ir) -> its shared reads neither proven written nor refused
        self.tree, self.namespace, self.sites = None, {}, []
        self.failed: dict = {}  # top-level statement -> the exception it raised when run

    def load(self) -> None:
        self.report.files += 1
        try:
            text = Path(self.file).read_text(encoding="utf-8")
            tree = ast.parse(text, self.file)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.file_verdict(Loc(self.file, 1, 0), NOT_COMPILABLE, f"cannot read: {exc}")
            return
        except SyntaxError as exc:
            loc = Loc(self.file, exc.lineno or 1, max((exc.offset or 1) - 1, 0))
            self.report.findings.append(Finding("", loc, f"cannot parse: {exc.msg}"))
            self.file_verdict(loc, NOT_COMPILABLE, f"cannot parse: {exc.msg}")
            return
        linecache.checkcache(self.file)  # quote the file as it is now
        try:
            roots = {root_name(launched_kernel(c)) for c in candidate_launches(tree)}
            self.namespace = load_definitions(tree, self.file, roots, self.failed)
            self.sites = launch_sites(tree, self.namespace, self.file)
            self.tree = tree
        except Exception as exc:  # a defect of check: this file's kernels are not proven
            self.file_verdict(Loc(self.file, 1, 0), NOT_PROVEN, _checker_failed(exc))

    def file_verdict(self, loc: Loc, verdict: str, detail: str) -> None:
        self.report.verdicts.append(Verdict(loc, "file", verdict, detail))

    def check_kernels(self, sites: list, only: set | None = None) -> set:
        """Check the kernels defined here (those `only` names by `defined_at`, if given),
        specialized by `sites`; gives the `defined_at` of each kernel defined here."""
        if self.tree is None:
            return set()
        found = set()
        for node in self.tree.body:
            if not is_definition(node, "kernel"):
                continue
            where = (str(Path(self.file).resolve()), node.lineno)
            kernel = self.namespace.get(node.name)
            if getattr(kernel, "__vg_kernel__", False):
                where = defined_at(autotuned(kernel)[0])
            found.add(where)
            if only is None or where in only:
                self.check_kernel(node, kernel, [s for s in sites if defined_at(s.kernel) == where])
        if only is None:
            for node in ast.walk(self.tree):
                if is_definition(node, "kernel") and node not in self.tree.body:
                    self.verdict(node, NOT_PROVEN, "it is defined inside a function or class, "
                                                   "and check runs no code")
        return found

    def check_launches(self) -> None:
        for site in self.sites:
            try:
                self.check_launch(site)
            except Error:
                pass  # the kernel's own verdict says why it could not be built
            except Exception as exc:  # a defect of check: this launch is not proven
                name = getattr(site.kernel, "__name__", "?")
                self.report.verdicts.append(Verdict(site.loc(site.call), f"launch of {name!r}",
                                                    NOT_PROVEN, _checker_failed(exc)))

    # ------------------------------------------------------------------ kernels

    def verdict(self, node, verdict: str, detail: str = "", seconds: float | None = None) -> None:
        self.report.verdicts.append(Verdict(Loc(self.file, node.lineno, node.col_offset),
                                            f"kernel {node.name!r}", verdict, detail, seconds))

    def check_kernel(self, node: ast.FunctionDef, kernel, mine: list) -> None:
        """One verdict for the kernel `node` defines; `mine`: its launch sites, in any file.
        Whatever goes wrong in one kernel, the run goes on to the next."""
        start = time.perf_counter()
        try:
            verdict, detail = self.kernel_verdict(node, kernel, mine)
        except Error as err:  # e.g. a signature no kernel can have (`*args`)
            self.report.findings.append(Finding(err.code, err.loc or Loc(self.file, node.lineno,
                                                node.col_offset), err.message, err.hint))
            verdict, detail = (REFUSED, err.code) if err.code else (NOT_COMPILABLE, _error_text(err))
        except Exception as exc:  # a defect of check: the kernel is not proven
            verdict, detail = NOT_PROVEN, _checker_failed(exc)
        self.verdict(node, verdict, detail, time.perf_counter() - start)

    def kernel_verdict(self, node: ast.FunctionDef, kernel, mine: list) -> tuple:
        """(verdict, detail) of one kernel, its findings and notes added to the report."""
        if not getattr(kernel, "__vg_kernel__", False):
            return self.unevaluated(node)
        kernel, tuned = autotuned(kernel)
        configs = [c for s in mine for c in s.configs()] \
            or [c for s in mine for c in default_configs(kernel, s.element_types(), tuned)] \
            or default_configs(kernel, tuned=tuned)
        if not configs:
            missing = [p.name for p in kernel.params
                       if p.constexpr and p.default is inspect.Parameter.empty]
            return NOT_PROVEN, ("no literal value for constexpr " + ", ".join(map(repr, missing))
                                + " at its launches and no default (give it one, e.g. "
                                f"`{missing[0]}: vg.constexpr = 64`, to have it checked)")
        built, refusals, failures = [], [], []
        for launch, constexprs, elements, wide in dict.fromkeys(
                (shape, tuple(c.items()), tuple(e.items()), w) for shape, c, e, w in configs):
            ir, error = self.build(kernel, launch, dict(constexprs), dict(elements), wide=wide)
            if ir is None and _refusal(error, self.tree):
                # a safety rule the frontend enforces, or Python no kernel can have: whatever
                # the types check assumed, a launch would be refused the same way
                refusals.append(error)
            elif ir is None:  # the types check inferred may be what fails: integers instead
                ir, retried = self.build(kernel, launch, dict(constexprs), dict(elements), True,
                                         wide)
                if ir is None:
                    failures.append((error, retried))
            if ir is not None:
                built.append(ir)
        for err in refusals:
            self.report.findings.append(Finding(err.code, err.loc or Loc(
                self.file, node.lineno, node.col_offset), err.message, err.hint))
        codes = sorted({e.code for e in refusals if e.code})
        for ir in built:
            for region in ir.unsafe_regions:
                self.report.notes.append(Note(region, f"unsafe region at {region.file}:"
                                                      f"{region.line} (kernel {ir.name})"))
            for fact in ir.assumptions:
                self.report.notes.append(Note(fact.loc, f"{ASSUMED}: {fact.text} at {fact.loc.file}:"
                                                        f"{fact.loc.line} (kernel {ir.name}), "
                                                        "checked at every launch"))
            narrow = [p.name for p in ir.params if p.narrow]
            if narrow:
                self.report.notes.append(Note(ir.loc, (
                    f"{NARROW}: {', '.join(narrow)} checked for values in int32's range "
                    f"(kernel {ir.name}); a launch with a larger value specializes apart "
                    "and is checked then")))
            codes += self.race_findings(ir)
        if codes:
            return REFUSED, ", ".join(sorted(set(codes)))
        if refusals:
            return NOT_COMPILABLE, _error_text(refusals[0])
        if failures:  # a specialization that did not build is not proven, unless no types
            # would build it: the same error with the types inferred and with integers
            first = failures[0][0]
            same = all(a.message == b.message and a.loc == b.loc
                       and not isinstance(a, UndefinedName) for a, b in failures)
            why = "" if same else "; the file binds it in code check does not run" \
                if isinstance(first, UndefinedName) else \
                " (with the types check inferred; the launches' types may differ)"
            return (NOT_COMPILABLE if same else NOT_PROVEN), _error_text(first) + why
        unproven = [n for ir in built for n in self.unproven_reads.get(id(ir), ())]
        if unproven:
            return NOT_PROVEN, (f"{len(unproven)} shared read{'s' * (len(unproven) != 1)} not proven "
                                "written (checked only on the cpu backend)")
        return PROVEN, self.proven_detail(built)

    def unevaluated(self, node) -> tuple:
        """The verdict of a kernel whose definition check could not evaluate."""
        if node not in self.failed:  # not run: check runs only inert definitions
            return NOT_PROVEN, ("its definition could not be evaluated (a decorator argument "
                                "that check does not run)")
        imports = [n for n in self.failed if isinstance(n, (ast.Import, ast.ImportFrom))
                   and n.lineno < node.lineno]
        if imports:  # the likely cause of its failure (a decorator's name it did not bind)
            first = imports[0]
            return NOT_COMPILABLE, (f"an import fails at {self.file}:{first.lineno}: "
                                    f"{_exception_text(self.failed[first])}")
        return NOT_COMPILABLE, f"its definition fails: {_exception_text(self.failed[node])}"

    @staticmethod
    def proven_detail(built: list) -> str:
        """What a proven kernel's verdict line adds: the regions `vg.unsafe()` exempts."""
        unsafe = sum(len(ir.unsafe_regions) for ir in built)
        return f"{unsafe} unsafe region{'s' * (unsafe != 1)} exempt" if unsafe else ""

    def race_findings(self, ir) -> list:
        """The codes of the races in `ir` (each a finding); notes for a race-free kernel's
        accesses that keep a run-time check."""
        analysis = analyze(ir)
        errors = analysis.errors
        for err in errors:
            self.report.findings.append(Finding(err.code, err.loc, err.message, err.hint))
        if errors and ir.track == "simt" and ir.block is None:  # a kernel for one block size fails others
            self.report.notes.append(Note(ir.loc, f"kernel {ir.name!r} at {ir.loc.file}:{ir.loc.line} "
                                                  f"was checked for any block: {ANY_BLOCK}"))
        if not errors and ir.track == "simt":
            self.runtime_check_notes(ir)
        reads = analysis.facts.get("unproven_shared_reads", ())
        if ir.block is not None:  # (without a block, every launch proves them for its own)
            self.unproven_reads[id(ir)] = reads
        if not errors:
            for array, line, col in reads:
                loc = Loc(ir.loc.file, line, col)
                why = "checked only on the cpu backend" if ir.block is not None else \
                    "no literal block here: each launch proves it for its block, or lists it"
                self.report.notes.append(Note(loc, (
                    f"{UNPROVEN_READ}: {array}[...] at {loc} (kernel {ir.name}); {why}")))
        return [err.code for err in errors]

    def runtime_check_notes(self, ir) -> None:
        """A note per access that no proof covers: it keeps its bounds check at run time."""
        proven = bounds.prove(ir).in_bounds
        for node in checks.sites(ir):
            if id(node) not in proven:
                loaded = any(isinstance(n, N.Load) for n in walk(list(node.indices)))
                why = "its index is read from memory" if loaded else \
                    "its index is not proven within the array's shape"
                self.report.notes.append(Note(node.loc, (
                    f"{RUNTIME_CHECK}: {node.array.name}[...] at {node.loc} (kernel {ir.name}); {why}")))

    def build(self, kernel, launch: tuple, constexprs: dict, elements: dict,
              integers: bool = False, wide: frozenset = frozenset()):
        """(the IR, None), or (None, the Error that stopped the frontend); `launch`: the
        (block, grid) it is specialized on, each None where unknown; `integers`: every
        scalar and array element whose type the source does not state is int64; `wide`:
        the 64-bit integer scalars built for any value (the others: the narrow variant)."""
        key = (id(kernel), launch, tuple(sorted(constexprs.items())),
               tuple(sorted((k, v.name) for k, v in elements.items())), integers, wide)
        if key not in self.builds:
            try:
                usage = param_usage(kernel.fn)
                if integers:
                    usage = {name: replace(u, int_elements=True, int_scalar=True)
                             for name, u in usage.items()}
                specs = {p.name: constexprs[p.name] if p.constexpr
                         else _narrowed(usage[p.name].spec(elements.get(p.name)), p.name in wide)
                         for p in kernel.params}
                self.builds[key] = (kernel.specialize_types(specs, *launch), None)
            except Error as err:
                self.builds[key] = (None, err)
        return self.builds[key]

    # ------------------------------------------------------------------ launches

    def check_launch(self, site: LaunchSite) -> None:
        configs = site.configs() + default_configs(site.kernel, site.element_types(), site.tuned)
        ir = next((ir for launch, c, e, w in configs
                   for ir in [self.build(site.kernel, launch, c, e, wide=w)[0]] if ir is not None),
                  None)
        if ir is None:
            return  # the kernel's own check says why it could not be built
        self.report.launches += 1
        arguments = site.arguments()
        views = {name: as_view(arg) for name, arg in arguments.items()}
        constexpr = {p.name for p in site.kernel.params if p.constexpr}
        reported = set()
        for written, w in views.items():
            if written not in ir.writes or w is None:
                continue
            for other, view in views.items():
                if view is None or other == written or other in constexpr \
                        or frozenset((written, other)) in reported:
                    continue
                how = overlap(w, view)
                if how is not None:
                    reported.add(frozenset((written, other)))
                    self.alias_finding(site, ir, written, other, how, w, view)

    def alias_finding(self, site, ir, written: str, other: str, how: str, w: View, v: View):
        name = site.kernel.__name__
        store = next((n.loc for n in walk(ir.body) if isinstance(n, N.Store)
                      and n.array.name == written), ir.loc)
        views = "" if w.text == v.text else f" ({w.text} and {v.text} are views of {w.base!r})"
        self.report.findings.append(Finding(
            "VG201", site.loc(site.arguments()[other]),
            f"{name} writes {written!r}, which {how} {other!r}{views}: the result would "
            f"depend on the order threads run in (written at {store})",
            f"pass a separate output array for {written!r} (e.g. vg.empty_like), or, to update it in place, a kernel that takes it once"))


def _refusal(err: Error, tree) -> bool:
    """A build error no types would avoid: a safety code the frontend enforces, or Python
    no kernel can have (a name is undefined for sure only where the file binds it nowhere:
    check runs part of the file)."""
    return bool(err.code) or isinstance(err, UnsupportedConstruct) and not (
        isinstance(err, UndefinedName) and err.name in store_counts(tree.body))


def _error_text(err: Error) -> str:
    return f"{err.message} ({err.loc})" if err.loc else err.message


def _exception_text(exc: BaseException) -> str:
    return _error_text(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"


def _checker_failed(exc: Exception) -> str:
    return f"the checker failed ({type(exc).__name__}: {exc}); please report it"


def _narrowed(spec, wide: bool):
    """A scalar's spec as check builds it: an int64 or uint64 in its narrow specialization
    (values in int32's range) unless `wide`, any other spec as it is."""
    from ..frontend.typing import Narrow

    if isinstance(spec, T.DType) and spec.name in N.NARROW_DTYPES and not wide:
        return Narrow(spec)
    return spec
