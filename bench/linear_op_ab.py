"""The `linear_gelu` op, forward and backward, with split-K in the op on and off, taking turns
(GPU; bf16, M=8192 tokens, K=768, N=3072, GPT-2's MLP): why the whole op ran at 0.38x torch on
an H100 when its kernels alone ran at 0.87-0.92x (bench/RESULTS.md, third session of
2026-12-07). Prints microseconds per step (wall, 30 steps after 3 untimed) for each, twice.
Run: `PYTHONPATH=src python3 bench/linear_op_ab.py`.
"""
from __future__ import annotations

import time

import torch

import verdigris.ops.linear as linear_ops

M, K, N = 8192, 768, 3072


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.03).requires_grad_()
    b = torch.zeros(N, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    split = linear_ops._workspace

    def step():
        linear_ops.linear_gelu(x, w, b).backward(dy)

    for name, workspace in [("split-K as chosen", split), ("never split", lambda *a, **k: None)] * 2:
        linear_ops._workspace = workspace
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        host = time.perf_counter() - start  # one step's host time, the GPU idle before it
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(30):
            step()
        torch.cuda.synchronize()
        print(f"{name:18} {(time.perf_counter() - start) / 30 * 1e6:8.1f} us/step   "
              f"one step's host time {host * 1e6:7.0f} us", flush=True)
    linear_ops._workspace = split


if __name__ == "__main__":
    main()
