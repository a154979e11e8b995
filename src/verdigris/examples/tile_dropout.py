"""Dropout with the counter-based generator: element k is kept when
`tile.rand(seed, k) >= p` and then scaled by 1 / (1 - p). No state: the mask depends only
on (seed, k), so it is the same on every backend and can be recomputed in the backward
pass instead of stored."""
import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.cpu import philox


@tile.kernel
def dropout(x, out, seed, p, BLOCK: vg.constexpr):
    i = tile.bid(0)
    offsets = tile.arange(BLOCK) + i * BLOCK
    keep = tile.rand(seed, offsets) >= p
    t = tile.load(x, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=tile.where(keep, t * (1.0 / (1.0 - p)), 0.0))


def check(rng, n=20_000, p=0.3, block=2048):
    from verdigris.examples import Result

    seed = int(rng.integers(0, 2**31))
    x = rng.standard_normal(n).astype(np.float32)
    out = vg.asarray(np.full(n, np.nan, np.float32))
    dropout[vg.cdiv(n, block)](vg.asarray(x), out, seed, np.float32(p), BLOCK=block)
    got = np.asarray(out)
    keep = philox.uniform(seed, np.arange(n)) >= np.float32(p)
    want = np.where(keep, x.astype(np.float64) / (1 - p), 0.0)
    kept = np.count_nonzero(got) / n
    return [Result(f"dropout of {n:,} float32 with p={p} (kept {kept:.3f})", got, want, 1e-6),
            Result("fraction kept, against 1 - p", np.array([kept]), np.array([1 - p]), 0.02, absolute=True)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
