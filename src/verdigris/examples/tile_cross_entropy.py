"""Fused softmax cross-entropy over a large vocabulary (GPT-2's 50,257, Llama 3's 128,256
columns), forward and backward, one block per row, chunked over the vocabulary.

Takes: `logits` (rows, vocab) in float32, bfloat16 or float16 (any vocab, not a multiple of
the chunk), `labels` (rows,) of integers, where `ignore_index` (-100 by default) marks a
row that takes no part; for the backward also `lse` (rows,) float32, the forward's row
log-sum-exp, and `dloss` (rows,) float32, the upstream gradient of each row's loss (a
zero-stride view for a mean: `np.broadcast_to(np.float32(1 / n), rows)`).

Gives: `forward` (one pass over the logits with an online log-sum-exp: `loss[r] = lse[r] -
logits[r, labels[r]]` and `lse[r]`), `backward` (one pass: `grad[r] = (softmax(logits[r])
- onehot(labels[r])) * dloss[r]`), and `forward_backward` (both in one launch when the
upstream gradient is known before the forward ran, as for a mean loss: the logits are read
twice and the gradient written once, never a second launch). Math is float32 whatever the
logits' dtype; the gradient is rounded once to its array's dtype.

Guarantees: a row whose label is `ignore_index` has loss 0 and a gradient of zeros; a label
outside `[0, vocab)` that is not `ignore_index` gives a NaN loss for its row (the 0-d load
of the target logit reads NaN there) instead of reading out of bounds. Every kernel is
proven race-free by the checker; none uses `vg.unsafe()`.

In place: `backward(..., in_place=True)` and `forward_backward(..., in_place=True)` write
the gradient over the logits, by launching the `*_inplace` kernels, which take the logits
once (each block reads a chunk of its own row and then overwrites that chunk, so no other
block ever sees it: the race checker proves this). That is the only way to say "in place":
passing the logits (or any view overlapping them) as `grad` launches the two-array kernel,
whose launch refuses the overlap with `vg.AliasError` (VG201), as every launch does; and
leaving out `grad` without `in_place=True` is a `vg.LaunchError`, never a silent overwrite.
"""
import math
import sys

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.errors import Loc

IGNORE_INDEX = -100
BLOCK = 4096  # vocabulary columns per chunk: 16 KB of float32 per block in flight
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * LOG2E)


@vg.func
def _row_log_sum_exp(logits, r, BLOCK: vg.constexpr):
    """The row's log-sum-exp in float32, one pass: the running maximum of the row (one
    reduction per chunk) and, per column position, a running sum of exp(x - that maximum),
    rescaled when it grows; one exponential per element (`exp2`, a single instruction on
    the GPU: at bfloat16's bandwidth the pass would otherwise wait on arithmetic)."""
    top = vg.float32(-math.inf)
    s = tile.zeros((1, BLOCK), vg.float32)
    for c in range(tile.num_tiles(logits, 1, (1, BLOCK))):
        t = tile.load(logits, index=(r, c), shape=(1, BLOCK), padding=-math.inf).astype(vg.float32)
        new_top = max(top, tile.max(t))
        shift = tile.where(new_top == -math.inf, 0.0, new_top)  # nothing but -inf so far: no NaN
        s = s * tile.exp2((top - shift) * LOG2E) + tile.exp2((t - shift) * LOG2E)
        top = new_top
    return top + tile.log(tile.sum(s))


@vg.func
def _write_loss(logits, labels, loss, lse, r, ignore_index, BLOCK: vg.constexpr):
    """Store the row's loss and log-sum-exp; give back (log-sum-exp, label)."""
    label = tile.load(labels, index=(r,), shape=())
    row_lse = _row_log_sum_exp(logits, r, BLOCK)
    target = vg.float32(tile.load(logits, index=(r, label), shape=(), padding=math.nan))
    row_loss = tile.where(label == ignore_index, 0.0, row_lse - target)
    tile.store(lse, index=(r,), tile=tile.full((1,), row_lse, vg.float32))
    tile.store(loss, index=(r,), tile=tile.full((1,), row_loss, vg.float32))
    return row_lse, label


@vg.func
def _write_grad(logits, grad, r, row_lse, label, dloss_r, ignore_index, BLOCK: vg.constexpr):
    """grad[r] = (softmax - onehot) * dloss_r, chunk by chunk (zeros for an ignored row)."""
    scale = tile.where(label == ignore_index, 0.0, dloss_r)
    for c in range(tile.num_tiles(logits, 1, (1, BLOCK))):
        t = tile.load(logits, index=(r, c), shape=(1, BLOCK)).astype(vg.float32)
        # the label's column within the chunk, clamped so that int32 holds it
        column = vg.int32(min(max(label - c * BLOCK, -1), BLOCK))
        onehot = tile.where(tile.arange(BLOCK) == column, 1.0, 0.0)
        g = (tile.exp2((t - row_lse) * LOG2E) - onehot) * scale
        tile.store(grad, index=(r, c), tile=g.astype(grad.dtype))


@tile.kernel
def cross_entropy_forward(logits, labels, loss, lse, ignore_index, BLOCK: vg.constexpr = BLOCK):
    _write_loss(logits, labels, loss, lse, tile.bid(0), ignore_index, BLOCK)


@vg.func
def _backward_row(logits, labels, lse, dloss, grad, ignore_index, BLOCK: vg.constexpr):
    r = tile.bid(0)
    label = tile.load(labels, index=(r,), shape=())
    row_lse = tile.load(lse, index=(r,), shape=())
    _write_grad(logits, grad, r, row_lse, label, tile.load(dloss, index=(r,), shape=()), ignore_index, BLOCK)


