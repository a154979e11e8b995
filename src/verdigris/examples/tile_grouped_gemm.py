"""Grouped GEMM for mixture-of-experts, in one launch: G products c_g = a_g @ op(b[g]), where
the a_g are the rows of one packed array a [sum M_i, K] that a router sent to expert g
(group g is rows offsets[g] ... offsets[g + 1] - 1; `offsets`: int32 [G + 1], cumulative
from 0 to a's rows, a device array: the sizes need not be known on the host), b is
[G, N, K] (each expert's weight as torch.nn.Linear stores it, B_ORDER="F") or [G, K, N]
(B_ORDER="C"), and c is packed as a is, [sum M_i, N].

The grid covers the output tiles of the packed array c, not of each group: block (r, j)
owns c's tile (r, j), rows r * BM ... r * BM + BM - 1 of the packed rows, whatever groups
they belong to. It finds the groups of its first and last rows in `offsets` (a bisection,
then a step past each group that starts by the last row: scalar code), and for each group
g between them that is not empty multiplies its whole A tile by b[g] (`tile_gemm`'s K loop
on a 3-d operand). A tile inside one group stores its product whole; a tile across groups
scatters each group's rows of that group's product as it comes (rows of other groups at
index -1, skipped), so one accumulator is live at a time. A tile inside one group costs
one product, a tile across a boundary one more per group it meets: in all at most G - 1
products more than the tiles of c, against the sum of ceil(M_i / BM) tiles that padding
each group to whole tiles costs. A group of 0 rows costs nothing, a ragged one no padding
in memory.

Why this shape: every block writes only its own tile of c, at indices computed from its
block index alone (the tile store's, and the scatter's rows and columns of the tile), so
the race checker proves the writes disjoint with no fact about the offsets (a grid of
per-group tiles would store at rows offsets[g] + i * BM, read from memory: not provable,
VG205). The offsets only choose which products a block computes and which b[g] it reads,
a group index always in 0 ... G - 1; offsets that are not cumulative give wrong numbers,
never a fault (`docs/safety.md`, "What is proven").

Arithmetic in float32 (tile.mma's), rounded once to c's dtype. On sm_90a both operands of
the K loop stream through TMA into wgmma, and the kernel is warp-specialized and
persistent as `tile_gemm.gemm` is (`tile/specialize.py`): the producer warp group runs the
group search and the loop over the groups again, as scalar code, and copies each group's
K tiles ahead of the consumers, across groups and tiles; a whole tile leaves by a TMA
store. 128 x 256 tiles fit in registers (one accumulator).
"""
from __future__ import annotations

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples import Result, on_backend
from verdigris.examples.tile_gemm import _narrow, available

GROUPED_TILES = dict(BM=128, BN=256, BK=64)


