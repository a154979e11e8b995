"""Issue #28's training kernels on the GPU beside torch, in one run: time and peak memory.

Cases:
- cross-entropy forward + backward, 16384 tokens x 50,257 vocabulary, bfloat16 logits,
  mean over the tokens (every 10th ignored): torch's `F.cross_entropy` + `backward()`
  (eager, and under `torch.compile` where it compiles) against verdigris's
  `tile_cross_entropy`: the gradient written over the logits in the forward's launch
  (`forward_backward(..., in_place=True)`; also with rows at a pitch of a multiple of 16
  elements, which makes every access a 16-byte vector), in one launch into a separate
  gradient, and as a forward then a backward launch. Peak memory is what one call allocates beyond the
  logits and labels (`torch.cuda.max_memory_allocated`).
- AdamW over GPT-2 small's parameters (124M, 148 tensors): `torch.optim.AdamW(fused=True)`
  on float32 parameters and gradients against verdigris's `tile_adamw` over the same
  tensors packed in one buffer, also writing bfloat16 parameters back (2 bytes a
  parameter more than torch moves), with float32 and with bfloat16 gradients.
Each implementation is checked against torch before it is timed. Times are medians
(`verdigris.benchsuite.timing.GpuTimer`: triton's do_bench where installed, CUDA events
otherwise, L2 flushed, the implementations taking turns).
Run: `PYTHONPATH=src python3 bench/train_kernels.py [--quick] [--json FILE]`.
"""
from __future__ import annotations

import argparse
import json
import statistics

try:  # `verdigris bench` imports every script that uses benchsuite, torch or not
    import torch
    import torch.nn.functional as F
except ModuleNotFoundError:  # pragma: no cover - run on the GPU machine, which has torch
    torch = F = None

from verdigris.benchsuite.timing import GpuTimer
from verdigris.examples import tile_adamw as adamw
from verdigris.examples import tile_cross_entropy as ce

TOKENS, VOCAB = 16384, 50257
GPT2_LAYERS, GPT2_D, GPT2_CONTEXT = 12, 768, 1024


def peak_bytes(fn) -> int:
    """Bytes one call of `fn` allocates at its peak, beyond what was allocated before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def cross_entropy_case(timer: GpuTimer) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (3 * torch.randn(TOKENS, VOCAB, device="cuda", generator=gen)).to(torch.bfloat16)
    labels = torch.randint(0, VOCAB, (TOKENS,), device="cuda", generator=gen)
    labels[::10] = ce.IGNORE_INDEX
    counted = int((labels != ce.IGNORE_INDEX).sum())
    dloss = torch.full((1,), 1.0 / counted, device="cuda").expand(TOKENS)  # the mean's gradient
    loss, lse = torch.empty(TOKENS, device="cuda"), torch.empty(TOKENS, device="cuda")

    def torch_eager(x=logits):
        x = x.detach().requires_grad_(True)
        F.cross_entropy(x, labels, ignore_index=ce.IGNORE_INDEX).backward()
        return x.grad

    compiled_loss = torch.compile(lambda x: F.cross_entropy(x, labels, ignore_index=ce.IGNORE_INDEX))

    def torch_compiled(x=logits):
        x = x.detach().requires_grad_(True)
        compiled_loss(x).backward()
        return x.grad

    work = logits.clone()  # the in-place version overwrites what it is given

    def ours_in_place():
        ce.forward_backward(work, labels, loss, lse, dloss, in_place=True)
        return work

    # the same logits in rows whose pitch is a multiple of 16 elements (32 bytes): an LM
    # head can write its output so, and then every load and store is a 16-byte vector
    pitched = torch.empty(TOKENS, -(-VOCAB // 16) * 16, dtype=logits.dtype, device="cuda")[:, :VOCAB]

    def ours_in_place_pitched():
        ce.forward_backward(pitched, labels, loss, lse, dloss, in_place=True)
        return pitched

    def ours_one_launch():
        grad = torch.empty_like(logits)
        ce.forward_backward(logits, labels, loss, lse, dloss, grad)
        return grad

    def ours_two_launches():
        grad = torch.empty_like(logits)
        ce.forward(logits, labels, loss, lse)
        ce.backward(logits, labels, lse, dloss, grad)
        return grad

    fns = {"torch eager": torch_eager, "torch.compile": torch_compiled, "verdigris in place": ours_in_place,
           "verdigris in place, pitch 16": ours_in_place_pitched,
           "verdigris one launch": ours_one_launch, "verdigris fwd then bwd": ours_two_launches}
    want = torch_eager().float()
    want_loss = float(F.cross_entropy(logits.float(), labels, ignore_index=ce.IGNORE_INDEX))
    checked = {}
    for name, fn in fns.items():
        try:
            work.copy_(logits)
            pitched.copy_(logits)
            grad = fn().float()
            error = float((grad - want).abs().max() / want.abs().max())
            if not name.startswith("torch"):
                loss_error = abs(float(loss.sum()) / counted - want_loss) / abs(want_loss)
                assert loss_error < 1e-4, f"{name}: mean loss off by {loss_error:.2e}"
            assert error < 2 ** -7, f"{name}: gradient off by {error:.2e}"
            checked[name] = fn
        except Exception as exc:  # noqa: BLE001  a peer that does not run is reported, not fatal
            print(f"  {name}: skipped ({type(exc).__name__}: {exc})")
    return {name: dict(ms=seconds * 1e3, peak_mib=peak_bytes(checked[name]) / 2 ** 20)
            for name, seconds in timed(timer, checked).items()}


def timed(timer: GpuTimer, fns: dict) -> dict:
    """Device seconds of each callable (the median of its rounds); one that raised is
    reported and left out."""
    rounds = timer.device_seconds_in_turn(fns, final=False)
    for name, figure in rounds.items():
        if isinstance(figure, Exception):
            print(f"  {name}: failed while timed ({type(figure).__name__}: {figure})")
    return {name: statistics.median(figures) for name, figures in rounds.items()
            if not isinstance(figures, Exception)}


def gpt2_small_shapes():
    """GPT-2 small's parameters (tied embeddings) and whether each takes weight decay."""
    d = GPT2_D
    shapes = [((VOCAB, d), True), ((GPT2_CONTEXT, d), True)]
    for _ in range(GPT2_LAYERS):
        shapes += [((d,), False), ((d,), False), ((d, 3 * d), True), ((3 * d,), False), ((d, d), True),
                   ((d,), False), ((d,), False), ((d,), False), ((d, 4 * d), True), ((4 * d,), False),
                   ((4 * d, d), True), ((d,), False)]
    shapes += [((d,), False), ((d,), False)]
    return shapes


