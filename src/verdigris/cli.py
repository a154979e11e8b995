"""The `verdigris` command: demo, compile, check, explain, doctor, bench.

Takes: command-line arguments. Gives: `main(argv) -> exit status`. Guarantees: user
mistakes (a missing file, an unknown kernel, a bad signature, a kernel that does not
compile) print one clear message and exit with status 2 (usage) or 1 (the kernel is
refused), never a traceback from inside the compiler.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import inspect
import os
import platform
import sys
import textwrap
import time
import traceback
from pathlib import Path

from . import types as T
from .errors import Error, SafetyError

EMITS = ("ir", "llvm", "llvm-opt", "ptx", "sass", "bundle")
TARGETS = ("sm_80", "sm_89", "sm_90", "sm_90a")


class UsageError(Exception):
    pass


# ------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
    import numpy as np

    from . import examples
    from .runtime import backend

    rng = np.random.default_rng(args.seed)
    if args.backend:
        backend.set_backend(args.backend)
    print(f"verdigris demo on the {backend.current()} backend\n")
    all_ok = True
    for name in examples.TILE_EXAMPLES + examples.SIMT_EXAMPLES:
        module = importlib.import_module(f"{examples.__name__}.{name}")
        summary = " ".join(module.__doc__.split("\n\n")[0].split()).removeprefix(f"{name}: ")
        print(textwrap.fill(f"{name}: {summary}", 92, subsequent_indent="  "))
        start = time.perf_counter()
        ok = examples.report(module.check(rng))
        print(f"  ({(time.perf_counter() - start) * 1e3:.0f} ms including compilation)\n")
        all_ok &= ok
    all_ok &= _demo_alias()
    all_ok &= _demo_race(rng)
    print("all examples match NumPy" if all_ok else "SOME EXAMPLES DID NOT MATCH")
    return 0 if all_ok else 1


def _demo_alias() -> bool:
    from .examples import axpy

    print("safety: the same array passed as input and output is refused before it runs:")
    print("  " + str(axpy.aliased()).replace("\n", "\n  ") + "\n")
    return True


def _demo_race(rng) -> bool:
    from .examples import racy_shift, report

    print("safety: a racy kernel is refused before it runs (shifting an array in place):")
    print("  " + str(racy_shift.refused()).replace("\n", "\n  "))
    print("  the fix, shifting into a second array, is accepted:")
    ok = report(racy_shift.check(rng))
    print()
    return ok


# ------------------------------------------------------------------------- compile


def load_kernel(spec: str):
    """`path/to/file.py::name` -> the kernel object defined there (the file is imported)."""
    path, sep, name = spec.partition("::")
    if not sep or not name:
        raise UsageError(f"expected FILE::KERNEL, got {spec!r}")
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path} is a directory: give FILE::KERNEL" if file.is_dir()
                         else f"no such file: {path}")
    module_name = f"_verdigris_cli_{file.stem}"
    loader = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    sys.path.insert(0, str(file.parent.resolve()))
    try:  # what the module prints is not compile's output (PTX on stdout)
        with contextlib.redirect_stdout(sys.stderr):
            loader.loader.exec_module(module)
    except Error:
        raise  # verdigris's own errors already name the user's line
    except Exception as err:  # the file's own failure: where in it, not the CLI's traceback
        raise UsageError(f"importing {path} failed: {_where_in(err, file)}{type(err).__name__}: {err}") from None
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if not getattr(kernel, "__vg_kernel__", False):
        kernels = [k for k, v in vars(module).items() if getattr(v, "__vg_kernel__", False)]
        raise UsageError(f"{path} defines no kernel {name!r}"
                         + (f"; its kernels: {', '.join(kernels)}" if kernels else ""))
    return getattr(kernel, "tuned_kernel", kernel)  # `@vg.autotune`: the kernel it times


def _where_in(err: BaseException, file: Path) -> str:
    """'FILE:LINE: ' of the last frame of `err`'s traceback inside `file` (or of the syntax
    error in it), else ''."""
    if isinstance(err, SyntaxError) and err.lineno:
        return f"{err.filename}:{err.lineno}: "
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == file.resolve()]
    return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(ch, 0)
        if depth < 0:
            raise UsageError(f"unbalanced brackets in the signature: a ')' or ']' closes "
                             f"nothing in {current + ch!r}")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if depth:
        raise UsageError(f"unbalanced brackets in the signature: {text!r} leaves {depth} "
                         "'[' or '(' open")
    return parts + [current.strip()] if current.strip() else parts


def _dtype(name: str) -> T.DType:
    try:
        return T.from_any(name.strip())  # "float32", "f32", "bool", "b1"
    except TypeError:
        raise UsageError(f"unknown dtype {name.strip()!r} (use e.g. f32, float32, i64, bf16, "
                         "bool)") from None


def parse_signature(kernel, text: str) -> dict:
    """'f32, f32[:], f32[:, ::1], 128' -> a spec per parameter, in order.

    Arrays are written as NumPy-style slices, one per axis: `[:]` any stride, `[::1]` unit
    stride on the innermost axis (C-contiguous rows). Constexpr parameters take a value;
    trailing ones with defaults may be left out, as in a call.
    A tile kernel's integer or array type may end in `:16`, as Triton's signatures do: the
    integer is a multiple of 16, or the array is on the grid (extents multiples of 16
    below 2**30, row strides multiples of 16), what a launch with such values specializes
    on (`i64:16`, `bf16[:, ::1]:16`). A plain `i64` or `u64` is compiled for any value;
    `i64:narrow` (or `i64:16:narrow`) for values in int32's range only (`Param.narrow`:
    what a launch with such a value specializes on, on both tracks).
    """
    from .frontend.typing import Multiple, Narrow
    from .ir.nodes import ArrayType

    items = _split_top_level(text)
    params = kernel.params
    defaulted = [p for p in params[len(items):] if p.constexpr and p.default is not inspect.Parameter.empty]
    if len(items) + len(defaulted) != len(params):
        raise UsageError(f"{kernel.__name__} has {len(params)} parameters "
                         f"({', '.join(p.name for p in params)}) but the signature gives {len(items)}")
    specs = {p.name: p.default for p in defaulted}  # trailing constexprs left out: their defaults
    for p, item in zip(params, items):
        if p.constexpr:
            try:
                specs[p.name] = ast.literal_eval(item)
            except (ValueError, SyntaxError):
                raise UsageError(f"constexpr {p.name!r} needs a Python literal, not {item!r}") from None
            continue
        item, narrow = _narrow(item)
        item, sixteen = _divisibility(kernel, p.name, item)
        if narrow:
            dtype = _dtype(item) if "[" not in item else None
            if dtype is None or dtype.name not in ("int64", "uint64"):
                raise UsageError(f"{p.name}: ':narrow' is for i64 and u64 scalars, not {item!r}")
            specs[p.name] = Narrow(dtype, 16 if sixteen else 1)
            continue
        if "[" in item:
            name, _, dims = item.partition("[")
            axes = [a.replace(" ", "") for a in dims.rstrip("]").split(",")]
            if any(a not in (":", "::1") for a in axes) or "::1" in axes[:-1]:
                raise UsageError(f"bad array type {item!r}: each axis is ':' and the last may be '::1'")
            specs[p.name] = ArrayType(_dtype(name), len(axes), "global", axes[-1] == "::1", True,
                                      on_grid=sixteen)
        elif sixteen:
            dtype = _dtype(item)
            if not dtype.is_int:
                raise UsageError(f"{p.name}: ':16' is for integers and arrays, not {dtype.name}")
            specs[p.name] = Multiple(dtype, 16)
        else:
            specs[p.name] = _dtype(item)
    return specs


def _narrow(item: str) -> tuple:
    """(the type without a trailing ':narrow', whether it had one)."""
    base, colon, suffix = item.strip().rpartition(":")
    return (base.strip(), True) if colon and suffix.strip() == "narrow" else (item, False)


def _divisibility(kernel, name: str, item: str) -> tuple:
    """(the type without a trailing ':16', whether it had one): after a scalar's name or an
    array's closing bracket."""
    base, colon, suffix = item.strip().rpartition(":")
    base = base.strip()
    if not colon or suffix.strip() != "16" or not (base.endswith("]") or "[" not in base):
        return item, False
    if kernel.track != "tile":
        raise UsageError(f"{name}: ':16' is for tile kernels (a SIMT kernel is not specialized on it)")
    return base, True


