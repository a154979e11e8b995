"""`verdigris.ops.linear` (linear, linear_gelu) with CPU torch tensors on the cpu backend:
values and gradients against torch's F.linear and F.gelu, `torch.autograd.gradcheck` in
float64 (the kernels accumulate in float64 there), bf16 against float32 torch, bias
gradients the same bit for bit from run to run, fake tensors (shapes without a launch),
and torch.compile(fullgraph=True) forward and backward. Skipped without torch; the GPU
twin is tests/gpu/test_linear_backward_gpu.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.ops.linear import linear, linear_gelu  # noqa: E402

F = torch.nn.functional


def tensors(rng, *shapes, dtype=torch.float64, requires_grad=True):
    return [torch.from_numpy(rng.standard_normal(s)).to(dtype).requires_grad_(requires_grad)
            for s in shapes]


def max_rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).abs().max() / want.abs().max())


def torch_linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


@pytest.mark.parametrize("ours,theirs,with_bias", [(linear, F.linear, True), (linear, F.linear, False),
                                                   (linear_gelu, torch_linear_gelu, True)])
def test_values_and_gradients_match_torch_in_float64(rng, ours, theirs, with_bias):
    x, w, b = tensors(rng, (3, 7, 40), (33, 40), (33,))
    params = (x, w, b) if with_bias else (x, w)
    dy = torch.from_numpy(rng.standard_normal((3, 7, 33)))
    assert max_rel(ours(*params), theirs(*params)) < 1e-13
    got = torch.autograd.grad(ours(*params), params, dy)
    want = torch.autograd.grad(theirs(*params), params, dy)
    for g, expected in zip(got, want):
        assert max_rel(g, expected) < 1e-12


def test_gradcheck_in_float64(rng):
    x, w, b = tensors(rng, (5, 9), (6, 9), (6,))
    assert torch.autograd.gradcheck(lambda x, w, b: linear(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: linear(x, w), (x, w))
    assert torch.autograd.gradcheck(lambda x, w, b: linear_gelu(x, w, b), (x, w, b))


@pytest.mark.parametrize("dtype,tolerance", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3),
                                             (torch.float32, 1e-5)])
def test_narrow_dtypes_against_float32_torch(rng, dtype, tolerance):
    """Shapes no GEMM tile divides (the ops launch 128 x 128 tiles)."""
    x, w, b = tensors(rng, (150, 72), (136, 72), (136,), dtype=dtype)
    dy = torch.from_numpy(rng.standard_normal((150, 136))).to(dtype)
    y = linear_gelu(x, w, b)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    reference = [p.detach().float().requires_grad_() for p in (x, w, b)]
    want_y = torch_linear_gelu(*reference)
    want = torch.autograd.grad(want_y, reference, dy.float())
    assert y.dtype == dtype and max_rel(y, want_y) < tolerance
    assert [g.dtype for g in grads] == [dtype] * 3
    for got, expected in zip(grads, want):
        assert max_rel(got, expected) < 2 * tolerance


def test_bias_gradients_are_the_same_bit_for_bit(rng):
    x, w, b = tensors(rng, (300, 24), (40, 24), (40,), dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((300, 40))).float()
    first, second = (torch.autograd.grad(linear_gelu(x, w, b), (b,), dy) for _ in range(2))
    assert torch.equal(first[0], second[0])


def test_fake_tensors_get_shapes_and_dtypes_without_a_launch():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(8, 4, 768, dtype=torch.bfloat16)
        w = torch.empty(3072, 768, dtype=torch.bfloat16)
        b = torch.empty(3072, dtype=torch.bfloat16)
        y, z = torch.ops.verdigris.linear_gelu(x, w, b)
        dx, dw, db = torch.ops.verdigris.linear_gelu_backward(y, x, w, b, z)
    assert (y.shape, z.shape, y.dtype) == ((8, 4, 3072), (32, 3072), torch.bfloat16)
    assert (dx.shape, dw.shape, db.shape) == ((8, 4, 768), (3072, 768), (3072,))


def test_no_rows_gives_zero_weight_gradients(rng):
    x = torch.zeros((0, 8), dtype=torch.float64, requires_grad=True)
    w, b = tensors(rng, (5, 8), (5,))
    y = linear(x, w, b)
    dw, db = torch.autograd.grad(y, (w, b), torch.zeros((0, 5), dtype=torch.float64))
    assert y.shape == (0, 5) and not dw.any() and not db.any()


@pytest.mark.slow  # inductor's first compile on CPU takes about a minute
def test_torch_compile_fullgraph_forward_and_backward(rng):
    def f(x, w1, b1, w2):
        return linear(linear_gelu(x, w1, b1), w2)

    params = tensors(rng, (6, 40), (24, 40), (24,), (8, 24), dtype=torch.float32)
    dy = torch.from_numpy(rng.standard_normal((6, 8))).float()
    eager = torch.autograd.grad(f(*params), params, dy)
    got = torch.autograd.grad(torch.compile(f, fullgraph=True)(*params), params, dy)
    for a, c in zip(eager, got):
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-6)


def test_rows_of_an_unaligned_width_are_padded_and_read_in_place(rng):
    """A width whose rows are no multiple of 16 bytes (57 bfloat16: a GPT's 50,257-token
    vocabulary in small) gets a padded row pitch; the loss and the products of the backward
    read those rows where they are, and the values and gradients are F.linear's."""
    from verdigris.ops.losses import cross_entropy
    from verdigris.ops.rows import aligned_rows, rows

    x, w = tensors(rng, (2, 5, 24), (57, 24), dtype=torch.bfloat16)
    labels = torch.from_numpy(rng.integers(0, 57, 10))
    logits = linear(x, w)
    assert logits.shape == (2, 5, 57) and logits.stride() == (5 * 64, 64, 1)
    flat = logits.view(-1, 57)
    assert rows(flat).data_ptr() == flat.data_ptr() and rows(flat).stride(0) == 64
    loss = cross_entropy(flat, labels)
    got = torch.autograd.grad(loss, (x, w))
    reference = [p.detach().float().requires_grad_() for p in (x, w)]
    want_loss = F.cross_entropy(F.linear(*reference).view(-1, 57), labels)
    want = torch.autograd.grad(want_loss, reference)
    assert abs(loss.item() - want_loss.item()) < 2e-2 * abs(want_loss.item())
    for g, expected in zip(got, want):
        assert max_rel(g, expected) < 3e-2
    assert aligned_rows(3, 8, x).stride(0) == 8  # 16 bytes already: no padding
    assert aligned_rows(3, 3, x, torch.float64).stride(0) == 4
