"""A kernel compiled by one process runs in the next from its launch record (no frontend, no
compiler): right results for a SIMT and a tile kernel, and a bounds fault of the checked
variant reported at its line (the checks of tests/gpu/test_aot_gpu.py)."""
import os
import shutil

import pytest

from tests.gpu.test_aot_gpu import ROOT, assert_right, run_checks

pytestmark = pytest.mark.gpu
KERNELS = os.path.join(ROOT, "tests", "sources", "fresh_kernels.py")

PRELUDE = """
import numpy as np
from kernels import axpy as k, add as a, softmax
import verdigris as vg
rows = vg.asarray(np.ones((4, 256), np.float32))
softmax[4](rows, vg.asarray(np.zeros((4, 256), np.float32)), COLS=256)  # each kernel launched:
# none left for the warm-up to load the compiler for
"""


def test_a_later_process_runs_the_kernels_from_their_records(tmp_path):
    shutil.copy(KERNELS, tmp_path / "kernels.py")
    env = {"VERDIGRIS_CACHE_DIR": str(tmp_path / "cache"), "VERDIGRIS_LOG": "compile",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    (first, first_out), (again, again_out) = (run_checks(PRELUDE, env) for _ in range(2))
    logs = [[line for line in out.splitlines() if line.startswith("verdigris:")]
            for out in (first_out, again_out)]
    assert len(logs[0]) == 4 and all("compiled" in line for line in logs[0])
    assert len(logs[1]) == 4 and all("launch record" in line for line in logs[1])
    for got in (first, again):
        assert_right(got, "alpha * x[i] + scaled(y[i])")
    assert again["compiler"] == []
