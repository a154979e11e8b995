"""2-D transpose: each block loads a BxB tile and stores its `.T` at the mirrored tile
index; the compiler moves the tile between layouts through padded shared memory, so both
the loads and the stores stay coalesced 16-byte accesses."""
import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def transpose(x, out, B: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    tile.store(out, index=(j, i), tile=tile.load(x, index=(i, j), shape=(B, B)).T)


def check(rng, rows=100, cols=70, b=32):
    from verdigris.examples import Result

    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = vg.asarray(np.full((cols, rows), np.nan, np.float32))
    transpose[vg.cdiv(rows, b), vg.cdiv(cols, b)](vg.asarray(x), out, B=b)
    return [Result(f"transpose of {rows}x{cols} in {b}x{b} tiles", np.asarray(out), x.T, 0.0)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
