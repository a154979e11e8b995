"""The residual stream without adds of its own (issue #28): `verdigris.ops.linear.linear(...,
residual=)` (the sum in the product's epilogue, the residual's gradient the output's own,
not copied) and `verdigris.ops.residual.linear_residual_layer_norm` (its backward adds the
stream's two gradients in the LayerNorm backward's kernel), with CPU torch tensors on the
cpu backend: values and gradients against torch in float64, `torch.autograd.gradcheck`,
bf16 against float32 torch, a pre-norm block whose backward runs no add, fake tensors,
refused residuals, `differentiable_op`'s `passes_gradient` contract, and
torch.compile(fullgraph=True) forward and backward. Skipped without torch; the GPU twin is
tests/gpu/test_residual_gpu.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.autograd import differentiable_op  # noqa: E402
from verdigris.ops.linear import linear, linear_gelu  # noqa: E402
from verdigris.ops.residual import linear_residual_layer_norm, mlp_residual_layer_norm  # noqa: E402

from tests.test_torch_linear import max_rel, tensors  # noqa: E402

F = torch.nn.functional


def torch_linear_residual_layer_norm(x, w, b, residual, norm_w, norm_b, eps=1e-5):
    stream = residual + F.linear(x, w, b)
    return stream, F.layer_norm(stream, stream.shape[-1:], norm_w, norm_b, eps)


def torch_mlp_residual_layer_norm(x, fc_w, fc_b, proj_w, proj_b, residual, norm_w, norm_b, eps=1e-5):
    return torch_linear_residual_layer_norm(F.gelu(F.linear(x, fc_w, fc_b)), proj_w, proj_b, residual,
                                            norm_w, norm_b, eps)


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_a_residual_matches_torch_in_float64(rng, with_bias):
    x, w, b, residual = tensors(rng, (3, 7, 40), (33, 40), (33,), (3, 7, 33))
    params = (x, w, b, residual) if with_bias else (x, w, residual)
    dy = torch.from_numpy(rng.standard_normal((3, 7, 33)))

    def ours(*p):
        return linear(*p[:-1], residual=p[-1])

    def theirs(*p):
        return p[-1] + F.linear(*p[:-1])

    assert max_rel(ours(*params), theirs(*params)) < 1e-13
    got = torch.autograd.grad(ours(*params), params, dy)
    want = torch.autograd.grad(theirs(*params), params, dy)
    for g, expected in zip(got, want):
        assert max_rel(g, expected) < 1e-12
    assert got[-1].data_ptr() == dy.data_ptr()  # the residual's gradient is dy, not a copy


def test_linear_residual_layer_norm_matches_torch_in_float64(rng):
    params = tensors(rng, (2, 9, 24), (70, 24), (70,), (2, 9, 70), (70,), (70,))
    grads = [torch.from_numpy(rng.standard_normal((2, 9, 70))) for _ in range(2)]
    stream, normed = linear_residual_layer_norm(*params)
    want_stream, want_normed = torch_linear_residual_layer_norm(*params)
    assert max_rel(stream, want_stream) < 1e-13 and max_rel(normed, want_normed) < 1e-13
    got = torch.autograd.grad((stream, normed), params, grads)
    want = torch.autograd.grad((want_stream, want_normed), params, grads)
    for g, expected in zip(got, want):
        assert max_rel(g, expected) < 1e-12


def test_mlp_residual_layer_norm_matches_torch_in_float64(rng):
    """The MLP as one op: its GELU's backward in the projection's product."""
    params = tensors(rng, (2, 9, 24), (80, 24), (80,), (20, 80), (20,), (2, 9, 20), (20,), (20,))
    grads = [torch.from_numpy(rng.standard_normal((2, 9, 20))) for _ in range(2)]
    results = mlp_residual_layer_norm(*params)
    want_results = torch_mlp_residual_layer_norm(*params)
    for result, expected in zip(results, want_results):
        assert max_rel(result, expected) < 1e-13
    got = torch.autograd.grad(results, params, grads)
    want = torch.autograd.grad(want_results, params, grads)
    for g, expected in zip(got, want):
        assert max_rel(g, expected) < 1e-12


def test_gradcheck_in_float64(rng):
    x, w, b, residual, norm_w, norm_b = tensors(rng, (5, 9), (6, 9), (6,), (5, 6), (6,), (6,))
    assert torch.autograd.gradcheck(lambda x, w, b, r: linear(x, w, b, residual=r), (x, w, b, residual))
    assert torch.autograd.gradcheck(lambda x, w, r: linear(x, w, residual=r), (x, w, residual))
    assert torch.autograd.gradcheck(linear_residual_layer_norm, (x, w, b, residual, norm_w, norm_b))
    mlp = tensors(rng, (2, 3), (5, 3), (5,), (4, 5), (4,), (2, 4), (4,), (4,))  # each element a probe: few
    assert torch.autograd.gradcheck(mlp_residual_layer_norm, mlp)


@pytest.mark.parametrize("op, theirs, shapes", [
    (linear_residual_layer_norm, torch_linear_residual_layer_norm,
     ((150, 72), (136, 72), (136,), (150, 136), (136,), (136,))),
    (mlp_residual_layer_norm, torch_mlp_residual_layer_norm,
     ((150, 72), (200, 72), (200,), (136, 200), (136,), (150, 136), (136,), (136,)))], ids=["linear", "mlp"])
def test_bfloat16_against_float32_torch(rng, op, theirs, shapes):
    """Shapes no GEMM tile divides; the stream's sums rounded once to bf16 (torch's eager
    bf16 rounds the product, then the sum)."""
    params = tensors(rng, *shapes, dtype=torch.bfloat16)
    grads = [torch.from_numpy(rng.standard_normal((150, 136))).to(torch.bfloat16) for _ in range(2)]
    results = op(*params)
    got = torch.autograd.grad(results, params, grads)
    reference = [p.detach().float().requires_grad_() for p in params]
    want_results = theirs(*reference)
    want = torch.autograd.grad(want_results, reference, [g.float() for g in grads])
    for result, expected in zip(results, want_results):
        assert result.dtype == torch.bfloat16 and max_rel(result, expected) < 1.6e-2
    for g, expected in zip(got, want):
        assert g.dtype == torch.bfloat16 and max_rel(g, expected) < 3.2e-2  # g rounded, then the products


def pre_norm_block(x, params):
    """GPT-2's block after its attention (y stands for attention's output): the attention
    projection added into the stream with LayerNorm 2, the MLP, its projection added in."""
    y, w_proj, b_proj, ln_w, ln_b, w_fc, b_fc, w_mlp, b_mlp = params
    stream, h = linear_residual_layer_norm(y, w_proj, b_proj, x, ln_w, ln_b)
    return linear(linear_gelu(h, w_fc, b_fc), w_mlp, b_mlp, residual=stream)


def pre_norm_block_as_trained(x, params):
    """pre_norm_block as examples/train_gpt.py runs it: the MLP one op, with a next
    LayerNorm (its weights LayerNorm 2's), whose output is summed in."""
    y, w_proj, b_proj, ln_w, ln_b, w_fc, b_fc, w_mlp, b_mlp = params
    stream, h = linear_residual_layer_norm(y, w_proj, b_proj, x, ln_w, ln_b)
    stream, normed = mlp_residual_layer_norm(h, w_fc, b_fc, w_mlp, b_mlp, stream, ln_w, ln_b)
    return stream + normed


def torch_pre_norm_block(x, y, w_proj, b_proj, ln_w, ln_b, w_fc, b_fc, w_mlp, b_mlp, trained=False):
    d = x.shape[-1]
    stream = x + F.linear(y, w_proj, b_proj)
    h = F.gelu(F.linear(F.layer_norm(stream, (d,), ln_w, ln_b), w_fc, b_fc))
    stream = stream + F.linear(h, w_mlp, b_mlp)
    return stream + F.layer_norm(stream, (d,), ln_w, ln_b) if trained else stream


@pytest.mark.parametrize("block", [pre_norm_block, pre_norm_block_as_trained], ids=["ops", "as_trained"])
def test_a_pre_norm_block_adds_no_gradients_outside_the_kernels(rng, block):
    """The block's backward through the ops runs no torch add (nor copy): the stream's two
    gradients meet in the LayerNorm backward's kernel, and each residual's gradient is
    passed on as it is. Its gradients are torch's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorded(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    d = 16
    x, *params = tensors(rng, (2, 3, d), (2, 3, d), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,),
                         (d, 4 * d), (d,))
    trained = block is pre_norm_block_as_trained
    out = block(x, params)
    dy = torch.from_numpy(rng.standard_normal(out.shape))
    with Recorded() as recorded:
        got = torch.autograd.grad(out, (x, *params), dy)
    # as trained, the norm's weight and bias serve both norms here: autograd adds each's
    # two gradients (two adds of the test's, none of the block's)
    adds = [op for op in recorded.ops if "add" in op or "copy" in op]
    assert recorded.ops and len(adds) == (2 if trained else 0), recorded.ops

    want = torch.autograd.grad(torch_pre_norm_block(x, *params, trained=trained), (x, *params), dy)
    for g, expected in zip(got, want):
        assert max_rel(g, expected) < 1e-12


def test_fake_tensors_get_shapes_and_dtypes_without_a_launch():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, residual = torch.empty(8, 4, 3072, dtype=torch.bfloat16), torch.empty(8, 4, 768, dtype=torch.bfloat16)
        w, b, norm_w = (torch.empty(768, 3072, dtype=torch.bfloat16), torch.empty(768, dtype=torch.bfloat16),
                        torch.empty(768))
        y = torch.ops.verdigris.linear_bias_residual(x, w, b, residual)
        stream, normed, mean, rstd = torch.ops.verdigris.linear_residual_layer_norm(x, w, b, residual, norm_w,
                                                                                  norm_w, 1e-5)
        grads = torch.ops.verdigris.linear_residual_layer_norm_backward(
            y, y, x, w, b, residual, norm_w, norm_w, 1e-5, stream, normed, mean, rstd)
    assert (y.shape, y.dtype) == ((8, 4, 768), torch.bfloat16)
    assert stream.shape == normed.shape == (8, 4, 768) and mean.shape == (32,)
    assert [tuple(g.shape) for g in grads] == [(8, 4, 3072), (768, 3072), (768,), (8, 4, 768), (768,), (768,)]


@pytest.mark.parametrize("shape, dtype", [((3, 5, 9), torch.float64), ((3, 5, 8), torch.float32)])
def test_a_residual_not_shaped_as_the_output_is_refused(rng, shape, dtype):
    x, w = tensors(rng, (3, 5, 4), (8, 4))
    residual = torch.zeros(shape, dtype=dtype)
    with pytest.raises(ValueError, match="residual must be shaped as the output, .3, 5, 8."):
        linear(x, w, residual=residual)


def test_passes_gradient_names_inputs_the_backward_does_not_see(rng):
    """The helper's contract: the named input's gradient is the first result's, the
    backward neither takes it nor returns one for it; one that names no tensor input, or a
    backward that takes the passed input anyway, is refused where the op is made."""
    import verdigris as vg

    def forward(x: torch.Tensor, residual: torch.Tensor, scale: float) -> torch.Tensor:
        return residual + x * scale

    def backward(grad: torch.Tensor, x: torch.Tensor, scale: float) -> torch.Tensor:
        return grad * scale

    op = differentiable_op("vgtest_cpu::scaled_residual", forward, backward, passes_gradient=("residual",))
    x, residual = tensors(rng, (10,), (10,))
    dy = torch.from_numpy(rng.standard_normal(10))
    dx, dr = torch.autograd.grad(op(x, residual, 3.0), (x, residual), dy)
    assert torch.equal(dx, dy * 3.0) and dr.data_ptr() == dy.data_ptr()
    assert torch.autograd.gradcheck(lambda x, r: op(x, r, 0.5), (x, residual))

    def takes_it(grad: torch.Tensor, x: torch.Tensor, residual: torch.Tensor,
                 scale: float) -> torch.Tensor:
        return grad * scale

    with pytest.raises(vg.Error, match="must take 3: 1 gradients, the forward's 2 inputs .not residual"):
        differentiable_op("vgtest_cpu::takes_it", forward, takes_it, passes_gradient=("residual",))
    with pytest.raises(vg.Error, match="passes_gradient names scale, which the forward takes as no tensor"):
        differentiable_op("vgtest_cpu::no_tensor", forward, backward, passes_gradient=("scale",))


@pytest.mark.slow  # inductor's first compile on CPU takes about a minute
def test_torch_compile_fullgraph_forward_and_backward(rng):
    d = 16
    x, *params = tensors(rng, (6, d), (6, d), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,),
                         dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((6, d))).float()
    eager = torch.autograd.grad(pre_norm_block_as_trained(x, params), (x, *params), dy)
    compiled = torch.compile(pre_norm_block_as_trained, fullgraph=True)
    got = torch.autograd.grad(compiled(x, params), (x, *params), dy)
    for a, c in zip(eager, got):
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-6)