def cmd_compile(args) -> int:
    from . import codegen
    from .ir.printer import format_kernel

    kernel = load_kernel(args.kernel)
    if args.sig is None:
        params = ", ".join(p.name + (" (constexpr)" if p.constexpr else "") for p in kernel.params)
        raise UsageError(f"give the argument types with --sig, one per parameter: {params}; "
                         "e.g. --sig 'f32, f32[::1], f32[::1], f32[::1]'")
    block, grid = launch_shape(kernel, args.block, "block"), launch_shape(kernel, args.grid, "grid")
    if args.emit == "bundle":
        return _compile_bundle(kernel, args, block, grid)
    target = (args.target or ["sm_90"])[-1]
    if target == "ptx":
        raise UsageError("--target ptx is for bundles (--emit bundle)")
    start = time.perf_counter()
    ir = kernel.specialize_types(parse_signature(kernel, args.sig), block, grid)
    timings = {"frontend": time.perf_counter() - start}
    if args.emit != "ir":
        ir = _as_launched(ir, timings, args.checked)
    if args.emit == "ir":
        output = format_kernel(ir)
    elif args.emit == "llvm":
        output = codegen.lower_to_llvm(ir, target)
    else:
        compiled = codegen.compile_to_ptx(ir, target)
        timings.update(compiled.timings)
        output = compiled.llvm_ir if args.emit == "llvm-opt" else compiled.ptx
        if args.emit == "sass":
            start = time.perf_counter()
            output = codegen.disassemble(codegen.assemble(compiled.ptx, target))
            timings["ptxas+disassemble"] = time.perf_counter() - start
    if args.out:
        write_output(args.out, lambda path: Path(path).write_text(output))
    else:
        sys.stdout.write(output)
    if args.time:
        for stage, seconds in timings.items():
            print(f"{stage:>20}: {seconds * 1e3:8.2f} ms", file=sys.stderr)
    return 0


