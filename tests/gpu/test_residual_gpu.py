"""The residual stream without adds of its own, on the GPU (issue #28): the kernels
(`gemm_bias_residual` and split-K's `split_sum_bias_residual` into poisoned outputs and
workspaces, the LayerNorm backward adding dsum) and the ops (`linear(..., residual=)`,
`linear_residual_layer_norm`, `mlp_residual_layer_norm`) with bf16 CUDA tensors against float64 references at GPT-2's
shapes (8192 tokens, d_model 768, the MLP's 3072) and at shapes no tile divides: within
bf16's rounding, and the stream no further from float64 than torch's bf16 eager sum (which
rounds the product, then the sum; ours rounds once). The residual's gradient is dy's own
memory; gradcheck in float64; the same bits from run to run; torch.compile(fullgraph=True)
of a pre-norm block, forward and backward. The cpu-backend twins: tests/test_torch_residual.py,
tests/test_linear_backward.py, tests/test_split_k.py, tests/test_norm_backward.py."""
import pytest

torch = pytest.importorskip("torch")

from tests.gpu.test_norm_backward_gpu import BF16_TOL, rel_err  # noqa: E402 (bf16: one rounding)

pytestmark = pytest.mark.gpu

F = torch.nn.functional
D, HIDDEN, TOKENS = 768, 3072, 8192  # GPT-2 small at batch 8


def randn(gen, *shape, scale=1.0, dtype=torch.bfloat16):
    return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(dtype)


def generator(rng):
    return torch.Generator(device="cuda").manual_seed(int(rng.integers(2**62)))


