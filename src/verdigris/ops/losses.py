"""Softmax cross-entropy as a differentiable torch op on verdigris kernels, its gradient
computed in the forward's launch.

Takes: torch tensors `logits` (rows, vocab) in float32, bfloat16 or float16 and `labels`
(rows,) of integers, where -100 (`IGNORE_INDEX`) marks a row that takes no part, on the
device verdigris runs on (CUDA tensors on the cuda backend, CPU tensors on the cpu one).

Gives: `cross_entropy(logits, labels)`, the mean loss over the rows that take part (a
float32 scalar), as `torch.nn.functional.cross_entropy(logits.float(), labels)` computes
it, and the torch custom op `verdigris::cross_entropy` (results: the loss and the
gradient of the mean with respect to the logits); `linear_cross_entropy(x, weight,
labels)`, the same loss of the logits x @ weight.T (a language model's output layer and its
loss in one op, `verdigris::linear_cross_entropy`), which never keeps logits and gradient
apart: the gradient is written over the logits in the loss's launch (the kernel's checked
in-place form), and the loss's upstream gradient scales x's and weight's gradients, not
the logits'.

Guarantees: one launch (`examples.tile_cross_entropy.forward_backward`) reads the logits
twice, in float32 (in place where their rows are evenly strided: `rows.rows`), and writes
each row's loss and the gradient of the mean, rounded once to the logits' dtype, into rows
that start on 16-byte boundaries (`rows.aligned_rows`); the op keeps that gradient, not the logits (a GPT's logits are its
largest activation: they are freed as soon as the loss is computed, and the backward does
no pass over them; it scales the kept gradient by the loss's upstream gradient). The
price: a forward under `torch.no_grad()` computes the gradient too. Rows that take part
are counted on the device (no host synchronisation). A mean over no rows is NaN, as
torch's. The op is not made with `verdigris.autograd.differentiable_op`, which saves
every tensor input for the backward: that would keep the logits alive; it is applied as
that one is (`verdigris.autograd.traced_or_eager`: the custom op where torch traces, an
autograd.Function of the same functions else, the kept gradient a residual that gets no
gradient of its own).
"""
from __future__ import annotations

import torch

from verdigris.autograd import traced_or_eager
from verdigris.examples.tile_cross_entropy import IGNORE_INDEX, forward_backward
from verdigris.ops.linear import linear_forward
from verdigris.ops.rows import aligned_rows, rows
from verdigris.runtime.torch_ops import torch_op

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _cross_entropy_outputs(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    labels = labels.contiguous()
    counted = (labels != IGNORE_INDEX).sum().to(torch.float32)
    logits = rows(logits)
    grad = aligned_rows(*logits.shape, logits)
    loss, lse = (logits.new_empty(logits.shape[0], dtype=torch.float32) for _ in range(2))
    if logits.numel():
        forward_backward(logits, labels, loss, lse, counted.reciprocal().expand(logits.shape[0]), grad)
    return loss.sum() / counted, grad


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[1])


def _gradient(ctx, dloss, _dgrad):
    (grad,) = ctx.saved_tensors
    scaled = aligned_rows(*grad.shape, grad)  # grad * dloss would give unaligned rows
    torch.mul(grad, dloss, out=scaled)  # a 0-d float32 factor: the product stays in grad's dtype
    return scaled, None


_cross_entropy_op = torch_op("verdigris::cross_entropy")(_cross_entropy_outputs)
_cross_entropy_op.register_autograd(_gradient, setup_context=_setup_context)
_cross_entropy = traced_or_eager(_cross_entropy_op, _cross_entropy_outputs, _setup_context, _gradient)


def _linear_cross_entropy_outputs(x: torch.Tensor, weight: torch.Tensor,
                                  labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    labels = labels.contiguous()
    counted = (labels != IGNORE_INDEX).sum().to(torch.float32)
    logits = linear_forward(x, weight)  # rows aligned; then the gradient, in place
    loss, lse = (x.new_empty(x.shape[0], dtype=torch.float32) for _ in range(2))
    if logits.numel():
        forward_backward(logits, labels, loss, lse, counted.reciprocal().expand(x.shape[0]), in_place=True)
    return loss.sum() / counted, logits


def _setup_linear_context(ctx, inputs, output):
    ctx.save_for_backward(output[1], inputs[0], inputs[1])


def _linear_gradients(ctx, dloss, _dgrad):
    grad, x, weight = ctx.saved_tensors
    dx, dw = torch.ops.verdigris.linear_backward(grad, x, weight)  # an op: traced as one
    return dx.mul_(dloss), dw.mul_(dloss), None  # the small products scaled, not the logits


_linear_cross_entropy_op = torch_op("verdigris::linear_cross_entropy")(_linear_cross_entropy_outputs)
_linear_cross_entropy_op.register_autograd(_linear_gradients, setup_context=_setup_linear_context)
_linear_cross_entropy = traced_or_eager(_linear_cross_entropy_op, _linear_cross_entropy_outputs,
                                        _setup_linear_context, _linear_gradients)


def _check(logits_shape, labels, dtype, what: str) -> None:
    if len(logits_shape) != 2 or labels.shape != logits_shape[:1]:
        raise ValueError(f"{what}: logits must be (rows, vocab) and labels (rows,); got "
                         f"{tuple(logits_shape)} and {tuple(labels.shape)}")
    if dtype not in DTYPES or labels.dtype.is_floating_point:
        raise ValueError(f"{what}: logits must be float32, bfloat16 or float16 and labels "
                         f"integers; got {dtype} and {labels.dtype}")


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean softmax cross-entropy of the logits x @ weight.T ((rows, features) by (vocab,
    features)) against (rows,) labels, rows labelled -100 left out:
    `F.cross_entropy(F.linear(x, weight), labels)` without logits beside their gradient."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1] or x.dtype != weight.dtype:
        raise ValueError(f"linear_cross_entropy: x must be (rows, features) and weight (vocab, features), "
                         f"of one dtype; got {tuple(x.shape)} {x.dtype} and {tuple(weight.shape)} {weight.dtype}")
    _check((x.shape[0], weight.shape[0]), labels, x.dtype, "linear_cross_entropy")
    return _linear_cross_entropy(x, weight, labels)[0]


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean softmax cross-entropy of (rows, vocab) logits against (rows,) labels,
    rows labelled -100 left out."""
    _check(logits.shape, labels, logits.dtype, "cross_entropy")
    return _cross_entropy(logits, labels)[0]