def _as_launched(ir, timings: dict, checked: bool):
    """`ir` as a launch compiles it (`checks.as_launched`), after the safety checks a launch
    runs first, so a racy kernel is refused here too. The shape conditions the bounds proofs
    need are printed on stderr, unless `checked` (the variant for launches that break them)."""
    from . import safety
    from .codegen import checks

    start = time.perf_counter()
    try:
        safety.check(ir)
    except SafetyError as err:
        if err.code != "VG202" or ir.unit_grid_axes is not None:
            raise
        raise SafetyError(err.message, err.loc, f"{err.hint}; or, if it is launched with one "
                          "block, compile it for that grid: --grid 1", err.code) from None
    timings["safety"] = time.perf_counter() - start
    conditions = [text for _, text in ir.facts.get("bounds_preconditions", ())]
    if conditions and not checked:
        print(f"bounds proofs apply for launches where {' and '.join(conditions)}: checks dropped "
              "or tested in 32 bits (the launch checks this; --checked shows the code it runs "
              "otherwise)", file=sys.stderr)
    return checks.as_launched(ir, checked)


def launch_shape(kernel, text: str | None, what: str) -> tuple | None:
    """`--block 256,2` / `--grid 1`: the shape a launch would take, checked as a launch
    checks it (UsageError, not the launch's error located in this file)."""
    if not text:
        return None
    from .runtime.dispatch import _dims

    try:
        dims = _dims(tuple(int(d) for d in text.split(",")), what, kernel.__name__)
    except ValueError:
        raise UsageError(f"--{what} takes 1 to 3 comma-separated ints, e.g. 256 or 16,16; "
                         f"got {text!r}") from None
    except Error as err:
        raise UsageError(f"--{what} {text}: {err.message}" + (f" ({err.hint})" if err.hint else "")) from None
    return dims


def write_output(path: str, write) -> None:
    """`write(path)`, with a missing folder or a path that is not a file as a UsageError."""
    try:
        write(path)
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as err:
        raise UsageError(f"cannot write --out {path}: {err.strerror}") from None


def _compile_bundle(kernel, args, block, grid) -> int:
    """`--emit bundle`: the kernel compiled for --sig (several signatures: separate them
    with ';') and each --target, written to --out for `vg.load_bundle`."""
    if not args.out:
        raise UsageError("--emit bundle writes a file: give it with --out, e.g. --out k.vgb")
    if kernel.track == "simt" and block is None:
        raise UsageError("a SIMT kernel is compiled for its block: give --block, e.g. 256")
    signatures = [sig for sig in args.sig.split(";") if sig.strip()]
    for sig in signatures:
        parse_signature(kernel, sig)  # a usage error before anything compiles
    start = time.perf_counter()
    bundle = kernel.compile_aot(signatures, block=block, grid=grid,
                                targets=tuple(args.target or ["sm_90"]))
    write_output(args.out, bundle.save)
    if args.time:
        print(f"{'bundle':>20}: {(time.perf_counter() - start) * 1e3:8.2f} ms "
              f"({len(signatures)} signature(s) x {len(args.target or ['sm_90'])} target(s))",
              file=sys.stderr)
    print(f"wrote {args.out}: {kernel.__name__}, {len(bundle.manifest['specializations'])} "
          f"specialization(s), {len(bundle.images)} image(s)")
    return 0


