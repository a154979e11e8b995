"""A bundle compiled ahead of time runs on the GPU in a process that cannot import llvmlite:
right results for a SIMT and a tile kernel, the checked variant when the proofs' launch
condition fails, and a bounds fault reported with its line."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.fakecuda.kernels import add, axpy

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Launches `k` (axpy) and `a` (add, BLOCK=1024), made before it, on fresh random inputs:
# their errors against float64, the fault of a read past x's end (x shorter than out: the
# checked variant), and which compiler modules the process loaded.
CHECKS = """
import json, sys
import numpy as np
import verdigris as vg
rng = np.random.default_rng()
n = 100_003
xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
x, y = vg.asarray(xh), vg.asarray(yh)
out = vg.asarray(np.full(n, np.nan, np.float32))
k[vg.cdiv(n, 256), 256](2.0, x, y, out)
want = 2.0 * xh.astype(np.float64) + yh
result = dict(axpy=float(np.abs(out.numpy() - want).max() / np.abs(want).max()))
out2 = vg.asarray(np.full(n, np.nan, np.float32))
a[vg.cdiv(n, 1024)](x, y, out2, BLOCK=1024)
want2 = xh.astype(np.float64) + yh
result["add"] = float(np.abs(out2.numpy() - want2).max() / np.abs(want2).max())
try:
    k[vg.cdiv(n, 256), 256](2.0, x[:1000], y, out)
    vg.synchronize()
except vg.BoundsError as err:
    result["fault"] = str(err)
result["compiler"] = sorted(m for m in sys.modules if m.startswith(("llvmlite.",
                            "verdigris.codegen.lower", "verdigris.safety")))
print(json.dumps(result))
"""


def fresh_process(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`code` run in a fresh process with this checkout's `src` first on its path."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "src"),
                                                      env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def run_checks(prelude: str, env: dict | None = None) -> dict:
    """CHECKS after `prelude` (which makes `k` and `a`) in a fresh process: its result."""
    done = fresh_process(textwrap.dedent(prelude) + CHECKS, env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout


def assert_right(got: dict, line: str) -> None:
    """Both kernels' results right, and the fault reported at the axpy's `line`."""
    assert got["axpy"] < 1e-6 and got["add"] < 1e-6
    assert "out of bounds: x[" in got["fault"] and "with shape (1000,)" in got["fault"]
    assert line in got["fault"]


def test_a_bundle_runs_without_the_compiler(tmp_path):
    axpy.compile_aot("f32, f32[::1], f32[::1], f32[::1]", block=256,
                     targets=["sm_90", "ptx"]).save(tmp_path / "axpy.vgb")
    add.compile_aot("f32[::1], f32[::1], f32[::1], 1024", targets=["sm_90a", "sm_90"]
                    ).save(tmp_path / "add.vgb")
    got, _ = run_checks(f"""
        import sys
        sys.modules["llvmlite"] = None
        import verdigris as vg
        k = vg.load_bundle({str(tmp_path / "axpy.vgb")!r})
        a = vg.load_bundle({str(tmp_path / "add.vgb")!r})
    """)
    assert_right(got, "alpha * x[i] + y[i]")
    assert got["compiler"] == []


def test_a_bundled_product_of_matrices_runs_without_the_compiler(tmp_path):
    """The GEMM example from a bundle for sm_90a (TMA, warp specialization, persistent grid):
    right products for arrays the copy engine reads and for a row pitch it cannot (520
    bytes: the bundle's variant without it), with llvmlite blocked."""
    from verdigris.examples.tile_gemm import gemm

    gemm.compile_aot("f16[:, ::1], f16[:, ::1], f32[:, ::1], 128, 256, 64", grid=(2, 2),
                     targets=["sm_90a"]).save(tmp_path / "gemm.vgb")
    code = textwrap.dedent(f"""
        import json, sys
        sys.modules["llvmlite"] = None
        import numpy as np
        import verdigris as vg
        gemm = vg.load_bundle({str(tmp_path / "gemm.vgb")!r})
        rng = np.random.default_rng()
        errors = {{}}
        for name, (m, n, k) in {{"aligned": (1000, 776, 328), "odd pitch": (130, 260, 72)}}.items():
            ah, bh = (rng.standard_normal(s).astype(np.float16) for s in ((m, k), (k, n)))
            c = vg.asarray(np.full((m, n), np.nan, np.float32))
            gemm[vg.cdiv(m, 128), vg.cdiv(n, 256)](vg.asarray(ah), vg.asarray(bh), c, BM=128, BN=256, BK=64)
            want = ah.astype(np.float64) @ bh.astype(np.float64)
            errors[name] = float(np.abs(c.numpy() - want).max() / np.abs(want).max())
        errors["compiler"] = sorted(m for m in sys.modules if m.startswith(("llvmlite.", "verdigris.tile.")))
        print(json.dumps(errors))
    """)
    done = fresh_process(code)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["aligned"] < 1e-3 and got["odd pitch"] < 1e-3 and got["compiler"] == []
