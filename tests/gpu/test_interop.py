"""Interop on the GPU: a verdigris kernel as a torch custom op under torch.compile, CuPy
arrays in and out (zero copy both ways), JAX arrays through DLPack (when JAX is present)."""
import os

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt

pytestmark = pytest.mark.gpu
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU


@simt.kernel
def scale_add(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_a_kernel_as_a_torch_op_under_torch_compile(rng):
    torch = pytest.importorskip("torch")

    @vg.torch_op("vgtest::scale_add")
    def scale_add_op(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        out = torch.empty_like(x)
        scale_add[vg.cdiv(x.numel(), 256), 256](alpha, x, y, out)
        return out

    def f(x, y):
        return torch.relu(scale_add_op(x, y, 3.0)) * 2 - y

    n = 10_007
    x, y = (torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda() for _ in range(2))
    want = (torch.relu(3 * x.double() + y.double()) * 2 - y.double()).cpu()
    assert rel_err(f(x, y).cpu(), want) < 1e-6
    compiled = torch.compile(f, fullgraph=True)
    assert rel_err(compiled(x, y).cpu(), want) < 1e-6
    x2 = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda()
    assert rel_err(compiled(x2, y).cpu(), (torch.relu(3 * x2.double() + y.double()) * 2
                                           - y.double()).cpu()) < 1e-6


def test_cupy_both_ways(rng):
    cupy = pytest.importorskip("cupy")
    n = 30_001
    x, y = (cupy.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    out = cupy.full(n, cupy.nan, cupy.float32)
    for _ in range(2):  # the general path, then the generated launcher
        out.fill(cupy.nan)
        scale_add[vg.cdiv(n, 256), 256](2.0, x, y, out)
        cupy.cuda.Device().synchronize()
        assert rel_err(cupy.asnumpy(out), 2.0 * cupy.asnumpy(x).astype(np.float64)
                       + cupy.asnumpy(y)) < 1e-6
    mine = vg.asarray(rng.standard_normal(n).astype(np.float32))
    through_cai, through_dlpack = cupy.asarray(mine), cupy.from_dlpack(mine)
    assert through_cai.data.ptr == through_dlpack.data.ptr == mine.ptr  # no copies
    assert np.array_equal(cupy.asnumpy(through_dlpack), mine.numpy())
    view = vg.asarray(x)
    assert view.ptr == x.data.ptr and view.shape == (n,)


def test_jax_arrays_through_dlpack(rng):
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU here")
    import jax.numpy as jnp

    n = 20_000
    xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    x, y = (jax.device_put(jnp.asarray(a), gpu).block_until_ready() for a in (xh, yh))
    out = vg.asarray(np.full(n, np.nan, np.float32))
    scale_add[vg.cdiv(n, 256), 256](2.0, x, y, out)
    back = jax.dlpack.from_dlpack(out)  # zero copy: JAX sees our array
    assert rel_err(np.asarray(back), 2.0 * xh.astype(np.float64) + yh) < 1e-6
    assert rel_err(out.numpy(), 2.0 * xh.astype(np.float64) + yh) < 1e-6
