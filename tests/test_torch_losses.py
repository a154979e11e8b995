"""`verdigris.ops.losses.cross_entropy` with CPU torch tensors on the cpu backend: the mean
loss and its gradient against torch's F.cross_entropy in float32 and from bfloat16 logits
(an ignored row among them, an upstream gradient other than one), the logits not kept for
the backward, fake tensors, and torch.compile(fullgraph=True) tracing the op (aot_eager:
no inductor compile). The kernels' own tests are test_tile_cross_entropy.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.ops.losses import IGNORE_INDEX, cross_entropy  # noqa: E402

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
