"""SGEMM in the SIMT track: C = A @ B in float32 with FMAs on the CUDA cores (no tensor
cores). A block computes a BM x BN tile of C from BK-deep slices of A and B staged in
shared memory; each thread keeps a TM x TN block of C in registers (register blocking) and
loads the next slices into registers while it computes on the current ones. A thread's
rows (columns) are two runs of TM / 2 (TN / 2), half a tile apart, so that the 16-byte
shared-memory reads of a warp hit distinct banks."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def sgemm(a, b, c, BM: vg.constexpr = 128, BN: vg.constexpr = 128, BK: vg.constexpr = 8,
          TM: vg.constexpr = 8, TN: vg.constexpr = 8):
    """c = a @ b (a: M x K, b: K x N, c: M x N, float32). Blocks of (BM // TM) * (BN // TN)
    threads, grid (cdiv(N, BN), cdiv(M, BM))."""
    THREADS: vg.constexpr = (BM // TM) * (BN // TN)
    A_LOADS: vg.constexpr = BM * BK // THREADS  # elements of the A slice each thread loads
    B_LOADS: vg.constexpr = BK * BN // THREADS
    a_tile = simt.shared.array((BK, BM + 4), vg.float32)  # transposed; padded: no conflicts
    b_tile = simt.shared.array((BK, BN), vg.float32)
    acc = simt.local.array((TM, TN), vg.float32)
    a_frag = simt.local.array(TM, vg.float32)
    b_frag = simt.local.array(TN, vg.float32)
    a_next = simt.local.array(A_LOADS, vg.float32)
    b_next = simt.local.array(B_LOADS, vg.float32)
    if simt.block_dim(0) != THREADS:  # the tiles' loads and stores assume THREADS threads
        return  # (the whole block: a block-uniform exit; gone once the block is known)
    t = simt.thread_id(0)
    m, n, depth = c.shape[0], c.shape[1], a.shape[1]
    row0 = int(simt.block_id(1)) * BM
    col0 = int(simt.block_id(0)) * BN
    HALF_M: vg.constexpr = TM // 2
    HALF_N: vg.constexpr = TN // 2
    tm = t // (BN // TN) * HALF_M  # where this thread's two runs of rows and columns start
    tn = t % (BN // TN) * HALF_N
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = vg.float32(0)
    fetch_slices(a, b, a_next, b_next, row0, col0, 0, t, BM, BN, BK, THREADS)
    for k0 in range(0, depth, BK):
        for s in range(A_LOADS):  # the slices fetched into registers go to shared memory
            e = t + s * THREADS
            a_tile[e % BK, e // BK] = a_next[s]
        for s in range(B_LOADS):
            e = t + s * THREADS
            b_tile[e // BN, e % BN] = b_next[s]
        simt.barrier()
        if k0 + BK < depth:  # the next slices' loads overlap the FMAs below
            fetch_slices(a, b, a_next, b_next, row0, col0, k0 + BK, t, BM, BN, BK, THREADS)
        for kk in range(BK):
            for i in range(TM):
                a_frag[i] = a_tile[kk, i // HALF_M * (BM // 2) + tm + i % HALF_M]
            for j in range(TN):
                b_frag[j] = b_tile[kk, j // HALF_N * (BN // 2) + tn + j % HALF_N]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] = vg.math.fma(a_frag[i], b_frag[j], acc[i, j])
        simt.barrier()  # everyone is done with the tiles before they are overwritten
    for i in range(TM):
        r = row0 + i // HALF_M * (BM // 2) + tm + i % HALF_M
        for j in range(TN):
            col = col0 + j // HALF_N * (BN // 2) + tn + j % HALF_N
            if r < m and col < n:
                c[r, col] = acc[i, j]


@vg.func
def fetch_slices(a, b, a_next, b_next, row0, col0, k0, t, BM: vg.constexpr, BN: vg.constexpr,
                 BK: vg.constexpr, THREADS: vg.constexpr):
    """This thread's elements of the BM x BK slice of a and the BK x BN slice of b at depth
    k0, into registers (zeros past the edges): consecutive threads read consecutive
    elements of a row."""
    m, n, depth = a.shape[0], b.shape[1], a.shape[1]
    for s in range(BM * BK // THREADS):
        e = t + s * THREADS
        r, k = row0 + e // BK, k0 + e % BK
        a_next[s] = a[r, k] if r < m and k < depth else vg.float32(0)
    for s in range(BK * BN // THREADS):
        e = t + s * THREADS
        k, col = k0 + e // BN, col0 + e % BN
        b_next[s] = b[k, col] if k < depth and col < n else vg.float32(0)


CONFIG = dict(BM=128, BN=128, BK=8, TM=8, TN=8)


def matmul(a, b, c, config=None) -> None:
    """c = a @ b on the current backend (float32, 2-d)."""
    cfg = config or CONFIG
    threads = (cfg["BM"] // cfg["TM"]) * (cfg["BN"] // cfg["TN"])
    grid = (vg.cdiv(c.shape[1], cfg["BN"]), vg.cdiv(c.shape[0], cfg["BM"]))
    sgemm[grid, threads](a, b, c, **cfg)


def check(rng):
    from verdigris.examples import Result

    results = []
    for (m, n, k), cfg in (((200, 150, 72), CONFIG),
                           ((70, 45, 37), dict(BM=32, BN=32, BK=8, TM=4, TN=4))):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = vg.asarray(np.full((m, n), np.nan, np.float32))
        matmul(vg.asarray(a), vg.asarray(b), c, cfg)
        results.append(Result(f"{m}x{k} @ {k}x{n} float32, tiles {cfg['BM']}x{cfg['BN']}x"
                              f"{cfg['BK']}, {cfg['TM']}x{cfg['TN']} per thread",
                              np.asarray(c), a.astype(np.float64) @ b.astype(np.float64), 1e-5))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
