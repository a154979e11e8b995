"""Sparse matrix times vector, y = A @ x, with A in CSR form (indptr, indices, data): a group
of LANES threads per row (a warp for long rows, fewer lanes for short ones), each taking every
LANES-th entry of the row, then a shuffle reduction within the group.

The row's bounds are read from indptr and the columns from indices, so no proof covers
the loads of data, indices and x: each keeps its bounds check. A column outside x (or an
indptr past the end of data) is not read, and the launch's first such index is raised as
`vg.BoundsError` at the next synchronization, naming the thread and the index.
"""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def spmv_csr(indptr, indices, data, x, y, LANES: vg.constexpr = 32):
    """y[r] = sum of data[j] * x[indices[j]] over j in indptr[r]:indptr[r + 1]; LANES threads
    per row (a power of two up to 32), so a warp takes 32 // LANES rows."""
    row = simt.global_id(0) // LANES
    part = vg.int32(simt.global_id(0) % LANES)  # the lane within the row's group (blocks of whole warps)
    total = 0.0
    if row < y.shape[0]:
        for j in range(indptr[row] + part, indptr[row + 1], LANES):
            total += data[j] * x[indices[j]]
    for k in range(5):  # the row's LANES partial sums, added within each group of LANES lanes
        partner = simt.shfl_xor(total, 16 >> k)
        if 16 >> k < LANES:
            total += partner
    if row < y.shape[0] and part == 0:
        y[row] = total


def lanes_for(mean_entries: float) -> int:
    """Threads per row for rows of about `mean_entries` entries: the largest power of two
    not above half of it, from 2 to 32 (so each thread takes about two entries or more)."""
    half = round(max(mean_entries / 2, 1))
    return min(32, max(2, 1 << (half.bit_length() - 1)))


def multiply(indptr, indices, data, x, y, lanes: int | None = None, block: int = 256):
    """y = A @ x on the current backend (y's length is A's row count); `lanes` threads per
    row, by default `lanes_for` the matrix's mean row length."""
    rows = y.shape[0]
    if lanes is None:
        lanes = lanes_for(data.shape[0] / max(rows, 1))
    spmv_csr[vg.cdiv(rows * lanes, block), block](indptr, indices, data, x, y, LANES=lanes)
    return y


def random_csr(rng, rows: int, cols: int, mean_nnz: int):
    """A random CSR matrix whose row lengths vary from 0 to twice `mean_nnz`."""
    lengths = rng.integers(0, 2 * mean_nnz + 1, rows)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = rng.integers(0, cols, int(indptr[-1])).astype(np.int32)
    data = rng.standard_normal(int(indptr[-1])).astype(np.float32)
    return indptr, indices, data


def reference(indptr, indices, data, x):
    """A @ x in float64."""
    products = data.astype(np.float64) * x.astype(np.float64)[indices]
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return np.bincount(rows, weights=products, minlength=len(indptr) - 1)


def check(rng, rows=20_011, cols=15_000):
    from verdigris.examples import Result

    results = []
    for mean_nnz, lanes in ((24, 32), (5, None)):
        indptr, indices, data = random_csr(rng, rows, cols, mean_nnz)
        x = rng.standard_normal(cols).astype(np.float32)
        y = vg.asarray(np.full(rows, np.nan, np.float32))  # poisoned: every row must be written
        multiply(*(vg.asarray(a) for a in (indptr, indices, data, x)), y, lanes=lanes)
        results.append(Result(f"CSR sparse matrix {rows:,}x{cols:,} ({len(data):,} entries) times a vector",
                              np.asarray(y), reference(indptr, indices, data, x), 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
