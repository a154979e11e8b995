"""Where a training step of examples/train_gpt.py's GPT goes, per implementation (GPU):
wall time per step, the GPU's kernel time per step (the sum of kernel durations: where it is
well under the wall time, the step waits on the host, launch by launch), and the kernels
that take the most time, with their launches per step.

Run: `PYTHONPATH=src python3 bench/gpt_profile.py [--impl verdigris,eager,compile]
[--steps 5] [--top 15] [--graph] [--host]`; `--host` also samples the host's Python stack
over the same steps (`sample_host`: every 0.2 ms, the main thread's frames; cProfile does not
see Cython's functions, cuda-bindings' calls among them, and gave their time to whatever
called them): the functions with the most time of their own, and with the most time under
them. Same model, batches and optimizers as the training script (GPT-2
small, batch 8 x 1024 tokens).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter, defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from verdigris.examples import train_gpt as gpt


def sample_host(work, interval: float = 2e-4) -> tuple:
    """Run `work()` while a thread samples the calling thread's Python stack every
    `interval` seconds. Gives (samples, the seconds `work` took, Counter of each sample's
    innermost function, Counter of every function on a sample's stack, once a sample)."""
    main, own, under, count = threading.get_ident(), Counter(), Counter(), [0]
    done = threading.Event()

    def name(frame) -> str:
        code = frame.f_code
        return f"{code.co_filename.rsplit('/', 2)[-1]}:{code.co_firstlineno}({code.co_name})"

    def sampler():
        while not done.wait(interval):
            frame = sys._current_frames().get(main)
            if frame is None:
                continue
            count[0] += 1
            own[name(frame)] += 1
            seen = set()
            while frame is not None:
                seen.add(name(frame))
                frame = frame.f_back
            under.update(seen)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(interval / 4)  # the sampler gets the interpreter that often
    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        work()
    finally:
        seconds = time.perf_counter() - started
        done.set()
        thread.join()
        sys.setswitchinterval(switch)
    return count[0], seconds, own, under


def print_samples(impl: str, sampled: tuple, steps: int, top: int) -> None:
    samples, seconds, own, under = sampled
    per_step = seconds / steps * 1e3 / max(samples, 1)  # ms of a step a sample stands for
    for title, counter in (("own time", own), ("time under them", under)):
        print(f"\n{impl}: host functions by {title} ({samples} samples over {steps} steps, "
              f"{seconds / steps * 1e3:.1f} ms a step)")
        for function, n in counter.most_common(top):
            print(f"  {n * per_step:7.3f} ms/step  {function}")


def profile_impl(impl: str, steps: int, top: int, batch: int, graph: bool, host: bool = False) -> None:
    config = gpt.CONFIGS["gpt2"]
    model, optimizer = gpt.make_model(impl, config, "cuda", 0)
    # Under capture, autocast's cache of cast weights would be baked into the graph.
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=impl != "verdigris", cache_enabled=not graph)
    draw = gpt.batches(config, batch, 0)
    data = [tuple(t.cuda() for t in draw(step)) for step in range(steps + 3)]
    for tokens, targets in data[:3]:  # compilation, autotuning and caches out of the way
        gpt.train_step(model, optimizer, autocast, tokens, targets)
    run = gpt.graphed_step(model, optimizer, autocast, *data[0]) if graph else gpt.train_step

    def steps_run():
        for tokens, targets in data[3:]:
            run(model, optimizer, autocast, tokens, targets)
        torch.cuda.synchronize()

    torch.cuda.synchronize()
    started = time.perf_counter()
    steps_run()
    wall = (time.perf_counter() - started) / steps
    if host:
        print_samples(impl, sample_host(steps_run), steps, top * 2)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        steps_run()
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default=",".join(gpt.IMPLS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--graph", action="store_true", help="also time each with forward and backward "
                        "captured in a CUDA graph (compile excepted: it is graphed by its own mode)")
    parser.add_argument("--host", action="store_true", help="also sample the host's Python stack")
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
        torch.cuda.empty_cache()  # (the impl's model and optimizer went with its call)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
