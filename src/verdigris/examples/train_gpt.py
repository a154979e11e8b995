"""A GPT trained end to end on verdigris kernels, beside the same model in torch eager and
under torch.compile: the same initial weights, the same batches, the same steps.

Takes (command line): `--config gpt2|tiny` (GPT-2 small: 12 layers, d_model 768, 12 heads,
context 1024, vocabulary 50,257, tied embeddings; tiny: 2 layers, d_model 64, 2 heads,
context 32, vocabulary 512, for the cpu backend), `--steps`, `--batch`, `--impl` (a comma
list of verdigris, eager, compile; all three by default), `--png FILE`, `--device` (cuda
where a GPU is, else cpu), `--every N` (print the loss every N steps), `--seed`, `--vocab`
(another vocabulary size for the config's), `--lr` and `--warmup` (the peak learning rate and
its warm-up steps, if not the config's), `--graph` (each step a CUDA graph's replay).

Gives: `GPT(config, ops)`, one model class whose hot operations are `ops` (`torch_ops()`
or `verdigris_ops()`); `batches(config, batch, seed)`, the corpus's batches; `train(impl,
config, steps, batch, device, seed, graph=False)`, a `Run` (the loss at every step,
tokens/s, peak memory), whose steps are `train_step`s (with graph=True, `graphed_step`'s
replays); and `main()`, which trains the chosen implementations one after another, prints
their loss curves and a table, and draws the curves into a PNG when matplotlib is
installed.

The three set-ups, each the standard way to train in bfloat16 with it:
- verdigris: bfloat16 parameters and activations, float32 master weights and moments in
  `verdigris.ops.optim.AdamW` (one launch a step over every parameter, packed). Every hot
  operation is a verdigris kernel: the linear layers (the MLP's first one fused with its
  GELU), causal attention (`attention_qkvpacked`: q, k and v read where c_attn wrote them,
  their gradients written into one packed tensor), LayerNorm, the output layer and its
  cross-entropy (one op: the loss's gradient written over the logits in the loss's launch)
  and the optimizer; torch holds the parameters, the data and the autograd tape, and does
  the embedding lookup and the reshapes. The residual adds are in the projections'
  epilogues, and each projection with the LayerNorm after it is one op
  (`verdigris.ops.residual`; the whole MLP with the next block's first norm, whose
  backward takes the GELU in the projection's product), whose backward adds the stream's
  two gradients in the norm's kernel: no separate add, forward or backward, but the
  embedding's.
- eager: float32 parameters under `torch.autocast(bfloat16)` (products and attention in
  bfloat16, norms, the residual stream and the loss in float32), `torch.optim.AdamW`
  (fused=True on CUDA).
- compile: the eager model under `torch.compile` (default mode), the same optimizer.
By default no CUDA graphs: each step runs as a user's training loop would, launch by
launch. With `--graph` each step replays a CUDA graph, as a user would run it to keep the
host off the GPU's path: verdigris and eager capture forward and backward once
(`graphed_step`) and step the optimizer outside it; compile uses mode="reduce-overhead".

Corpus: real text with no download: the source of this interpreter's standard library
(its top-level modules, 4 MiB), one byte a token, the 256 byte values spread through the
vocabulary's ids. Text gives the loss the smooth fall of real training (a synthetic
Markov source kept GPT-2 on a plateau for 200 steps, where which run left it first was
chance: two eager runs differed by 5% at step 300). Batch `step` is windows of the text at
offsets drawn from a generator seeded with (seed,
step): every implementation sees the same batches. The models have no dropout and GELU is
the erf form (torch's default) in all three.
"""
from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys
import sysconfig
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

IMPLS = ("verdigris", "eager", "compile")


@dataclass(frozen=True)
class Config:
    layers: int
    d_model: int
    heads: int
    context: int
    vocab: int
    lr: float
    warmup: int  # steps of linear learning-rate warm-up


CONFIGS = {"gpt2": Config(12, 768, 12, 1024, 50257, 6e-4, 30),
           "tiny": Config(2, 64, 2, 32, 512, 3e-3, 2)}
CORPUS_BYTES = 4 << 20  # 300 steps of 8 x 1024 tokens read it about 0.6 times
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)


