"""The kernels behind `vg.Array`'s fills and copies that no driver call does: verdigris
kernels, compiled and proven like a user's.

Takes: device views of three axes (`hostops` coalesces a view's axes and pads it to three;
a view of more is taken in slices) and a value. Gives: `run(kernel, out, operand)`, which
launches `fill(out, value)` (every element of `out` set to one value) or `convert(out,
src)` (`out` set element by element to `src` converted to `out`'s dtype, as NumPy's
`astype` converts; a plain copy where the dtypes are one) over a grid that covers `out`.

Guarantees:
- The race checker proves them like any kernel (grid-stride loops along each axis, each
  element written by one thread), and a launch still passes the alias check, so a caller
  that would overlap `src` and `out` must copy first (`hostops` does).
- A specialization is compiled once per machine (the disk cache; later processes launch it
  from its launch record, without the frontend): the first call in a fresh cache pays a
  compile of a few hundred milliseconds. Fills and copies of one dtype move bits: they
  are launched on unsigned integers of the item's size, so they have four specializations
  per layout whatever the dtype; conversions have one per pair of dtypes.
- They run on the legacy default stream, ordered with verdigris's copies, and on the cuda
  backend whichever backend kernels run on (`dispatch.KernelFunction.launch(on=)`): a
  `vg.Array` is device memory.
- This module is imported on first need only: importing verdigris, and fills and copies
  the driver does, define no kernel.
"""
from __future__ import annotations

from .. import simt

BLOCK = (256, 1, 1)  # one shape: the block is part of a specialization's key
MAX_GRID = 65535  # blocks along each axis; the grid-stride loops cover the rest


@simt.kernel
def fill(out, value):
    for a in range(simt.global_id(2), out.shape[0], simt.grid_dim(2) * simt.block_dim(2)):
        for b in range(simt.global_id(1), out.shape[1], simt.grid_dim(1) * simt.block_dim(1)):
            for c in range(simt.global_id(0), out.shape[2], simt.grid_dim(0) * simt.block_dim(0)):
                out[a, b, c] = value


@simt.kernel
def convert(out, src):
    for a in range(simt.global_id(2), out.shape[0], simt.grid_dim(2) * simt.block_dim(2)):
        for b in range(simt.global_id(1), out.shape[1], simt.grid_dim(1) * simt.block_dim(1)):
            for c in range(simt.global_id(0), out.shape[2], simt.grid_dim(0) * simt.block_dim(0)):
                out[a, b, c] = out.dtype(src[a, b, c])


def grid(shape: tuple) -> tuple:
    """The grid that covers a 3-d `shape` with `BLOCK`s, each axis capped at `MAX_GRID`."""
    rows, cols, inner = shape
    return (min(-(-inner // BLOCK[0]), MAX_GRID), min(cols, MAX_GRID), min(rows, MAX_GRID))


def run(kernel, out, operand) -> None:
    """`kernel(out, operand)` on the cuda backend, over `out`'s 3-d shape."""
    kernel.launch(grid(tuple(out.shape)), BLOCK, (out, operand), {}, on="cuda")
