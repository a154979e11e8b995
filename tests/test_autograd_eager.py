"""`differentiable_op` outside tracing applies a `torch.autograd.Function` of its two halves
(the custom op's dispatch costs host time a training step waits on); traced, the custom op.
Both must give the same results and gradients: passed gradients, saved outputs, non-tensor
inputs and results nothing uses included. Skipped without torch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from verdigris.autograd import differentiable_op  # noqa: E402


def _forward(x: torch.Tensor, stream: torch.Tensor, w: torch.Tensor, scale: float) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]:
    y = x * w * scale
    return stream + y, y * y, w.sum().reshape(1)  # two results (stream only in the first), a residual


def _backward(dh: torch.Tensor, dsq: torch.Tensor, x: torch.Tensor, w: torch.Tensor, scale: float,
              h: torch.Tensor, sq: torch.Tensor, wsum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dtotal = dh + 2 * x * w * scale * dsq
    return dtotal * w * scale, dtotal * x * scale


op = differentiable_op("vgtest::eager_pair", _forward, _backward, outputs=2, saves_outputs=True,
                       passes_gradient=("stream",))


def _reference(x, stream, w, scale):
    y = x * w * scale
    return stream + y, y * y


def _grads(fn, use_sq: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    x, stream, w = (torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    h, sq = fn(x, stream, w, 0.5)
    loss = (h * torch.arange(15, dtype=torch.float64).reshape(5, 3)).sum() + (sq.sum() if use_sq else 0)
    return (h.detach(), sq.detach(), *torch.autograd.grad(loss, (x, stream, w)))


@pytest.mark.parametrize("use_sq", [True, False], ids=["both results used", "second result unused"])
def test_eager_and_custom_op_paths_agree_with_torch(use_sq):
    def traced(*args):  # what a compiled graph calls
        return op.forward_op(*args)[:2]

    eager, custom, want = (_grads(f, use_sq, seed=7) for f in (op, traced, _reference))
    for a, b, c in zip(eager, custom, want):
        torch.testing.assert_close(a, c)
        torch.testing.assert_close(b, c)


def test_outside_tracing_no_custom_op_is_dispatched(monkeypatch):
    dispatched = []
    original = type(op.forward_op).__call__
    monkeypatch.setattr(type(op.forward_op), "__call__", lambda self, *a, **k: dispatched.append(self) or original(self, *a, **k))
    _grads(op, True, seed=1)
    assert dispatched == []


def test_under_fake_tensors_the_custom_op_runs():
    """A dispatch mode (fake tensors: torch.compile's tracing, memory estimates) gets the
    custom op and its fake implementation: shapes only, nothing launched."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(5, 3, dtype=torch.float64, requires_grad=True)
        h, sq = op(x, x.detach().clone(), x.detach().clone(), 0.5)
    assert h.shape == sq.shape == (5, 3)


def test_residuals_get_no_gradient_and_unused_results_get_zeros():
    """`traced_or_eager`'s eager path: the gradient function sees None for a residual
    (autograd would have filled a zero tensor of its size every backward: the linear
    cross-entropy's logits) and zeros for a result nothing used."""
    from verdigris.autograd import traced_or_eager

    seen = []

    def forward(x):
        return x * 2, x * 3, torch.ones(1000, dtype=x.dtype)  # two results, a residual

    def setup_context(ctx, inputs, output):
        pass

    def gradient(ctx, dfirst, dsecond, dresidual):
        seen.append((dfirst, dsecond, dresidual))
        return dfirst * 2 + dsecond * 3

    apply = traced_or_eager(None, forward, setup_context, gradient, outputs=2)
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    first, _, residual = apply(x)
    assert not residual.requires_grad
    (grad,) = torch.autograd.grad(first.sum(), x)
    ((dfirst, dsecond, dresidual),) = seen
    assert dresidual is None and torch.equal(dsecond, torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(grad, torch.full((4,), 2.0, dtype=torch.float64))
