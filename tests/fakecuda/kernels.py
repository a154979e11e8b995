"""Kernels for the launch-path tests that run on the fake driver (tests/test_runtime_launch.py)
and for bench/runtime.py: one of three arrays and a scalar, one of sixteen arguments, a
strided 2-D copy, tile kernels with a constexpr (one racy twin) and one masked by a scalar,
a row kernel whose proof needs its width in int32's range, and a tile concatenation whose
shared buffers are dynamic shared memory past 48 KiB."""
import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


@simt.kernel
def sixteen(a0, a1, a2, a3, a4, a5, a6, a7, s0, s1, s2, s3, s4, s5, s6, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = (a0[i] + a1[i] + a2[i] + a3[i] + a4[i] + a5[i] + a6[i] + a7[i]
                  + s0 + s1 + s2 + s3 + s4 + s5 + s6)


@simt.kernel
def copy2d(src, dst):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < dst.shape[0] and c < dst.shape[1]:
        dst[r, c] = src[r, c]


@tile.kernel
def add(a, b, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    x = tile.load(a, index=(i,), shape=(BLOCK,))
    y = tile.load(b, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=x + y)


@tile.kernel
def store_tile_zero(x, out, B: vg.constexpr):
    """Racy (VG202): every block stores its tile at tile 0."""
    tile.store(out, index=(0,), tile=tile.load(x, index=(tile.bid(0),), shape=(B,)))


@tile.kernel
def keep_prefix(x, out, n, BLOCK: vg.constexpr):
    """Each block's tile with the elements past position n of the tile zeroed: a mask
    against an integer scalar (compared once per run when n is a multiple of 16)."""
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(BLOCK,))
    tile.store(out, index=(i,), tile=tile.where(tile.arange(BLOCK) < n, t, 0.0))


@simt.kernel
def fill(out, h, address, _scale):
    """Parameters named like the generated launcher's locals (`h`, `address`) and one with
    a leading underscore (which keeps the general path)."""
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = h + address * _scale


@simt.kernel
def assumed_rows(x, out, n, m):
    vg.assume(m <= n and x.shape[0] * n <= out.shape[0])
    i = simt.global_id(0)
    if i < x.shape[0]:
        for j in range(m):
            out[i * n + j] = x[i]


SCALE = 2.0  # a module-level constant: tests rebind it between launches


@simt.kernel
def scaled(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * SCALE


@simt.kernel
def rows_by_width(x, out, width):
    """Race-free for widths in int32's range (the narrow variant, `Param.narrow`); a width
    near 2**62 makes rows meet through wrap-around (the wide variant is refused); an int64
    or a uint64 width."""
    row = simt.global_id(1)
    col = simt.global_id(0)
    w = vg.int64(width)
    if row < x.shape[0] and col < w:
        out[row * w + col] = x[row]


@tile.kernel
def side_by_side(x, y, out, R: vg.constexpr, C: vg.constexpr):
    a = tile.load(x, index=(0, 0), shape=(R, C))
    b = tile.load(y, index=(0, 0), shape=(R, C))
    tile.store(out, index=(0, 0), tile=tile.cat((a, b), 1))
