"""The cooperative launch path without a GPU (tests/fakecuda: launches record their
arguments instead of running, as a GPU of 132 multiprocessors holding 2048 threads each):
a kernel that calls `grid_barrier()` goes through `cuLaunchCooperativeKernel` on the general
path and on the generated launcher's (repeated launches), on any stream; a grid of more
blocks than fit at once is refused before anything is enqueued, with both numbers; a kernel
without one keeps `cuLaunchKernel`. The GPU's own run is tests/gpu/test_grid_barrier_gpu.py."""
import json

import pytest

from tests import fakecuda

pytest.importorskip("cuda.bindings.driver")
pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

KERNELS = '''
from verdigris import simt


@simt.kernel
def sweeps(a, b, iterations):
    n = a.shape[0]
    stride = simt.grid_dim(0) * simt.block_dim(0)
    for _ in range(iterations):
        for i in range(simt.global_id(0) + 1, n - 1, stride):
            b[i] = 0.5 * (a[i - 1] + a[i + 1])
        simt.grid_barrier()
        for i in range(simt.global_id(0) + 1, n - 1, stride):
            a[i] = 0.5 * (b[i - 1] + b[i + 1])
        simt.grid_barrier()


@simt.kernel
def copy(a, b):
    i = simt.global_id(0)
    if i < a.shape[0]:
        b[i] = a[i]
'''

SCRIPT = """
import json, sys
sys.path.insert(0, {folder!r})
import numpy as np
import verdigris as vg
from tests.fakecuda import last_launch
from grid_kernels import copy, sweeps

def seen():
    launch = last_launch()
    return [launch.count, launch.cooperative, list(launch.grid), list(launch.block)]

a, b = (vg.asarray(np.zeros(4096, np.float32)) for _ in range(2))
out = {{}}
sweeps[132 * 16, 128](a, b, 3)  # 16 blocks of 128 threads per multiprocessor
out["fits"] = seen()
for _ in range(3):
    sweeps[132 * 16, 128](a, b, 3)
out["repeated"] = seen()
sweeps[132 * 32, 64](a, b, 3, stream=vg.Stream())
out["other stream"] = seen()
try:
    sweeps[132 * 16 + 1, 128](a, b, 3)
except vg.LaunchError as err:
    out["refused"] = str(err)
out["after refusal"] = seen()
copy[32, 128](a, b)
out["plain"] = seen()
print(json.dumps(out))
"""


def test_a_kernel_with_grid_barriers_launches_cooperatively_with_its_grid_checked(tmp_path):
    (tmp_path / "grid_kernels.py").write_text(KERNELS)
    done = fakecuda.run(SCRIPT.format(folder=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["fits"] == [1, 1, [2112, 1, 1], [128, 1, 1]]
    assert out["repeated"][:2] == [4, 1]
    assert out["other stream"] == [5, 1, [4224, 1, 1], [64, 1, 1]]
    refused = out["refused"]
    assert "the grid has 2113 blocks and at most 2112 blocks of 128 threads fit" in refused
    assert "(16 per multiprocessor x 132 multiprocessors" in refused, refused
    assert out["after refusal"][0] == 5  # nothing enqueued
    assert out["plain"][:2] == [6, 0]