# ------------------------------------------------------------------------- check, explain


def cmd_check(args) -> int:
    from .safety.scan import check_paths

    try:
        report = check_paths(args.paths, allow_unproven=args.allow_unproven, timed=args.time)
    except FileNotFoundError as err:
        raise UsageError(f"no such file or directory: {err.args[0]}") from None
    except ValueError as err:
        raise UsageError(str(err)) from None
    sys.stdout.write(report.format())
    return report.status


def cmd_explain(args) -> int:
    from .safety.codes import CODES
    from .safety.explain import explain

    code = args.code.upper()
    if code not in CODES:
        listing = "\n".join(f"  {c.code}  {c.title}" for c in CODES.values())
        raise UsageError(f"unknown code {args.code!r}; the codes are:\n{listing}")
    print(explain(code))
    return 0


# ------------------------------------------------------------------------- doctor


def cmd_doctor(args) -> int:
    import numpy

    rows = [("python", platform.python_version()), ("verdigris", _version()),
            ("numpy", numpy.__version__)]
    try:
        import llvmlite
        import llvmlite.binding as llvm

        rows.append(("llvmlite", f"{llvmlite.__version__} (LLVM "
                                 f"{'.'.join(map(str, llvm.llvm_version_info))})"))
    except ImportError as exc:
        rows.append(("llvmlite", f"MISSING: {exc}"))
    try:
        import cuda.bindings

        rows.append(("cuda-bindings", cuda.bindings.__version__))
    except ImportError as exc:
        rows.append(("cuda-bindings", f"MISSING: {exc}"))
    rows.extend(_gpu_rows())
    from . import codegen

    rows.append(("ptxas", codegen.ptxas_path() or "not found (PTX is JIT-compiled by the driver)"))
    disassembler = codegen.toolkit.find_tool("nvdisasm") or codegen.toolkit.find_tool("cuobjdump")
    rows.append(("disassembler", disassembler or "not found (--emit sass unavailable)"))
    rows.append(("libdevice", str(codegen.libdevice_path() or "NOT FOUND (math functions fail)")))
    from .runtime import cache

    rows.append(("cache", str(cache.cache_dir())))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:>{width}}: {value}")
    return 1 if dict(rows)["backend"].startswith("NONE:") else 0  # kernels could not run


def _gpu_rows() -> list:
    from .runtime import driver

    if not driver.is_available():
        try:
            driver.device_count()
            reason = "the driver reports no GPU"
        except Error as err:
            reason = err.message
        return [("gpu", f"none ({reason})"), ("backend", _backend_in_use())]
    rows = []
    for ordinal in range(driver.device_count()):
        props = driver.properties(ordinal)
        rows.append((f"gpu {ordinal}", f"{props.name}, {props.arch}, "
                                       f"{props.multiprocessors} SMs"))
    rows.append(("driver", ".".join(map(str, driver.driver_version()))))
    rows.append(("backend", _backend_in_use()))
    return rows


def _backend_in_use() -> str:
    """The backend kernels would run on, or why they could not run (`VERDIGRIS_BACKEND`
    asking for one that is unknown or has no GPU)."""
    from .runtime import backend

    try:
        return backend.current()
    except Error as err:
        return f"NONE: {err.message}"


def _version() -> str:
    from . import __version__

    return __version__


# ------------------------------------------------------------------------- cache


def cmd_cache(args) -> int:
    from .runtime import cache

    if args.clear:
        count, size = cache.clear()
        print(f"removed {count} entries ({size / 2**20:.1f} MiB) from {cache.cache_dir()}")
    else:
        count, size = cache.usage()
        print(f"{cache.cache_dir()}: {count} entries, {size / 2**20:.1f} MiB "
              "(compiled kernels, launch records, launchers; `verdigris cache --clear` "
              "empties it)")
    return 0


# ------------------------------------------------------------------------- bench


def cmd_bench(args) -> int:
    from .benchsuite.command import BenchUsageError, run_bench

    try:
        return run_bench(args)
    except BenchUsageError as err:
        raise UsageError(str(err)) from None


