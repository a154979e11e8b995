"""Fused AdamW over many parameter tensors in one launch: every tensor lives in one packed
buffer, each at an offset that is a multiple of the block's tile, so each block updates a
tile of exactly one tensor.

Takes: a `PackedLayout` (from `pack_layout(shapes, decays, block)`: each tensor's offset,
the packed length, and one flag per block saying whether its tensor takes weight decay, as
GPT training decays matrices and not biases or norms); packed 1-d buffers of that length:
`master` (float32 master weights), `grad` (float32 or bfloat16), `exp_avg` and
`exp_avg_sq` (float32), and `params` (bfloat16, or any dtype: the model's weights, written
back from the master weights); the step number (from 1), `lr`, `betas`, `eps` and
`weight_decay`.

Gives: `adamw_step(...)`, one launch that updates master, exp_avg, exp_avg_sq and params
in place, and `PackedLayout.views(buffer)` (a view of the packed buffer for each tensor).

Guarantees: the update is torch.optim.AdamW's single-tensor step (decoupled weight decay,
step-dependent bias correction), operation for operation in float32, each rounding on
its own (no fused multiply-adds): `p *= 1 - lr * wd`; `m.lerp_(g, 1 - beta1)`;
`v = v * beta2 + (1 - beta2) * g * g`; `p += -lr / (1 - beta1**step) * m / (sqrt(v) /
sqrt(1 - beta2**step) + eps)`, where the step's scalars are computed in float64 on the host
and rounded to float32 once, as torch does. The padding between tensors stays zero (its
gradient must be zero: `pack_layout`'s buffers start zeroed). Each block reads and writes
only its own tile, which the race checker proves; no `vg.unsafe()`.
"""
import math
from dataclasses import dataclass

import numpy as np

import verdigris as vg
from verdigris import tile

BLOCK = 4096  # elements per block; every tensor starts at a multiple of it


@tile.kernel
def adamw(master, grad, exp_avg, exp_avg_sq, params, block_decays, decay, lerp_weight, beta2,
          one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size, BLOCK: vg.constexpr = BLOCK):
    b = tile.bid(0)
    g = tile.load(grad, index=(b,), shape=(BLOCK,)).astype(vg.float32)
    p = tile.load(master, index=(b,), shape=(BLOCK,))
    p = p * tile.where(tile.load(block_decays, index=(b,), shape=()) != 0, decay, vg.float32(1.0))
    m = tile.load(exp_avg, index=(b,), shape=(BLOCK,))
    diff = g - m
    if lerp_weight < 0.5:  # torch's lerp: the form that is exact at each end
        m = m + lerp_weight * diff
    else:
        m = g - diff * (1.0 - lerp_weight)
    v = tile.load(exp_avg_sq, index=(b,), shape=(BLOCK,))
    v = v * beta2 + one_minus_beta2 * g * g
    denom = tile.sqrt(v) / bias_correction2_sqrt + eps
    p = p + neg_step_size * m / denom
    tile.store(exp_avg, index=(b,), tile=m)
    tile.store(exp_avg_sq, index=(b,), tile=v)
    tile.store(master, index=(b,), tile=p)
    tile.store(params, index=(b,), tile=p.astype(params.dtype))


@dataclass(frozen=True)
class PackedLayout:
    shapes: tuple  # each tensor's shape
    offsets: tuple  # each tensor's first element in the packed buffer (multiples of block)
    size: int  # the packed length (a multiple of block)
    block: int
    block_decays: np.ndarray  # uint8, one per block: 1 where its tensor takes weight decay

    def views(self, buffer):
        """A view of `buffer` (packed, 1-d) shaped as each tensor."""
        return [buffer[o:o + math.prod(s)].reshape(s) for o, s in zip(self.offsets, self.shapes)]


