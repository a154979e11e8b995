"""`verdigris.ops.attention` with CPU torch tensors on the cpu backend: the output and q, k
and v's gradients against torch's scaled_dot_product_attention in float32 (float16 and
bfloat16 inputs, head dims 64 and 16, causal and not, a sequence no tile divides), the
gradients the same bit for bit from run to run, fake tensors (shapes without a launch),
grouped-query attention (2 and 4 query heads per K/V head) against SDPA's enable_gqa,
`attention_varlen` against SDPA one sequence at a time, the refusals of inputs the kernels
do not take, `differentiable_op(saves_outputs=True)`
on its own, and torch.compile(fullgraph=True) forward and backward. Skipped without torch;
the GPU twin is tests/gpu/test_attention_backward_gpu.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.autograd import differentiable_op  # noqa: E402
from verdigris.ops.attention import attention, attention_varlen  # noqa: E402

F = torch.nn.functional
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 1.6e-2}  # of the reference's largest value


def inputs(rng, shape, dtype):
    return [torch.from_numpy(rng.standard_normal(shape)).to(dtype).requires_grad_() for _ in range(3)]


def max_rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all()
    return float((got - want).abs().max() / want.abs().max())


def float32_reference(q, k, v, do, causal, scale=None):
    params = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*params, is_causal=causal, scale=scale)
    return out, torch.autograd.grad(out, params, do.float())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 16])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_output_and_gradients_match_float32_torch(rng, dtype, d, causal):
    q, k, v = inputs(rng, (2, 3, 100, d), dtype)
    do = torch.from_numpy(rng.standard_normal((2, 3, 100, d))).to(dtype)
    out = attention(q, k, v, causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), do)
    want_out, want = float32_reference(q, k, v, do, causal)
    assert out.dtype == dtype and max_rel(out, want_out) < TOLERANCE[dtype]
    for got, expected in zip(grads, want):
        assert got.dtype == dtype and got.shape == q.shape and max_rel(got, expected) < TOLERANCE[dtype]


def test_a_given_scale_and_inputs_that_are_not_contiguous(rng):
    q, k, v = (t.detach().transpose(1, 2).requires_grad_() for t in inputs(rng, (2, 70, 2, 32), torch.float16))
    do = torch.from_numpy(rng.standard_normal((2, 2, 70, 32))).half()
    out = attention(q, k, v, causal=True, scale=0.3)
    grads = torch.autograd.grad(out, (q, k, v), do)
    want_out, want = float32_reference(q, k, v, do, True, scale=0.3)
    assert max_rel(out, want_out) < 4e-3
    for got, expected in zip(grads, want):
        assert max_rel(got, expected) < 4e-3


def test_gradients_are_the_same_bit_for_bit(rng):
    q, k, v = inputs(rng, (1, 2, 90, 16), torch.bfloat16)
    do = torch.from_numpy(rng.standard_normal((1, 2, 90, 16))).to(torch.bfloat16)
    first, second = (torch.autograd.grad(attention(q, k, v, causal=True), (q, k, v), do) for _ in range(2))
    assert all(torch.equal(a, c) for a, c in zip(first, second))


def test_fake_tensors_get_shapes_and_dtypes_without_a_launch():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 4, 256, 64, dtype=torch.bfloat16)
        o, lse = torch.ops.verdigris.attention(q, q, q, True, 0.125)
        dq, dk, dv = torch.ops.verdigris.attention_backward(o, q, q, q, True, 0.125, o, lse)
    assert (o.shape, o.dtype, lse.shape, lse.dtype) == ((2, 4, 256, 64), torch.bfloat16, (8, 256), torch.float32)
    assert all(g.shape == q.shape and g.dtype == torch.bfloat16 for g in (dq, dk, dv))


@pytest.mark.parametrize("group", [2, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention_and_its_gradients(rng, group, causal):
    q = torch.from_numpy(rng.standard_normal((2, 4, 70, 16))).to(torch.bfloat16).requires_grad_()
    k, v = (torch.from_numpy(rng.standard_normal((2, 4 // group, 70, 16))).to(torch.bfloat16)
            .requires_grad_() for _ in range(2))
    do = torch.from_numpy(rng.standard_normal((2, 4, 70, 16))).to(torch.bfloat16)
    out = attention(q, k, v, causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), do)
    params = [t.detach().float().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*params, is_causal=causal, enable_gqa=True)
    assert max_rel(out, want) < TOLERANCE[torch.bfloat16]
    for got, want in zip(grads, torch.autograd.grad(want, params, do.float())):
        assert got.shape == want.shape and max_rel(got, want) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_variable_length_sequences(rng, causal):
    lengths = [5, 0, 90, 1, 17]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    total = int(cu[-1])
    q = torch.from_numpy(rng.standard_normal((total, 4, 32))).to(torch.bfloat16)
    k, v = (torch.from_numpy(rng.standard_normal((total, 2, 32))).to(torch.bfloat16) for _ in range(2))
    o = attention_varlen(q, k, v, cu, causal=causal)
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if start < end:
            one = [t[start:end].transpose(0, 1).float()[None] for t in (q, k, v)]
            want = F.scaled_dot_product_attention(*one, is_causal=causal, enable_gqa=True)
            assert max_rel(o[start:end], want[0].transpose(0, 1)) < TOLERANCE[torch.bfloat16]
    with pytest.raises(ValueError, match="1-d int32"):
        attention_varlen(q, k, v, cu.long())


def test_inputs_the_kernels_do_not_take_are_refused():
    q = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="kv_heads dividing heads"):
        attention(q, q[:, :, :4], q)
    with pytest.raises(ValueError, match="kv_heads dividing heads"):
        attention(q[:, :1].expand(1, 3, 8, 16), q, q)
    with pytest.raises(ValueError, match="float16 or all bfloat16"):
        attention(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="scale must be positive"):
        attention(q, q, q, scale=-1.0)
    wide = torch.zeros(1, 1, 8, 256, dtype=torch.float16)
    with pytest.raises(ValueError, match="head_dim is at most 128; got 256"):
        attention(wide, wide, wide)


def test_a_helper_op_whose_backward_takes_its_output(rng):
    """saves_outputs: the backward gets the result itself, after the inputs (exp's gradient
    is its output), beside a residual."""
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.exp(x), x * 2

    def backward(g: torch.Tensor, x: torch.Tensor, y: torch.Tensor, twice: torch.Tensor) -> torch.Tensor:
        assert torch.equal(twice, x * 2)
        return g * y

    op = differentiable_op("vgtest_cpu::exp_saving_output", forward, backward, saves_outputs=True)
    x = torch.from_numpy(rng.standard_normal(10)).requires_grad_()
    (grad,) = torch.autograd.grad(op(x).sum(), x)
    assert torch.equal(grad, torch.exp(x.detach()))
    assert torch.autograd.gradcheck(op, (x,))


@pytest.mark.slow  # inductor's first compile on CPU takes about a minute
def test_torch_compile_fullgraph_forward_and_backward(rng):
    q, k, v = inputs(rng, (1, 2, 40, 16), torch.float16)
    do = torch.from_numpy(rng.standard_normal((1, 2, 40, 16))).half()
    eager = torch.autograd.grad(attention(q, k, v, causal=True), (q, k, v), do)
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, causal=True), fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v), do)
    assert all(torch.equal(a, c) for a, c in zip(eager, got))