def adamw_case(timer: GpuTimer) -> dict:
    hyper = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    shapes, decays = zip(*gpt2_small_shapes())
    layout = adamw.pack_layout(shapes, decays)
    count = sum(torch.Size(s).numel() for s in shapes)
    gen = torch.Generator(device="cuda").manual_seed(0)
    master = torch.zeros(layout.size, device="cuda")
    grad = torch.zeros(layout.size, device="cuda")
    for p, g in zip(layout.views(master), layout.views(grad)):
        p.copy_(0.02 * torch.randn(p.shape, device="cuda", generator=gen))
        g.copy_(torch.randn(g.shape, device="cuda", generator=gen))
    tensors = [p.clone().requires_grad_(True) for p in layout.views(master)]
    for t, g in zip(tensors, layout.views(grad)):
        t.grad = g.clone()
    groups = [{"params": [t for t, d in zip(tensors, decays) if d], "weight_decay": hyper["weight_decay"]},
              {"params": [t for t, d in zip(tensors, decays) if not d], "weight_decay": 0.0}]
    fused = torch.optim.AdamW(groups, fused=True, lr=hyper["lr"], betas=hyper["betas"], eps=hyper["eps"])
    exp_avg, exp_avg_sq = torch.zeros_like(master), torch.zeros_like(master)
    params = torch.empty(layout.size, dtype=torch.bfloat16, device="cuda")
    grad_bf16 = grad.to(torch.bfloat16)
    block_decays = torch.from_numpy(layout.block_decays).cuda()
    steps = {"ours": 0}  # our step count, shared by both gradient dtypes

    def torch_fused():
        fused.step()

    def ours(g):
        def run():
            steps["ours"] += 1
            adamw.adamw_step(layout, master, g, exp_avg, exp_avg_sq, params, block_decays, step=steps["ours"],
                             **hyper)
        return run

    for _ in range(3):  # the same three steps, then compare
        torch_fused()
        ours(grad)()
    error = max(float((t.detach() - p).abs().max()) for t, p in zip(tensors, layout.views(master)))
    assert error < 1e-5, f"AdamW differs from torch's fused by {error:.2e}"
    fns = {"torch fused=True (fp32 grads)": torch_fused, "verdigris packed (fp32 grads)": ours(grad),
           "verdigris packed (bf16 grads)": ours(grad_bf16)}
    moved = {"torch fused=True (fp32 grads)": 28, "verdigris packed (fp32 grads)": 30,
             "verdigris packed (bf16 grads)": 28}  # bytes per parameter read + written
    return {name: dict(ms=seconds * 1e3, tb_per_s=moved[name] * count / seconds / 1e12)
            for name, seconds in timed(timer, fns).items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    timer = GpuTimer(quick=args.quick)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    results = {}
    print(f"cross-entropy fwd+bwd, {TOKENS} x {VOCAB} bf16:")
    results["cross_entropy"] = rows = cross_entropy_case(timer)
    base = rows["torch eager"]
    for name, row in rows.items():
        print(f"  {name:28s} {row['ms']:8.3f} ms  {base['ms'] / row['ms']:5.2f}x eager   "
              f"peak {row['peak_mib']:8.0f} MiB ({row['peak_mib'] / base['peak_mib']:.2f}x eager)")
    print("AdamW step over GPT-2 small (124M parameters, 148 tensors):")
    results["adamw"] = rows = adamw_case(timer)
    base = rows["torch fused=True (fp32 grads)"]
    for name, row in rows.items():
        print(f"  {name:32s} {row['ms']:8.3f} ms  {base['ms'] / row['ms']:5.2f}x torch   {row['tb_per_s']:.2f} TB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
