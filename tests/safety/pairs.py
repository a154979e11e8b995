"""The safety suite: racy SIMT kernels from the classic catalogues, each beside its fixed twin.

Sources: GPUVerify's testsuite (inter-group `p[threadIdx.x]`, stride bugs, read/atomic and
atomic-index cases, 2-D races), Faial's examples (SAXPY reading `y[i+1]`, plain and atomic
on one array, loop off-by-one), Descend's error examples (every thread writing one element,
in-place reversal, computed indices `thread*2 % 5`), the index-map table of
race-safety.md §4.3 (`i % 32`, `i // 2`, `r*W + c` without or with an off-by-one column
guard, grid-stride steps), the in-place saxpy, stencil and transpose bugs, and sweeps
that need a grid barrier between reads and writes of one array.

`Pair.make(rng)` gives `(grid, block, args, kwargs)` with NumPy arrays (outputs poisoned or
holding the start values the kernel accumulates into); the same arguments serve both
kernels. `Pair.reference(args)`, given the arguments as made (before any run), gives the
contents the FIXED kernel leaves in its output arguments, by position. `dynamic` says
whether a cpu run of the racy kernel with those arguments really makes the colliding
accesses (so a dynamic checker can see them).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import verdigris as vg
from verdigris import simt


@dataclass
class Pair:
    name: str
    racy: object  # KernelFunction
    fixed: object  # KernelFunction
    code: str  # the code the racy one must get, e.g. "VG202"
    make: object  # make(rng) -> (grid, block, args: tuple, kwargs: dict)
    reference: object  # reference(args) -> dict[int, np.ndarray], outputs of the fixed one
    dynamic: bool = True  # a cpu run of the racy kernel with make()'s args shows the race


BLOCK = 64
N = 3 * BLOCK - 5  # ragged: the last block is partly idle


def _f32(rng, n=N):
    return rng.standard_normal(n).astype(np.float32)


def _poison(n=N, dtype=np.float32):
    return np.full(n, -7, dtype)


def copy_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (_f32(rng), _poison()), {}


def copy_reference(args):
    return {1: args[0].copy()}


# ----------------------------------------------------------------------------- 1-D writes

@simt.kernel
def missing_block_offset(x, out):  # GPUVerify: p[threadIdx.x] with several blocks
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[simt.thread_id(0)] = x[i]


@simt.kernel
def copy(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i]


@simt.kernel
def stride_bug(x, out):  # block offset with the wrong stride: b*(B-1) + t
    i = simt.block_id(0) * (simt.block_dim(0) - 1) + simt.thread_id(0)
    if i < out.shape[0]:
        out[i] = x[i]


@simt.kernel
def all_write_one(x, out):  # Descend: every thread writes out[0]
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[0] = x[i]


@simt.kernel
def all_add_one(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(out, 0, x[i])


def sum_setup(rng):
    x = rng.integers(-50, 50, N).astype(np.int32)
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (x, np.zeros(1, np.int32)), {}


def sum_reference(args):
    return {1: np.array([args[0].sum()], np.int32)}


@simt.kernel
def plain_sum(x, out):  # a reduction without atomics: read-modify-write of out[0]
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[0] += x[i]


@simt.kernel
def modulo_index(x, out):  # out[i % 32]
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i % 32] = x[i]


@simt.kernel
def modulo_atomic(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_add(out, i % 32, x[i])


def buckets_setup(rng):
    x = rng.integers(-50, 50, N).astype(np.int32)
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (x, np.zeros(32, np.int32)), {}


def buckets_reference(args):
    return {1: np.bincount(np.arange(N) % 32, weights=args[0], minlength=32).astype(np.int32)}


@simt.kernel
def halve_index(x, out):  # out[i // 2]: two threads per element
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i // 2] = x[i]


@simt.kernel
def halve_even_threads(x, out):
    i = simt.global_id(0)
    if i + 1 < x.shape[0] and i % 2 == 0:
        out[i // 2] = x[i] + x[i + 1]


def pairs_setup(rng):
    x = rng.integers(-50, 50, N + 1).astype(np.int32)
    return (vg.cdiv(N + 1, BLOCK),), (BLOCK,), (x, np.full((N + 1) // 2, -7, np.int32)), {}


def pairs_reference(args):
    x = args[0]
    return {1: (x[0::2] + x[1::2]).astype(np.int32)}


@simt.kernel
def computed_index(x, out):  # Descend: thread*2 % 5
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i * 2 % 5] = x[i]


@simt.kernel
def computed_index_max(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        simt.atomic_max(out, i * 2 % 5, x[i])


def max5_setup(rng):
    x = rng.integers(-1000, 1000, N).astype(np.int32)
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (x, np.full(5, -2**31, np.int32)), {}


def max5_reference(args):
    x, out = args[0], np.full(5, -2**31, np.int64)
    np.maximum.at(out, np.arange(N) * 2 % 5, x)
    return {1: out.astype(np.int32)}


@simt.kernel
def pair_overlap(x, out):  # out[2i] and out[2i+2]: thread i+1's first is thread i's second
    i = simt.global_id(0)
    if 2 * i + 2 < out.shape[0]:
        out[2 * i] = x[i]
        out[2 * i + 2] = -x[i]


@simt.kernel
def pair_interleave(x, out):
    i = simt.global_id(0)
    if 2 * i + 2 < out.shape[0]:
        out[2 * i] = x[i]
        out[2 * i + 1] = -x[i]


def interleave_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (_f32(rng), _poison(2 * N + 1)), {}


def interleave_reference(args):
    x, want = args[0], args[1].copy()
    want[0:2 * N:2], want[1:2 * N:2] = x, -x
    return {1: want}


@simt.kernel
def next_overlap(x, out):  # out[i] and out[i + 1] on two lines
    i = simt.global_id(0)
    if i < x.shape[0] and i + 1 < out.shape[0]:
        out[i] = x[i]
        out[i + 1] = x[i]


@simt.kernel
def block_leader_overlap(x, out):  # one writer per block, but every block writes out[0]
    if simt.thread_id(0) == 0:
        out[0] = x[simt.block_id(0)]


@simt.kernel
def block_leader(x, out):
    if simt.thread_id(0) == 0:
        out[simt.block_id(0)] = x[simt.block_id(0)]


@simt.kernel
def whole_block_writes_slot(x, out):  # every thread of a block writes the block's slot
    out[simt.block_id(0)] = x[simt.block_id(0)]


def leader_setup(rng):
    return (5,), (BLOCK,), (_f32(rng, 5), _poison(5)), {}


def leader_reference(args):
    return {1: args[0].copy()}


# ----------------------------------------------------------------------------- loops

@simt.kernel
def grid_stride_by_block(x, out):  # steps by block_dim only
    for i in range(simt.global_id(0), out.shape[0], simt.block_dim(0)):
        out[i] = 2.0 * x[i]


@simt.kernel
def grid_stride(x, out):
    for i in range(simt.global_id(0), out.shape[0], simt.grid_dim(0) * simt.block_dim(0)):
        out[i] = 2.0 * x[i]


@simt.kernel
def grid_stride_from_thread(x, out):  # starts at thread_id: blocks repeat each other
    for i in range(simt.thread_id(0), out.shape[0], simt.grid_dim(0) * simt.block_dim(0)):
        out[i] = 2.0 * x[i]


def stride_setup(rng):
    n = 5 * BLOCK + 3
    return (2,), (BLOCK,), (_f32(rng, n), _poison(n)), {}


def double_reference(args):
    return {1: 2.0 * args[0]}


@simt.kernel
def chunk_off_by_one(x, out, K):  # Faial: loop bound off by one, chunks overlap
    i = simt.global_id(0)
    for j in range(K + 1):
        if i * K + j < out.shape[0]:
            out[i * K + j] = x[i]


@simt.kernel
def chunks(x, out, K):
    i = simt.global_id(0)
    for j in range(K):
        if i * K + j < out.shape[0]:
            out[i * K + j] = x[i]


def chunk_setup(rng):
    k = 3
    # a 32-bit K: `i * K` of an int64 K wraps for K = 2**33 on a large grid (a real race)
    return (2,), (BLOCK,), (_f32(rng, 2 * BLOCK), _poison(2 * BLOCK * k)), {"K": np.int32(k)}


def chunk_reference(args):
    return {1: np.repeat(args[0], 3)}


@simt.kernel
def interleave_by_block(x, out, M):  # out[j*T + gid] with T = block_dim, not all threads
    i = simt.global_id(0)
    for j in range(M):
        if j * simt.block_dim(0) + i < out.shape[0]:
            out[j * simt.block_dim(0) + i] = x[i]


@simt.kernel
def interleave_by_grid(x, out, M):
    i = simt.global_id(0)
    for j in range(M):  # an int32 M, widened: the product fits int64 (see chunk_setup)
        if int(j) * (simt.grid_dim(0) * simt.block_dim(0)) + i < out.shape[0]:
            out[int(j) * (simt.grid_dim(0) * simt.block_dim(0)) + i] = x[i]


def tile_setup(rng):
    return (2,), (BLOCK,), (_f32(rng, 2 * BLOCK), _poison(6 * BLOCK)), {"M": np.int32(3)}  # see chunk_setup


def tile_reference(args):
    return {1: np.tile(args[0], 3)}


# ----------------------------------------------------------------------------- 2-D

H, W = 7, 10


def grid2d_setup(rng):
    x = rng.standard_normal(H * W).astype(np.float32)
    # a 32-bit width: `r * width` of an int64 width 2**62 is 0 at r = 4 (threads of rows 0
    # and 4 write one element), which the checker finds
    return (1, 2), (16, 4), (x, _poison(H * W), np.int32(W)), {}


@simt.kernel
def rows_without_column_guard(x, out, width):  # r*W + c, c unguarded: rows overlap
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r * width + c < out.shape[0]:
        out[r * width + c] = x[r * width + c]


@simt.kernel
def rows(x, out, width):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if c < width and r * width + c < out.shape[0]:
        out[r * width + c] = x[r * width + c]


@simt.kernel
def rows_off_by_one(x, out, width):  # c <= W: the last column is the next row's first
    r = simt.global_id(1)
    c = simt.global_id(0)
    if c <= width and r * width + c < out.shape[0]:
        out[r * width + c] = x[r * width + c]


def rows_reference(args):
    return {1: args[0].copy()}


def matrix_setup(rng):
    x = rng.standard_normal((H, W)).astype(np.float32)
    return (1, 2), (16, 4), (x, np.full((H, W), -7, np.float32)), {}


@simt.kernel
def rows_from_thread_only(x, out):  # GPUVerify misc: 2-D race, row = thread_id(1)
    r = simt.thread_id(1)
    c = simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c]


@simt.kernel
def copy_2d(x, out):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c]


@simt.kernel
def rows_from_block_only(x, out):  # row = block_id(1): the threads of a block column collide
    r = simt.block_id(1)
    c = simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c]


def matrix_reference(args):
    return {1: args[0].copy()}


def transpose_setup(rng):
    x = rng.standard_normal(H * W).astype(np.float32)
    return (1, 2), (16, 4), (x, _poison(H * W), np.int32(H), np.int32(W)), {}  # see grid2d_setup


@simt.kernel
def transpose_wrong_stride(x, out, height, width):  # rows of out laid out height apart
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < height and c < width:
        out[r * height + c] = x[r * width + c]  # height < width: row r overlaps row r + 1


@simt.kernel
def transpose_flat(x, out, height, width):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < height and c < width:
        out[c * height + r] = x[r * width + c]


def transpose_reference(args):
    return {1: args[0].reshape(H, W).T.copy().reshape(-1)}


def square_setup(rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    return (1, 2), (8, 4), (x, np.full((8, 8), -7, np.float32)), {}


@simt.kernel
def transpose_in_place(x, out):  # reads x[r, c] that thread (c, r) overwrites
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < x.shape[0] and c < x.shape[1]:
        x[c, r] = x[r, c]


@simt.kernel
def transpose_2d(x, out):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < x.shape[0] and c < x.shape[1]:
        out[c, r] = x[r, c]


def square_reference(args):
    return {1: args[0].T.copy()}


@simt.kernel
def blur_in_place(x, out):  # 2-D stencil writing its own input
    r = simt.global_id(1)
    c = simt.global_id(0)
    if 0 < r < x.shape[0] - 1 and 0 < c < x.shape[1] - 1:
        x[r, c] = (x[r - 1, c] + x[r + 1, c] + x[r, c - 1] + x[r, c + 1]) * 0.25


@simt.kernel
def blur(x, out):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if 0 < r < x.shape[0] - 1 and 0 < c < x.shape[1] - 1:
        out[r, c] = (x[r - 1, c] + x[r + 1, c] + x[r, c - 1] + x[r, c + 1]) * 0.25


def blur_reference(args):
    x, want = args[0].astype(np.float64), args[1].astype(np.float64)
    want[1:-1, 1:-1] = (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:]) * 0.25
    return {1: want}


# ----------------------------------------------------------------------------- reads of writes

def inplace_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (_f32(rng), _poison()), {}


@simt.kernel
def reverse_in_place(x, out):  # Descend: read the reversed view, write the plain one
    i = simt.global_id(0)
    n = x.shape[0]
    if i < n:
        x[i] = x[n - 1 - i]


@simt.kernel
def reverse(x, out):
    i = simt.global_id(0)
    n = x.shape[0]
    if i < n:
        out[i] = x[n - 1 - i]


def reverse_reference(args):
    return {1: args[0][::-1].copy()}


@simt.kernel
def stencil_in_place(x, out):  # reads neighbours that other threads overwrite
    i = simt.global_id(0)
    if 0 < i < x.shape[0] - 1:
        x[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0


@simt.kernel
def stencil(x, out):
    i = simt.global_id(0)
    if 0 < i < x.shape[0] - 1:
        out[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0


def stencil_reference(args):
    x, want = args[0].astype(np.float64), args[1].astype(np.float64)
    want[1:-1] = (x[:-2] + x[1:-1] + x[2:]) / 3.0
    return {1: want}


@simt.kernel
def stencil_grid_synced(x, out):  # every read of the sweep, a grid barrier, then the writes
    i = simt.global_id(0)
    inside = 0 < i < x.shape[0] - 1
    mean = vg.float32(0.0)
    if inside:
        mean = (x[i - 1] + x[i] + x[i + 1]) / 3.0
    simt.grid_barrier()
    if inside:
        x[i] = mean


def stencil_in_place_reference(args):
    x = args[0].astype(np.float64)
    x[1:-1] = (x[:-2] + x[1:-1] + x[2:]) / 3.0
    return {0: x}


SWEEPS = 3  # Laplace's iterations on a rod: b from a, then a from b


@simt.kernel
def sweeps_one_grid_barrier(a, b):  # a sweep writes a while the next one reads it
    i = simt.global_id(0)
    for _ in range(SWEEPS):
        if 0 < i < a.shape[0] - 1:
            b[i] = 0.5 * (a[i - 1] + a[i + 1])
        simt.grid_barrier()
        if 0 < i < a.shape[0] - 1:
            a[i] = 0.5 * (b[i - 1] + b[i + 1])


@simt.kernel
def sweeps_two_grid_barriers(a, b):
    i = simt.global_id(0)
    for _ in range(SWEEPS):
        if 0 < i < a.shape[0] - 1:
            b[i] = 0.5 * (a[i - 1] + a[i + 1])
        simt.grid_barrier()
        if 0 < i < a.shape[0] - 1:
            a[i] = 0.5 * (b[i - 1] + b[i + 1])
        simt.grid_barrier()


def sweeps_setup(rng):
    a = _f32(rng)
    b = _poison()
    b[[0, -1]] = a[[0, -1]]
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (a, b), {}


def sweeps_reference(args):
    a, b = args[0].astype(np.float64), args[1].astype(np.float64)
    for _ in range(SWEEPS):
        b[1:-1] = 0.5 * (a[:-2] + a[2:])
        a[1:-1] = 0.5 * (b[:-2] + b[2:])
    return {0: a, 1: b}


def saxpy_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (1.5, _f32(rng), _f32(rng, N + 1)), {}


@simt.kernel
def saxpy_neighbour(a, x, y):  # Faial's tutorial: y[i+1] instead of y[i]
    i = simt.global_id(0)
    if i < x.shape[0]:
        y[i] = a * x[i] + y[i + 1]


@simt.kernel
def saxpy(a, x, y):
    i = simt.global_id(0)
    if i < x.shape[0]:
        y[i] = a * x[i] + y[i]


def saxpy_reference(args):
    a, x, y = args
    want = y.astype(np.float64)
    want[:N] = a * x.astype(np.float64) + want[:N]
    return {2: want}


@simt.kernel
def read_neighbours_output(x, out, diff):  # reads out[i + 1], which thread i + 1 writes
    i = simt.global_id(0)
    if i + 1 < out.shape[0]:
        out[i] = x[i]
        diff[i] = out[i + 1] - x[i]


@simt.kernel
def read_neighbours_input(x, out, diff):
    i = simt.global_id(0)
    if i + 1 < out.shape[0]:
        out[i] = x[i]
        diff[i] = x[i + 1] - x[i]


def neighbour_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (_f32(rng), _poison(), _poison()), {}


def neighbour_reference(args):
    x, out, diff = (a.astype(np.float64) for a in args)
    out[:-1] = x[:-1]
    diff[:-1] = x[1:] - x[:-1]
    return {1: out, 2: diff}


# ----------------------------------------------------------------------------- data and atomics

def histogram_setup(rng):
    data = rng.integers(0, 8, N).astype(np.int64)
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (data, np.zeros(8, np.int32)), {}


@simt.kernel
def histogram_plain(data, counts):  # Indigo atomicBug: the atomic made a plain RMW
    i = simt.global_id(0)
    if i < data.shape[0]:
        counts[data[i]] += 1


@simt.kernel
def histogram(data, counts):
    i = simt.global_id(0)
    if i < data.shape[0]:
        simt.atomic_add(counts, data[i], 1)


def histogram_reference(args):
    return {1: np.bincount(args[0], minlength=8).astype(np.int32)}


def scatter_setup(rng):
    index = rng.integers(0, N, N).astype(np.int64)
    index[1] = index[0]  # a repeated destination
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (_f32(rng), index, _poison()), {}


@simt.kernel
def scatter(x, index, out):  # distinct destinations are not known
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[index[i]] = x[i]


@simt.kernel
def gather(x, index, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = x[index[i]]


def gather_reference(args):
    x, index, _ = args
    return {2: x[index]}


def mixed_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (np.zeros(N + 1, np.int32),), {}


@simt.kernel
def plain_and_atomic(y):  # Faial racy-atomics: y[i] plain, y[i + 1] atomic
    i = simt.global_id(0)
    if i + 1 < y.shape[0]:
        y[i] += 1
        simt.atomic_add(y, i + 1, 1)


@simt.kernel
def atomic_and_atomic(y):
    i = simt.global_id(0)
    if i + 1 < y.shape[0]:
        simt.atomic_add(y, i, 1)
        simt.atomic_add(y, i + 1, 1)


def mixed_reference(args):
    want = np.zeros(N + 1, np.int32)
    want[:N] += 1
    want[1:] += 1
    return {0: want}


def counter_setup(rng):
    return (vg.cdiv(N, BLOCK),), (BLOCK,), (_f32(rng), _poison(), np.zeros(1, np.int32)), {}


@simt.kernel
def read_atomic_counter(x, out, count):  # GPUVerify read/atomic: a plain read of count
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = x[i] + count[0]
        simt.atomic_add(count, 0, 1)


@simt.kernel
def atomic_counter(x, out, count):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = x[i]
        simt.atomic_add(count, 0, 1)


def counter_reference(args):
    return {1: args[0].copy(), 2: np.array([N], np.int32)}


@simt.kernel
def index_from_atomic(x, out, count):  # GPUVerify atomics/add_zero: j = atomic_add(c, 0, 0)
    i = simt.global_id(0)
    if i < x.shape[0]:
        j = simt.atomic_add(count, 0, 0)
        out[j] = 1.0


@simt.kernel
def compaction_unsafe(x, out, count):  # distinct slots from the counter: trusted, marked
    i = simt.global_id(0)
    if i < x.shape[0]:
        j = simt.atomic_add(count, 0, 1)
        with vg.unsafe():
            out[j] = 1.0


def compaction_reference(args):
    return {1: np.ones(N, np.float32), 2: np.array([N], np.int32)}


# ----------------------------------------------------------------------------- tiles by arrival


@simt.kernel
def tiles_by_arrival_wrapped(x, out, tickets):  # more blocks than tiles: tickets wrap around
    tiles = (x.shape[0] + BLOCK - 1) // BLOCK
    tile = int(simt.block_ticket(tickets)) % tiles
    i = tile * BLOCK + simt.thread_id(0)
    if i < x.shape[0]:
        out[i] = x[i]


@simt.kernel
def tiles_by_arrival(x, out, tickets):
    tile = int(simt.block_ticket(tickets))
    i = tile * BLOCK + simt.thread_id(0)
    if i < x.shape[0]:
        out[i] = x[i]


def arrival_setup(rng):
    return (vg.cdiv(N, BLOCK) + 2,), (BLOCK,), (_f32(rng), _poison(), np.zeros(1, np.int32)), {}


PAIRS = [
    Pair("missing block offset", missing_block_offset, copy, "VG202", copy_setup, copy_reference),
    Pair("stride bug b*(B-1)+t", stride_bug, copy, "VG202", copy_setup, copy_reference),
    Pair("every thread writes out[0]", all_write_one, all_add_one, "VG202", sum_setup, sum_reference),
    Pair("sum without atomics", plain_sum, all_add_one, "VG202", sum_setup, sum_reference),
    Pair("i % 32 as write index", modulo_index, modulo_atomic, "VG202", buckets_setup,
         buckets_reference),
    Pair("i // 2 as write index", halve_index, halve_even_threads, "VG202", pairs_setup,
         pairs_reference),
    Pair("computed index thread*2 % 5", computed_index, computed_index_max, "VG202", max5_setup,
         max5_reference),
    Pair("out[2i] and out[2i+2]", pair_overlap, pair_interleave, "VG202", interleave_setup,
         interleave_reference),
    Pair("out[i] and out[i+1]", next_overlap, pair_interleave, "VG202", interleave_setup,
         interleave_reference),
    Pair("every block leader writes out[0]", block_leader_overlap, block_leader, "VG202",
         leader_setup, leader_reference),
    Pair("every thread of a block writes its slot", whole_block_writes_slot, block_leader,
         "VG202", leader_setup, leader_reference),
    Pair("in-place 2-D stencil", blur_in_place, blur, "VG203", square_setup, blur_reference),
    Pair("grid-stride loop stepping by block_dim", grid_stride_by_block, grid_stride, "VG202",
         stride_setup, double_reference),
    Pair("grid-stride loop starting at thread_id", grid_stride_from_thread, grid_stride, "VG202",
         stride_setup, double_reference),
    Pair("per-thread chunks, loop off by one", chunk_off_by_one, chunks, "VG202", chunk_setup,
         chunk_reference),
    Pair("interleaved tiles stepping by block_dim", interleave_by_block, interleave_by_grid,
         "VG202", tile_setup, tile_reference),
    Pair("r*W + c without the column guard", rows_without_column_guard, rows, "VG202",
         grid2d_setup, rows_reference),
    Pair("r*W + c with c <= W", rows_off_by_one, rows, "VG202", grid2d_setup, rows_reference),
    Pair("2-D row from thread_id only", rows_from_thread_only, copy_2d, "VG202", matrix_setup,
         matrix_reference),
    Pair("2-D row from block_id only", rows_from_block_only, copy_2d, "VG202", matrix_setup,
         matrix_reference),
    Pair("transpose with the wrong stride", transpose_wrong_stride, transpose_flat, "VG202",
         transpose_setup, transpose_reference),
    Pair("in-place transpose", transpose_in_place, transpose_2d, "VG203", square_setup,
         square_reference),
    Pair("in-place reversal", reverse_in_place, reverse, "VG203", inplace_setup,
         reverse_reference),
    Pair("in-place 3-point stencil", stencil_in_place, stencil, "VG203", inplace_setup,
         stencil_reference),
    Pair("in-place 3-point stencil, grid barrier between reads and writes", stencil_in_place,
         stencil_grid_synced, "VG203", inplace_setup, stencil_in_place_reference),
    Pair("Laplace's iterations, one grid barrier per sweep", sweeps_one_grid_barrier,
         sweeps_two_grid_barriers, "VG203", sweeps_setup, sweeps_reference),
    Pair("saxpy reading y[i+1]", saxpy_neighbour, saxpy, "VG203", saxpy_setup, saxpy_reference),
    Pair("read of a neighbour's output", read_neighbours_output, read_neighbours_input, "VG203",
         neighbour_setup, neighbour_reference),
    Pair("histogram without atomics", histogram_plain, histogram, "VG205", histogram_setup,
         histogram_reference),
    Pair("scatter through an index array", scatter, gather, "VG205", scatter_setup,
         gather_reference),
    Pair("plain and atomic update of one array", plain_and_atomic, atomic_and_atomic, "VG204",
         mixed_setup, mixed_reference),
    Pair("plain read of an atomic counter", read_atomic_counter, atomic_counter, "VG204",
         counter_setup, counter_reference),
    Pair("write index from an atomic", index_from_atomic, compaction_unsafe, "VG205",
         counter_setup, compaction_reference),
    Pair("tiles by arrival, wrapped around", tiles_by_arrival_wrapped, tiles_by_arrival, "VG202",
         arrival_setup, copy_reference),
]
