"""Linear layers as differentiable torch ops on verdigris kernels.

Takes: torch tensors x of shape (..., K), a weight (N, K) as torch.nn.Linear stores it and a
bias (N,), all of one dtype (float16, bfloat16, float32 or float64), on the device
verdigris runs on (CUDA tensors on the cuda backend, CPU tensors on the cpu one).

Gives: `linear(x, weight, bias=None, residual=None)` (torch.nn.functional.linear; with a
residual, residual + F.linear(x, weight, bias), the sum made in the product's epilogue),
`linear_forward(x, weight)` (its product, for ops that begin with a linear layer; the op
`torch.ops.verdigris.linear_backward(dy, x, weight)` gives its dx and dw),
`linear_gelu(x, weight, bias)` (F.gelu(F.linear(x, weight, bias)), the erf form, fused in
the product's epilogue), the torch custom ops `verdigris::linear`, `verdigris::linear_bias`,
`verdigris::linear_gelu`, `verdigris::linear_residual` and `verdigris::linear_bias_residual`
(with their `_backward`s), and for ops built on a linear layer its halves,
`linear_outputs(x, weight, bias=None, gelu=False, residual=None)` and
`linear_gradients(dy, x, weight, bias=None, z=None)`, `weight_gradient(dy, x)` (dw alone)
and `gelu_gradient(dy, weight, z)` (dz of a GELU whose output the layer reads, in the
product's epilogue: `tile_linear.gemm_gelu_backward`).

Guarantees: every product is `tile_gemm.gemm`, its operands read as stored (the weight
transposed in the forward, dy transposed for the weight gradient: views, no copies;
`examples.tile_linear`); the outputs' rows start on 16-byte boundaries (`rows.aligned_rows`:
a vocabulary of 50,257 columns gets a padded row pitch, which every later pass reads
aligned), and inputs whose rows are evenly strided are read in place (`rows.rows`); accumulation in float32 (float64 for float64), each result rounded
once to its dtype. A product whose output tiles would leave the GPU's multiprocessors idle
(fewer than two waves: the weight gradient of a long sequence, any product of a few rows)
is split along K (`tile_linear.k_parts`): `gemm_split` sums each part into its own slice
of a float32 workspace, `split_sum` adds the slices in a fixed order, so every result is
the same bit for bit from run to run (no float atomics). `linear_gelu` saves the pre-activation x @ w.T + bias (in x's dtype) for
the backward, which does not recompute the product. A residual is read in the product's
epilogue (`tile_linear.gemm_bias_residual`): residual + x @ w.T + bias is summed in float32
and rounded once, with no pass of its own over the activations; its gradient is the
output's gradient itself, passed on without a copy (`differentiable_op`'s
`passes_gradient`: the backward is the plain layer's). A residual linear layer without a
bias adds a zero bias (one fill of N numbers) rather than having kernels of its own. Bias gradients are column sums in a
fixed order (per-block partials, then `column_sums`): the same bit for bit from run to run.
"""
from __future__ import annotations

import torch

from verdigris.autograd import differentiable_op
from verdigris.examples.tile_linear import (gemm_tiles, launch_gemm, launch_gemm_bias_gelu_backward,
                                            launch_gemm_gelu_backward, launch_linear_backward,
                                            launch_linear_forward, partials, split_workspace)
from verdigris.ops.rows import aligned_rows, rows


