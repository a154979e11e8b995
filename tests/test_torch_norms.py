"""`verdigris.ops.norms` (layer_norm, rms_norm) and the helper under them,
`verdigris.autograd.differentiable_op`, with CPU torch tensors on the cpu backend: values
and gradients against torch's own norms, `torch.autograd.gradcheck` in float64 (the kernels
compute in float64 there), bf16 activations with a float32 weight against float32 torch,
weight gradients the same bit for bit from run to run, fake tensors (shapes without a
launch), and torch.compile(fullgraph=True) forward and backward. Skipped without torch; the
GPU twin is tests/gpu/test_norm_backward_gpu.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.autograd import differentiable_op  # noqa: E402
from verdigris.ops.norms import layer_norm, rms_norm  # noqa: E402

F = torch.nn.functional


def tensors(rng, *shapes, dtype=torch.float64, requires_grad=True):
    return [torch.from_numpy(rng.standard_normal(s)).to(dtype).requires_grad_(requires_grad)
            for s in shapes]


def torch_rms_norm(x, w, eps):
    x64 = x.double()
    return (x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + eps) * w.double())


def max_rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).abs().max() / want.abs().max())


def test_layer_norm_and_its_gradients_match_torch_in_float64(rng):
    x, w, b = tensors(rng, (3, 5, 70), (70,), (70,))
    dy = torch.from_numpy(rng.standard_normal((3, 5, 70)))
    ours = torch.autograd.grad(layer_norm(x, w, b, 1e-5), (x, w, b), dy)
    want = torch.autograd.grad(F.layer_norm(x, (70,), w, b, 1e-5), (x, w, b), dy)
    assert max_rel(layer_norm(x, w, b), F.layer_norm(x, (70,), w, b, 1e-5)) < 1e-13
    for got, expected in zip(ours, want):
        assert max_rel(got, expected) < 1e-12


def test_rms_norm_and_its_gradients_match_torch_in_float64(rng):
    x, w = tensors(rng, (4, 33), (33,))
    dy = torch.from_numpy(rng.standard_normal((4, 33)))
    ours = torch.autograd.grad(rms_norm(x, w, 1e-6), (x, w), dy)
    want = torch.autograd.grad(torch_rms_norm(x, w, 1e-6), (x, w), dy)
    for got, expected in zip(ours, want):
        assert max_rel(got, expected) < 1e-12


def test_gradcheck_in_float64(rng):
    x, w, b = tensors(rng, (2, 3, 17), (17,), (17,))
    assert torch.autograd.gradcheck(lambda x, w, b: layer_norm(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w), (x, w))


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_bfloat16_activations_with_a_float32_weight_against_float32_torch(rng, norm):
    x = tensors(rng, (64, 300), dtype=torch.bfloat16)[0]
    w, b = tensors(rng, (300,), (300,), dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((64, 300))).to(torch.bfloat16)
    if norm == "layer":
        y, params = layer_norm(x, w, b), (x, w, b)
        want_y = F.layer_norm(x.float(), (300,), w, b, 1e-5)
    else:
        y, params = rms_norm(x, w), (x, w)
        want_y = torch_rms_norm(x.float(), w, 1e-6).float()
    assert y.dtype == torch.bfloat16 and max_rel(y, want_y) < 1e-2
    grads = torch.autograd.grad(y, params, dy)
    reference = [p.detach().float().requires_grad_() for p in params]
    want_y = (F.layer_norm(reference[0], (300,), *reference[1:], 1e-5) if norm == "layer"
              else torch_rms_norm(reference[0], reference[1], 1e-6))
    want = torch.autograd.grad(want_y, reference, dy.float())
    assert [g.dtype for g in grads] == [p.dtype for p in params]
    for got, expected in zip(grads, want):
        assert max_rel(got, expected) < 1.6e-2


def test_weight_gradients_are_the_same_bit_for_bit(rng):
    x, w, b = tensors(rng, (300, 64), (64,), (64,), dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((300, 64))).float()
    first, second = (torch.autograd.grad(layer_norm(x, w, b), (w, b), dy) for _ in range(2))
    assert all(torch.equal(a, c) for a, c in zip(first, second))


def test_fake_tensors_get_shapes_and_dtypes_without_a_launch():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(8, 4, 96, dtype=torch.bfloat16)
        w = torch.empty(96)
        y, mean, rstd = torch.ops.verdigris.layer_norm(x, w, w, 1e-5)
        dx, dw, db = torch.ops.verdigris.layer_norm_backward(y, x, w, w, 1e-5, mean, rstd)
    assert (y.shape, y.dtype, mean.shape, mean.dtype) == ((8, 4, 96), torch.bfloat16, (32,), torch.float32)
    assert (dx.shape, dx.dtype, dw.shape, dw.dtype) == ((8, 4, 96), torch.bfloat16, (96,), torch.float32)


def test_a_helper_op_with_two_outputs_and_no_residual(rng):
    """The helper's contract beyond the norms: two results, gradients for the tensor inputs
    only, zeros for a result nothing used."""
    def forward(x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x * scale, x * x

    def backward(g_scaled: torch.Tensor, g_squared: torch.Tensor, x: torch.Tensor,
                 scale: float) -> torch.Tensor:
        return g_scaled * scale + 2 * x * g_squared

    op = differentiable_op("vgtest_cpu::scaled_and_squared", forward, backward, outputs=2)
    x = tensors(rng, (10,))[0]
    scaled, squared = op(x, 3.0)
    assert torch.equal(scaled, x * 3.0) and torch.equal(squared, x * x)
    (grad,) = torch.autograd.grad(scaled.sum(), x)
    assert torch.equal(grad, torch.full_like(x, 3.0))
    assert torch.autograd.gradcheck(lambda x: op(x, 0.5), (x,))


@pytest.mark.slow  # inductor's first compile on CPU takes about a minute
def test_torch_compile_fullgraph_forward_and_backward(rng):
    def f(x, w, b, w2):
        return rms_norm(torch.relu(layer_norm(x, w, b) * 2 + 1), w2)

    params = tensors(rng, (6, 40), (40,), (40,), (40,), dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((6, 40))).float()
    eager = torch.autograd.grad(f(*params), params, dy)
    compiled = torch.compile(f, fullgraph=True)
    got = torch.autograd.grad(compiled(*params), params, dy)
    for a, c in zip(eager, got):
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-6)


def test_rows_of_8192_launched_on_16_warps(rng):
    """The benchmark's width, which the backward launches with 16 warps (ops.norms)."""
    x, w, b = tensors(rng, (5, 8192), (8192,), (8192,), dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((5, 8192))).float()
    ours = torch.autograd.grad(layer_norm(x, w, b), (x, w, b), dy)
    want = torch.autograd.grad(F.layer_norm(x, (8192,), w, b, 1e-5), (x, w, b), dy)
    for got, expected in zip(ours, want):
        assert max_rel(got, expected) < 1e-5


def test_a_backward_that_does_not_fit_its_forward_is_refused_where_it_is_defined():
    import verdigris as vg

    def forward(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x * w, x.sum(-1)

    def backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float,  # one grad
                 residual: torch.Tensor) -> torch.Tensor:
        return g * w

    with pytest.raises(vg.Error) as info:
        differentiable_op("vgtest_cpu::misfit", forward, backward)
    text = str(info.value)
    assert "returns 1 value(s); it must return 2" in text and "# one grad" in text, text
    assert f"{__file__}:" in text
