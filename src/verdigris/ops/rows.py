"""Row layouts of the ops' tensors: two-dimensional row views without copies, and new
tensors whose rows start on 16-byte boundaries.

Takes: torch tensors. Gives: `rows(t)`, t as (rows, t.shape[-1]): a view where t's last axis
has unit stride and its other axes fold into one row stride (a padded row pitch included),
else a contiguous copy; `aligned_rows(rows, cols, like, dtype=None)`, a new uninitialised
(rows, cols) tensor on like's device whose row pitch is cols rounded up to a multiple of 16
bytes (a view of the first cols columns of a (rows, pitch) buffer; the pitch is cols where
cols already fills whole 16-byte units).

Guarantees: `rows` never copies a tensor whose rows the kernels can read as they are.
Why the pitch: the products load their operands by the Tensor Memory Accelerator, whose row
strides must be multiples of 16 bytes, and the row kernels load 16 bytes at a time; a GPT's
logits have 50,257 columns, which in bfloat16 is no multiple of 16 bytes. Given rows of an
aligned pitch, every later pass over them (the loss, its gradient, the products of the
backward) reads aligned rows. This is the padding nanoGPT applies to the vocabulary itself
(50,304), made by the ops instead of the model.
"""
from __future__ import annotations

import torch

ROW_ALIGNMENT = 16  # bytes


def rows(t: torch.Tensor) -> torch.Tensor:
    """t as a (rows, t.shape[-1]) matrix: a view where one is possible with unit column
    stride, else a contiguous copy."""
    cols = t.shape[-1]
    if t.stride(-1) == 1 or cols == 1:
        try:
            return t.view(-1, cols)
        except RuntimeError:  # axes that do not fold into one row stride
            pass
    return t.contiguous().view(-1, cols)


def aligned_rows(rows: int, cols: int, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new (rows, cols) tensor like `like` (its device; its dtype unless `dtype`) whose
    rows start every multiple of 16 bytes."""
    dtype = like.dtype if dtype is None else dtype
    per_unit = max(1, ROW_ALIGNMENT // dtype.itemsize)
    pitch = -(-cols // per_unit) * per_unit
    buffer = like.new_empty((rows, pitch), dtype=dtype)
    return buffer if pitch == cols else buffer[:, :cols]
