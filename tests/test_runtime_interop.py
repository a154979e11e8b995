"""A verdigris kernel as a torch custom op on the cpu backend (torch CPU tensors run in
place): the real implementation, the fake one (shapes from fake tensors, no launch), and
torch.compile tracing it. Skipped without torch; the GPU twin is tests/gpu/test_interop.py."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt

torch = pytest.importorskip("torch")


@simt.kernel
def scale_add(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


@vg.torch_op("vgtest_cpu::scale_add")
def scale_add_op(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.full_like(x, float("nan"))
    scale_add[vg.cdiv(x.numel(), 64), 64](alpha, x, y, out)
    return out


def test_the_op_runs_the_kernel(rng):
    x, y = (torch.from_numpy(rng.standard_normal(300).astype(np.float32)) for _ in range(2))
    got = scale_add_op(x, y, 2.5)
    assert torch.allclose(got.double(), 2.5 * x.double() + y.double(), rtol=1e-6, atol=1e-6)


def test_fake_tensors_get_shapes_without_a_launch():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(77, 3)[:, 0]
        out = scale_add_op(x, x, 1.0)
    assert tuple(out.shape) == (77,) and out.dtype == torch.float32


def test_torch_compile_traces_the_op(rng):
    def f(x, y):
        return torch.relu(scale_add_op(x, y, 3.0)) * 2 - y

    x, y = (torch.from_numpy(rng.standard_normal(500).astype(np.float32)) for _ in range(2))
    compiled = torch.compile(f, fullgraph=True)
    want = torch.relu(3 * x.double() + y.double()) * 2 - y.double()
    assert torch.allclose(compiled(x, y).double(), want, rtol=1e-5, atol=1e-5)
