"""The residual stream of a pre-norm transformer without passes of its own: a linear layer
added into the stream and the LayerNorm of the sum, one differentiable torch op.

Takes: torch tensors x (..., K), a weight (N, K) and bias (N,) as torch.nn.Linear stores
them, the residual stream (..., N) in x's dtype, a LayerNorm's weight and bias (N,) and
its eps; on the device verdigris runs on (as `verdigris.ops.linear` and `.norms` take them).

Gives: `linear_residual_layer_norm(x, weight, bias, residual, norm_weight, norm_bias,
eps=1e-5)` -> (stream, normed): stream = residual + F.linear(x, weight, bias) and normed =
F.layer_norm(stream, (N,), norm_weight, norm_bias, eps), the torch custom op
`verdigris::linear_residual_layer_norm` (with its `_backward`); and for a transformer's
MLP, `mlp_residual_layer_norm(x, fc_weight, fc_bias, proj_weight, proj_bias, residual,
norm_weight, norm_bias, eps=1e-5)` -> (stream, normed), the same with the layer's input
gelu(F.linear(x, fc_weight, fc_bias)) (the erf form), the op
`verdigris::mlp_residual_layer_norm`.

Guarantees: the forward is `linear(x, weight, bias, residual=residual)` (the sum in the
product's float32 epilogue, rounded once) and the LayerNorm of its result; the backward
takes both results' gradients and makes the stream's whole gradient g = d_stream +
LayerNorm's dx(d_normed) in the LayerNorm backward's kernel (one rounding), which is also
the residual's gradient (returned once, never copied); the same kernel sums g's columns
block by block (the layer's bias gradient, then `column_sums`: no pass over g of its own),
then dx and dw from g as `linear`'s backward makes them. Arithmetic and determinism are those of the two ops.

Why this op. In a pre-norm block every value of the stream has two uses, the next
LayerNorm and the next residual add, so autograd sums its two gradients with an add kernel
of its own: a pass over the (tokens, d_model) activations per use. The sum can only go
into a kernel if one op sees both uses, and a torch custom op cannot return one of its
inputs (an output may not alias an input), so the op must make the stream value itself:
the op that adds a layer into the stream is the one whose backward gets both gradients.
Liger's and Apex's add + LayerNorm (`(x + y, LN(x + y))`) does that for an add done by
the norm's kernel; here the add is already in the GEMM's epilogue (`linear`'s residual,
one pass fewer in the forward: the product is written once, as the sum), so the op is
linear + residual + LayerNorm: two kernels forward (GEMM with the residual epilogue, the
norm) and, backward, the norm's kernel writing g with the residual's gradient added, then
the layer's products from g, with no add anywhere. The alternative, a LayerNorm op taking
the stream and returning it beside the normed value, would copy the stream: the pass saved.

In GPT-2's block (examples/train_gpt.py) the attention projection and LayerNorm 2 are this
op, and the MLP with the next block's LayerNorm 1 is `mlp_residual_layer_norm` (the
block's input is handed over as (stream, normed) from the op that made it): no add of
the stream runs, forward or backward.

Why the MLP is one op. The GELU's backward, dz = dh * gelu'(z), is elementwise on the
gradient dh = g @ proj_weight that the projection's backward makes; in one op that
product's epilogue multiplies by gelu'(z) (`tile_linear.gemm_gelu_backward`), so dh is
never written and the pass that read it and z and wrote dz (a 4 * d_model wide one)
goes. Its saved tensors are those of the two ops it replaces (z, and y = gelu(z), the
projection's input). The backward: the norm's kernel makes g and its column sums (the
projection's bias gradient), the projection's dw = g.T @ y, dz in the product's
epilogue, then the first layer's dx, dw and db from dz as `linear`'s backward.
"""
from __future__ import annotations

import torch

from verdigris.autograd import differentiable_op
from verdigris.ops.linear import gelu_gradient, linear_gradients, linear_outputs, weight_gradient
from verdigris.ops.norms import layer_norm_backward, layer_norm_forward


def _forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor,
             norm_weight: torch.Tensor, norm_bias: torch.Tensor,
             eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """stream, normed, and the norm's mean and rstd (the backward's)."""
    (stream,) = linear_outputs(x, weight, bias, residual=residual)
    return (stream, *layer_norm_forward(stream, norm_weight, norm_bias, eps))


