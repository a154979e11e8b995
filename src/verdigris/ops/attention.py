"""Scaled dot-product attention as a differentiable torch op on verdigris kernels.

Takes: torch tensors q, k, v of one shape (batch, heads, seq, head_dim) and one dtype,
float16 or bfloat16, on the device verdigris runs on (CUDA tensors on the cuda backend, CPU
tensors on the cpu one), head_dim at most MAX_HEAD_DIM, 128 (on sm_90a the powers of two
from 16 stream their tiles by TMA; others run without); `causal` (each query sees the keys up to its own position) and
`scale` (positive; default 1 / sqrt(head_dim)).

Gives: `attention(q, k, v, causal=False, scale=None)`, softmax(q k^T * scale) v, as
`torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`
computes it, and the torch custom ops `verdigris::attention` (results: the output and each
row's log-sum-exp, float32 (batch * heads, seq)) and `verdigris::attention_backward`.

Guarantees: float32 arithmetic (scores, softmax, the products' sums), the probabilities and
dS rounded to the inputs' dtype before their products (as FlashAttention does), results in
the inputs' dtype. The forward saves its output and the log-sum-exp; the backward recomputes
the probabilities from them (FlashAttention-2's scheme) and writes each gradient element
from one block, summed in a fixed order: the gradients are the same bit for bit from run to
run (no atomics; this is the only mode). Kernels: `examples.tile_attention`.
"""
from __future__ import annotations

import math

import torch

import verdigris as vg
from verdigris.autograd import differentiable_op
from verdigris.examples.tile_attention import attention as attention_forward
from verdigris.examples.tile_attention import attention_backward

FORWARD_TILES = (128, 64)  # (BM, BN): bench/matmul.py's first attention configuration
DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 128  # the dK/dV kernel's tiles of 256 columns need more shared memory than a block has


def _heads(t: torch.Tensor) -> torch.Tensor:
    """(batch, heads, seq, d) as the kernels' (batch * heads, seq, d), contiguous."""
    return t.contiguous().view(t.shape[0] * t.shape[1], *t.shape[2:])


def _attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    q3, k3, v3 = _heads(q), _heads(k), _heads(v)
    bh, seq, d = q3.shape
    o = torch.empty_like(q3)
    lse = q3.new_empty((bh, seq), dtype=torch.float32)
    if o.numel():
        bm, bn = FORWARD_TILES
        attention_forward[vg.cdiv(seq, bm), bh](q3, k3, v3, o, lse, scale, CAUSAL=causal,
                                                BM=bm, BN=bn, D=d)
    return o.view(q.shape), lse


def _attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        causal: bool, scale: float, o: torch.Tensor,
                        lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q3 = _heads(q)
    dq, dk, dv = (torch.empty_like(q3) for _ in range(3))
    if q3.numel():
        attention_backward(q3, _heads(k), _heads(v), _heads(o), lse, _heads(do),
                           dq, dk, dv, torch.empty_like(lse), scale, causal)
    return dq.view(q.shape), dk.view(q.shape), dv.view(q.shape)


_attention = differentiable_op("verdigris::attention", _attention_forward, _attention_backward,
                               saves_outputs=True)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over the last two axes of (batch, heads, seq, head_dim)
    tensors, causal or not; scale defaults to 1 / sqrt(head_dim)."""
    if not (q.shape == k.shape == v.shape and q.dim() == 4):
        raise ValueError(f"attention: q, k and v must have one shape (batch, heads, seq, "
                         f"head_dim); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype and q.dtype in DTYPES):
        raise ValueError(f"attention: q, k and v must be all float16 or all bfloat16; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype} (convert them with .to())")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"attention: head_dim is at most {MAX_HEAD_DIM}; got {q.shape[-1]}")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError(f"attention: scale must be positive; got {scale}")
    return _attention(q, k, v, bool(causal), scale)
