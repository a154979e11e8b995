"""The compiler's warm-up (`runtime.warmup`), on the fake CUDA driver in fresh processes: it
starts once a kernel is defined and a device is ready, loads what the first compile of
those kernels imports (so the launch imports nothing more of the compiler), is skipped for
kernels compiled on this machine before, on the cpu backend and with VERDIGRIS_WARMUP=0,
and leaves a fork safe."""
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests import fakecuda

pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

LAUNCH = """
import json, sys
from verdigris.runtime import warmup
x = vg.asarray(np.ones((64, 256), np.float32))
out = vg.asarray(np.zeros((64, 256), np.float32))
v = vg.asarray(np.ones(1024, np.float32))
w = vg.asarray(np.zeros(1024, np.float32))
warmup.join()
warm = {"llvm": "llvmlite.binding" in sys.modules, "libdevice": "verdigris.codegen.libdevice" in sys.modules}
before = set(sys.modules)
axpy[4, 256](2.0, v, v, w)
add[4](v, v, w, BLOCK=256)
softmax[64](x, out, COLS=256)
vg.synchronize()
warm["launch imported"] = sorted(m for m in set(sys.modules) - before
                                 if m.startswith(("verdigris.", "llvmlite")))
print(json.dumps(warm))
"""
KERNELS = Path(__file__).parent / "sources" / "fresh_kernels.py"


def _run(folder, code: str, before: str = "", **env) -> dict:
    """Run `code` after `before` and `from kernels import *`, with the kernels of
    tests/sources/fresh_kernels.py copied into `folder`: its last line, as JSON, with
    "log": the lines `VERDIGRIS_LOG=compile` printed."""
    shutil.copy(KERNELS, folder / "kernels.py")
    preamble = (f"import sys\nsys.path.insert(0, {str(folder)!r})\n{before}"
                "import numpy as np\nimport verdigris as vg\nfrom kernels import *\n")
    done = fakecuda.run(preamble + textwrap.dedent(code), VERDIGRIS_LOG="compile", **env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    return dict(json.loads(lines[-1]), log=[line for line in lines if line.startswith("verdigris:")])


def test_a_warm_compiler_leaves_the_first_launches_nothing_to_import(tmp_path):
    got = _run(tmp_path, LAUNCH)
    log = got.pop("log")
    assert got == {"llvm": True, "libdevice": True, "launch imported": []}
    # the first compile's log line says what the warm-up did
    assert "; the compiler warmed up for axpy, add, softmax in " in log[0]
    assert not any("warmed up" in line for line in log[1:])


def test_kernels_compiled_here_before_skip_the_warm_up(tmp_path):
    cache = str(tmp_path / "cache")
    first = _run(tmp_path, LAUNCH, VERDIGRIS_CACHE_DIR=cache)
    assert first["llvm"]
    again = _run(tmp_path, LAUNCH, VERDIGRIS_CACHE_DIR=cache)
    # from the disk cache: the compiler is neither warmed nor needed
    assert not again["llvm"] and not again["libdevice"]
    assert not [m for m in again["launch imported"] if m.startswith(("llvmlite", "verdigris.codegen"))]


def test_no_warm_up_before_a_device_is_ready_or_on_the_cpu_backend(tmp_path):
    check = """
import json, sys
from verdigris.runtime import warmup
warmup.join()
print(json.dumps({"llvm": "llvmlite.binding" in sys.modules}))
"""
    # as on a machine without NVIDIA's driver: kernels defined, no device made ready
    no_driver = ("from verdigris.runtime import warmup\n"
                 "warmup._driver_installed = lambda: False\n")
    assert _run(tmp_path, check, before=no_driver) == {"llvm": False, "log": []}
    cpu_arrays = "x = vg.asarray(np.ones(64, np.float32))\n"
    assert _run(tmp_path, cpu_arrays + check, VERDIGRIS_BACKEND="cpu") == {"llvm": False, "log": []}
    # the switch that measures a first call without it: a device is ready, no warm-up
    gpu_arrays = "x = vg.asarray(np.ones(64, np.float32))\n"
    assert _run(tmp_path, gpu_arrays + check, VERDIGRIS_WARMUP="0") == {"llvm": False, "log": []}
    assert _run(tmp_path, gpu_arrays + check)["llvm"]  # its twin, the switch left on


def test_a_defined_kernel_on_a_machine_with_the_driver_imports_the_runtime_not_calling_it(tmp_path):
    """Arrays made by torch, say: the launch path and cuda-bindings are loaded before the
    first launch, and the driver is not initialized (a fork is still safe for CUDA)."""
    code = """
import json, sys
from verdigris.runtime import driver
warmup.join()
print(json.dumps({"cuda-bindings": "cuda.bindings.driver" in sys.modules,
                  "launch path": "verdigris.runtime.launch_cuda" in sys.modules,
                  "compiler": "llvmlite.binding" in sys.modules, "driver called": driver._api is not None,
                  "report": warmup.take_report()}))
"""
    driver_installed = ("from verdigris.runtime import warmup\n"
                        "warmup._driver_installed = lambda: True\n")
    got = _run(tmp_path, code, before=driver_installed)
    assert got.pop("report").startswith("the compiler warmed up for axpy, add, softmax in ")
    assert got == {"cuda-bindings": True, "launch path": True, "compiler": True,
                   "driver called": False, "log": []}


def test_a_fork_waits_for_the_warm_up_and_the_child_can_compile(tmp_path):
    code = """
import json, os, sys
x = vg.asarray(np.ones(64, np.float32))  # device ready: the warm-up starts
pid = os.fork()
if pid == 0:
    import llvmlite.binding  # would hang on a lock a half-done import left held
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(json.dumps({"child exit": os.waitstatus_to_exitcode(status)}))
"""
    assert _run(tmp_path, code)["child exit"] == 0
