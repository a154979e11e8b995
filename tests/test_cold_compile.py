"""The cold first launch loads only what its kernel needs (the fake CUDA driver, a fresh
process): a SIMT kernel the fast path proves imports neither z3 nor the checker's solver,
divergence, shared-memory or tile modules, and LLVM's setup (`nvptx.prefetch`) runs on
its own thread beside the safety check, giving the same target as a direct set-up."""
import json
import subprocess
import sys
import textwrap

import pytest

from tests import fakecuda

needs_fake_driver = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

UNNEEDED = ("z3", "verdigris.safety.solver", "verdigris.safety.diverge",
            "verdigris.safety.shared", "verdigris.safety.tilerace", "verdigris.cpu.ops")


@needs_fake_driver
def test_cold_simt_launch_imports_only_what_it_needs():
    code = textwrap.dedent(f"""
        import json, sys, threading
        import numpy as np
        import verdigris as vg
        from verdigris.runtime import warmup
        from tests.fakecuda import last_launch
        warmup.kernel_defined = lambda kernel: None  # it loads what every defined kernel's track needs
        from tests.fakecuda.kernels import axpy

        x, y, out = (vg.asarray(np.ones(1000, np.float32)) for _ in range(3))
        axpy[4, 256](2.0, x, y, out)
        print(json.dumps({{"loaded": [m for m in {UNNEEDED!r} if m in sys.modules],
                          "llvm": "llvmlite.binding" in sys.modules,
                          "launched": last_launch().function is not None}}))
    """)
    done = fakecuda.run(code)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"loaded": [], "llvm": True, "launched": True}


def test_barrier_and_tile_kernels_load_their_checkers():
    code = textwrap.dedent("""
        import json, sys
        from verdigris import safety
        from verdigris.runtime.signatures import parse_signature
        from verdigris.examples import reduce_sum, tile_softmax
        from verdigris.ir import ArrayType
        from verdigris.types import float32

        def loaded():
            return [m.rpartition(".")[2] for m in ("verdigris.safety.diverge",
                    "verdigris.safety.shared", "verdigris.safety.tilerace") if m in sys.modules]

        k = reduce_sum.block_sum
        safety.check(k.specialize_types(parse_signature(k, "f32[::1], f32[::1], 256, 8")))
        out = {"barriers": loaded()}
        rows = ArrayType(float32, 2, "global", True, True)
        safety.check(tile_softmax.softmax.specialize_types(dict(x=rows, out=rows, COLS=4096)))
        out["tile"] = loaded()
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=fakecuda.ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"barriers": ["diverge", "shared"], "tile": ["diverge", "shared", "tilerace"]}


def test_prefetched_llvm_setup_is_the_one_target():
    from verdigris.codegen import nvptx

    nvptx.prefetch()
    target = nvptx.initialize()  # waits for the thread, if it still holds the set-up
    nvptx.prefetch()  # set up already: no thread
    assert nvptx.initialize() is target and target.triple == nvptx.TRIPLE


@needs_fake_driver
def test_a_tile_kernel_compiles_while_it_is_checked_and_a_refused_one_never_runs():
    """A cold tile kernel's safety check runs beside its compile (the log says so) and the
    launch waits for the verdict: a racy kernel raises its SafetyError at every call and
    reaches the driver never; a SIMT kernel whose accesses the proofs may exempt from checks
    is checked before it compiles."""
    code = textwrap.dedent("""
        import json
        import numpy as np
        import verdigris as vg
        from verdigris.errors import SafetyError
        from tests.fakecuda import last_launch
        from tests.fakecuda.kernels import add, axpy, store_tile_zero

        x, out = (vg.asarray(np.ones(1024, np.float32)) for _ in range(2))
        add[4](x, x, out, BLOCK=256)
        launched = last_launch().count
        codes = []
        for _ in range(2):
            try:
                store_tile_zero[4](x, out, B=256)
            except SafetyError as error:
                codes.append(error.code)
        racy_launches = last_launch().count - launched
        axpy[4, 256](2.0, x, x, out)
        print(json.dumps({"codes": codes, "racy launches": racy_launches}))
    """)
    done = fakecuda.run(code, VERDIGRIS_LOG="compile")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"codes": ["VG202", "VG202"], "racy launches": 0}
    logs = {line.split()[2]: line for line in lines if line.startswith("verdigris: compiled")}
    assert "beside the compile" in logs["add"] and "safety wait" in logs["add"]
    assert "beside" not in logs["axpy"] and "safety" in logs["axpy"]
