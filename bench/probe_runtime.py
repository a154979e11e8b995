"""Where first-call time goes, on the lent GPU: imports, the compiler's stages, and the three
PTX -> cubin routes (ptxas, nvJitLink, the driver's JIT) side by side.

Prints, for vector add, softmax (tile) and GEMM (tile, when the matmul lowering exists):
the stages of `codegen.compile_to_ptx` at O3 and at lower LLVM optimization levels (with
the PTX size, a proxy for what O3 buys), then the time of each PTX -> cubin route (first use
in the process and again); the import time of each heavy module in a fresh process; and
the versions that decide which fast paths exist (cuda-bindings and its `_v2` driver API).
Run: `PYTHONPATH=src python3 bench/probe_runtime.py [--json FILE]`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), os.path.join(ROOT, "bench")]

LEVELS = (2, 1)  # LLVM optimization levels timed beside O3
IMPORTS = ("numpy", "verdigris", "cuda.bindings.driver", "llvmlite.binding",
           "verdigris.frontend", "verdigris.safety", "verdigris.codegen.lower",
           "verdigris.tile.lower", "torch")


def import_times() -> dict:
    script = ("import time, importlib; out = {}\n"
              f"for name in {IMPORTS!r}:\n"
              "    t = time.perf_counter()\n"
              "    try:\n        importlib.import_module(name)\n"
              "    except Exception as e:\n        out[name] = repr(e); continue\n"
              "    out[name] = round((time.perf_counter() - t) * 1e3, 2)\n"
              "print(out)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src")))
    return eval(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-300:]}


def kernels():
    """(name, kernel, specialized IR) for each kernel of bench/runtime.py that builds here."""
    import tempfile

    import runtime as bench

    work = tempfile.mkdtemp()
    ours = bench._module(work, "vg_runtime_kernels", bench.OURS)
    todo = [("vector_add", ours.vector_add, ((256, 1, 1), (1, 2), ("a", "float32", 1, True, True),
                                             ("a", "float32", 1, True, True),
                                             ("a", "float32", 1, True, True))),
            ("softmax", ours.softmax, (None, (1, 2), ("a", "float32", 2, True, True),
                                       ("a", "float32", 2, True, True), ("c", 4096))),
            ("gemm", ours.gemm, (None, (2,), *[("a", "bfloat16", 2, True, True)] * 3,
                                 ("c", 128), ("c", 128), ("c", 64)))]
    out = []
    for name, kernel, key in todo:
        try:
            spec = kernel.specialization(key)
            spec.kernel.facts["noalias"] = True
            out.append((name, spec.kernel))
        except Exception as exc:  # the tile matmul may not exist yet
            print(f"{name}: not built ({type(exc).__name__}: {exc})"[:200])
    return out


def stages(ir) -> dict:
    """compile_to_ptx's stages at O3, then optimize + emit at each of LEVELS (ms, PTX bytes)."""
    import llvmlite.binding as llvm

    from verdigris import codegen
    from verdigris.codegen import libdevice, nvptx
    from verdigris.runtime.launch_cuda import ptx_target

    target = ptx_target((9, 0))
    compiled = codegen.compile_to_ptx(ir, target)
    out = {"O3": {k: round(v * 1e3, 2) for k, v in compiled.timings.items()},
           "O3 ptx bytes": len(compiled.ptx), "ptx": compiled.ptx, "target": target}
    lowered = str(codegen._lower(ir, target))
    for level in LEVELS:
        module = nvptx.parse(lowered)
        libdevice.link(module, target)
        t = time.perf_counter()
        builder = llvm.create_pass_builder(nvptx.target_machine(target),
                                           llvm.create_pipeline_tuning_options(speed_level=level))
        builder.getModulePassManager().run(module, builder)
        t1 = time.perf_counter()
        ptx = nvptx.emit_ptx(module, target)
        t2 = time.perf_counter()
        out[f"O{level}"] = {"optimize": round((t1 - t) * 1e3, 2), "emit": round((t2 - t1) * 1e3, 2),
                            "ptx bytes": len(ptx)}
    return out


def routes(ptx: str, arch: str) -> dict:
    from verdigris.codegen import ptxas
    from verdigris.runtime.module import jit_cubin

    todo = {"ptxas": lambda: ptxas.assemble(ptx, arch) if ptxas.ptxas_available() else None,
            "nvjitlink": lambda: ptxas.link(ptx, arch) if ptxas.nvjitlink_available() else None,
            "driver": lambda: jit_cubin(ptx, 0)}
    out = {}
    for name, run in todo.items():
        times = []
        for _ in range(2):
            t = time.perf_counter()
            try:
                result = run()
            except Exception as exc:
                out[name] = f"{type(exc).__name__}: {exc}"[:160]
                break
            if result is None:
                out[name] = "absent"
                break
            times.append(round((time.perf_counter() - t) * 1e3, 2))
        else:
            out[name] = {"first": times[0], "again": times[1]}
    return out


def versions() -> dict:
    out = {}
    for name in ("cuda.bindings", "cupy", "triton", "torch", "llvmlite", "jax"):
        try:
            module = __import__(name, fromlist=["__version__"])
            out[name] = getattr(module, "__version__", "?")
        except Exception as exc:
            out[name] = f"absent ({type(exc).__name__})"
    import importlib.util

    try:
        out["cuda.bindings._v2"] = importlib.util.find_spec("cuda.bindings._v2.driver") is not None
    except ImportError:
        out["cuda.bindings._v2"] = False
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    from verdigris.runtime import driver

    result = {"versions": versions(), "imports ms": import_times(), "kernels": {}}
    print("versions:", result["versions"])
    print("imports (ms, fresh process, in this order):", result["imports ms"])
    props = driver.properties(0)
    arch = f"sm_{props.cc[0]}{props.cc[1]}"
    for name, ir in kernels():
        s = stages(ir)
        route_arch = s["target"] if s["target"].endswith("a") else arch
        r = routes(s.pop("ptx"), route_arch)
        result["kernels"][name] = {"stages": s, "routes": r}
        print(f"\n{name}: O3 stages (ms) {s['O3']}, PTX {s['O3 ptx bytes']} bytes")
        for level in LEVELS:
            print(f"  O{level}: {s[f'O{level}']}")
        print(f"  PTX -> cubin for {route_arch} (ms): {r}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
