"""Jacobi iteration for Laplace's equation on a 2-D grid: each block loads its tile of the
grid with a one-cell halo into shared memory, then every interior point becomes the mean
of its four neighbours; boundary points keep their values. Sweeps alternate between two
arrays, one launch per sweep; `jacobi_sweeps` does them all in one launch, with a grid
barrier between a sweep's writes and the next sweep's reads."""
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


@simt.kernel
def jacobi_sweeps(u, spare, steps):
    """`steps` sweeps in one launch, from u into spare and back (spare's edges must hold
    u's); the last sweep is in u if `steps` is even, else in spare. One thread per point."""
    y, x = simt.global_id(1), simt.global_id(0)
    inside = 0 < y < u.shape[0] - 1 and 0 < x < u.shape[1] - 1
    for _ in range(steps // 2):
        if inside:
            spare[y, x] = 0.25 * (u[y - 1, x] + u[y + 1, x] + u[y, x - 1] + u[y, x + 1])
        simt.grid_barrier()  # every point of the sweep written before the next reads it
        if inside:
            u[y, x] = 0.25 * (spare[y - 1, x] + spare[y + 1, x] + spare[y, x - 1] + spare[y, x + 1])
        simt.grid_barrier()
    if steps % 2 == 1 and inside:
        spare[y, x] = 0.25 * (u[y - 1, x] + u[y + 1, x] + u[y, x - 1] + u[y, x + 1])


def sweeps_in_one_launch(u, steps: int, tx: int = 32, ty: int = 8):
    """The same as `sweeps`, in one cooperative launch (the grid must fit on the GPU at
    once: a plate of up to about a million points on an H100)."""
    spare = vg.asarray(np.array(np.asarray(u)))  # a copy: its edges are u's
    jacobi_sweeps[(vg.cdiv(u.shape[1], tx), vg.cdiv(u.shape[0], ty)), (tx, ty)](u, spare, steps)
    return spare if steps % 2 else u


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
        got = sweeps(vg.asarray(u.copy()), steps, tx, ty)  # (it overwrites its argument)
        results.append(Result(f"{steps} Jacobi sweeps on {shape[0]}x{shape[1]}, tiles of "
                              f"{tx}x{ty}", np.asarray(got), want, 1e-5))
        for odd in (0, 1):
            got = sweeps_in_one_launch(vg.asarray(u.copy()), steps + odd, tx, ty)
            results.append(Result(f"{steps + odd} Jacobi sweeps on {shape[0]}x{shape[1]} in one "
                                  f"launch, blocks of {tx}x{ty}", np.asarray(got),
                                  reference(u, steps + odd), 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