@dataclass(frozen=True)
class Ops:
    """The model's hot operations: (x, w, b) linear layers, LayerNorm, causal attention
    `attention(qkv, heads)` of c_attn's packed (batch, seq, 3 * d_model) q, k and v to
    (batch, seq, d_model), and the output layer with its loss: the mean cross-entropy of
    the logits x @ w.T of (rows, features) x against (rows,) targets."""
    linear: object
    linear_residual_layer_norm: object  # (x, w, b, residual, norm_w, norm_b): the stream, its LayerNorm
    mlp_residual_layer_norm: object  # (x, fc_w, fc_b, proj_w, proj_b, residual, norm_w, norm_b): the same
    layer_norm: object
    attention: object
    lm_loss: object


def _torch_linear(x, w, b=None, residual=None):
    y = F.linear(x, w, b)
    return y if residual is None else residual + y


def _torch_linear_residual_layer_norm(x, w, b, residual, norm_w, norm_b):
    stream = _torch_linear(x, w, b, residual)
    return stream, F.layer_norm(stream, stream.shape[-1:], norm_w, norm_b)


def _torch_mlp_residual_layer_norm(x, fc_w, fc_b, proj_w, proj_b, residual, norm_w, norm_b):
    return _torch_linear_residual_layer_norm(F.gelu(F.linear(x, fc_w, fc_b)), proj_w, proj_b, residual,
                                             norm_w, norm_b)


def sdpa_packed(qkv, heads: int):
    """Causal SDPA of packed (batch, seq, 3 * d) q, k and v: their heads as (batch, heads,
    seq, head_dim) views, the result back to (batch, seq, d)."""
    batch, seq, width = qkv.shape
    q, k, v = qkv.view(batch, seq, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, width // 3)


def torch_ops() -> Ops:
    return Ops(linear=_torch_linear,
               linear_residual_layer_norm=_torch_linear_residual_layer_norm,
               mlp_residual_layer_norm=_torch_mlp_residual_layer_norm,
               layer_norm=lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
               attention=sdpa_packed,
               lm_loss=lambda x, w, targets: F.cross_entropy(F.linear(x, w), targets))


def verdigris_ops() -> Ops:
    from verdigris.ops.attention import attention_qkvpacked
    from verdigris.ops.linear import linear
    from verdigris.ops.losses import linear_cross_entropy
    from verdigris.ops.norms import layer_norm
    from verdigris.ops.residual import linear_residual_layer_norm, mlp_residual_layer_norm

    return Ops(linear=linear, layer_norm=layer_norm, linear_residual_layer_norm=linear_residual_layer_norm,
               mlp_residual_layer_norm=mlp_residual_layer_norm,
               attention=lambda qkv, heads: attention_qkvpacked(qkv, heads, causal=True),
               lm_loss=linear_cross_entropy)


class Block(nn.Module):
    def __init__(self, config: Config, ops: Ops):
        super().__init__()
        d = config.d_model
        self.ops, self.heads = ops, config.heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, h, next_norm):
        """(the stream x, h = ln_1(x)) -> (the stream after the block, next_norm of it): each
        projection's residual add and the LayerNorm after it are one op."""
        ops = self.ops
        qkv = ops.linear(h, self.c_attn.weight, self.c_attn.bias)
        y = ops.attention(qkv, self.heads)
        x, h = ops.linear_residual_layer_norm(y, self.attn_proj.weight, self.attn_proj.bias, x,
                                              self.ln_2.weight, self.ln_2.bias)
        return ops.mlp_residual_layer_norm(h, self.c_fc.weight, self.c_fc.bias, self.mlp_proj.weight,
                                           self.mlp_proj.bias, x, next_norm.weight, next_norm.bias)


