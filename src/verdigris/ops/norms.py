"""LayerNorm and RMSNorm as differentiable torch ops on verdigris kernels.

Takes: torch tensors x of shape (..., cols), normalized over the last axis, a weight (and
for LayerNorm a bias) of shape (cols,), in float16, bfloat16, float32 or float64 (x and
the weight may differ: a float32 weight beside bfloat16 activations is usual), on the
device verdigris runs on (CUDA tensors on the cuda backend, CPU tensors on the cpu one).

Gives: `layer_norm(x, weight, bias, eps=1e-5)` (torch.nn.functional.layer_norm over the
last axis) and `rms_norm(x, weight, eps=1e-6)` (torch.nn.functional.rms_norm's), the torch
custom ops `verdigris::layer_norm` and `verdigris::rms_norm` (with their `_backward`s), and
for ops that end with a LayerNorm, its halves: `layer_norm_forward(x, weight, bias, eps)`
(out, mean, rstd) and `layer_norm_backward(dy, x, weight, bias, mean, rstd, dsum=None,
dx_sums=None)` (dx, dw, db; dsum, a gradient x has from elsewhere, added into dx in the
same kernel; dx_sums, given dx's column sums, the bias gradient of the layer before).

Guarantees: arithmetic in float32 (float64 for float64 x), the results rounded once to x's
dtype and the weight gradients to the weight's; the forward saves each row's statistics
(mean and rstd) for the backward, which does not recompute them; the weight and bias
gradients are reduced across rows in a fixed order (per-block partial sums, then
`column_sums`), so they are the same bit for bit from run to run. Kernels:
`examples.tile_layernorm`, `examples.tile_rmsnorm`.
"""
from __future__ import annotations

import numpy as np
import torch

import verdigris as vg
from verdigris.autograd import differentiable_op
from verdigris.examples.tile_layernorm import (launch_layernorm_backward, layernorm_forward,
                                               rows_per_block, tile_cols)
from verdigris.examples.tile_rmsnorm import launch_rmsnorm_backward, rmsnorm_forward


def _arithmetic(x: torch.Tensor):
    """The kernels' arithmetic dtype for x, as torch and NumPy dtypes."""
    return (torch.float64, np.float64) if x.dtype == torch.float64 else (torch.float32, np.float32)


def _rows(t: torch.Tensor, cols: int) -> torch.Tensor:
    return t.contiguous().view(-1, cols)


def _statistics(x2: torch.Tensor) -> torch.Tensor:
    return x2.new_empty(x2.shape[0], dtype=_arithmetic(x2)[0])


def _partials(x2: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Each backward block's row of partial weight gradients, and the rows each block takes."""
    rows, cols = x2.shape
    per_block = rows_per_block(rows, cols)
    return x2.new_empty((vg.cdiv(rows, per_block), cols), dtype=_arithmetic(x2)[0]), per_block


def _backward_launch(x2: torch.Tensor) -> dict:
    """Launch options of a backward kernel: 16 warps for rows of 8192 and wider, where the
    row tiles live across the loop (x, dy, the weight-gradient sums) take 214 registers a
    thread at the lowering's 8 warps and 120 at 16 (ptxas, sm_90a; 4 warps spill); the
    lowering's own choice below. bench/norm_backward.py measures the alternatives."""
    return {"num_warps": 16} if tile_cols(x2.shape[1]) >= 8192 else {}


def layer_norm_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The normed x, and each row's mean and rstd (the backward's)."""
    x2 = _rows(x, x.shape[-1])
    out, mean, rstd = torch.empty_like(x2), _statistics(x2), _statistics(x2)
    if x2.numel():
        layernorm_forward[x2.shape[0]](x2, weight.contiguous(), bias.contiguous(), out, mean,
                                       rstd, _arithmetic(x2)[1](eps), COLS=tile_cols(x2.shape[1]))
    return out.view(x.shape), mean, rstd


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        mean: torch.Tensor, rstd: torch.Tensor, dsum: torch.Tensor | None = None,
                        dx_sums: torch.Tensor | None = None):
    """dx, dw, db from dy and the forward's mean and rstd; dx plus dsum (x's gradient from
    its other use, shaped as x), added in the backward's kernel, when dsum is given; and
    dx's column sums (of dx as rounded) into dx_sums ((cols,)), from partials the same
    kernel writes, when dx_sums is given: the bias gradient of the layer that made x."""
    x2 = _rows(x, x.shape[-1])
    dx, dw, db = torch.empty_like(x2), torch.empty_like(weight), torch.empty_like(bias)
    if x2.numel():
        (dw_partial, per_block), (db_partial, _) = _partials(x2), _partials(x2)
        launch_layernorm_backward(_rows(dy, x2.shape[1]), x2, weight.contiguous(), mean, rstd,
                                  dx, dw, db, dw_partial, db_partial, ROWS=per_block,
                                  dsum=None if dsum is None else _rows(dsum, x2.shape[1]),
                                  dx_sums=dx_sums, dx_partial=None if dx_sums is None else _partials(x2)[0],
                                  **_backward_launch(x2))
    else:
        dw.zero_(), db.zero_()
        if dx_sums is not None:
            dx_sums.zero_()
    return dx.view(x.shape), dw, db


def _layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor, eps: float, mean: torch.Tensor,
                         rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return layer_norm_backward(dy, x, weight, bias, mean, rstd)


def _rms_norm_forward(x: torch.Tensor, weight: torch.Tensor,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x2 = _rows(x, x.shape[-1])
    out, rstd = torch.empty_like(x2), _statistics(x2)
    if x2.numel():
        rmsnorm_forward[x2.shape[0]](x2, weight.contiguous(), out, rstd, _arithmetic(x2)[1](eps),
                                     COLS=tile_cols(x2.shape[1]))
    return out.view(x.shape), rstd


def _rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float,
                       rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x2 = _rows(x, x.shape[-1])
    dx, dw = torch.empty_like(x2), torch.empty_like(weight)
    if x2.numel():
        dw_partial, per_block = _partials(x2)
        launch_rmsnorm_backward(_rows(dy, x2.shape[1]), x2, weight.contiguous(), rstd, dx, dw,
                                dw_partial, ROWS=per_block, **_backward_launch(x2))
    else:
        dw.zero_()
    return dx.view(x.shape), dw


_layer_norm = differentiable_op("verdigris::layer_norm", layer_norm_forward, _layer_norm_backward)
_rms_norm = differentiable_op("verdigris::rms_norm", _rms_norm_forward, _rms_norm_backward)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of x over its last axis, scaled by `weight` and shifted by `bias`."""
    return _layer_norm(x, weight, bias, float(eps))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of x over its last axis, scaled by `weight`."""
    return _rms_norm(x, weight, float(eps))