def pack_layout(shapes, decays=None, block=BLOCK) -> PackedLayout:
    """Offsets for `shapes` packed one after another, each rounded up to a multiple of
    `block`; `decays` (one bool per tensor, all True by default) says which take weight
    decay."""
    shapes = tuple(tuple(s) for s in shapes)
    decays = [True] * len(shapes) if decays is None else list(decays)
    if len(decays) != len(shapes):
        raise ValueError(f"pack_layout: {len(shapes)} shapes but {len(decays)} decay flags")
    offsets, flags, end = [], [], 0
    for shape, decayed in zip(shapes, decays):
        offsets.append(end)
        blocks = vg.cdiv(math.prod(shape), block)
        flags += [int(decayed)] * blocks
        end += blocks * block
    return PackedLayout(shapes, tuple(offsets), end, block, np.array(flags, np.uint8))


def step_scalars(step, lr, betas, eps, weight_decay):
    """The step's scalars as torch computes them: in float64, then rounded to float32."""
    beta1, beta2 = betas
    f32 = np.float32
    return dict(decay=f32(1 - lr * weight_decay), lerp_weight=f32(1 - beta1), beta2=f32(beta2),
                one_minus_beta2=f32(1 - beta2), bias_correction2_sqrt=f32((1 - beta2 ** step) ** 0.5),
                eps=f32(eps), neg_step_size=f32(-(lr / (1 - beta1 ** step))))


def adamw_step(layout: PackedLayout, master, grad, exp_avg, exp_avg_sq, params, block_decays, *, step,
               lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """One AdamW step over every tensor of `layout`, in one launch. `block_decays` is
    `layout.block_decays` on the arrays' device (`vg.asarray` or a torch tensor)."""
    if step < 1:
        raise ValueError(f"adamw_step: step counts from 1, got {step}")
    adamw[layout.size // layout.block](master, grad, exp_avg, exp_avg_sq, params, block_decays,
                                       BLOCK=layout.block, **step_scalars(step, lr, betas, eps, weight_decay))


def reference_step(master, grad, exp_avg, exp_avg_sq, decays, *, step, lr, betas, eps, weight_decay):
    """float64 AdamW (the textbook update), on copies; `decays` is a bool per element."""
    beta1, beta2 = betas
    p, g = master.astype(np.float64), grad.astype(np.float64)
    p = p * np.where(decays, 1 - lr * weight_decay, 1.0)
    m = beta1 * exp_avg.astype(np.float64) + (1 - beta1) * g
    v = beta2 * exp_avg_sq.astype(np.float64) + (1 - beta2) * g * g
    p = p - lr / (1 - beta1 ** step) * m / (np.sqrt(v) / math.sqrt(1 - beta2 ** step) + eps)
    return p, m, v


def check(rng, shapes=((300, 70), (70,), (5000,), (3,)), steps=3):
    from verdigris.examples import Result

    layout = pack_layout(shapes, decays=[len(s) > 1 for s in shapes], block=1024)
    decays = np.repeat(layout.block_decays.astype(bool), layout.block)
    master, m, v = (np.zeros(layout.size, np.float32) for _ in range(3))
    for view in layout.views(master):
        view[...] = rng.standard_normal(view.shape)
    params = np.full(layout.size, np.nan, np.float32)
    want = (master.astype(np.float64), m.astype(np.float64), v.astype(np.float64))
    hyper = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for step in range(1, steps + 1):
        grad = np.zeros(layout.size, np.float32)
        for view in layout.views(grad):
            view[...] = rng.standard_normal(view.shape)
        adamw_step(layout, master, grad, m, v, params, layout.block_decays, step=step, **hyper)
        want = reference_step(*want[:1], grad, *want[1:], decays, step=step, **hyper)
    return [Result(f"AdamW, {steps} steps over {len(shapes)} tensors packed in one launch", master, want[0], 1e-5),
            Result("its first moment", m, want[1], 1e-5),
            Result("its second moment", v, want[2], 1e-5),
            Result("the parameters written back", params, master, 0.0)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
