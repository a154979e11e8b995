"""The rules of docs/api.md "Numbers" on the GPU, against the cpu backend and float64 /
exact-integer references (issue #27): Python floats (weak float64), module-level constants
read at every launch, integer division by zero, INT_MIN // -1, shifts, run-time
conversions that wrap, and a tile kernel with a Python float."""
import numpy as np
import pytest

import verdigris as vg
from tests.sources import module_constants as m
from verdigris import simt, tile
from verdigris.runtime import backend

pytestmark = pytest.mark.gpu


@simt.kernel
def axpy(a, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = a * x[i] + y[i]


@tile.kernel
def axpy_tiles(a, x, y, out):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=a * tile.load(x, index=(i,), shape=(256,))
               + tile.load(y, index=(i,), shape=(256,)))


def _run(kernel, a, x, y):
    out = vg.asarray(np.full_like(x, np.nan))
    if kernel is axpy:
        axpy[vg.cdiv(x.size, 256), 256](a, vg.asarray(x), vg.asarray(y), out)
    else:
        axpy_tiles[vg.cdiv(x.size, 256)](a, vg.asarray(x), vg.asarray(y), out)
    return out.numpy()


@pytest.mark.parametrize("kernel", [axpy, axpy_tiles], ids=["simt", "tile"])
def test_python_floats_are_exact_in_float64_and_stay_float32(rng, kernel):
    a = float(rng.uniform(0.05, 0.15))
    x, y = rng.standard_normal(1024), rng.standard_normal(1024)
    np.testing.assert_array_equal(_run(kernel, a, x, y), a * x + y)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    np.testing.assert_array_equal(_run(kernel, a, x32, y32), np.float32(a) * x32 + y32)
    with pytest.raises(vg.LaunchError, match="beyond float32's range"):
        _run(kernel, 1e40, x32, y32)  # after launches of the same kinds: their launcher too
    np.testing.assert_array_equal(_run(kernel, a, x32, y32), np.float32(a) * x32 + y32)


def test_module_constants_are_read_at_every_launch(rng):
    saved = m.SCALE
    try:
        x = rng.standard_normal(1000).astype(np.float32)
        for scale in (2.0, 3.0, 3.0, -0.25, 2.0):
            m.SCALE = scale
            out = vg.asarray(np.full_like(x, np.nan))
            m.scaled[vg.cdiv(x.size, 128), 128](vg.asarray(x), out)
            np.testing.assert_array_equal(out.numpy(), x * np.float32(scale) + m.OFFSET
                                          + m.WIDTHS[1])
    finally:
        m.SCALE = saved


@simt.kernel
def integer_ops(a, b, q, r, left, right, narrow):
    i = simt.global_id(0)
    if i < q.shape[0]:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
        left[i] = a[i] << b[i]
        right[i] = a[i] >> b[i]
        narrow[i] = vg.int8(a[i])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_edge_cases_match_the_cpu_backend_and_the_documented_rule(rng, dtype):
    info = np.iinfo(dtype)
    edges = [0, 1, -1, info.min, info.max, 7, -7, 300, 40, 64, 33] if info.min else \
        [0, 1, info.max, 7, 300, 40, 64, 33, 31, 32]
    a = np.array(edges * len(edges), np.int64).astype(dtype)
    b = np.repeat(np.array(edges, np.int64), len(edges)).astype(dtype)
    outs = {}
    for name in ("cuda", "cpu"):
        backend.set_backend(name)
        arrays = [vg.asarray(np.zeros(a.size, dtype)) for _ in range(4)] + \
            [vg.asarray(np.zeros(a.size, np.int8))]
        integer_ops[vg.cdiv(a.size, 128), 128](vg.asarray(a), vg.asarray(b), *arrays)
        outs[name] = [np.asarray(x.numpy() if hasattr(x, "numpy") else x) for x in arrays]
    backend.set_backend("cuda")
    for got, want in zip(outs["cuda"], outs["cpu"]):
        np.testing.assert_array_equal(got, want)
    bits = np.dtype(dtype).itemsize * 8
    for x, y, q, r, s in zip(a.tolist(), b.tolist(), *[o.tolist() for o in outs["cuda"][:3]]):
        wrap = (lambda v: (v + 2**(bits - 1)) % 2**bits - 2**(bits - 1)) if info.min else \
            (lambda v: v % 2**bits)
        assert q == (0 if y == 0 else wrap(x // y)) and r == (0 if y == 0 else x % y)
        assert s == (wrap(x << y) if 0 <= y < bits else 0)
    assert outs["cuda"][4].tolist() == a.astype(np.int8).tolist()  # low bits: 300 -> 44
