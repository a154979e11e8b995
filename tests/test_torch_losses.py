"""`verdigris.ops.losses.cross_entropy` with CPU torch tensors on the cpu backend: the mean
loss and its gradient against torch's F.cross_entropy in float32 and from bfloat16 logits
(an ignored row among them, an upstream gradient other than one), the logits not kept for
the backward, fake tensors, and torch.compile(fullgraph=True) tracing the op (aot_eager:
no inductor compile). The kernels' own tests are test_tile_cross_entropy.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.ops.losses import IGNORE_INDEX, cross_entropy, linear_cross_entropy  # noqa: E402

F = torch.nn.functional


def logits_and_labels(rng, rows=12, vocab=5000, dtype=torch.float32):
    logits = torch.from_numpy(3 * rng.standard_normal((rows, vocab))).to(dtype).requires_grad_()
    labels = torch.from_numpy(rng.integers(0, vocab, rows))
    labels[rows // 3] = IGNORE_INDEX
    return logits, labels


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_loss_and_gradient_match_torch(rng, dtype, tolerance):
    logits, labels = logits_and_labels(rng, dtype=dtype)
    upstream = float(rng.uniform(0.5, 2.0))
    loss = cross_entropy(logits, labels)
    (grad,) = torch.autograd.grad(loss * upstream, logits)
    wanted = logits.detach().double().requires_grad_()
    want_loss = F.cross_entropy(wanted, labels)
    (want_grad,) = torch.autograd.grad(want_loss * upstream, wanted)
    assert loss.dtype == torch.float32 and loss.shape == ()
    assert abs(loss.item() - want_loss.item()) <= 1e-6 * want_loss.item()
    assert grad.dtype == dtype
    assert float((grad.double() - want_grad).abs().max() / want_grad.abs().max()) < tolerance
    assert not grad[labels.shape[0] // 3].any()  # the ignored row


def test_the_logits_are_not_kept_for_the_backward(rng):
    logits, labels = logits_and_labels(rng)
    loss = cross_entropy(logits * 1.0, labels)
    saved = [getattr(loss.grad_fn, name) for name in dir(loss.grad_fn) if name.startswith("_saved")]
    kept = [t for t in getattr(loss.grad_fn, "saved_tensors", ()) if isinstance(t, torch.Tensor)] + saved
    assert all(t.data_ptr() != logits.data_ptr() for t in kept if isinstance(t, torch.Tensor))


def test_shapes_and_dtypes_are_checked(rng):
    logits, labels = logits_and_labels(rng)
    with pytest.raises(ValueError, match=r"\(rows, vocab\)"):
        cross_entropy(logits[None], labels)
    with pytest.raises(ValueError, match="integers"):
        cross_entropy(logits, labels.float())


def test_fake_tensors_get_shapes_and_dtypes_without_a_launch():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        loss = cross_entropy(torch.empty(7, 300, dtype=torch.bfloat16), torch.zeros(7, dtype=torch.int64))
    assert loss.shape == () and loss.dtype == torch.float32


def test_torch_compile_traces_the_op_without_a_graph_break(rng):
    logits, labels = logits_and_labels(rng, rows=6, vocab=700)
    compiled = torch.compile(lambda x, y: cross_entropy(x * 2.0, y), fullgraph=True, backend="aot_eager")
    (got,) = torch.autograd.grad(compiled(logits, labels), logits)
    (want,) = torch.autograd.grad(F.cross_entropy(logits * 2.0, labels), logits)
    assert float((got - want).abs().max() / want.abs().max()) < 1e-6


def features_weight_labels(rng, rows=10, features=24, vocab=301, dtype=torch.float32):
    x = torch.from_numpy(rng.standard_normal((rows, features))).to(dtype).requires_grad_()
    w = torch.from_numpy(0.3 * rng.standard_normal((vocab, features))).to(dtype).requires_grad_()
    labels = torch.from_numpy(rng.integers(0, vocab, rows))
    labels[rows // 2] = IGNORE_INDEX
    return x, w, labels


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_linear_cross_entropy_matches_torch(rng, dtype, tolerance):
    """F.cross_entropy(F.linear(x, w), labels) and its gradients, an upstream factor that is
    not 1 included (it scales x's and w's gradients); vocabulary 301, whose bfloat16 rows
    are no multiple of 16 bytes."""
    x, w, labels = features_weight_labels(rng, dtype=dtype)
    upstream = float(rng.uniform(0.5, 2.0))
    loss = linear_cross_entropy(x, w, labels)
    got = torch.autograd.grad(loss * upstream, (x, w))
    reference = [p.detach().double().requires_grad_() for p in (x, w)]
    want_loss = F.cross_entropy(F.linear(*reference), labels)
    want = torch.autograd.grad(want_loss * upstream, reference)
    assert loss.dtype == torch.float32 and loss.shape == ()
    assert abs(loss.item() - want_loss.item()) <= tolerance * want_loss.item()
    for g, expected, p in zip(got, want, (x, w)):
        assert g.dtype == dtype and g.shape == p.shape
        assert float((g.double() - expected).abs().max() / expected.abs().max()) < tolerance


def test_linear_cross_entropy_keeps_one_rows_by_vocab_buffer(rng):
    """The gradient is written over the logits: one (rows, vocab) tensor is kept for the
    backward, beside x and the weight."""
    x, w, labels = features_weight_labels(rng)
    loss = linear_cross_entropy(x, w, labels)
    kept = [t for t in loss.grad_fn.saved_tensors if isinstance(t, torch.Tensor)] if hasattr(
        loss.grad_fn, "saved_tensors") else []
    big = [t for t in kept if t.shape == (x.shape[0], w.shape[0])]
    assert len(big) <= 1
    with pytest.raises(ValueError, match="features"):
        linear_cross_entropy(x, w[:, :5], labels)


def test_linear_cross_entropy_under_fake_tensors_and_compile(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        loss = linear_cross_entropy(torch.empty(7, 16, dtype=torch.bfloat16), torch.empty(300, 16, dtype=torch.bfloat16),
                                    torch.zeros(7, dtype=torch.int64))
    assert loss.shape == () and loss.dtype == torch.float32
    x, w, labels = features_weight_labels(rng, rows=6, vocab=200)
    compiled = torch.compile(lambda x, w, y: linear_cross_entropy(x * 2.0, w, y), fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(x, w, labels), (x, w))
    want = torch.autograd.grad(F.cross_entropy(F.linear(x * 2.0, w), labels), (x, w))
    for g, expected in zip(got, want):
        assert float((g - expected).abs().max() / expected.abs().max()) < 1e-5