class GPT(nn.Module):
    """GPT-2: learned positions, pre-norm blocks, the output layer tied to the token
    embedding; GPT-2's initialization (normal 0.02, the residual projections scaled by
    1/sqrt(2 * layers)). `forward(tokens, targets)` gives the mean loss."""

    def __init__(self, config: Config, ops: Ops):
        super().__init__()
        self.ops = ops
        self.wte = nn.Embedding(config.vocab, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(Block(config, ops) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                std = 0.02 / math.sqrt(2 * config.layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        h = self.ops.layer_norm(x, self.blocks[0].ln_1.weight, self.blocks[0].ln_1.bias)
        norms = [block.ln_1 for block in self.blocks[1:]] + [self.ln_f]
        for block, next_norm in zip(self.blocks, norms):
            x, h = block(x, h, next_norm)
        return self.ops.lm_loss(h.view(-1, h.shape[-1]), self.wte.weight, targets.reshape(-1))

    def param_groups(self):
        """Matrices decay, biases and norms do not."""
        params = list(self.parameters())
        return [{"params": [p for p in params if p.dim() > 1], "weight_decay": WEIGHT_DECAY},
                {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}]


@functools.lru_cache(maxsize=1)
def corpus() -> np.ndarray:
    """The corpus's bytes (uint8): this interpreter's standard library, its top-level
    modules' source files in the order of their names, up to CORPUS_BYTES."""
    chunks, size = [], 0
    for path in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        chunks.append(np.frombuffer(path.read_bytes(), np.uint8))
        size += len(chunks[-1])
        if size >= CORPUS_BYTES:
            break
    return np.concatenate(chunks)[:CORPUS_BYTES]


def batches(config: Config, batch: int, seed: int):
    """Batch `step` (from 0): (tokens, targets), int64 (batch, context), windows of the
    corpus at offsets drawn from (seed, step), the targets the tokens shifted by one. Byte
    b is token ids[b], 256 ids drawn from the vocabulary by `seed`."""
    text = corpus()
    ids = np.random.default_rng(seed).choice(config.vocab, 256, replace=False)

    def draw(step: int):
        starts = np.random.default_rng((seed, step)).integers(0, len(text) - config.context - 1, batch)
        tokens = torch.from_numpy(ids[text[starts[:, None] + np.arange(config.context + 1)]])
        return tokens[:, :-1], tokens[:, 1:]

    return draw


def unigram_entropy() -> float:
    """Nats a token of the corpus's byte frequencies: the loss of a model that has learnt
    them and no context (a plateau training passes early)."""
    p = np.bincount(corpus(), minlength=256) / len(corpus())
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@dataclass
class Run:
    impl: str
    losses: list = field(default_factory=list)
    tokens_per_s: float = math.nan
    peak_memory: float = math.nan  # bytes (CUDA only)


def make_model(impl: str, config: Config, device: str, seed: int, graph: bool = False):
    """The model and its optimizer for `impl`, from the weights seed `seed` draws (the
    same for every impl); `graph`: compile in mode "reduce-overhead" (CUDA graphs)."""
    torch.manual_seed(seed)
    reference = GPT(config, torch_ops())  # float32 weights, drawn on the CPU: the same everywhere
    if impl == "verdigris":
        from verdigris.ops.optim import AdamW

        model = GPT(config, verdigris_ops()).to(device)
        model.load_state_dict(reference.state_dict())
        optimizer = AdamW(model.param_groups(), lr=config.lr, betas=BETAS, param_dtype=torch.bfloat16)
        return model, optimizer
    model = reference.to(device)
    optimizer = torch.optim.AdamW(model.param_groups(), lr=config.lr, betas=BETAS, fused=device == "cuda")
    if impl == "compile":
        return torch.compile(model, mode="reduce-overhead" if graph else "default"), optimizer
    return model, optimizer


def train_step(model, optimizer, autocast, tokens, targets):
    """One step: the gradients zeroed, forward (under `autocast`) and backward, the
    optimizer's step; gives the loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = forward_backward(model, autocast, tokens, targets)
    optimizer.step()
    return loss


def forward_backward(model, autocast, tokens, targets):
    """The loss (forward under `autocast`), its gradients accumulated."""
    with autocast:
        loss = model(tokens, targets)
    loss.backward()
    return loss


def graphed_step(model, optimizer, autocast, tokens, targets):
    """`train_step` with its forward and backward captured once into a CUDA graph (torch's
    partial-network capture; `tokens`, `targets`: a batch of the right shapes). Gives a step
    of train_step's signature that copies its batch into the graph's static inputs, zeroes
    the gradients in place, replays the graph, steps the optimizer outside it, and returns
    the graph's loss tensor (the next replay overwrites it). The warm-up before the capture
    (compiles, autotuning, allocations kept out of it) runs forward and backward twice and
    steps no optimizer. The gradients are set to None before the capture, so that autograd
    hands the graph's own gradient tensors to the parameters, which each replay overwrites
    (torch's recipe: no zeroing and no accumulating add a step; verdigris's AdamW gathers
    them into its packed buffer at its step); an optimizer whose zero_grad keeps them has
    them zeroed before each replay."""
    static_tokens, static_targets = tokens.clone(), targets.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            optimizer.zero_grad(set_to_none=False)
            forward_backward(model, autocast, static_tokens, static_targets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    kept = any(p.grad is not None for p in model.parameters())
    with torch.cuda.graph(graph):
        static_loss = forward_backward(model, autocast, static_tokens, static_targets)

    def step(model, optimizer, autocast, tokens, targets):
        static_tokens.copy_(tokens)
        static_targets.copy_(targets)
        if kept:
            optimizer.zero_grad(set_to_none=False)
        graph.replay()
        optimizer.step()
        return static_loss
    return step


def _marked_step(model, optimizer, autocast, tokens, targets):
    """`train_step` of a model compiled in mode "reduce-overhead": each step begins a new
    replay of its CUDA graphs."""
    torch.compiler.cudagraph_mark_step_begin()
    return train_step(model, optimizer, autocast, tokens, targets)


def train(impl: str, config: Config, steps: int, batch: int, device: str, seed: int = 0,
          untimed_steps: int = 3, every: int = 0, graph: bool = False) -> Run:
    """Train `impl` for `steps` steps; tokens/s counts the steps after `untimed_steps`.
    `graph` (CUDA only): each step replays a CUDA graph, as a user would run it to take the
    host off the GPU's path: verdigris and eager capture forward and backward
    (`graphed_step`), compile is compiled with mode="reduce-overhead" (its CUDA graphs)."""
    model, optimizer = make_model(impl, config, device, seed, graph=graph)
    # under capture, autocast's cache of cast weights would be baked into the graph
    autocast = torch.autocast(device, torch.bfloat16, enabled=impl != "verdigris", cache_enabled=not graph)
    draw, run = batches(config, batch, seed), Run(impl)
    data = [tuple(t.to(device) for t in draw(step)) for step in range(steps)]  # drawn before the clock starts
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step_fn = train_step
    if graph:
        step_fn = _marked_step if impl == "compile" else graphed_step(model, optimizer, autocast, *data[0])
    losses, started = [], None
    for step, (tokens, targets) in enumerate(data):
        if step == untimed_steps:
            _synchronize(device)
            started = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = config.lr * min(1.0, (step + 1) / config.warmup)
        loss = step_fn(model, optimizer, autocast, tokens, targets)
        losses.append(loss.detach().clone() if graph else loss.detach())  # (a graph's output is overwritten)
        if every and (step % every == 0 or step == steps - 1):
            print(f"  {impl:9s} step {step:4d}  loss {loss.item():.4f}", flush=True)
    _synchronize(device)
    if started is not None and steps > untimed_steps:
        run.tokens_per_s = (steps - untimed_steps) * batch * config.context / (time.perf_counter() - started)
    run.losses = [float(v) for v in torch.stack(losses).float().cpu()]
    if device == "cuda":
        run.peak_memory = torch.cuda.max_memory_allocated()
    return run


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def plot(runs, path: str, config_name: str) -> str:
    """Draw the loss curves into `path`; say what was done."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"no PNG: matplotlib is not installed (pip install 'verdigris[bench]' to draw {path})"
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        ax.plot(range(len(run.losses)), run.losses, label=run.impl)
    ax.axhline(unigram_entropy(), color="gray", linestyle=":", label="unigram entropy")
    ax.set(xlabel="step", ylabel="loss (nats)", title=f"GPT ({config_name}) training loss")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return f"loss curves drawn in {path}"


LAST = 10  # steps whose mean loss the table gives beside the last step's (one batch's loss is noisy)


def _last_mean(run) -> float:
    return sum(run.losses[-LAST:]) / len(run.losses[-LAST:])


def table(runs) -> str:
    """One line a run: final loss and the mean of the last LAST steps' (each against
    eager's), tokens/s (against eager's and torch.compile's), peak memory."""
    by_impl = {r.impl: r for r in runs}

    def ratio(value, impl, of):
        return of(value) / of(by_impl[impl]) if impl in by_impl else math.nan

    lines = [f"{'impl':10s} {'final loss':>10s} {'vs eager':>9s} {f'last {LAST}':>9s} {'vs eager':>9s} "
             f"{'tokens/s':>11s} {'vs eager':>9s} {'vs compile':>10s} {'peak GiB':>9s}"]
    for r in runs:
        loss = ratio(r, "eager", lambda run: run.losses[-1]) - 1
        mean = ratio(r, "eager", _last_mean) - 1
        speed = [_shown(ratio(r, impl, lambda run: run.tokens_per_s), "{:.2f}x", width)
                 for impl, width in (("eager", 9), ("compile", 10))]
        lines.append(f"{r.impl:10s} {r.losses[-1]:10.4f} {_shown(loss, '{:+.2%}', 9)} {_last_mean(r):9.4f} "
                     f"{_shown(mean, '{:+.2%}', 9)} {r.tokens_per_s:11,.0f} "
                     f"{speed[0]} {speed[1]} {_shown(r.peak_memory / 2**30, '{:.2f}', 9)}")
    return "\n".join(lines)


def _shown(value: float, form: str, width: int) -> str:
    """`value` in `form`, right-aligned; "n/a" where there is none (no eager run to
    compare with, no peak memory off CUDA)."""
    return (form.format(value) if math.isfinite(value) else "n/a").rjust(width)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--impl", default=",".join(IMPLS), help="comma list of " + ", ".join(IMPLS))
    parser.add_argument("--png", default=None, help="draw the loss curves into this PNG")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda runs verdigris on the cuda backend, cpu on the cpu backend")
    parser.add_argument("--every", type=int, default=10, help="print the loss every N steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=None,
                        help="the vocabulary's size, if not the config's (GPT-2's 50,257 padded to 50,304 "
                             "gives the logits rows of a multiple of 16 bytes, as nanoGPT pads it)")
    parser.add_argument("--lr", type=float, default=None, help="the peak learning rate, if not the config's")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps, if not the config's")
    parser.add_argument("--graph", action="store_true", help="run each step as a CUDA graph's replay (CUDA only)")
    args = parser.parse_args(argv)
    impls = args.impl.split(",")
    if args.graph and args.device != "cuda":
        parser.error("--graph: CUDA graphs need --device cuda")
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown:
        parser.error(f"--impl: unknown {', '.join(unknown)}; choose from {', '.join(IMPLS)}")
    import verdigris as vg

    vg.set_backend("cuda" if args.device == "cuda" else "cpu")
    config = CONFIGS[args.config]
    config = replace(config, **{name: value for name, value in
                                (("vocab", args.vocab), ("lr", args.lr), ("warmup", args.warmup)) if value})
    print(f"GPT {args.config} ({config}), batch {args.batch} x {config.context} tokens, {args.steps} steps; "
          f"corpus: {len(corpus()):,} bytes of Python's standard library, unigram entropy "
          f"{unigram_entropy():.3f} nats a token")
    runs, failed = [], []
    for impl in impls:
        try:
            run = train(impl, config, args.steps, args.batch, args.device, args.seed, every=args.every,
                        graph=args.graph)
            runs.append(run)  # each run's figures as it ends, before the table (a run cut short keeps them)
            print(f"  {impl}: {run.tokens_per_s:,.0f} tokens/s, last {LAST} steps' mean loss {_last_mean(run):.4f}, "
                  f"peak {run.peak_memory / 2**30:.2f} GiB", flush=True)
        except Exception as error:  # one set-up failing (a peer's compiler) leaves the others' table
            failed.append(impl)
            print(f"{impl}: failed: {type(error).__name__}: {error}", file=sys.stderr)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if runs:
        print(table(runs))
    if args.png and runs:
        print(plot(runs, args.png, args.config))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
