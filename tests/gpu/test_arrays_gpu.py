"""The host array API on a GPU: every fill, copy and conversion path of `hostops` (memsets,
2-d copies, the `elementwise` kernels) against NumPy, bit for bit, on fresh random data and
views, over poisoned memory; `vg.Stream` with our launches and with torch."""
import gc
import itertools

import numpy as np
import pytest

import verdigris as vg
import verdigris.types as T
from tests.fakecuda.kernels import axpy

pytestmark = pytest.mark.gpu

DTYPES = [T.bool_, T.int8, T.uint8, T.int16, T.uint16, T.int32, T.uint32, T.int64, T.uint64,
          T.float16, T.bfloat16, T.float32, T.float64]


def same(got, want: np.ndarray) -> None:
    got = got.numpy() if isinstance(got, vg.Array) else np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    as_bytes = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in (got, want)]
    assert np.array_equal(*as_bytes), (got, want)


def random_values(rng, shape, dtype: T.DType) -> np.ndarray:
    """Values every dtype holds exactly in range (so conversions are NumPy's, defined ones)."""
    if dtype.is_bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype.np)
    return (rng.standard_normal(shape) * 50).astype(dtype.np)


def random_value(rng, dtype: T.DType):
    return random_values(rng, (), dtype)[()]


def poisoned(shape, dtype: T.DType):
    host = np.full(shape, 0xAB, np.uint8).astype(dtype.np) if not dtype.is_float else \
        np.full(shape, np.nan, dtype.np)
    return host, vg.asarray(host)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_constructors(dtype, rng):
    value = random_value(rng, dtype)
    for shape in [(), (7,), (3, 1000), (70_000, 3)]:
        same(vg.full(shape, value, dtype), np.full(shape, value, dtype.np))
        same(vg.ones(shape, dtype), np.ones(shape, dtype.np))
        same(vg.zeros(shape, dtype), np.zeros(shape, dtype.np))
    like = vg.asarray(random_values(rng, (5, 6), dtype))
    same(vg.full_like(like, value), np.full((5, 6), value, dtype.np))
    same(vg.ones_like(like[:, ::2]), np.ones((5, 3), dtype.np))
    same(vg.zeros_like(like, vg.float64), np.zeros((5, 6)))
    if not dtype.is_bool:
        same(vg.arange(0, 50, 3, dtype), np.arange(0, 50, 3, dtype=dtype.np))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_fills_of_random_views(dtype, rng):
    host, device = poisoned((9, 11, 6), dtype)
    for _ in range(12):
        key = random_key(rng, host.shape)
        value = random_value(rng, dtype)
        device[key] = value
        host[key] = value
        same(device, host)
    device.T.fill(value)
    same(device, np.full_like(host, value))


def random_key(rng, shape, integers: bool = True):
    """A random basic index: integers (unless not wanted), slices with any step."""
    key = []
    for n in shape:
        if integers and rng.integers(0, 4) == 0:
            key.append(int(rng.integers(0, n)))
        else:
            step = int(rng.choice([-2, -1, 1, 1, 2, 3]))
            start, stop = sorted(rng.integers(0, n + 1, size=2))
            key.append(slice(start, stop, step) if step > 0 else slice(stop, start, step))
    return tuple(key)


@pytest.mark.parametrize("dtype", [T.int8, T.float16, T.float32, T.float64], ids=lambda d: d.name)
def test_assignments_from_the_host_and_the_device(dtype, rng):
    host, device = poisoned((9, 11, 6), dtype)
    for _ in range(12):
        key = random_key(rng, host.shape)
        values = random_values(rng, host[key].shape, dtype)
        source = values if rng.integers(0, 2) else vg.asarray(values)
        device[key] = source
        host[key] = values
        same(device, host)
    other = random_values(rng, host.shape, dtype)
    on_device = vg.asarray(other)
    for _ in range(12):  # views of another array, laid out otherwise
        key_dst, key_src = (random_key(rng, host.shape, integers=False) for _ in range(2))
        index = tuple(slice(0, min(a, b)) for a, b in zip(host[key_dst].shape, other[key_src].shape))
        device[key_dst][index] = on_device[key_src][index]
        host[key_dst][index] = other[key_src][index]
        same(device, host)
    device[1:] = device[:-1]  # overlapping: NumPy's result
    host[1:] = host[:-1]
    same(device, host)
    device[:, :, 1:] = device[:, :, :-1][::-1]
    host[:, :, 1:] = host[:, :, :-1][::-1]
    same(device, host)
    row = random_values(rng, (6,), dtype)
    device[2:5] = row  # broadcast
    host[2:5] = row
    same(device, host)
    device[:, 3] = vg.asarray(row[:1])
    host[:, 3] = row[:1]
    same(device, host)


