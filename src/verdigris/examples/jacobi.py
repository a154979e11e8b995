"""Jacobi iteration for Laplace's equation on a 2-D grid: each block loads its tile of the
grid with a one-cell halo into shared memory, then every interior point becomes the mean
of its four neighbours; boundary points keep their values. Sweeps alternate between two
arrays."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def jacobi_step(u, out, TX: vg.constexpr = 32, TY: vg.constexpr = 8):
    """One sweep from u into out (same shape). Blocks of (TX, TY) threads, grid
    (cdiv(cols, TX), cdiv(rows, TY))."""
    tile = simt.shared.array((TY + 2, TX + 2), vg.float32)
    tx, ty = simt.thread_id(0), simt.thread_id(1)
    rows, cols = u.shape[0], u.shape[1]
    y0 = int(simt.block_id(1)) * TY - 1  # the halo tile's first row and column in u
    x0 = int(simt.block_id(0)) * TX - 1
    # The (TY + 2) x (TX + 2) halo tile: thread (tx, ty) loads cell (ty, tx), and the first
    # two rows and columns of threads also the cells TY rows below and TX columns right.
    for r in range(ty, TY + 2, TY):
        for c in range(tx, TX + 2, TX):
            y, x = y0 + r, x0 + c
            tile[r, c] = u[y, x] if 0 <= y < rows and 0 <= x < cols else vg.float32(0)
    simt.barrier()
    y, x = y0 + 1 + ty, x0 + 1 + tx
    if y < rows and x < cols:
        if 0 < y < rows - 1 and 0 < x < cols - 1:
            out[y, x] = 0.25 * (tile[ty, tx + 1] + tile[ty + 2, tx + 1]
                                + tile[ty + 1, tx] + tile[ty + 1, tx + 2])
        else:
            out[y, x] = tile[ty + 1, tx + 1]


def sweeps(u, steps: int, tx: int = 32, ty: int = 8):
    """`steps` Jacobi sweeps from u (2-d float32; it is one of the two arrays the sweeps
    alternate between, so it is overwritten); returns the array holding the last."""
    a, b = u, vg.empty(u.shape, vg.float32)
    grid = (vg.cdiv(u.shape[1], tx), vg.cdiv(u.shape[0], ty))
    for _ in range(steps):
        jacobi_step[grid, (tx, ty)](a, b, TX=tx, TY=ty)
        a, b = b, a
    return a


def reference(u: np.ndarray, steps: int) -> np.ndarray:
    u = u.astype(np.float64)
    for _ in range(steps):
        nxt = u.copy()
        nxt[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u = nxt
    return u


def check(rng, steps=6):
    from verdigris.examples import Result

    results = []
    for shape, tx, ty in (((123, 301), 32, 8), ((40, 33), 16, 4)):
        u = rng.random(shape, dtype=np.float32)
        want = reference(u, steps)
        got = sweeps(vg.asarray(u), steps, tx, ty)
        results.append(Result(f"{steps} Jacobi sweeps on {shape[0]}x{shape[1]}, tiles of "
                              f"{tx}x{ty}", np.asarray(got), want, 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
