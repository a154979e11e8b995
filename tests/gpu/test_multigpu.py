"""Several GPUs: arrays on device k launch on device k (its own module and context), the
caller's current device is left alone, mixing devices in one launch is a clear LaunchError,
and the data-parallel example trains across two GPUs with NCCL. Skipped with fewer than 2."""
import os
import subprocess
import sys

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.runtime import driver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not driver.is_available() or driver.device_count() < 2, reason="needs 2 GPUs")]


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


def test_arrays_on_each_device_launch_there(rng):
    n = 40_000
    for _ in range(2):  # the general path, then the generated launchers
        for device in (1, 0, 1):
            xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
            x, y = vg.asarray(xh, device=device), vg.asarray(yh, device=device)
            out = vg.asarray(np.full(n, np.nan, np.float32), device=device)
            axpy[vg.cdiv(n, 256), 256](1.5, x, y, out)
            got = out.numpy()
            assert out.device == device
            assert np.allclose(got, 1.5 * xh.astype(np.float64) + yh, rtol=1e-6, atol=1e-6)


def test_torch_tensors_on_another_device_and_torch_keeps_its_device(rng):
    torch = pytest.importorskip("torch")
    torch.cuda.set_device(0)
    n = 10_000
    x, y = (torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to("cuda:1")
            for _ in range(2))
    out = torch.full_like(x, float("nan"))
    for _ in range(2):
        axpy[vg.cdiv(n, 256), 256](2.0, x, y, out)
        torch.cuda.synchronize(1)
        assert torch.allclose(out, 2 * x + y, rtol=1e-6, atol=1e-6)
        assert torch.cuda.current_device() == 0
        assert torch.empty(1, device="cuda").device.index == 0


def test_mixing_devices_is_a_launch_error():
    x, y = vg.zeros(100, device=0), vg.zeros(100, device=1)
    out = vg.zeros(100, device=0)
    with pytest.raises(vg.LaunchError) as err:
        axpy[1, 128](1.0, x, y, out)
    message = str(err.value)
    assert "different GPUs" in message and "'y' on GPU 1" in message and "GPU 0" in message


def test_the_data_parallel_example_trains_on_two_gpus():
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "data_parallel.py")],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")})
    print(done.stdout[-2000:], done.stderr[-2000:])
    assert done.returncode == 0
    assert "matches the single-process reference" in done.stdout
