"""Scaled dot-product attention as a differentiable torch op on verdigris kernels.

Takes: torch tensors q (batch, heads, seq, head_dim) and k, v (batch, kv_heads, seq,
head_dim), kv_heads dividing heads (grouped-query attention: query head h reads K/V head
h // (heads // kv_heads); kv_heads == heads is multi-head attention), of one dtype, float16
or bfloat16, on the device verdigris runs on (CUDA tensors on the cuda backend, CPU
tensors on the cpu one), head_dim at most MAX_HEAD_DIM, 128 (on sm_90a the powers of two
from 16 stream their tiles by TMA, over views whose strides are multiples of 16 bytes;
others run without); `causal` (each query sees the keys up to its own position) and
`scale` (positive; default 1 / sqrt(head_dim)).

Gives: `attention(q, k, v, causal=False, scale=None)`, softmax(q k^T * scale) v, as
`torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
enable_gqa=True)` computes it, as a (batch, heads, seq, head_dim) view of (batch, seq,
heads, head_dim) memory (so that `o.transpose(1, 2).reshape(batch, seq, heads * head_dim)`
is a view too); `attention_qkvpacked(qkv, heads, causal=False, scale=None)`, the same of
GPT-2's packed qkv (batch, seq, 3 * heads * head_dim: q, k and v one after another along
the last axis, as `flash_attn_qkvpacked_func` takes them flattened), as (batch, seq, heads
* head_dim), whose gradient is one tensor of qkv's shape; `attention_varlen(q, k, v,
cu_seqlens, causal=False, scale=None)`, the forward only, of packed sequences
(`flash_attn_varlen_func`'s layout: q (total_tokens, heads, head_dim), k and v
(total_tokens, kv_heads, head_dim), cu_seqlens int32 (batch + 1,), head_dim up to 256);
`attention_fp8(q, k, v, descale_q, descale_k, descale_v, causal=False, scale=None)`, the
forward only, of float8_e4m3fn q, k, v laid out as `attention`'s with FlashAttention-3's
per-tensor descales (positive numbers: a tensor's real values are its stored ones times its
descale), head_dim up to 256, bfloat16 results; and the torch custom ops
`verdigris::attention` and `verdigris::attention_qkvpacked` (results: the output and each
row's log-sum-exp, float32 (batch * heads, seq)), their `_backward` ops,
`verdigris::attention_varlen` and `verdigris::attention_fp8` (their outputs only; forward
only: a backward through them raises NotImplementedError naming the function, in eager mode
and compiled alike, and never gives a gradient).

Guarantees: float32 arithmetic (scores, softmax, the products' sums), the probabilities and
dS rounded to the inputs' dtype before their products (as FlashAttention does), results in
the inputs' dtype. The dense ops hand the kernels the caller's tensors as they lie, views
of any strides (a tensor whose last stride is not 1 is copied first), and the kernels write
the output and the gradients where they belong: no copy or transpose around them, and the
packed op's backward writes dQ, dK and dV into their parts of one gradient (no torch.cat or
stack); `attention`'s gradients are laid out as its inputs where those are dense. The
forward reads each K/V head once per query head of its group, with no copy; it saves its
output and the log-sum-exp; the backward recomputes the probabilities from them
(FlashAttention-2's scheme; with kv_heads < heads each query head's share of its K/V head's
dK and dV, then the shares of a group summed) and writes each gradient element from one
block, summed in a fixed order: the gradients are the same bit for bit from run to run (no
atomics; this is the only mode). Every op allocates its results with torch, so its fake
implementation gives their shapes without a launch and torch.compile(fullgraph=True) traces
it. fp8 passes V as stored (the kernel transposes it on its way to shared memory; no copy
to the kernel's V_TRANSPOSED layout). Kernels: `examples.tile_attention`,
`examples.tile_attention_variants` (varlen, fp8).
"""
from __future__ import annotations

import math

import torch

