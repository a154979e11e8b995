"""GEMM backward and GEMM + bias + GELU backward at GPT-2's MLP shape (issue #28 item 1):
ours beside torch (cuBLAS), bf16, M = 8192 tokens, K = 768, N = 3072 (the up-projection
x (M, K) @ w.T, w (N, K) as nn.Linear stores it), printing each time and the ratio to
torch's from one run.

Cases:
- dA = dC @ B.T and dB = A.T @ dC for C = A @ B, A (M, K), B (K, N): ours
  `tile_gemm.gemm` with B_ORDER="F" / A_ORDER="F" (the transposed operand read as stored,
  wgmma's transpose flag); torch `dc @ b.T` and `a.T @ dc` (cuBLAS, no copy either);
- the fused layer's backward, dx, dw, dbias of y = gelu(x @ w.T + bias) from the saved
  pre-activation z: ours `launch_gemm_bias_gelu_backward` (dz and the bias partials in one
  pass, the column sums, two GEMMs); torch the same steps as autograd runs them
  (`aten.gelu_backward`, `dz.sum(0)`, `dz @ w`, `dz.T @ x`);
- the whole `verdigris::linear_gelu` forward + backward against torch autograd's
  F.gelu(F.linear(...)) (allocations included).
Ours are timed at a few GEMM tile configurations, each first checked against float32 torch
(relative Frobenius error; the times on stderr); the products of few output tiles (dB, and
the fused backward's weight gradient) also split along K into 2, 3 and 4 parts and into
the parts `tile_linear.k_parts` chooses for this GPU (split-K: `parts` in the printed
configuration; dA, and dx in the fused backward, take the parts k_parts chooses, 1 at
these shapes); the best is chosen and timed again beside
torch in turns over 5 rounds, with itself a second time as the A-vs-A control (the noise
printed beside each ratio: docs/benchmarks.md's method, in small). Times:
`triton.testing.do_bench` medians where Triton is installed, else CUDA events
(`bench/norm_backward.py`'s timer).
Run (GPU): `PYTHONPATH=src python3 bench/linear_backward.py [--m 8192 --k 768 --n 3072]
[--json FILE]`.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from verdigris.examples.tile_gemm import workspace_shape
from verdigris.examples.tile_linear import (k_parts, launch_gemm, launch_gemm_bias_gelu_backward, partials,
                                            split_workspace)
from verdigris.ops.linear import linear_gelu

from norm_backward import bench, rel_err  # the same timer (do_bench medians) and error measure

CONFIGS = [dict(BM=128, BN=128, BK=64), dict(BM=128, BN=256, BK=64), dict(BM=256, BN=128, BK=64),
           dict(BM=128, BN=64, BK=64)]
SPLITS = (2, 3, 4)  # split-K's parts tried beside 1 and k_parts' choice, on the first three tiles
TOLERANCE = 1e-2  # bf16 results over float32 accumulation, relative Frobenius
ROUNDS = 5


def multiprocessors() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def workspace(m, n, k, tiles, parts=None):
    """Split-K's workspace for an (m, n) product summed over k in `parts` parts (None: as
    many as k_parts chooses), or None for one kernel."""
    shape = split_workspace(m, n, k, tiles, multiprocessors()) if parts is None else \
        None if parts == 1 else workspace_shape(m, n, parts, tiles)
    return None if shape is None else torch.empty(shape, device="cuda", dtype=torch.float32)


def split_configs(m, n, k) -> list:
    """CONFIGS (parts: k_parts' choice), then the first three tiles in 1 and SPLITS parts,
    each (tiles, parts) once, for an (m, n) product summed over k."""
    configs = [dict(tiles, parts=k_parts(m, n, k, tiles, multiprocessors())) for tiles in CONFIGS]
    configs += [dict(tiles, parts=p) for tiles in CONFIGS[:3] for p in (1, *SPLITS)]
    return [c for i, c in enumerate(configs) if c not in configs[:i]]


def fastest(name, candidates, check, outputs=()):
    """The selection pass: the fastest of `candidates` ((label, launch) pairs, made as they
    are reached) whose results pass `check(what the launch returned)`, the worst relative
    error at most TOLERANCE, after a run into `outputs` poisoned with NaN (each time on
    stderr). Gives (label, launch)."""
    best = None
    for label, run in candidates:
        for out in outputs:
            out.fill_(float("nan"))
        result = run()
        torch.cuda.synchronize()
        error = check(result)
        if error > TOLERANCE:
            print(f"  {name} {label}: wrong (relative error {error:.2e})", file=sys.stderr)
            continue
        seconds = bench(run)
        print(f"  {name} {label}: {seconds * 1e6:.1f} us", file=sys.stderr)
        if best is None or seconds < best[0]:
            best = (seconds, label, run)
    if best is None:
        raise SystemExit(f"{name}: no configuration matched the reference")
    print(f"  {name}: chose {best[1]}", file=sys.stderr)
    return best[1], best[2]


def chosen(name, prepare, outputs, wants, configs=None):
    """`fastest` of our configurations (prepare(config) gives the launch to time, its
    workspaces allocated once) whose outputs match `wants`. Gives that launch."""
    return fastest(name, ((config, prepare(config)) for config in configs or CONFIGS),
                   lambda _: max(rel_err(o, w) for o, w in zip(outputs, wants)), outputs)[1]


def tiles_of(config) -> dict:
    return {key: v for key, v in config.items() if key != "parts"}


def line(name, flops, ours, theirs, results) -> None:
    """The final pass: ours (at its chosen configuration), its twin (the A-vs-A control)
    and torch, timed in turn over ROUNDS rounds; medians, and the ratio torch / ours."""
    rounds = {"ours": [], "twin": [], "torch": []}
    for r in range(ROUNDS):
        order = [("ours", ours), ("twin", ours), ("torch", theirs)]
        for key, fn in order[r % 3:] + order[:r % 3]:  # each round starts one further on
            rounds[key].append(bench(fn))
    median = {key: sorted(times)[len(times) // 2] for key, times in rounds.items()}
    noise = max(abs(t / o - 1) for t, o in zip(rounds["twin"] + [median["twin"]],
                                                 rounds["ours"] + [median["ours"]]))
    ratio = median["torch"] / median["ours"]
    print(f"{name:<34} ours {median['ours'] * 1e6:8.1f} us ({flops / median['ours'] / 1e12:6.1f} TFLOP/s)   "
          f"torch {median['torch'] * 1e6:8.1f} us ({flops / median['torch'] / 1e12:6.1f} TFLOP/s)   "
          f"torch/ours {ratio:5.3f} (A-vs-A noise {noise:.1%})")
    results[name] = dict(ours_s=median["ours"], torch_s=median["torch"], ratio=ratio, noise=noise,
                         flops=flops, rounds=rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=8192)
    parser.add_argument("--k", type=int, default=768)
    parser.add_argument("--n", type=int, default=3072)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    m, k, n = args.m, args.k, args.n
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, bf16, M={m} K={k} N={n}")
    results: dict = {}
    product = 2 * m * k * n

    # GEMM backward: C = A @ B
    a, b, dc = torch.randn(m, k, **bf16), torch.randn(k, n, **bf16), torch.randn(m, n, **bf16)
    da, db = torch.empty(m, k, **bf16), torch.empty(k, n, **bf16)
    want_da, want_db = dc.float() @ b.float().T, a.float().T @ dc.float()

    def ours_da(config):
        ws = workspace(m, k, n, config)
        return lambda: launch_gemm(dc, b, da, B_ORDER="F", tiles=config, workspace=ws)

    def ours_db(config):
        tiles = tiles_of(config)
        ws = workspace(k, n, m, tiles, config["parts"])
        return lambda: launch_gemm(a, dc, db, A_ORDER="F", tiles=tiles, workspace=ws)

    line("dA = dC @ B.T", product, chosen("dA = dC @ B.T", ours_da, [da], [want_da]), lambda: dc @ b.T, results)
    line("dB = A.T @ dC", product, chosen("dB = A.T @ dC", ours_db, [db], [want_db], split_configs(k, n, m)),
         lambda: a.T @ dc, results)

    # GEMM + bias + GELU backward from the saved pre-activation
    x, w, bias = torch.randn(m, k, **bf16), torch.randn(n, k, **bf16) * 0.05, torch.randn(n, **bf16)
    dy = torch.randn(m, n, **bf16)
    z = F.linear(x, w, bias)
    dz, dx, dw, dbias = torch.empty_like(z), torch.empty_like(x), torch.empty_like(w), torch.empty_like(bias)
    per_block, shape = partials(m, n)
    partial = torch.empty(shape, device="cuda", dtype=torch.float32)
    reference = [t.float().requires_grad_() for t in (x, w, bias)]
    wants = torch.autograd.grad(F.gelu(F.linear(*reference)), reference, dy.float())

    def ours_backward(config):  # dw = dz.T @ x (n, k) over m rows in config's parts, dx as chosen
        tiles = tiles_of(config)
        workspaces = workspace(m, k, n, tiles), workspace(n, k, m, tiles, config["parts"])
        return lambda: launch_gemm_bias_gelu_backward(dy, x, w, z, dz, dx, dw, dbias, partial, per_block,
                                                      tiles=tiles, workspaces=workspaces)

    def torch_backward():
        g = torch.ops.aten.gelu_backward(dy, z)
        return g @ w, g.T @ x, g.sum(0)

    line("gelu(x @ w.T + b) backward", 2 * product,
         chosen("gelu(x @ w.T + b) backward", ours_backward, [dx, dw, dbias], list(wants), split_configs(n, k, m)),
         torch_backward, results)

    # the differentiable op, forward + backward, against torch autograd
    params = [t.clone().requires_grad_() for t in (x, w, bias)]

    def step(fn):
        return lambda: torch.autograd.grad(fn(*params), params, dy)

    torch_layer = lambda x, w, b: F.gelu(F.linear(x, w, b))  # noqa: E731
    got = step(linear_gelu)()
    errors = [rel_err(g, want) for g, want in zip(got, wants)]
    assert max(errors) < TOLERANCE, errors
    line("linear_gelu op, forward + backward", 3 * product, step(linear_gelu), step(torch_layer), results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), m=m, k=k, n=n, results=results), f, indent=1)


if __name__ == "__main__":
    main()
