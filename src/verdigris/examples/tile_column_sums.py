"""Column sums of a 2-d array, in a fixed order: out[c] = sum over rows r of partial[r, c].

The second pass of a deterministic reduction across rows (the norms' weight gradients,
`tile_layernorm.layernorm_backward`): each block of a first pass writes its own row of
partial sums, with no atomic, and this kernel adds the rows up. One block per tile of BC
columns walks the rows BR at a time in order, so the result is the same bit for bit from
run to run (no float atomics, whose order changes). Arithmetic in `partial`'s dtype; the
result is rounded once to `out`'s."""
import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def column_sums(partial, out, BR: vg.constexpr, BC: vg.constexpr):
    c = tile.bid(0)
    acc = tile.zeros((BR, BC), partial.dtype)
    for k in range(tile.num_tiles(partial, 0, (BR, BC))):
        acc += tile.load(partial, index=(k, c), shape=(BR, BC))
    tile.store(out, index=(c,), tile=tile.sum(acc, axis=0).astype(out.dtype))


def launch_column_sums(partial, out, BR=64, BC=32, **launch):
    """out = partial.sum(axis=0), one block per BC columns: narrow, so that a few hundred
    partial rows of GPT-2's 768 columns are summed by 24 blocks, not 3 (at BC=256 a launch
    took 6 us in GPT-2's step, 4 at these tiles; 64 x 32 was the best of
    bench/gpt_reductions.py's five tiles at every width and row count, H100)."""
    column_sums[vg.cdiv(partial.shape[1], BC)](partial, out, BR=BR, BC=BC, **launch)


@tile.kernel
def row_block_sums(x, partial, ROWS: vg.constexpr = 64, BR: vg.constexpr = 16,
                   BC: vg.constexpr = 256):
    """The first pass over a tall array: block (r, c) adds up rows r*ROWS ... r*ROWS +
    ROWS - 1 of x's columns tile c (BR rows at a time, ROWS a multiple of BR) into
    partial[r] (in partial's dtype); rows past x's end load as zeros."""
    r, c = tile.bid(0), tile.bid(1)
    acc = tile.zeros((BR, BC), partial.dtype)
    for t in range(int(r) * (ROWS // BR), (int(r) + 1) * (ROWS // BR)):
        acc += tile.load(x, index=(t, c), shape=(BR, BC)).astype(partial.dtype)
    tile.store(partial, index=(r, c), tile=tile.sum(acc, axis=0).reshape((1, BC)))


def row_blocks(rows: int, BR: int, blocks: int = 32) -> int:
    """ROWS for a first pass over `rows` rows: a multiple of BR, so that about `blocks`
    row blocks cover them (the partials stay small beside the array)."""
    return BR * vg.cdiv(vg.cdiv(int(rows), BR), blocks)


def launch_two_pass_column_sums(x, out, partial, ROWS, BR=16, BC=256, second=None, **launch):
    """out = x.sum(axis=0) in a fixed order: row_block_sums into partial ((cdiv(rows,
    ROWS), cols), the arithmetic dtype), then its column sums (`second`: their BR and BC)."""
    row_block_sums[partial.shape[0], vg.cdiv(x.shape[1], BC)](x, partial, ROWS=ROWS, BR=BR, BC=BC, **launch)
    launch_column_sums(partial, out, **(second or {}), **launch)


def check(rng, rows=37, cols=1000):
    from verdigris.examples import Result, on_backend

    partial = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full(cols, np.nan, np.float32)
    out = on_backend(launch_column_sums, partial, out)[1]
    return [Result(f"column sums of {rows} x {cols}", out,
                   partial.astype(np.float64).sum(axis=0), 1e-5)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