@tile.kernel
def cross_entropy_backward(logits, labels, lse, dloss, grad, ignore_index, BLOCK: vg.constexpr = BLOCK):
    _backward_row(logits, labels, lse, dloss, grad, ignore_index, BLOCK)


@tile.kernel
def cross_entropy_backward_inplace(logits, labels, lse, dloss, ignore_index, BLOCK: vg.constexpr = BLOCK):
    _backward_row(logits, labels, lse, dloss, logits, ignore_index, BLOCK)


@vg.func
def _forward_backward_row(logits, labels, loss, lse, dloss, grad, ignore_index, BLOCK: vg.constexpr):
    r = tile.bid(0)
    row_lse, label = _write_loss(logits, labels, loss, lse, r, ignore_index, BLOCK)
    _write_grad(logits, grad, r, row_lse, label, tile.load(dloss, index=(r,), shape=()), ignore_index, BLOCK)


@tile.kernel
def cross_entropy_forward_backward(logits, labels, loss, lse, dloss, grad, ignore_index,
                                   BLOCK: vg.constexpr = BLOCK):
    _forward_backward_row(logits, labels, loss, lse, dloss, grad, ignore_index, BLOCK)


@tile.kernel
def cross_entropy_forward_backward_inplace(logits, labels, loss, lse, dloss, ignore_index,
                                           BLOCK: vg.constexpr = BLOCK):
    _forward_backward_row(logits, labels, loss, lse, dloss, logits, ignore_index, BLOCK)


def forward(logits, labels, loss, lse, *, ignore_index=IGNORE_INDEX, block=BLOCK):
    """Launch the forward: `loss` and `lse` (rows,) float32 are written."""
    cross_entropy_forward[logits.shape[0]](logits, labels, loss, lse, ignore_index, BLOCK=block)


def backward(logits, labels, lse, dloss, grad=None, *, in_place=False, ignore_index=IGNORE_INDEX, block=BLOCK):
    """Launch the backward into `grad`, or over `logits` with `in_place=True`."""
    if _writes_over_logits(grad, in_place, "backward"):
        cross_entropy_backward_inplace[logits.shape[0]](logits, labels, lse, dloss, ignore_index, BLOCK=block)
    else:
        cross_entropy_backward[logits.shape[0]](logits, labels, lse, dloss, grad, ignore_index, BLOCK=block)


def forward_backward(logits, labels, loss, lse, dloss, grad=None, *, in_place=False, ignore_index=IGNORE_INDEX,
                     block=BLOCK):
    """Forward and backward in one launch; the gradient goes to `grad`, or over `logits`
    with `in_place=True`."""
    rows = logits.shape[0]
    if _writes_over_logits(grad, in_place, "forward_backward"):
        cross_entropy_forward_backward_inplace[rows](logits, labels, loss, lse, dloss, ignore_index, BLOCK=block)
    else:
        cross_entropy_forward_backward[rows](logits, labels, loss, lse, dloss, grad, ignore_index, BLOCK=block)


def _writes_over_logits(grad, in_place: bool, launcher: str) -> bool:
    """Whether the caller asked for the gradient over the logits: `in_place=True` and no
    `grad`; a `grad` and `in_place=False` write it there. Anything else is refused, naming
    the caller's line: a forgotten `grad` never overwrites the logits."""
    if (grad is None) == bool(in_place):
        return bool(in_place)
    caller = sys._getframe(2)
    where = Loc(caller.f_code.co_filename, caller.f_lineno, 0, caller.f_code.co_name)
    if in_place:
        raise vg.LaunchError(f"{launcher}: in_place=True writes the gradient over the logits, but a grad was "
                             "passed too", where, hint="pass either grad=ARRAY or in_place=True")
    raise vg.LaunchError(f"{launcher}: no array for the gradient", where,
                         hint="pass grad=ARRAY (e.g. an empty array shaped as the logits), or in_place=True "
                              "to write it over the logits")


def reference(logits, labels, dloss, ignore_index=IGNORE_INDEX):
    """float64 loss, log-sum-exp and gradient."""
    x = np.asarray(logits).astype(np.float64)
    row_max = x.max(1, keepdims=True)
    lse = (row_max + np.log(np.exp(x - row_max).sum(1, keepdims=True)))[:, 0]
    ignored = labels == ignore_index
    safe = np.where(ignored, 0, labels)
    rows = np.arange(x.shape[0])
    loss = np.where(ignored, 0.0, lse - x[rows, safe])
    grad = np.exp(x - lse[:, None])
    grad[rows, safe] -= 1.0
    grad *= np.where(ignored, 0.0, np.asarray(dloss, np.float64))[:, None]
    return loss, lse, grad


def check(rng, rows=4, vocab=50257, block=BLOCK):
    from verdigris.examples import Result

    logits = (2 * rng.standard_normal((rows, vocab))).astype(np.float32)
    labels = rng.integers(0, vocab, rows)
    labels[rows // 2] = IGNORE_INDEX
    dloss = rng.random(rows).astype(np.float32)
    loss, lse = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    grad = np.full_like(logits, np.nan)
    forward(vg.asarray(logits), vg.asarray(labels), loss_out := vg.asarray(loss), lse_out := vg.asarray(lse),
            block=block)
    backward(vg.asarray(logits), vg.asarray(labels), lse_out, vg.asarray(dloss), grad_out := vg.asarray(grad),
             block=block)
    want_loss, want_lse, want_grad = reference(logits, labels, dloss)
    return [Result(f"cross-entropy loss of {rows} rows of {vocab:,}", np.asarray(loss_out), want_loss, 1e-5),
            Result("its log-sum-exp", np.asarray(lse_out), want_lse, 1e-6),
            Result("its gradient", np.asarray(grad_out), want_grad, 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
