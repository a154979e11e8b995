"""Attention backward (issue #28): each of our kernels' launch configurations, chosen one
kernel at a time, then the whole backward against the best of torch's SDPA backends, at
GPT-2's shape (B8 H12 S1024 D64, causal) and the issue's (B4 H32 S4096 D128).

Ours (the library's `tile_attention.attention_backward`): delta, then dK and dV
(`attention_backward_dkdv`, one block per key tile), then dQ (`attention_backward_dq`, one
block per query tile). Each kernel's configurations (tiles, warps) are timed alone and the
fastest kept (`linear_backward.fastest`). Torch: the backward of SDPA under each backend
(flash, cuDNN, efficient), the fastest kept. Every candidate is checked on what it computes
(relative Frobenius error at most 1e-2 against float32 SDPA gradients, our outputs poisoned
first) before it is timed; the chosen ones are timed again in turns over 5 rounds with ours
twice (the A-vs-A control, `linear_backward.line`). TFLOP/s count five products of
2 B H S^2 D (half causal). (FlashAttention-2's atomic dQ, measured against these in the
eighth session, bench/RESULTS.md, was a prototype in this script at ef89231.)

Run (GPU): `PYTHONPATH=src python3 bench/attention_backward.py [--shape gpt|issue|both]`.
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

import verdigris as vg
from verdigris.examples.tile_attention import (attention, attention_backward_delta, attention_backward_dkdv,
                                               attention_backward_dq, by_head)

from linear_backward import fastest, line
from norm_backward import rel_err
from suite_matmul import SDPA_BACKENDS, backward_of, sdpa_forward, sdpa_gradients

SHAPES = {"gpt": [(8, 12, 1024, 64, True)],
          "issue": [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True)]}
DKDV = [dict(BM=32, BN=128, num_warps=8), dict(BM=64, BN=128, num_warps=8), dict(BM=64, BN=128),
        dict(BM=64, BN=64), dict(BM=32, BN=64), dict(BM=128, BN=128, num_warps=8)]
DQ = [dict(BM=128, BN=64), dict(BM=128, BN=32, num_warps=8), dict(BM=64, BN=64), dict(BM=64, BN=128),
      dict(BM=128, BN=128, num_warps=8)]


def label(config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def worst(got, wants) -> float:
    return max(rel_err(g, w) for g, w in zip(got, wants))


def one_shape(batch, heads, seq, d, causal, results) -> None:
    shape = (batch, heads, seq, d)
    name = f"B{batch} H{heads} S{seq} D{d}{' causal' if causal else ''}"
    print(f"{name}:", file=sys.stderr)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = 1 / math.sqrt(d)
    wants = sdpa_gradients(q, k, v, do, causal)
    o, lse = torch.empty_like(q), torch.empty(batch * heads, seq, device="cuda")
    lse3, delta = by_head(lse, batch, heads), torch.empty(batch, heads, seq, device="cuda")
    attention[vg.cdiv(seq, 128), heads, batch](q, k, v, o, lse3, scale, CAUSAL=causal, BM=128, BN=64, D=d)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))

    def delta_launch():
        attention_backward_delta[vg.cdiv(seq, 128), heads, batch](o, do, delta, BM=128, D=d)

    def dkdv_of(config):
        return lambda: attention_backward_dkdv[vg.cdiv(seq, config["BN"]), heads, batch](
            q, k, v, do, lse3, delta, dk, dv, scale, CAUSAL=causal, D=d, **config)

    def dq_of(config):
        return lambda: attention_backward_dq[vg.cdiv(seq, config["BM"]), heads, batch](
            q, k, v, do, lse3, delta, dq, scale, CAUSAL=causal, D=d, **config)

    delta_launch()
    _, dkdv = fastest("dK/dV", ((label(c), dkdv_of(c)) for c in DKDV), lambda _: worst((dk, dv), wants[1:]),
                      (dk, dv))
    _, dq_run = fastest("dQ", ((label(c), dq_of(c)) for c in DQ), lambda _: worst((dq,), wants[:1]), (dq,))

    def ours():
        delta_launch()
        dkdv()
        dq_run()

    def recorded():  # each backend's forward, recorded once (a backend may refuse the shape)
        for backend in SDPA_BACKENDS:
            try:
                yield backend, backward_of(sdpa_forward(backend, causal), q, k, v, do)
            except RuntimeError as err:
                print(f"  torch {backend}: no forward ({str(err).splitlines()[0][:100]})", file=sys.stderr)

    _, theirs = fastest("torch", recorded(), lambda grads: worst(grads, wants))
    flops = 5 * 2 * batch * heads * seq * seq * d * (0.5 if causal else 1)
    line(name, flops, ours, theirs, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["gpt", "issue", "both"], default="both")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, bf16; torch/ours > 1 means ours is faster")
    results: dict = {}
    for key in ("gpt", "issue") if args.shape == "both" else (args.shape,):
        for shape in SHAPES[key]:
            one_shape(*shape, results)


if __name__ == "__main__":
    main()
