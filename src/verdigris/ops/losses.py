"""Softmax cross-entropy as a differentiable torch op on verdigris kernels, its gradient
computed in the forward's launch.

Takes: torch tensors `logits` (rows, vocab) in float32, bfloat16 or float16 and `labels`
(rows,) of integers, where -100 (`IGNORE_INDEX`) marks a row that takes no part, on the
device verdigris runs on (CUDA tensors on the cuda backend, CPU tensors on the cpu one).

Gives: `cross_entropy(logits, labels)`, the mean loss over the rows that take part (a
float32 scalar), as `torch.nn.functional.cross_entropy(logits.float(), labels)` computes
it, and the torch custom op `verdigris::cross_entropy` (results: the loss and the
gradient of the mean with respect to the logits).

Guarantees: one launch (`examples.tile_cross_entropy.forward_backward`) reads the logits
twice, in float32 (in place where their rows are evenly strided: `rows.rows`), and writes
each row's loss and the gradient of the mean, rounded once to the logits' dtype, into rows
that start on 16-byte boundaries (`rows.aligned_rows`); the op keeps that gradient, not the logits (a GPT's logits are its
largest activation: they are freed as soon as the loss is computed, and the backward does
no pass over them; it scales the kept gradient by the loss's upstream gradient). The
price: a forward under `torch.no_grad()` computes the gradient too. Rows that take part
are counted on the device (no host synchronisation). A mean over no rows is NaN, as
torch's. The op is not made with `verdigris.autograd.differentiable_op`, which saves
every tensor input for the backward: that would keep the logits alive.
"""
from __future__ import annotations

import torch

from verdigris.examples.tile_cross_entropy import IGNORE_INDEX, forward_backward
from verdigris.ops.rows import aligned_rows, rows
from verdigris.runtime.torch_ops import torch_op

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@torch_op("verdigris::cross_entropy")
def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


_cross_entropy.register_autograd(_gradient, setup_context=_setup_context)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean softmax cross-entropy of (rows, vocab) logits against (rows,) labels,
    rows labelled -100 left out."""
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy: logits must be (rows, vocab) and labels (rows,); got "
                         f"{tuple(logits.shape)} and {tuple(labels.shape)}")
    if logits.dtype not in DTYPES or labels.dtype.is_floating_point:
        raise ValueError(f"cross_entropy: logits must be float32, bfloat16 or float16 and labels "
                         f"integers; got {logits.dtype} and {labels.dtype}")
    return _cross_entropy(logits, labels)[0]