def _stream_gradients(d_stream, d_normed, bias, stream, norm_weight, norm_bias, mean, rstd) -> tuple:
    """g, the stream's whole gradient (d_stream plus the norm's dx, in the norm's kernel),
    the layer's bias gradient (g's column sums, from the same kernel), the norm's dw, db."""
    db = torch.empty_like(bias)
    g, d_norm_weight, d_norm_bias = layer_norm_backward(d_normed, stream, norm_weight, norm_bias, mean, rstd,
                                                        dsum=d_stream, dx_sums=db)
    return g, db, d_norm_weight, d_norm_bias


def _backward(d_stream: torch.Tensor, d_normed: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
              bias: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
              norm_bias: torch.Tensor, eps: float, stream: torch.Tensor, normed: torch.Tensor,
              mean: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                              torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dw, db, the residual's gradient (the stream's) and the norm's dw, db."""
    g, db, d_norm_weight, d_norm_bias = _stream_gradients(d_stream, d_normed, bias, stream, norm_weight,
                                                          norm_bias, mean, rstd)
    return (*linear_gradients(g, x, weight), db, g, d_norm_weight, d_norm_bias)


_linear_residual_layer_norm = differentiable_op("verdigris::linear_residual_layer_norm", _forward, _backward,
                                                outputs=2, saves_outputs=True)


def linear_residual_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                               residual: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor,
                               eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """(stream, normed): stream = residual + x @ weight.T + bias, normed = its LayerNorm."""
    return _linear_residual_layer_norm(x, weight, bias, residual, norm_weight, norm_bias, float(eps))


def _mlp_forward(x: torch.Tensor, fc_weight: torch.Tensor, fc_bias: torch.Tensor, proj_weight: torch.Tensor,
                 proj_bias: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                 norm_bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                               torch.Tensor, torch.Tensor, torch.Tensor]:
    """stream, normed, then the GELU's output y and input z, and the norm's mean and rstd."""
    y, z = linear_outputs(x, fc_weight, fc_bias, gelu=True)
    stream, normed, mean, rstd = _forward(y, proj_weight, proj_bias, residual, norm_weight, norm_bias, eps)
    return stream, normed, y, z, mean, rstd


def _mlp_backward(d_stream: torch.Tensor, d_normed: torch.Tensor, x: torch.Tensor, fc_weight: torch.Tensor,
                  fc_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
                  residual: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor, eps: float,
                  stream: torch.Tensor, normed: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                  mean: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                   torch.Tensor, torch.Tensor, torch.Tensor,
                                                                   torch.Tensor, torch.Tensor]:
    """dx, the two layers' dw and db, the residual's gradient, the norm's dw and db."""
    g, d_proj_bias, d_norm_weight, d_norm_bias = _stream_gradients(d_stream, d_normed, proj_bias, stream,
                                                                   norm_weight, norm_bias, mean, rstd)
    dz = gelu_gradient(g, proj_weight, z)  # the projection's dx, through the GELU in its epilogue
    dx, d_fc_weight, d_fc_bias = linear_gradients(dz, x, fc_weight, fc_bias)
    return (dx, d_fc_weight, d_fc_bias, weight_gradient(g, y), d_proj_bias, g, d_norm_weight, d_norm_bias)


_mlp_residual_layer_norm = differentiable_op("verdigris::mlp_residual_layer_norm", _mlp_forward, _mlp_backward,
                                             outputs=2, saves_outputs=True)


def mlp_residual_layer_norm(x: torch.Tensor, fc_weight: torch.Tensor, fc_bias: torch.Tensor,
                            proj_weight: torch.Tensor, proj_bias: torch.Tensor, residual: torch.Tensor,
                            norm_weight: torch.Tensor, norm_bias: torch.Tensor,
                            eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """(stream, normed): stream = residual + gelu(x @ fc_weight.T + fc_bias) @ proj_weight.T
    + proj_bias (GELU's erf form), normed = its LayerNorm."""
    return _mlp_residual_layer_norm(x, fc_weight, fc_bias, proj_weight, proj_bias, residual, norm_weight,
                                    norm_bias, float(eps))