@pytest.mark.parametrize("source, target", list(itertools.product(
    [T.bool_, T.int8, T.uint16, T.int32, T.int64, T.float16, T.bfloat16, T.float32, T.float64],
    [T.bool_, T.uint8, T.int16, T.int64, T.float16, T.bfloat16, T.float32, T.float64])),
    ids=lambda d: d.name)
def test_astype_converts_as_numpy(source, target, rng):
    values = random_values(rng, (40, 33), source)
    if source.is_float and target.is_int:  # in range: NumPy leaves the rest undefined
        info = np.iinfo(target.np)
        values = np.clip(values, max(info.min, -100), min(info.max, 100)).astype(source.np)
    device = vg.asarray(values)
    same(device.astype(target), values.astype(target.np))
    same(device[::-2, 3:].astype(target), values[::-2, 3:].astype(target.np))
    host, out = poisoned((40, 33), target)
    out[:, 1::2] = device[:, :16]
    host[:, 1::2] = values[:, :16]
    same(out, host)


def test_many_axes_and_long_axes(rng):
    host = random_values(rng, (3, 4, 5, 6), T.float32)
    device = vg.asarray(host)
    device[::2, ::2, ::2, ::2] = 1.5
    host[::2, ::2, ::2, ::2] = 1.5
    same(device, host)
    same(device[::-1, 1::2, :, ::3].copy(), host[::-1, 1::2, :, ::3])
    host, device = poisoned((70_000, 8), T.float64)  # more rows than a grid's y axis has blocks
    device[:, ::2] = 2.5
    host[:, ::2] = 2.5
    same(device, host)
    same(device[:, 1::2].astype(vg.float32), host[:, 1::2].astype(np.float32))


def test_views_of_the_same_memory(rng):
    host = random_values(rng, (6, 8), T.int32)
    device = vg.asarray(host)
    same(device.reshape(4, -1), host.reshape(4, -1))
    same(device.view(vg.uint8), host.view(np.uint8))
    same(device[1:3].view(vg.float64), host[1:3].view(np.float64))
    device.reshape(-1)[5:9] = 0  # writes through the view
    host.reshape(-1)[5:9] = 0
    same(device, host)


def test_streams_order_our_work(rng):
    x = random_values(rng, 10_000, T.float32)
    y = random_values(rng, 10_000, T.float32)
    for stream in (vg.Stream(), vg.Stream(non_blocking=True)):
        xd, yd, out = vg.asarray(x), vg.asarray(y), vg.full(10_000, np.nan, vg.float32)
        if stream.non_blocking:  # our copies and fills are on the legacy stream: wait for them
            vg.synchronize()
        axpy[vg.cdiv(10_000, 256), 256](2.0, xd, yd, out, stream=stream)
        stream.synchronize()
        assert stream.query()
        np.testing.assert_allclose(out.numpy(), 2.0 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    del stream
    gc.collect()


def test_streams_with_torch(rng):
    torch = pytest.importorskip("torch")
    stream = vg.Stream()
    theirs = torch.cuda.ExternalStream(stream.handle)
    x = torch.from_numpy(random_values(rng, 4096, T.float32)).cuda()
    with torch.cuda.stream(theirs):
        doubled = x * 2  # on our stream
        out = torch.full_like(x, float("nan"))
        axpy[16, 256](1.0, doubled, x, out)  # a torch tensor: torch's current stream, ours
    stream.synchronize()
    assert torch.allclose(out, x * 3)
