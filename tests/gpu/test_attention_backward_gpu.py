"""Flash attention backward on the GPU (issue #28): `verdigris.ops.attention` with CUDA
tensors against torch's scaled_dot_product_attention backward, bf16 and fp16, head dims 64
and 128, causal and not, at a sequence the tiles divide and one they do not: the output,
the log-sum-exp and every gradient against a float32 reference (relative Frobenius error;
torch's own SDPA in the inputs' dtype beside it, to show both err alike); the gradients
the same bit for bit from run to run; torch.compile(fullgraph=True) forward and backward.
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