# ------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verdigris", description=(
        "Safe GPU kernels written in Python, compiled straight to PTX."))
    parser.add_argument("--version", action="version", version=f"verdigris {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile and run the example kernels, check them "
                                       "against NumPy, and show two refused launches (an "
                                       "aliased output, a racy kernel)")
    demo.add_argument("--backend", choices=("cuda", "cpu"))
    demo.add_argument("--seed", type=int, default=None)
    demo.set_defaults(run=cmd_demo)
    comp = sub.add_parser("compile", help="show a kernel at one stage of the pipeline")
    comp.add_argument("kernel", help="FILE::KERNEL, e.g. examples/axpy.py::axpy")
    comp.add_argument("--sig", help="argument types, one per parameter, e.g. "
                                    "'f32, f32[::1], f32[::1], f32[::1]'")
    comp.add_argument("--emit", choices=EMITS, default="ptx")
    comp.add_argument("--block", help="specialize for this block shape, e.g. 256 or 16,16 "
                                      "(as a launch does)")
    comp.add_argument("--target", choices=TARGETS + ("ptx",), action="append",
                      help="the GPU architecture (default sm_90); for --emit bundle, give it "
                           "once per target ('ptx': PTX the driver compiles at load)")
    comp.add_argument("--grid", help="specialize for launches with this grid, as a launch "
                                     "does (which axes have one block: a kernel storing one "
                                     "fixed tile is race-free only with one), e.g. 1 or 64,64")
    comp.add_argument("--out", help="write to this file instead of stdout (a bundle: "
                                    "vg.load_bundle loads it)")
    comp.add_argument("--time", action="store_true", help="print stage timings on stderr")
    comp.add_argument("--checked", action="store_true",
                      help="keep every bounds check: the code a launch runs when the shape "
                           "conditions of the proofs do not hold (by default the proofs apply, "
                           "as at a launch that meets them)")
    comp.set_defaults(run=cmd_compile)
    check = sub.add_parser("check", help="find kernels and launch sites in source files, "
                                         "without running them, and give each kernel a "
                                         "verdict: proven, refused, not compilable or not "
                                         "proven (exit status 1 unless every one is proven)")
    check.add_argument("paths", nargs="+", metavar="PATH", help=".py files or directories")
    check.add_argument("--allow-unproven", action="store_true",
                       help="exit 0 when kernels are only not proven (none refused or not "
                            "compilable): their launches are still checked when they run")
    check.add_argument("--time", action="store_true",
                       help="print the time each kernel's check took")
    check.set_defaults(run=cmd_check)
    explain = sub.add_parser("explain", help="the long form of a safety code, with a racy "
                                             "example and its fix")
    explain.add_argument("code", help="e.g. VG201")
    explain.set_defaults(run=cmd_explain)
    doctor = sub.add_parser("doctor", help="GPU, driver, toolchain and versions")
    doctor.set_defaults(run=cmd_doctor)
    cache = sub.add_parser("cache", help="where the disk cache is and what it holds; "
                                         "--clear empties it")
    cache.add_argument("--clear", action="store_true",
                       help="remove every compiled kernel and record (the next launches "
                            "compile again)")
    cache.set_defaults(run=cmd_cache)
    bench = sub.add_parser(
        "bench", help="benchmark the suite of bench/ on this GPU beside the installed peers "
                      "(torch, Triton, CuPy, cuTile): a table, JSON and PNG plots",
        description="Runs every case registered by the scripts of bench/ on the current GPU, "
                    "each beside the installed peers, prints a table (achieved TB/s, TFLOP/s, "
                    "us or ms; ratios to the best peer and to the measured roofline) and "
                    "writes results.json, index.md and PNG plots. Exit status: 0 measured, "
                    "2 usage error, 3 no GPU here (nothing was run), 130 interrupted.")
    bench.add_argument("--filter", metavar="REGEX",
                       help="only the cases whose name matches (case-insensitive), or whose "
                            "kind or plot is exactly it, e.g. 'softmax|norm' or 'memory'")
    bench.add_argument("--quick", action="store_true",
                       help="one size per case and shorter timing (a few minutes)")
    bench.add_argument("--out", metavar="DIR", help="where to write the results (default: "
                                                    "docs/bench/DATE-CARD/ of the checkout)")
    bench.add_argument("--list", action="store_true",
                       help="list the cases and sizes and the installed peers; run nothing")
    bench.add_argument("--bench-dir", metavar="DIR",
                       help="the directory of bench scripts (default: ./bench)")
    bench.add_argument("--plain-progress", action="store_true",
                       help="a plain progress line instead of tqdm's bar")
    bench.set_defaults(run=cmd_bench)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # `verdigris explain VG201 | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")
        return 0
    except UsageError as err:
        print(f"verdigris {args.command}: {err}", file=sys.stderr)
        return 2
    except Error as err:
        print(err, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
