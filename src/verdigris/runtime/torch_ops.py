"""verdigris kernels as PyTorch custom ops, so `torch.compile` can trace code that uses them.

Takes: a Python function that launches verdigris kernels on torch tensors and returns new
tensors, with type annotations (torch.library's rule: `(x: torch.Tensor, ...) ->
torch.Tensor`), and the op's name ("namespace::name"). Gives: `torch_op(name,
mutates_args=(), fake=None)`, a decorator (also `vg.torch_op`) returning the op
(`torch.library.custom_op`), and `launches_skipped()`.

Guarantees: the op's fake implementation (what torch.compile and meta/fake tensors run to
learn output shapes, dtypes and devices) is `fake` when given, else the function itself
run with every verdigris launch skipped: its outputs must then come from torch
(`torch.empty_like(x)`, `x.new_empty(shape)`, ...), so that their shapes follow from the
inputs alone. Launches happen only in the real implementation, with real tensors, on
torch's current stream (so CUDA graphs that torch.compile makes capture them).
"""
from __future__ import annotations

import contextlib
import functools

from .launches import skipping_launches


def torch_op(name: str, *, mutates_args=(), fake=None):
    """Decorator: register the function as the torch custom op `name`."""
    import torch

    def register(fn):
        op = torch.library.custom_op(name, mutates_args=mutates_args)(fn)
        if fake is not None:
            op.register_fake(fake)
        else:
            @functools.wraps(fn)
            def shapes_only(*args, **kwargs):
                with launches_skipped():
                    return fn(*args, **kwargs)

            op.register_fake(shapes_only)
        return op

    return register


@contextlib.contextmanager
def launches_skipped():
    """Within the block, verdigris launches on this thread do nothing (fake tensors have no
    memory to run on)."""
    with skipping_launches():
        yield
