"""Flash attention backward on the GPU (issue #28): `verdigris.ops.attention` with CUDA
tensors against torch's scaled_dot_product_attention backward, bf16 and fp16, head dims 64
and 128, causal and not, at a sequence the tiles divide and one they do not: the output,
the log-sum-exp and every gradient against a float32 reference (relative Frobenius error;
torch's own SDPA in the inputs' dtype beside it, to show both err alike); the gradients
the same bit for bit from run to run; torch.compile(fullgraph=True) forward and backward.
`attention_qkvpacked` on GPT-2's layout (heads 12, head dim 64; and 128) against SDPA of the
unpacked heads, output and packed gradient, with the copy engine's 4-d tensor maps over the
views and, on rows whose pitch it cannot describe, the variant without it; an output
gradient broadcast along batch and seq (strides 0) read as it lies; the same bits
as `attention` given the same views, from run to run, and compiled.
The kernels on their own (cpu backend, float64 references): tests/test_attention_backward.py."""
import math

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

F = torch.nn.functional
# one rounding of the output to the inputs' dtype over float32 sums, P and dS rounded before
# their products (as SDPA's flash backend rounds them): relative Frobenius errors
TOLERANCE = {torch.bfloat16: 1.6e-2, torch.float16: 4e-3}


def rel_err(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm())


def case(dtype, seq, d, batch=2, heads=4):
    g = torch.Generator(device="cuda").manual_seed(seq * 131 + d)
    q, k, v, do = (torch.randn(batch, heads, seq, d, device="cuda", generator=g).to(dtype)
                   for _ in range(4))
    return q, k, v, do


def float32_reference(q, k, v, do, causal):
    params = [t.float().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*params, is_causal=causal)
    return out, torch.autograd.grad(out, params, do.float())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1024, 1000])
def test_against_torch_sdpa_backward(dtype, d, causal, seq):
    from verdigris.ops.attention import attention

    q, k, v, do = case(dtype, seq, d)
    params = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attention(*params, causal=causal)
    grads = torch.autograd.grad(out, params, do)
    want_out, want = float32_reference(q, k, v, do, causal)
    sdpa_params = [t.clone().requires_grad_() for t in (q, k, v)]
    sdpa_out = F.scaled_dot_product_attention(*sdpa_params, is_causal=causal)
    sdpa_grads = torch.autograd.grad(sdpa_out, sdpa_params, do)
    assert out.dtype == dtype and rel_err(out, want_out) < TOLERANCE[dtype]
    for name, got, expected, theirs in zip("qkv", grads, want, sdpa_grads):
        ours = rel_err(got, expected)
        assert got.dtype == dtype and ours < TOLERANCE[dtype], f"d{name}: {ours:.2e}"
        # no worse than torch's own backward in the same dtype, give or take
        assert ours < 2 * rel_err(theirs, expected) + 1e-3, f"d{name}: {ours:.2e}"


def test_the_log_sum_exp_the_forward_saves():
    import verdigris.ops.attention  # noqa: F401 - registers torch.ops.verdigris.attention

    q, k, v, _ = case(torch.bfloat16, 1000, 128)
    o, lse = torch.ops.verdigris.attention(q, k, v, True, 1 / math.sqrt(128))
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(128)
    s = s.masked_fill(torch.ones(1000, 1000, device="cuda", dtype=torch.bool).triu(1), -math.inf)
    want = torch.logsumexp(s, dim=-1).view(-1, 1000)
    assert lse.dtype == torch.float32 and rel_err(lse, want) < 1e-5


def test_gradients_are_the_same_bit_for_bit():
    from verdigris.ops.attention import attention

    q, k, v, do = case(torch.bfloat16, 2048, 128)
    params = [t.clone().requires_grad_() for t in (q, k, v)]
    first, second = (torch.autograd.grad(attention(*params, causal=True), params, do) for _ in range(2))
    assert all(torch.equal(a, c) for a, c in zip(first, second))


def test_torch_compile_fullgraph_forward_and_backward():
    from verdigris.ops.attention import attention

    q, k, v, do = case(torch.bfloat16, 512, 64)
    params = [t.clone().requires_grad_() for t in (q, k, v)]
    eager = torch.autograd.grad(attention(*params, causal=True), params, do)
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, causal=True), fullgraph=True)
    got = torch.autograd.grad(compiled(*params), params, do)
    assert all(torch.equal(a, c) for a, c in zip(eager, got))


def packed_case(dtype, seq, d, batch=2, heads=12, pad=0):
    """qkv (batch, seq, 3 * heads * d) as GPT-2's c_attn gives it (`pad` more columns to a
    row, left out of the view) and the output's gradient (batch, seq, heads * d)."""
    g = torch.Generator(device="cuda").manual_seed(seq * 7 + d + pad)
    width = 3 * heads * d
    qkv = torch.randn(batch, seq, width + pad, device="cuda", generator=g).to(dtype)[..., :width]
    do = torch.randn(batch, seq, heads * d, device="cuda", generator=g).to(dtype)
    return qkv, do