def _accumulator(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _multiprocessors(t: torch.Tensor) -> int:
    """The multiprocessors of t's GPU; 0 on the cpu backend (split-K never pays there)."""
    return torch.cuda.get_device_properties(t.device).multi_processor_count if t.is_cuda else 0


def _workspace(like: torch.Tensor, m: int, n: int, k: int):
    """Split-K's workspace for an (m, n) product summed over k, where `k_parts` splits it
    on like's device; else None (one kernel)."""
    shape = split_workspace(m, n, k, gemm_tiles(like), _multiprocessors(like))
    return None if shape is None else like.new_empty(shape, dtype=_accumulator(like))


def linear_outputs(x: torch.Tensor, weight: torch.Tensor, bias=None, gelu: bool = False, residual=None):
    """(y,), or with gelu (y, z), z the pre-activation: y shaped as x with N features, and
    residual (shaped as y, x's dtype; with a bias, without gelu) added into it in the
    product's epilogue."""
    x2 = rows(x)
    y = aligned_rows(x2.shape[0], weight.shape[0], x2)
    z = aligned_rows(*y.shape, y) if gelu else None
    shape = (*x.shape[:-1], weight.shape[0])
    if residual is not None and (residual.shape != shape or residual.dtype != x.dtype):
        raise ValueError(f"linear: the residual must be shaped as the output, {tuple(shape)}, in x's dtype "
                         f"{x.dtype}; got {tuple(residual.shape)} {residual.dtype}")
    if y.numel():
        launch_linear_forward(x2, weight.contiguous(), y, None if bias is None else bias.contiguous().view(1, -1), z,
                              workspace=_workspace(x2, *y.shape, x2.shape[1]),
                              residual=None if residual is None else rows(residual))
    return (y.view(shape),) if z is None else (y.view(shape), z)


def _partials(dy2: torch.Tensor) -> tuple[torch.Tensor, int]:
    per_block, shape = partials(*dy2.shape)
    return dy2.new_empty(shape, dtype=_accumulator(dy2)), per_block


def linear_gradients(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias=None, z=None):
    """dx, dw (and db when there is a bias): dy through GELU first when z is given."""
    x2, dy2 = rows(x), rows(dy)
    dx, dw = torch.empty_like(x2), torch.empty_like(weight)
    db = None if bias is None else torch.empty_like(bias)
    (m, n), k = dy2.shape, x2.shape[1]
    workspaces = _workspace(dy2, m, k, n), _workspace(dy2, n, k, m)  # dx's, dw's
    if not dy2.numel():  # no rows (no gradient to add up) or no features
        dx.zero_(), dw.zero_()
        if db is not None:
            db.zero_()
    elif z is not None:
        partial, per_block = _partials(dy2)
        launch_gemm_bias_gelu_backward(dy2, x2, weight.contiguous(), rows(z), aligned_rows(*dy2.shape, dy2),
                                       dx, dw, db, partial, per_block, workspaces=workspaces)
    else:
        partial, per_block = _partials(dy2) if db is not None else (None, None)
        launch_linear_backward(dy2, x2, weight.contiguous(), dx, dw, db, partial, per_block,
                               workspaces=workspaces)
    return (dx.view(x.shape), dw) if db is None else (dx.view(x.shape), dw, db)


def weight_gradient(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dw = dy.T @ x over rows (a linear layer's weight gradient alone), shaped (N, K)."""
    x2, dy2 = rows(x), rows(dy)
    (m, n), k = dy2.shape, x2.shape[1]
    dw = x2.new_empty((n, k))
    if not m:
        return dw.zero_()
    launch_gemm(dy2, x2, dw, A_ORDER="F", workspace=_workspace(dy2, n, k, m))
    return dw


def gelu_gradient(dy: torch.Tensor, weight: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """dz = (dy @ weight) * gelu'(z), shaped as z: the gradient of a GELU's input z whose
    output a linear layer of this weight ((N, K)) reads, from that layer's output
    gradient dy, the GELU taken in the product's epilogue (rounded once)."""
    dy2, z2 = rows(dy), rows(z)
    dz = aligned_rows(*z2.shape, z2)
    if not dy2.shape[1]:  # the product sums nothing: dz is 0
        return dz.zero_().view(z.shape)
    if dz.numel():
        launch_gemm_gelu_backward(dy2, weight.contiguous(), z2, dz, workspace=_workspace(dy2, *z2.shape, dy2.shape[1]))
    return dz.view(z.shape)


def linear_forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T, its rows aligned (the product of `linear`'s forward)."""
    return linear_outputs(x, weight)[0]


def _linear_backward(dy: torch.Tensor, x: torch.Tensor,
                     weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return linear_gradients(dy, x, weight)


def _linear_bias_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return linear_outputs(x, weight, bias)[0]


def _linear_bias_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                          bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return linear_gradients(dy, x, weight, bias)


def _linear_residual_forward(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return linear_outputs(x, weight, weight.new_zeros(weight.shape[0]), residual=residual)[0]


def _linear_bias_residual_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                                  residual: torch.Tensor) -> torch.Tensor:
    return linear_outputs(x, weight, bias, residual=residual)[0]


def _linear_gelu_forward(x: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return linear_outputs(x, weight, bias, gelu=True)


def _linear_gelu_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                          z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return linear_gradients(dy, x, weight, bias, z)


_linear = differentiable_op("verdigris::linear", linear_forward, _linear_backward)
_linear_bias = differentiable_op("verdigris::linear_bias", _linear_bias_forward, _linear_bias_backward)
_linear_gelu = differentiable_op("verdigris::linear_gelu", _linear_gelu_forward, _linear_gelu_backward)
# a residual's gradient is the output's own (`passes_gradient`): the backwards are the plain layers'
_linear_residual = differentiable_op("verdigris::linear_residual", _linear_residual_forward, _linear_backward,
                                     passes_gradient=("residual",))
_linear_bias_residual = differentiable_op("verdigris::linear_bias_residual", _linear_bias_residual_forward,
                                          _linear_bias_backward, passes_gradient=("residual",))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias): torch.nn.functional.linear; with a residual (shaped as the
    result, in x's dtype), residual + x @ weight.T (+ bias), the sum made in the product's
    float32 epilogue and rounded once."""
    if residual is None:
        return _linear(x, weight) if bias is None else _linear_bias(x, weight, bias)
    return _linear_residual(x, weight, residual) if bias is None else _linear_bias_residual(x, weight, bias, residual)


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x @ weight.T + bias), the erf form (F.gelu's default), fused."""
    return _linear_gelu(x, weight, bias)