def group_product(a, b, r, g, j, BM, BN, BK, B_ORDER):
    """Tile (r, j) of a @ op(b[g]), accumulated BK at a time along K in float32; b[g] is
    (N, K) as stored with B_ORDER="F", (K, N) with "C"."""
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range((a.shape[1] + BK - 1) // BK):
        if B_ORDER == "F":
            w = tile.load(b, index=(g, j, k), shape=(1, BN, BK)).reshape((BN, BK)).T
        else:
            w = tile.load(b, index=(g, k, j), shape=(1, BK, BN)).reshape((BK, BN))
        acc = tile.mma(tile.load(a, index=(r, k), shape=(BM, BK)), w, acc)
    return acc


@tile.kernel
def grouped_gemm(a, b, offsets, c, GROUPS: vg.constexpr = 8, BM: vg.constexpr = 128,
                 BN: vg.constexpr = 128, BK: vg.constexpr = 64, B_ORDER: vg.constexpr = "F"):
    """c[offsets[g]:offsets[g + 1]] = a[offsets[g]:offsets[g + 1]] @ op(b[g]) for each of
    the GROUPS groups (module docstring); grid (tiles of c's rows, tiles of N). GROUPS
    must be b's groups: a launch where it is not is refused (VG304)."""
    vg.assume(b.shape[0] == GROUPS and offsets.shape[0] == GROUPS + 1)
    r, j = tile.bid(0), tile.bid(1)
    first_row = int(r) * BM
    last_row = min(first_row + BM, a.shape[0]) - 1
    # The first row's group: offsets[first] <= first_row < offsets[past], by bisection.
    first, past = 0, GROUPS
    while past - first > 1:
        middle = (first + past) // 2
        if tile.load(offsets, index=(middle,), shape=()) <= first_row:
            first = middle
        else:
            past = middle
    # The last row's group: past each group after the first that starts by the last row.
    last = first
    while last + 1 < GROUPS and tile.load(offsets, index=(last + 1,), shape=()) <= last_row:
        last += 1
    rows = (first_row + tile.arange(BM)).reshape((BM, 1))
    acc = tile.zeros((BM, BN), vg.float32)
    for g in range(first, last + 1):
        start = tile.load(offsets, index=(g,), shape=())
        end = tile.load(offsets, index=(g + 1,), shape=())
        if end > start:  # the empty groups a tile spans cost no product
            acc = group_product(a, b, r, g, j, BM, BN, BK, B_ORDER)
            if last > first:  # a tile across groups: this group's rows, the others at -1
                # (skipped). The columns are computed here: a column tile made before the
                # loop would keep BN / 4 int64 columns in each thread's registers through
                # every product.
                mine = tile.where((rows >= start) & (rows < end), rows, -1)
                tile.scatter(c, (mine, (int(j) * BN + tile.arange(BN)).reshape((1, BN))),
                             acc.astype(c.dtype), skip_out_of_bounds=True)
    if last == first:  # a tile inside one group: stored whole
        tile.store(c, index=(r, j), tile=acc.astype(c.dtype))


def group_offsets(sizes) -> np.ndarray:
    """The offsets (int32 [G + 1], cumulative from 0) of groups of `sizes` rows."""
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def grid(c, tiles: dict) -> tuple:
    """One block per tile of the packed output c."""
    return vg.cdiv(c.shape[0], tiles["BM"]), vg.cdiv(c.shape[1], tiles["BN"])


def launch_grouped_gemm(a, b, offsets, c, B_ORDER="F", tiles=None, **launch):
    """c = each group's rows of a times its b[g] (module docstring), one launch."""
    tiles = tiles or GROUPED_TILES
    grouped_gemm[grid(c, tiles)](a, b, offsets, c, GROUPS=b.shape[0], B_ORDER=B_ORDER,
                                 **tiles, **launch)


def reference(a, b, offsets, B_ORDER="F") -> np.ndarray:
    """The grouped product in float64 (NumPy arrays)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if B_ORDER == "F":
        b64 = b64.transpose(0, 2, 1)
    out = np.empty((a.shape[0], b.shape[2] if B_ORDER == "C" else b.shape[1]))
    for g in range(b.shape[0]):
        out[offsets[g]:offsets[g + 1]] = a64[offsets[g]:offsets[g + 1]] @ b64[g]
    return out


def check(rng, sizes=(5, 0, 70, 33, 0, 1), n=48, k=40, tiles=dict(BM=32, BN=32, BK=16)) -> list:
    """Ragged groups (empty ones too, none a multiple of the tile) in both b layouts."""
    offsets = group_offsets(sizes)
    name = "bfloat16" if available("bfloat16") else "float16"
    a, _ = _narrow(rng, (int(offsets[-1]), k), name)
    results = []
    for order, shape in (("F", (len(sizes), n, k)), ("C", (len(sizes), k, n))):
        b, _ = _narrow(rng, shape, name)
        c = np.full((a.shape[0], n), np.nan, np.float32)
        c = on_backend(launch_grouped_gemm, a, b, offsets, c, order, tiles)[3]
        results.append(Result(f"grouped gemm {name}, groups of {list(sizes)} rows, B_ORDER={order}",
                              c, reference(a, b, offsets, order), 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
