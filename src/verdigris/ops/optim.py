"""AdamW as a torch optimizer whose step is one verdigris launch over every parameter,
with float32 master weights beside parameters kept in a narrower dtype (bfloat16).

Takes: parameters (or torch param groups: the groups may differ in `weight_decay`, which is
either 0 or one shared value, as GPT training decays matrices and not biases or norms; `lr`,
`betas` and `eps` are shared), on the device verdigris runs on, and `param_dtype`, the
dtype the parameters take (their own by default).

Gives: `AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
param_dtype=None)`, a `torch.optim.Optimizer`: `step()` and `zero_grad(set_to_none=True)`, and `lr` read
from `param_groups` at each step (a scheduler may change it, in every group at once).

Guarantees: the parameters are packed once, at construction (`examples.tile_adamw`'s
layout): each becomes a view of one buffer in `param_dtype`, and its `.grad` starts as a
view of a second one, the packed gradients the step reads. Gradients follow torch's
rules: `zero_grad()` sets them to None (autograd then hands each parameter its new
gradient tensor, with no zeroing and no accumulating add, and `step()` gathers those into
the packed buffer with one multi-tensor copy), `zero_grad(set_to_none=False)` makes them
the packed views again, zeroed (one fill; autograd then adds into them in place, and the
step copies nothing); a parameter with no gradient at the step is stepped with a zero
gradient (torch's AdamW would skip it: its moments still decay here); the float32 master weights
start as the parameters' values at construction, before their rounding to
`param_dtype`. `step()` is `tile_adamw.adamw_step`, torch.optim.AdamW's single-tensor update
operation for operation in float32, which writes the master weights and rounds them once
into the parameters. A parameter in two groups is refused (by torch), and one whose `.data` is
replaced afterwards is no longer updated (as with any packed optimizer). `state_dict`
carries the packed buffers (`master`, `exp_avg`, `exp_avg_sq`) and the step count.
"""
from __future__ import annotations

import torch

from verdigris.examples.tile_adamw import adamw_step, pack_layout


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW over packed buffers: one launch a step, float32 master weights."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 param_dtype=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        tensors = [p for group in self.param_groups for p in group["params"]]  # torch refuses repeats
        self._shared("betas"), self._shared("eps")
        self._decay = max(group["weight_decay"] for group in self.param_groups)
        if any(group["weight_decay"] not in (0, self._decay) for group in self.param_groups):
            raise ValueError("AdamW: each param group's weight_decay must be 0 or one shared value; got "
                             f"{[group['weight_decay'] for group in self.param_groups]}")
        decays = [group["weight_decay"] != 0 for group in self.param_groups for _ in group["params"]]
        self.layout = pack_layout([p.shape for p in tensors], decays)
        like = tensors[0]
        dtype = like.dtype if param_dtype is None else param_dtype
        self.master = like.new_zeros(self.layout.size, dtype=torch.float32)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.master), torch.zeros_like(self.master)
        self.params = like.new_zeros(self.layout.size, dtype=dtype)
        self.grads = torch.zeros_like(self.params)
        self.block_decays = torch.from_numpy(self.layout.block_decays).to(like.device)
        self.steps = 0
        self._tensors, self._grad_views = tensors, self.layout.views(self.grads)
        with torch.no_grad():
            for p, master, packed, grad in zip(tensors, *(self.layout.views(b) for b in
                                                          (self.master, self.params)), self._grad_views):
                master.copy_(p)
                packed.copy_(p)
                p.data, p.grad = packed, grad

    def _shared(self, key):
        values = {tuple(v) if isinstance(v, (tuple, list)) else v
                  for v in (group[key] for group in self.param_groups)}
        if len(values) != 1:
            raise ValueError(f"AdamW: every param group must have the same {key}; got {sorted(values)}")
        return values.pop()

    def zero_grad(self, set_to_none: bool = True):
        """The gradients to None, or (set_to_none=False) to the packed views, zeroed."""
        if set_to_none:
            for p in self._tensors:
                p.grad = None
        else:
            self.grads.zero_()
            for p, view in zip(self._tensors, self._grad_views):
                p.grad = view

    def _gather(self):
        """The parameters' gradients into the packed buffer: copied where autograd made
        tensors of their own, zeros where there is none, nothing where they are the views."""
        copied, sources, absent = [], [], []
        for p, view in zip(self._tensors, self._grad_views):
            if p.grad is None:
                absent.append(view)
            elif p.grad.data_ptr() != view.data_ptr():
                copied.append(view)
                sources.append(p.grad)
        if copied:
            torch._foreach_copy_(copied, sources)
        if absent:
            torch._foreach_zero_(absent)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        self._gather()
        self.steps += 1
        adamw_step(self.layout, self.master, self.grads, self.exp_avg, self.exp_avg_sq, self.params,
                   self.block_decays, step=self.steps, lr=self._shared("lr"), betas=self._shared("betas"),
                   eps=self._shared("eps"), weight_decay=self._decay)
        return loss

    def state_dict(self):
        return {"steps": self.steps, "master": self.master, "exp_avg": self.exp_avg,
                "exp_avg_sq": self.exp_avg_sq, "param_groups": [
                    {k: v for k, v in group.items() if k != "params"} for group in self.param_groups]}

    def load_state_dict(self, state_dict):
        self.steps = state_dict["steps"]
        for name in ("master", "exp_avg", "exp_avg_sq"):
            getattr(self, name).copy_(state_dict[name])
        self.params.copy_(self.master)
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update(saved)
