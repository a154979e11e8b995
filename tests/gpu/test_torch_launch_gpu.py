"""The compiled launcher (runtime.clauncher) on the GPU, with CUDA torch tensors: it is the
head of the configuration from the second launch, computes what the Python launcher does
(fresh inputs at every launch, views, tensors changed in place), refuses aliasing, and
launches on torch's current stream (a CUDA graph captures it)."""
import os

import pytest

import verdigris as vg
from verdigris import simt
from verdigris.examples.axpy import axpy
from verdigris.runtime import clauncher

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture
def twins(monkeypatch):
    """axpy twice: launchers installed under VERDIGRIS_LAUNCHER=c and =python."""
    if clauncher.extension() is None:
        pytest.skip("the compiled launcher cannot be built here")

    def launch(mode, *args, grid=None):
        monkeypatch.setenv("VERDIGRIS_LAUNCHER", mode)
        kernel = kernels[mode]
        n = args[-1].numel()
        kernel[grid or vg.cdiv(n, 128), 128](*args)
        return kernel[grid or vg.cdiv(n, 128), 128]
    kernels = {mode: simt.kernel(axpy.fn) for mode in ("c", "python")}
    return launch


def fresh(rng, n, dtype=torch.float32):
    return torch.from_numpy(rng.standard_normal(n)).to(device="cuda", dtype=dtype)


def test_the_compiled_launcher_computes_what_the_python_one_does(rng, twins):
    n = 3000
    heads = set()
    for step in range(6):  # fresh inputs and scalar at every launch; views on some
        x, y = fresh(rng, 2 * n), fresh(rng, 2 * n)
        if step % 2:
            x, y = x[::2], y[1::2]
        else:
            x, y = x[:n], y[n:]
        alpha = float(rng.standard_normal())
        outs = {}
        for mode in ("c", "python"):
            out = torch.full((n,), float("nan"), device="cuda")
            heads.add((mode, type(twins(mode, alpha, x, y, out)).__name__))
            outs[mode] = out
        torch.cuda.synchronize()
        want = alpha * x.double() + y.double()
        assert torch.allclose(outs["c"].double(), want, rtol=1e-6, atol=1e-6)
        assert torch.equal(outs["c"], outs["python"])
    assert ("c", "Launcher") in heads and ("python", "Launcher") not in heads


def test_aliasing_is_refused_on_the_compiled_path(rng, twins):
    n = 1000
    x, y, out = fresh(rng, n), fresh(rng, n), torch.empty(n, device="cuda")
    twins("c", 2.0, x, y, out)
    head = twins("c", 2.0, x, y, out)
    assert type(head).__name__ == "Launcher"
    before = x.clone()
    with pytest.raises(vg.AliasError, match="'out'"):
        head(2.0, x, y, x)
    with pytest.raises(vg.AliasError):
        head(2.0, x, y, out[:1].expand(n))
    torch.cuda.synchronize()
    assert torch.equal(x, before)


def test_a_tensor_changed_in_place_is_read_again(rng, twins):
    n = 2000
    x, y, out = fresh(rng, n), fresh(rng, n), torch.empty(n, device="cuda")
    twins("c", 1.0, x, y, out)
    other = fresh(rng, n)
    x.set_(other)
    out.fill_(float("nan"))
    twins("c", 1.0, x, y, out)
    torch.cuda.synchronize()
    assert torch.allclose(out.double(), other.double() + y.double(), rtol=1e-6, atol=1e-6)


def test_the_compiled_launcher_launches_on_torchs_current_stream(rng, twins):
    """Captured in a CUDA graph (a launch on another stream would break the capture), then
    replayed on new inputs."""
    n = 4096
    x, y, out = fresh(rng, n), fresh(rng, n), torch.empty(n, device="cuda")
    twins("c", 3.0, x, y, out)
    head = twins("c", 3.0, x, y, out)
    assert type(head).__name__ == "Launcher"
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        head(3.0, x, y, out)
    x.copy_(fresh(rng, n))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out.double(), 3.0 * x.double() + y.double(), rtol=1e-6, atol=1e-6)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out.fill_(float("nan"))
        head(-1.0, x, y, out)
    side.synchronize()
    assert torch.allclose(out.double(), -x.double() + y.double(), rtol=1e-6, atol=1e-6)


def test_the_benchmark_runs(tmp_path):
    """bench/launch_torch.py, a few rounds: every variant launches; the compiled launcher is
    the torch head."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, os.path.join(root, "bench", "launch_torch.py"),
                           "--rounds", "3"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.path.join(root, "src")})
    assert done.returncode == 0, done.stderr
    assert "ours axpy (torch, compiled launcher): head Launcher" in done.stderr
    assert "raw cuLaunchKernel" in done.stdout