def poisoned(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def layer(gen, m, k, n):
    """x (m, k), a weight (n, k) scaled as GPT-2's, a bias (n,), a residual (m, n)."""
    return randn(gen, m, k), randn(gen, n, k, scale=0.05), randn(gen, n, scale=0.1), randn(gen, m, n)


@pytest.mark.parametrize("m, k, n, parts", [(TOKENS, D, D, 0), (TOKENS, HIDDEN, D, 0), (333, 200, 136, 0),
                                            (256, HIDDEN, D, 6), (333, 1096, 136, 3)])
def test_the_epilogue_adds_the_residual_into_a_poisoned_output(rng, m, k, n, parts):
    """gemm_bias_residual (parts 0), or split-K in `parts` into a poisoned workspace."""
    from verdigris.examples.tile_gemm import workspace_shape
    from verdigris.examples.tile_linear import GEMM_TILES, launch_linear_forward

    x, w, b, residual = layer(generator(rng), m, k, n)
    y = poisoned(m, n)
    workspace = poisoned(*workspace_shape(m, n, parts, GEMM_TILES), dtype=torch.float32) if parts else None
    launch_linear_forward(x, w, y, b.view(1, -1), residual=residual, workspace=workspace)
    want = residual.double() + x.double() @ w.double().T + b.double()
    assert rel_err(y, want) < BF16_TOL


def test_the_norm_backward_adds_dsum_into_a_poisoned_dx(rng):
    from verdigris.examples.tile_layernorm import launch_layernorm_backward, rows_per_block
    import verdigris as vg

    gen = generator(rng)
    x, dy, dsum = randn(gen, TOKENS, D, scale=2), randn(gen, TOKENS, D), randn(gen, TOKENS, D)
    w, b = randn(gen, D, dtype=torch.float32), randn(gen, D, dtype=torch.float32)
    x64 = x.double()
    mean, var = x64.mean(-1), x64.var(-1, unbiased=False)
    rstd = torch.rsqrt(var + 1e-5)
    per_block = rows_per_block(TOKENS, D)
    dx, dw, db = poisoned(TOKENS, D), poisoned(D, dtype=torch.float32), poisoned(D, dtype=torch.float32)
    partials = [poisoned(vg.cdiv(TOKENS, per_block), D, dtype=torch.float32) for _ in range(2)]
    launch_layernorm_backward(dy, x, w, mean.float(), rstd.float(), dx, dw, db, *partials, ROWS=per_block,
                              dsum=dsum)
    reference = x64.clone().requires_grad_()
    want = torch.autograd.grad(F.layer_norm(reference, (D,), w.double(), b.double(), 1e-5), reference,
                               dy.double())[0] + dsum.double()
    assert rel_err(dx, want) < BF16_TOL
    xhat = (x64 - mean[:, None]) * rstd[:, None]
    assert rel_err(dw, (dy.double() * xhat).sum(0)) < 1e-4 and rel_err(db, dy.double().sum(0)) < 1e-4


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("m, k, n", [(TOKENS, HIDDEN, D), (333, 200, 136)])
def test_linear_with_a_residual_against_float64_and_torch_bf16(rng, m, k, n, with_bias):
    from verdigris.ops.linear import linear

    gen = generator(rng)
    x, w, b, residual = layer(gen, m, k, n)
    dy = randn(gen, m, n)
    params = [t.clone().requires_grad_() for t in ((x, w, b, residual) if with_bias else (x, w, residual))]
    y = linear(*params[:-1], residual=params[-1])
    grads = torch.autograd.grad(y, params, dy)
    reference = [t.double().requires_grad_() for t in params]
    want_y = reference[-1] + F.linear(*reference[:-1])
    want = torch.autograd.grad(want_y, reference, dy.double())
    torch_bf16 = residual + F.linear(*(t.detach() for t in params[:-1]))
    assert y.dtype == torch.bfloat16 and rel_err(y, want_y) < BF16_TOL
    assert rel_err(y, want_y) <= rel_err(torch_bf16, want_y)  # one rounding, not two
    for got, expected in zip(grads, want):
        assert got.dtype == torch.bfloat16 and rel_err(got, expected) < BF16_TOL
    assert grads[-1].data_ptr() == dy.data_ptr()  # the residual's gradient: dy, no copy


def test_linear_residual_layer_norm_at_gpt2_shapes(rng):
    """The attention projection added into the stream, and LayerNorm 2 of the sum: bf16
    activations beside float32 norm parameters (layer_norm takes either)."""
    from verdigris.ops.residual import linear_residual_layer_norm

    gen = generator(rng)
    x, w, b, residual = layer(gen, TOKENS, D, D)
    norm_w, norm_b = 1 + randn(gen, D, scale=0.1, dtype=torch.float32), randn(gen, D, scale=0.1, dtype=torch.float32)
    d_stream, d_normed = randn(gen, TOKENS, D), randn(gen, TOKENS, D)
    params = [t.clone().requires_grad_() for t in (x, w, b, residual, norm_w, norm_b)]
    stream, normed = linear_residual_layer_norm(*params)
    grads = torch.autograd.grad((stream, normed), params, (d_stream, d_normed))
    reference = [t.double().requires_grad_() for t in params]
    want_stream = reference[3] + F.linear(*reference[:3])
    want_normed = F.layer_norm(want_stream, (D,), reference[4], reference[5], 1e-5)
    want = torch.autograd.grad((want_stream, want_normed), reference, (d_stream.double(), d_normed.double()))
    torch_bf16 = residual + F.linear(x, w, b)
    assert rel_err(stream, want_stream) <= rel_err(torch_bf16, want_stream)
    assert rel_err(stream, want_stream) < BF16_TOL and rel_err(normed, want_normed) < BF16_TOL
    for got, expected, p in zip(grads, want, params):
        assert got.dtype == p.dtype and rel_err(got, expected) < BF16_TOL
    again = torch.autograd.grad(linear_residual_layer_norm(*params), params, (d_stream, d_normed))
    assert all(torch.equal(a, c) for a, c in zip(grads, again))  # no atomics: the same bits


@pytest.mark.parametrize("tokens, d, hidden", [(TOKENS, D, HIDDEN), (96, 1536, 512)], ids=["gpt2", "split-K"])
def test_mlp_residual_layer_norm_at_gpt2_shapes(rng, tokens, d, hidden):
    """The MLP as one op (its GELU's backward in the projection's dx product; at 96 tokens
    of 1536 features that product is split along K, the GELU in the second pass): against
    float64, the same bits from run to run."""
    from verdigris.ops.residual import mlp_residual_layer_norm

    gen = generator(rng)
    x, fc_w, fc_b, _ = layer(gen, tokens, d, hidden)
    _, proj_w, proj_b, residual = layer(gen, tokens, hidden, d)
    norm_w, norm_b = 1 + randn(gen, d, scale=0.1, dtype=torch.float32), randn(gen, d, scale=0.1, dtype=torch.float32)
    d_stream, d_normed = randn(gen, tokens, d), randn(gen, tokens, d)
    params = [t.clone().requires_grad_() for t in (x, fc_w, fc_b, proj_w, proj_b, residual, norm_w, norm_b)]
    results = mlp_residual_layer_norm(*params)
    grads = torch.autograd.grad(results, params, (d_stream, d_normed))
    reference = [t.double().requires_grad_() for t in params]
    want_stream = reference[5] + F.linear(F.gelu(F.linear(*reference[:3])), *reference[3:5])
    want_normed = F.layer_norm(want_stream, (d,), reference[6], reference[7], 1e-5)
    want = torch.autograd.grad((want_stream, want_normed), reference, (d_stream.double(), d_normed.double()))
    for got, expected in zip(results, (want_stream, want_normed)):
        assert rel_err(got, expected) < BF16_TOL
    for got, expected, p in zip(grads, want, params):
        assert got.dtype == p.dtype and rel_err(got, expected) < 2 * BF16_TOL  # z and g rounded on the way
    again = torch.autograd.grad(mlp_residual_layer_norm(*params), params, (d_stream, d_normed))
    assert all(torch.equal(a, c) for a, c in zip(grads, again))


def test_gradcheck_in_float64(rng):
    from verdigris.ops.linear import linear
    from verdigris.ops.residual import linear_residual_layer_norm, mlp_residual_layer_norm

    gen = generator(rng)
    x, w, b, residual, norm_w, norm_b = (randn(gen, *s, dtype=torch.float64).requires_grad_()
                                         for s in ((6, 10), (7, 10), (7,), (6, 7), (7,), (7,)))
    assert torch.autograd.gradcheck(lambda x, w, b, r: linear(x, w, b, residual=r), (x, w, b, residual))
    assert torch.autograd.gradcheck(linear_residual_layer_norm, (x, w, b, residual, norm_w, norm_b))
    fc_w, fc_b, proj_w = (randn(gen, *s, dtype=torch.float64).requires_grad_() for s in ((9, 10), (9,), (7, 9)))
    assert torch.autograd.gradcheck(mlp_residual_layer_norm, (x, fc_w, fc_b, proj_w, b, residual, norm_w, norm_b))


def test_torch_compile_fullgraph_of_a_pre_norm_block(rng):
    from verdigris.ops.linear import linear, linear_gelu
    from verdigris.ops.residual import linear_residual_layer_norm

    def block(x, y, w_proj, b_proj, ln_w, ln_b, w_fc, b_fc, w_mlp, b_mlp):
        stream, h = linear_residual_layer_norm(y, w_proj, b_proj, x, ln_w, ln_b)
        return linear(linear_gelu(h, w_fc, b_fc), w_mlp, b_mlp, residual=stream)

    gen, d, tokens = generator(rng), 256, 512
    x, y = randn(gen, tokens, d), randn(gen, tokens, d)
    w_proj, w_fc, w_mlp = (randn(gen, *s, scale=0.05) for s in ((d, d), (4 * d, d), (d, 4 * d)))
    b_proj, ln_w, ln_b, b_fc, b_mlp = (randn(gen, n, scale=0.1) for n in (d, d, d, 4 * d, d))
    params = [t.requires_grad_() for t in (x, y, w_proj, b_proj, 1 + ln_w, ln_b, w_fc, b_fc, w_mlp, b_mlp)]
    dy = randn(gen, tokens, d)
    eager = torch.autograd.grad(block(*params), params, dy)
    got = torch.autograd.grad(torch.compile(block, fullgraph=True)(*params), params, dy)
    for a, c in zip(eager, got):
        assert rel_err(c, a) < 1e-3  # the same kernels; inductor may move the glue around