def packed_reference(qkv, do, heads, causal):
    """float32 SDPA of the unpacked heads: the output (batch, seq, heads * d) and dqkv."""
    batch, seq, width = qkv.shape
    x = qkv.detach().float().requires_grad_()
    q, k, v = x.view(batch, seq, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(batch, seq, -1)
    return out, torch.autograd.grad(out, x, do.float())[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1024, 1000])
def test_qkvpacked_against_torch_sdpa(dtype, d, causal, seq):
    from verdigris.ops.attention import attention_qkvpacked

    heads = 12 if d == 64 else 6
    qkv, do = packed_case(dtype, seq, d, heads=heads)
    x = qkv.clone().requires_grad_()
    out = attention_qkvpacked(x, heads, causal=causal)
    (dqkv,) = torch.autograd.grad(out, x, do)
    want_out, want = packed_reference(qkv, do, heads, causal)
    assert out.shape == do.shape and out.dtype == dtype and out.is_contiguous()
    assert dqkv.shape == qkv.shape and dqkv.dtype == dtype
    assert rel_err(out, want_out) < TOLERANCE[dtype]
    for part, got, expected in zip("qkv", dqkv.chunk(3, dim=2), want.chunk(3, dim=2)):
        assert rel_err(got, expected) < TOLERANCE[dtype], f"d{part}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_qkvpacked_rows_the_copy_engine_cannot_describe(causal):
    """A row pitch of 3 * 12 * 64 + 4 bfloat16s (8 bytes past a multiple of 16): the launches
    run the kernels' variants without TMA, on the same views, with the same results."""
    from verdigris.ops.attention import attention_qkvpacked

    qkv, do = packed_case(torch.bfloat16, 1000, 64, pad=4)
    assert qkv.stride(1) * 2 % 16 == 8
    x = qkv.detach().requires_grad_()
    out = attention_qkvpacked(x, 12, causal=causal)
    (dqkv,) = torch.autograd.grad(out, x, do)
    want_out, want = packed_reference(qkv, do, 12, causal)
    assert rel_err(out, want_out) < TOLERANCE[torch.bfloat16]
    assert rel_err(dqkv, want) < TOLERANCE[torch.bfloat16]


def test_qkvpacked_gradient_of_a_weighted_sum():
    """The output's gradient as autograd gives it for (out * weights).sum(): a broadcast
    along batch and seq (strides 0, 0, 1), which the kernels and the copy engine's tensor
    maps read as it lies."""
    from verdigris.ops.attention import attention_qkvpacked

    qkv, do = packed_case(torch.bfloat16, 1000, 64)
    x = qkv.clone().requires_grad_()
    out = attention_qkvpacked(x, 12, causal=True)
    (dqkv,) = torch.autograd.grad((out * do[0, 0]).sum(), x)
    want = packed_reference(qkv, do[0, 0].expand(do.shape), 12, True)[1]
    assert rel_err(dqkv, want) < TOLERANCE[torch.bfloat16]


def test_qkvpacked_is_attention_of_the_same_views_bit_for_bit():
    """The packed op and `attention` given the (batch, heads, seq, d) views of qkv launch the
    same kernels on the same views: the same output (`attention`'s, a view of (batch, seq,
    heads, d) memory, is the packed op's reshaped for free) and the same gradients, from
    run to run."""
    from verdigris.ops.attention import attention, attention_qkvpacked

    qkv, do = packed_case(torch.bfloat16, 2048, 64)
    x = qkv.clone().requires_grad_()
    first, second = (torch.autograd.grad(attention_qkvpacked(x, 12, causal=True), x, do)[0] for _ in range(2))
    assert torch.equal(first, second)
    y = qkv.clone().requires_grad_()
    q, k, v = y.view(2, 2048, 3, 12, 64).permute(2, 0, 3, 1, 4)
    o = attention(q, k, v, causal=True)
    out = o.transpose(1, 2).reshape(2, 2048, 768)
    assert out.data_ptr() == o.data_ptr() and out.is_contiguous()  # a view: no copy after the kernel
    assert torch.equal(out, attention_qkvpacked(x, 12, causal=True))
    assert torch.equal(torch.autograd.grad(out, y, do)[0], first)


def test_qkvpacked_under_torch_compile_fullgraph():
    from verdigris.ops.attention import attention_qkvpacked

    qkv, do = packed_case(torch.bfloat16, 512, 64)
    x = qkv.clone().requires_grad_()
    eager = torch.autograd.grad(attention_qkvpacked(x, 12, causal=True), x, do)[0]
    compiled = torch.compile(lambda t: attention_qkvpacked(t, 12, causal=True), fullgraph=True)
    assert torch.equal(torch.autograd.grad(compiled(x), x, do)[0], eager)
