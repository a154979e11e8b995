"""Where a training step of examples/train_gpt.py's GPT goes, per implementation (GPU):
wall time per step, the GPU's kernel time per step (the sum of kernel durations: where it is
well under the wall time, the step waits on the host, launch by launch), and the kernels
that take the most time, with their launches per step.

Run: `PYTHONPATH=src python3 bench/gpt_profile.py [--impl verdigris,eager,compile]
[--steps 5] [--top 15] [--graph] [--host]`; `--host` also profiles the host's Python
(cProfile) over the same steps: the functions with the most time of their own, and with the
most time under them. Same model, batches and optimizers as the training script (GPT-2
small, batch 8 x 1024 tokens).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from verdigris.examples import train_gpt as gpt


def _graphed(model, optimizer, autocast, tokens, targets):
    """The step with its forward and backward captured once into a CUDA graph (torch's
    partial-network capture: the batch copied into static inputs, the graph replayed, then
    the optimizer's step outside it)."""
    static_tokens, static_targets = tokens.clone(), targets.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
        for _ in range(2):
            gpt.train_step(model, optimizer, autocast, static_tokens, static_targets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        with autocast:
            loss = model(static_tokens, static_targets)
        loss.backward()

    def step(model, optimizer, autocast, tokens, targets):
        static_tokens.copy_(tokens)
        static_targets.copy_(targets)
        optimizer.zero_grad(set_to_none=False)
        graph.replay()
        optimizer.step()
    return step


def profile_impl(impl: str, steps: int, top: int, batch: int, graph: bool, host: bool = False) -> None:
    config = gpt.CONFIGS["gpt2"]
    model, optimizer = gpt.make_model(impl, config, "cuda", 0)
    # Under capture, autocast's cache of cast weights would be baked into the graph.
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=impl != "verdigris", cache_enabled=not graph)
    draw = gpt.batches(config, batch, 0)
    data = [tuple(t.cuda() for t in draw(step)) for step in range(steps + 3)]
    for tokens, targets in data[:3]:  # compilation, autotuning and caches out of the way
        gpt.train_step(model, optimizer, autocast, tokens, targets)
    run = _graphed(model, optimizer, autocast, *data[0]) if graph else gpt.train_step
    torch.cuda.synchronize()
    started = time.perf_counter()
    for tokens, targets in data[3:]:
        run(model, optimizer, autocast, tokens, targets)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - started) / steps
    if host:
        profiler = cProfile.Profile()
        profiler.enable()
        for tokens, targets in data[3:]:
            run(model, optimizer, autocast, tokens, targets)
        torch.cuda.synchronize()
        profiler.disable()
        for order in ("tottime", "cumulative"):
            print(f"\n{impl}: host functions by {order}, {steps} steps")
            pstats.Stats(profiler).sort_stats(order).print_stats(top * 2)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for tokens, targets in data[3:]:
            run(model, optimizer, autocast, tokens, targets)
        torch.cuda.synchronize()
    kernels = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = kernels[event.name[:90]]
            entry[0] += event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
            entry[1] += 1
    busy = sum(t for t, _ in kernels.values()) / steps / 1e3
    launches = sum(n for _, n in kernels.values()) / steps
    print(f"\n{impl}{' (forward and backward in a CUDA graph)' if graph else ''}: wall {wall * 1e3:.2f} ms/step, GPU kernels {busy:.2f} ms/step "
          f"({busy / (wall * 1e3):.0%} busy), {launches:.0f} kernels/step, "
          f"{batch * config.context / wall:,.0f} tokens/s")
    for name, (t, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {t / steps / 1e3:7.3f} ms  {n / steps:5.0f}x  {name}")
    del model, optimizer
    torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default=",".join(gpt.IMPLS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--graph", action="store_true", help="also time each with forward and backward "
                        "captured in a CUDA graph (compile excepted: it is graphed by its own mode)")
    parser.add_argument("--host", action="store_true", help="also profile the host's Python (cProfile)")
    args = parser.parse_args()
    import verdigris as vg

    vg.set_backend("cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for impl in args.impl.split(","):
        profile_impl(impl, args.steps, args.top, args.batch, graph=False, host=args.host)
        if args.graph and impl != "compile":
            try:
                profile_impl(impl, args.steps, args.top, args.batch, graph=True)
            except Exception as error:  # a step that cannot be captured: say why, go on
                print(f"\n{impl} in a CUDA graph: {type(error).__name__}: {error}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