import verdigris as vg
from verdigris.autograd import differentiable_op, forward_only_op
from verdigris.examples.tile_attention import FORWARD_LAUNCH, attention_backward, by_head
from verdigris.examples.tile_attention import attention as attention_forward
from verdigris.examples.tile_attention_variants import FP8_LAUNCH
from verdigris.examples.tile_attention_variants import attention_fp8 as fp8_forward
from verdigris.examples.tile_attention_variants import attention_varlen as varlen_forward

FORWARD_TILES = (128, 64)  # (BM, BN): bench/matmul.py's first attention configuration
DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 128  # the dK/dV kernel's tiles of 256 columns need more shared memory than a block has


def _kernel_view(t: torch.Tensor) -> torch.Tensor:
    """`t` as the kernels take it: itself where its last stride is 1 (any others: the
    kernels index them, the copy engine's tensor maps take them), else a contiguous copy
    (autograd's gradient of a sum is a broadcast, every stride 0)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _head_views(packed: torch.Tensor, heads: int, parts: int) -> tuple:
    """The `parts` (batch, heads, seq, head_dim) views of a (batch, seq, parts * heads *
    head_dim) tensor of unit last stride (`examples.tile_attention.head_views`)."""
    return packed.unflatten(2, (parts, heads, -1)).permute(2, 0, 3, 1, 4).unbind(0)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, causal: bool,
             scale: float) -> torch.Tensor:
    """Launch the forward into `o`; give each row's log-sum-exp, (batch * heads, seq)."""
    batch, heads, seq, d = q.shape
    lse = q.new_empty((batch * heads, seq), dtype=torch.float32)
    if o.numel():
        bm, bn = FORWARD_TILES
        attention_forward[vg.cdiv(seq, bm), heads, batch](q, k, v, o, by_head(lse, batch, heads), scale,
                                                          CAUSAL=causal, BM=bm, BN=bn, D=d, GROUP=heads // k.shape[1])
    return lse


def _backward(q, k, v, o, lse, do, dq, dk, dv, causal: bool, scale: float) -> None:
    """Launch the backward into dq, dk and dv (views, written where they lie)."""
    if q.numel():
        attention_backward(q, k, v, o, lse, do, dq, dk, dv, torch.empty_like(lse), scale, causal)


def _attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (_kernel_view(t) for t in (q, k, v))
    batch, heads, seq, d = q.shape
    # (batch, seq, heads, head_dim) memory seen as (batch, heads, seq, head_dim): the
    # caller's o.transpose(1, 2).reshape(batch, seq, heads * head_dim) is then a view
    o = q.new_empty((batch, seq, heads, d)).transpose(1, 2)
    return o, _forward(q, k, v, o, causal, scale)


def _attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        causal: bool, scale: float, o: torch.Tensor,
                        lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v, o, do = (_kernel_view(t) for t in (q, k, v, o, do))
    group = q.shape[1] // k.shape[1]
    # laid out as the inputs where they are dense (empty_like keeps such strides); with
    # group > 1, dK and dV per query head (its share of its K/V head's), summed below
    dq = torch.empty_like(q)
    dk, dv = (torch.empty_like(t if group == 1 else q) for t in (k, v))
    _backward(q, k, v, o, lse, do, dq, dk, dv, causal, scale)
    if group > 1:
        dk, dv = (g.unflatten(1, (k.shape[1], group)).sum(2) for g in (dk, dv))
    return dq, dk, dv


_attention = differentiable_op("verdigris::attention", _attention_forward, _attention_backward,
                               saves_outputs=True)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over the last two axes of (batch, heads, seq, head_dim)
    tensors, causal or not; scale defaults to 1 / sqrt(head_dim). The result is a
    (batch, heads, seq, head_dim) view of (batch, seq, heads, head_dim) memory."""
    _check_dense("attention", q, k, v)
    return _attention(q, k, v, bool(causal), _checked("attention", q, k, v, DTYPES, MAX_HEAD_DIM, scale))


def _attention_qkvpacked_forward(qkv: torch.Tensor, heads: int, causal: bool,
                                 scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    qkv = _kernel_view(qkv)
    batch, seq, width = qkv.shape
    out = qkv.new_empty((batch, seq, width // 3))
    return out, _forward(*_head_views(qkv, heads, 3), *_head_views(out, heads, 1), causal, scale)


def _attention_qkvpacked_backward(dout: torch.Tensor, qkv: torch.Tensor, heads: int, causal: bool,
                                  scale: float, out: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    qkv, out, dout = (_kernel_view(t) for t in (qkv, out, dout))
    dqkv = qkv.new_empty(qkv.shape)  # dQ, dK and dV written into their parts by the kernels
    _backward(*_head_views(qkv, heads, 3), *_head_views(out, heads, 1), lse, *_head_views(dout, heads, 1),
              *_head_views(dqkv, heads, 3), causal, scale)
    return dqkv


_attention_qkvpacked = differentiable_op("verdigris::attention_qkvpacked", _attention_qkvpacked_forward,
                                         _attention_qkvpacked_backward, saves_outputs=True)


def attention_qkvpacked(qkv: torch.Tensor, heads: int, causal: bool = False,
                        scale: float | None = None) -> torch.Tensor:
    """FlashAttention's `flash_attn_qkvpacked_func` in GPT-2's layout: qkv (batch, seq, 3 *
    heads * head_dim) holds q, k and v one after another along its last axis (each heads *
    head_dim wide, head by head: a c_attn layer's output); gives softmax(q k^T * scale) v
    as (batch, seq, heads * head_dim), causal or not, scale defaulting to
    1 / sqrt(head_dim). Its gradient is one (batch, seq, 3 * heads * head_dim) tensor."""
    if not (qkv.dim() == 3 and isinstance(heads, int) and heads > 0 and qkv.shape[2] % (3 * heads) == 0):
        raise ValueError(f"attention_qkvpacked: qkv must be (batch, seq, 3 * heads * head_dim) "
                         f"for heads={heads!r}; got {tuple(qkv.shape)}")
    scale = _checked("attention_qkvpacked", *_head_views(qkv, heads, 3), DTYPES, MAX_HEAD_DIM, scale)
    return _attention_qkvpacked(qkv, heads, bool(causal), scale)


def _check_dense(name: str, q, k, v) -> None:
    """q (batch, heads, seq, head_dim) and k, v (batch, kv_heads, seq, head_dim), kv_heads
    dividing heads."""
    if not (k.shape == v.shape and q.dim() == k.dim() == 4 and q.shape[::2] == k.shape[::2]
            and q.shape[3] == k.shape[3] and k.shape[1] and q.shape[1] % k.shape[1] == 0):
        raise ValueError(f"{name}: q must be (batch, heads, seq, head_dim) and k and v "
                         f"(batch, kv_heads, seq, head_dim), kv_heads dividing heads; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


def _checked(name: str, q, k, v, dtypes, max_head_dim: int, scale: float | None) -> float:
    """The scale, once q, k and v's dtypes (one of `dtypes`, all three alike) and head_dim
    are ones the kernels take."""
    if not (q.dtype == k.dtype == v.dtype and q.dtype in dtypes):
        allowed = " or all ".join(str(t).removeprefix("torch.") for t in dtypes)
        raise ValueError(f"{name}: q, k and v must be all {allowed}; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype} (convert them with .to())")
    if q.shape[-1] > max_head_dim:
        raise ValueError(f"{name}: head_dim is at most {max_head_dim}; got {q.shape[-1]}")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError(f"{name}: scale must be positive; got {scale}")
    return scale


def _attention_varlen_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              cu_seqlens: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    total, heads, d = q.shape
    o = q.new_empty(q.shape)  # contiguous, whatever q's strides: viewed (total, heads * d) below
    if o.numel():
        launch = FORWARD_LAUNCH.get(d, dict(BM=128, BN=64))
        varlen_forward[vg.cdiv(total, launch["BM"]), heads](
            *(t.contiguous().view(total, -1) for t in (q, k, v)), o.view(total, -1),
            q.new_empty((heads, total), dtype=torch.float32), cu_seqlens.contiguous(), scale,
            CAUSAL=causal, D=d, GROUP=heads // k.shape[1], **launch)
    return o


_attention_varlen = forward_only_op("verdigris::attention_varlen", _attention_varlen_forward,
                                    "verdigris.ops.attention.attention_varlen")


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The attention of packed sequences (forward only): sequence b is rows
    cu_seqlens[b]:cu_seqlens[b + 1] of q (total_tokens, heads, head_dim) and of k, v
    (total_tokens, kv_heads, head_dim), kv_heads dividing heads, and attends within itself
    (causal: to its own earlier tokens). cu_seqlens: int32, batch + 1 entries, from 0 up to
    total_tokens, non-decreasing (others give wrong numbers, never a wrong access)."""
    if not (k.shape == v.shape and q.dim() == k.dim() == 3 and q.shape[::2] == k.shape[::2]
            and k.shape[1] and q.shape[1] % k.shape[1] == 0):
        raise ValueError(f"attention_varlen: q must be (total_tokens, heads, head_dim) and k "
                         f"and v (total_tokens, kv_heads, head_dim), kv_heads dividing heads; "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 or len(cu_seqlens) < 1:
        raise ValueError(f"attention_varlen: cu_seqlens must be a 1-d int32 tensor of batch + 1 "
                         f"offsets; got {cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}")
    scale = _checked("attention_varlen", q, k, v, DTYPES, max(FORWARD_LAUNCH), scale)
    return _attention_varlen(q, k, v, cu_seqlens, bool(causal), scale)


def _attention_fp8_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                           scale: float, descale_v: float) -> torch.Tensor:
    # the fp8 kernel's (batch * heads, seq, head_dim), contiguous
    q3, k3, v3 = (t.contiguous().flatten(0, 1) for t in (q, k, v))
    bh, seq, d = q3.shape
    o = q3.new_empty(q3.shape, dtype=torch.bfloat16)
    if o.numel():
        launch = FP8_LAUNCH.get(d, dict(BM=128, BN=64))
        fp8_forward[vg.cdiv(seq, launch["BM"]), bh](
            q3, k3, v3, o, q3.new_empty((bh, seq), dtype=torch.float32), scale, descale_v,
            CAUSAL=causal, D=d, GROUP=q.shape[1] // k.shape[1], **launch)
    return o.view(q.shape)


_attention_fp8 = forward_only_op("verdigris::attention_fp8", _attention_fp8_forward,
                                 "verdigris.ops.attention.attention_fp8")


def attention_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, descale_q: float,
                  descale_k: float, descale_v: float, causal: bool = False,
                  scale: float | None = None) -> torch.Tensor:
    """FlashAttention-3's fp8 attention (forward only), bfloat16 out: q (batch, heads, seq,
    head_dim) and k, v (batch, kv_heads, seq, head_dim) float8_e4m3fn, kv_heads dividing
    heads, whose real values are the stored ones times descale_q, descale_k and descale_v
    (positive numbers); scale (of the real scores) defaults to 1 / sqrt(head_dim)."""
    _check_dense("attention_fp8", q, k, v)
    scale = _checked("attention_fp8", q, k, v, (torch.float8_e4m3fn,), max(FP8_LAUNCH), scale)
    descales = [float(d) for d in (descale_q, descale_k, descale_v)]
    if not all(0 < d < math.inf for d in descales):
        raise ValueError(f"attention_fp8: descale_q, descale_k and descale_v must be positive "
                         f"and finite; got {descales}")
    return _attention_fp8(q, k, v, bool(causal), scale * descales[0] * descales[1], descales[2])
