"""Tile vector add: each block adds one tile of BLOCK elements; the last tile is masked."""
import numpy as np

import verdigris as vg
from verdigris import tile


@tile.kernel
def add(a, b, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    x = tile.load(a, index=(i,), shape=(BLOCK,))
    y = tile.load(b, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=x + y)


def check(rng, n=10_003, block=1024):
    from verdigris.examples import Result

    results = []
    for dtype in (np.float32, np.float16):
        a, b = (rng.standard_normal(n).astype(dtype) for _ in range(2))
        out = vg.asarray(np.full(n, np.nan, dtype))  # poisoned: every element must be written
        add[vg.cdiv(n, block)](vg.asarray(a), vg.asarray(b), out, BLOCK=block)
        want = a.astype(np.float64) + b
        results.append(Result(f"{n:,} {np.dtype(dtype).name} in tiles of {block}", np.asarray(out), want,
                              1e-6 if dtype == np.float32 else 1e-3))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
