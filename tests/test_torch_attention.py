"""`verdigris.ops.attention` with CPU torch tensors on the cpu backend: the output and q, k
and v's gradients against torch's scaled_dot_product_attention in float32 (float16 and
bfloat16 inputs, head dims 64 and 16, causal and not, a sequence no tile divides), the
gradients the same bit for bit from run to run, fake tensors (shapes without a launch),
grouped-query attention (2 and 4 query heads per K/V head) against SDPA's enable_gqa,
`attention_varlen` against float64 SDPA one sequence at a time, `attention_fp8` (e4m3 with
descales, GQA, causal and not) against float64 SDPA of the dequantized inputs, the refusals
of inputs the kernels do not take, `differentiable_op(saves_outputs=True)`
on its own, and torch.compile(fullgraph=True) forward and backward; the output a (batch,
heads, seq, head_dim) view of (batch, seq, heads, head_dim) memory, views passed to the
kernels as they lie (copied only without a unit last stride: the gradient of a sum),
the backward's gradients laid out as its inputs; `attention_qkvpacked` (GPT-2's
packed q, k, v) against float32 SDPA of the unpacked heads, its one packed gradient, fake
tensors, torch.compile (aot_eager, and inductor with the slow test) and its refusals; the forward-only ops
(varlen, fp8) under fake tensors and torch.compile (aot_eager: no inductor compile), and a
backward through them raising NotImplementedError, eager and compiled. Skipped without torch;
the GPU twins are tests/gpu/test_attention_backward_gpu.py and test_torch_attention_gpu.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.autograd import differentiable_op  # noqa: E402
from verdigris.ops.attention import (_kernel_view, attention, attention_fp8, attention_qkvpacked,  # noqa: E402
                                     attention_varlen)

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
            one = [t[start:end].transpose(0, 1).double()[None] for t in (q, k, v)]
            want = F.scaled_dot_product_attention(*one, is_causal=causal, enable_gqa=True)
            assert max_rel(o[start:end], want[0].transpose(0, 1)) < TOLERANCE[torch.bfloat16]
    with pytest.raises(ValueError, match="1-d int32"):
        attention_varlen(q, k, v, cu.long())


def packed(rng, lengths, heads=4, kv_heads=2, d=32):
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.from_numpy(rng.standard_normal((int(cu[-1]), heads, d))).to(torch.bfloat16)
    k, v = (torch.from_numpy(rng.standard_normal((int(cu[-1]), kv_heads, d))).to(torch.bfloat16) for _ in range(2))
    return q, k, v, cu


def fp8_inputs(rng, heads=4, kv_heads=2, seq=70, d=32):
    """e4m3 q, k, v (batch 2) and their descales, each tensor's range onto e4m3's (448)."""
    real = [torch.from_numpy(rng.standard_normal((2, h, seq, d)) * 3) for h in (heads, kv_heads, kv_heads)]
    descales = [float(t.abs().max()) / 448 for t in real]
    return [(t / s).to(torch.float8_e4m3fn) for t, s in zip(real, descales)], descales


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp8_against_float64_attention_of_the_dequantized_inputs(rng, causal):
    (q, k, v), descales = fp8_inputs(rng)
    o = attention_fp8(q, k, v, *descales, causal=causal)
    real = [t.double() * s for t, s in zip((q, k, v), descales)]
    want = F.scaled_dot_product_attention(*real, is_causal=causal, enable_gqa=True)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and torch.isfinite(o).all()
    # P rounded to e4m3 (3 significant bits) before P @ V, as FlashAttention-3 rounds it
    assert float((o.double() - want).norm() / want.norm()) < 2e-2  # about 0.006 seen
    scaled = attention_fp8(q, k, v, *descales, causal=causal, scale=0.1)
    want = F.scaled_dot_product_attention(*real, is_causal=causal, enable_gqa=True, scale=0.1)
    assert float((scaled.double() - want).norm() / want.norm()) < 2e-2


def test_forward_only_ops_under_fake_tensors_and_torch_compile(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(300, 8, 64, dtype=torch.bfloat16)
        cu = torch.empty(4, dtype=torch.int32)
        o = torch.ops.verdigris.attention_varlen(q, q[:, :2], q[:, :2], cu, True, 0.125)
        q8 = torch.empty(2, 8, 256, 128, dtype=torch.float8_e4m3fn)
        o8 = torch.ops.verdigris.attention_fp8(q8, q8[:, :4], q8[:, :4], False, 0.1, 0.5)
    assert (o.shape, o.dtype) == ((300, 8, 64), torch.bfloat16)
    assert (o8.shape, o8.dtype) == ((2, 8, 256, 128), torch.bfloat16)

    def both(q, k, v, cu, q8, k8, v8):
        return attention_varlen(q * 2.0, k, v, cu, causal=True), attention_fp8(q8, k8, v8, 0.5, 0.25, 2.0)

    args = (*packed(rng, [30, 0, 9]), *fp8_inputs(rng, seq=20)[0])
    eager = both(*args)
    compiled = torch.compile(both, fullgraph=True, backend="aot_eager")
    assert all(torch.equal(a, c) for a, c in zip(eager, compiled(*args)))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_backward_through_a_forward_only_op_raises(rng, compiled):
    """Never a zero gradient: the error is an op of the backward graph, so a compiled forward
    (traced with inputs that need gradients) runs, and its backward raises."""
    q, k, v, cu = packed(rng, [12, 5])
    q.requires_grad_()
    varlen = torch.compile(attention_varlen, fullgraph=True, backend="aot_eager") if compiled else attention_varlen
    o = varlen(q, k, v, cu)
    assert o.requires_grad
    with pytest.raises(NotImplementedError, match="attention_varlen is forward only"):
        o.sum().backward()
    (q8, k8, v8), descales = fp8_inputs(rng, seq=10)
    q8 = q8.float().requires_grad_()  # fp8 tensors take no gradient: one through a conversion
    fp8 = torch.compile(attention_fp8, fullgraph=True, backend="aot_eager") if compiled else attention_fp8
    with pytest.raises(NotImplementedError, match="attention_fp8 is forward only"):
        fp8(q8.to(torch.float8_e4m3fn), k8, v8, *descales).sum().backward()


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
    q8 = q.to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="all float8_e4m3fn; got torch.float16"):
        attention_fp8(q, q, q, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="attention_fp8: q must be .* kv_heads dividing heads"):
        attention_fp8(q8[0], q8[0], q8[0], 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="descale_q, descale_k and descale_v must be positive"):
        attention_fp8(q8, q8, q8, 1.0, 0.0, 1.0)
    wider = torch.zeros(1, 1, 8, 512, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="attention_fp8: head_dim is at most 256; got 512"):
        attention_fp8(wider, wider, wider, 1.0, 1.0, 1.0)


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
    """`attention` and `attention_qkvpacked` in one compiled graph (one inductor compile)."""
    q, k, v = inputs(rng, (1, 2, 40, 16), torch.float16)
    qkv = torch.from_numpy(rng.standard_normal((1, 40, 96))).half().requires_grad_()
    do = torch.from_numpy(rng.standard_normal((1, 2, 40, 16))).half()
    dout = torch.from_numpy(rng.standard_normal((1, 40, 32))).half()

    def both(q, k, v, qkv):
        return attention(q, k, v, causal=True), attention_qkvpacked(qkv, 2, causal=True)

    eager = torch.autograd.grad(both(q, k, v, qkv), (q, k, v, qkv), (do, dout))
    compiled = torch.compile(both, fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v, qkv), (q, k, v, qkv), (do, dout))
    assert all(torch.equal(a, c) for a, c in zip(eager, got))


def packed_inputs(rng, batch, seq, heads, d, dtype):
    qkv = torch.from_numpy(rng.standard_normal((batch, seq, 3 * heads * d))).to(dtype).requires_grad_()
    return qkv, torch.from_numpy(rng.standard_normal((batch, seq, heads * d))).to(dtype)


def packed_reference(qkv, dout, heads, causal, scale=None):
    """float32 SDPA of the unpacked heads: the output (batch, seq, heads * d) and dqkv."""
    batch, seq, width = qkv.shape
    x = qkv.detach().float().requires_grad_()
    q, k, v = x.view(batch, seq, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out = out.transpose(1, 2).reshape(batch, seq, -1)
    return out, torch.autograd.grad(out, x, dout.float())[0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_qkvpacked_output_and_packed_gradient_match_float32_torch(rng, dtype, causal):
    qkv, dout = packed_inputs(rng, 2, 70, 3, 16, dtype)
    out = attention_qkvpacked(qkv, 3, causal=causal)
    (dqkv,) = torch.autograd.grad(out, qkv, dout)
    want_out, want = packed_reference(qkv, dout, 3, causal)
    assert out.shape == (2, 70, 48) and out.dtype == dtype and out.is_contiguous()
    assert max_rel(out, want_out) < TOLERANCE[dtype]
    assert dqkv.shape == qkv.shape and dqkv.dtype == dtype
    for got, expected in zip(dqkv.chunk(3, dim=2), want.chunk(3, dim=2)):  # dq, dk, dv
        assert max_rel(got, expected) < TOLERANCE[dtype]


def test_qkvpacked_views_of_wider_rows_a_scale_and_a_gradient_of_a_sum(rng):
    """qkv a view of rows wider than it (passed as it lies), a given scale, and the output's
    gradient as autograd gives it for out.sum(): a broadcast (every stride 0), copied; one
    broadcast along batch and seq only (stride 1 along the features) is read as it lies."""
    wide = torch.from_numpy(rng.standard_normal((2, 30, 3 * 2 * 32 + 8))).half()
    qkv = wide[..., 8:].requires_grad_()
    assert _kernel_view(qkv) is qkv
    out = attention_qkvpacked(qkv, 2, causal=True, scale=0.3)
    (dqkv,) = torch.autograd.grad(out.sum(), qkv, retain_graph=True)
    want_out, want = packed_reference(qkv, torch.ones(out.shape), 2, True, scale=0.3)
    assert max_rel(out, want_out) < 4e-3 and max_rel(dqkv, want) < 4e-3
    weights = torch.from_numpy(rng.standard_normal(out.shape[-1])).half()
    (dqkv,) = torch.autograd.grad((out * weights).sum(), qkv)
    want = packed_reference(qkv, weights.expand(out.shape), 2, True, scale=0.3)[1]
    assert max_rel(dqkv, want) < 4e-3


def test_outputs_and_gradients_are_laid_out_without_copies(rng):
    """`attention`'s output is a (batch, heads, seq, d) view of (batch, seq, heads, d)
    memory, so that (batch, seq, heads * d) is a view of it too; views of a unit last stride
    reach the kernels as they are; the backward's gradients are laid out as its inputs,
    where they are dense."""
    q, k, v = (t.detach().transpose(1, 2) for t in inputs(rng, (2, 40, 3, 16), torch.bfloat16))
    o, lse = torch.ops.verdigris.attention(q, k, v, False, 0.25)
    assert o.shape == q.shape and o.transpose(1, 2).is_contiguous() and lse.shape == (6, 40)
    assert all(_kernel_view(t) is t for t in (q, k, v, o))
    grads = torch.ops.verdigris.attention_backward(o, q, k, v, False, 0.25, o, lse)
    assert all(g.stride() == t.stride() for g, t in zip(grads, (q, k, v)))
    columns = q.transpose(2, 3)  # no unit last stride: a copy
    copied = _kernel_view(columns)
    assert copied is not columns and copied.is_contiguous() and torch.equal(copied, columns)


def test_qkvpacked_under_fake_tensors_and_torch_compile(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        qkv = torch.empty(2, 256, 3 * 768, dtype=torch.bfloat16)
        out, lse = torch.ops.verdigris.attention_qkvpacked(qkv, 12, True, 0.125)
        dqkv = torch.ops.verdigris.attention_qkvpacked_backward(out, qkv, 12, True, 0.125, out, lse)
    assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((2, 256, 768), torch.bfloat16, (24, 256), torch.float32)
    assert (dqkv.shape, dqkv.dtype) == ((2, 256, 3 * 768), torch.bfloat16)
    qkv, dout = packed_inputs(rng, 1, 33, 2, 16, torch.bfloat16)
    eager = torch.autograd.grad(attention_qkvpacked(qkv, 2, causal=True), qkv, dout)[0]
    compiled = torch.compile(lambda t: attention_qkvpacked(t * 1.0, 2, causal=True), fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(torch.autograd.grad(compiled(qkv), qkv, dout)[0], eager)


def test_qkvpacked_refuses_what_the_kernels_do_not_take():
    qkv = torch.zeros(1, 8, 96, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"qkv must be \(batch, seq, 3 \* heads \* head_dim\) for heads=5"):
        attention_qkvpacked(qkv, 5)
    with pytest.raises(ValueError, match="for heads=2; got \\(8, 96\\)"):
        attention_qkvpacked(qkv[0], 2)
    with pytest.raises(ValueError, match="attention_qkvpacked: q, k and v must be all float16 or all bfloat16"):
        attention_qkvpacked(qkv.float(), 2)
    with pytest.raises(ValueError, match="attention_qkvpacked: head_dim is at most 128; got 256"):
        attention_qkvpacked(torch.zeros(1, 8, 3 * 256, dtype=torch.float16), 1)
    with pytest.raises(ValueError, match="scale must be positive"):
        attention_qkvpacked(qkv, 2, scale=0.0)
