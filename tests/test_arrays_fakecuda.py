"""The host array API's cuda paths without a GPU: each test runs a script in a subprocess
whose CUDA driver is tests/fakecuda, where "device memory" is host memory, so what the
driver calls write can be read back. A launch there runs nothing: the `elementwise`
kernels run instead on the cpu backend, over that memory (`fakecuda.host_view`), which
checks what `hostops` asks of them; `kernels` lists the ones that ran, so a test also
sees which path a fill or copy took. Results are compared bit for bit with NumPy, on
fresh random data, over poisoned memory. tests/gpu/test_arrays_gpu.py runs the same on a GPU."""
import json
import textwrap

import pytest

from tests import fakecuda

pytest.importorskip("cuda.bindings.driver")
pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

PRELUDE = """
import gc, json, sys
import numpy as np
import verdigris as vg
from tests.fakecuda import host_view, last_launch, live_streams

rng = np.random.default_rng()
out = {"mismatches": []}

def same(name, got, want):
    got = got.numpy() if isinstance(got, vg.Array) else got
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(
            np.ascontiguousarray(got).reshape(-1).view(np.uint8),
            np.ascontiguousarray(want).reshape(-1).view(np.uint8)):
        out["mismatches"].append([name, repr(got), repr(want)])

kernels = []  # the elementwise kernels that ran, by name

def launches():
    return len(kernels) if KERNELS_ON_HOST else last_launch().count

if KERNELS_ON_HOST:
    from verdigris.runtime import elementwise
    from verdigris.runtime.interop import ArrayInfo

    def run_on_host(kernel, out, operand):
        kernels.append(kernel.__name__)
        views = [host_view(x) if isinstance(x, ArrayInfo) else x for x in (out, operand)]
        kernel.launch(elementwise.grid(tuple(out.shape)), elementwise.BLOCK, tuple(views), {},
                      on="cpu")

    elementwise.run = run_on_host

def poisoned(shape, dtype=np.float32):
    host = np.full(shape, 0xAB, np.uint8).astype(dtype) if np.dtype(dtype).kind != "f" else \\
        np.full(shape, np.nan, dtype)
    return host, vg.asarray(host)
"""


def run(body: str, kernels_on_host: bool = True, devices: int = 1) -> dict:
    """Run `body` after PRELUDE; with `kernels_on_host`, the elementwise kernels run on the
    cpu backend over the fake device memory, else they are launched (and do nothing)."""
    done = fakecuda.run(f"KERNELS_ON_HOST = {kernels_on_host}\n" + PRELUDE
                        + textwrap.dedent(body) + "\nprint(json.dumps(out))\n", devices=devices)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("mismatches") == []
    return result


def test_constructors_fill_by_memsets_without_a_kernel():
    got = run("""
    before = launches()
    for dtype in (vg.bool_, vg.int8, vg.uint8, vg.int16, vg.float16, vg.bfloat16, vg.int32,
                  vg.uint32, vg.float32, vg.float8_e4m3fn):
        shape = tuple(int(n) for n in rng.integers(1, 6, size=2))
        value = int(rng.integers(0, 100)) if np.dtype(dtype).kind in "iub" else float(rng.standard_normal())
        same(f"ones {dtype}", vg.ones(shape, dtype), np.ones(shape, dtype.np))
        same(f"zeros {dtype}", vg.zeros(shape, dtype), np.zeros(shape, dtype.np))
        same(f"full {dtype}", vg.full(shape, value, dtype), np.full(shape, value, dtype.np))
        like = vg.asarray(rng.standard_normal(shape).astype(dtype.np))
        same(f"full_like {dtype}", vg.full_like(like, value), np.full(shape, value, dtype.np))
        same(f"zeros_like {dtype}", vg.zeros_like(like), np.zeros(shape, dtype.np))
    for value, dtype in [(0.0, vg.float64), (-1, vg.int64), (0, vg.uint64), (2**32 + 1, vg.int64)]:
        same(f"full {value}", vg.full((3, 4), value, dtype), np.full((3, 4), value, dtype.np))
    same("full 0-d", vg.full((), 2.5, vg.float32), np.full((), 2.5, np.float32))
    same("empty shape", vg.ones((0, 3)), np.ones((0, 3), np.float32))
    out["kernels"] = launches() - before
    out["imported"] = "verdigris.runtime.elementwise" in sys.modules
    """, kernels_on_host=False)
    assert got == {"kernels": 0, "imported": False}


def test_eight_byte_values_whose_halves_differ_take_the_fill_kernel():
    got = run("""
    before = launches()
    a = vg.full((3, 1000), 1.5)  # float64: 0x3FF8000000000000
    launch = last_launch(4)
    out["launch"] = [launch.count - before, launch.name, list(launch.grid), list(launch.block)]
    out["ptr"] = launch.slots[0] == a.ptr  # fill(out, value): out's pointer first
    out["ones"] = [vg.ones(5, vg.float64).dtype.name, launches() - before]
    """, kernels_on_host=False)
    assert got["launch"][0] == 1 and got["launch"][1].startswith("fill")
    assert got["launch"][2:] == [[12, 1, 1], [256, 1, 1]]  # 3000 elements, one run
    assert got["ptr"] and got["ones"] == ["float64", 2]


def test_fills_of_views():
    got = run("""
    paths = {}
    for dtype in (np.int64, np.float64, np.float32, np.int16, np.uint8):
        host = rng.standard_normal((6, 8, 5)).astype(dtype)
        device = vg.asarray(host)
        for key, value in [((slice(None), slice(2, 5)), 7), ((slice(1, 5, 2), slice(None, None, -1)), 2),
                           ((Ellipsis, slice(1, 4)), 3), ((2,), 0), ((slice(None), 3, slice(1, 3)), 1),
                           ((slice(None, None, -1),), 4), ((1, 2, 3), 5),
                           ((slice(None), slice(None), slice(None, None, 2)), 6),  # a step in the rows
                           ((slice(None), slice(None), 3), 8)]:  # rows of one element
            before = launches()
            device[key] = value
            host[key] = value
            same(f"{dtype} {key}", device, host)
            paths.setdefault(np.dtype(dtype).name, []).append(launches() - before)
        all_ones = np.frombuffer(b"\\xff" * host.itemsize, dtype)[0]  # a memset for 8 bytes too
        before = launches()
        device.T.fill(all_ones)
        host.view(np.uint8)[...] = 0xFF
        same(f"{dtype} fill of the transpose", device, host)
        paths[np.dtype(dtype).name].append(launches() - before)
    out["paths"] = paths
    out["kernels"] = sorted(set(kernels))
    """)
    # a memset (0) but for a step in the rows, rows of one element and 8-byte values other
    # than 0 and all ones (1: the fill kernel)
    memsets, eight_bytes = [0] * 7 + [1, 1, 0], [1, 1, 1, 0, 1, 1, 1, 1, 1, 0]
    assert got["paths"] == {"int64": eight_bytes, "float64": eight_bytes, "float32": memsets,
                            "int16": memsets, "uint8": memsets}
    assert got["kernels"] == ["fill"]


def test_assignments_from_the_host_and_the_device():
    got = run("""
    host, device = poisoned((6, 8))
    before = launches()
    for key in [(slice(None), slice(1, 4)), (slice(2, 4),), (Ellipsis,), (slice(None, None, -1), slice(5, 1, -1)),
                (3,), (1, 2)]:
        values = rng.standard_normal(host[key].shape).astype(np.float32)
        device[key] = values
        host[key] = values
        same(f"from the host {key}", device, host)
    device[1:3, 2:6] = [[1, 2, 3, 4]] * 2  # a list, converted
    host[1:3, 2:6] = [[1, 2, 3, 4]] * 2
    same("a list", device, host)
    values = rng.standard_normal((6, 4))  # float64 data, converted on the host
    device[:, :4] = values
    host[:, :4] = values
    same("float64 into float32", device, host)
    source = rng.standard_normal((6, 8)).astype(np.float32)
    on_device = vg.asarray(source)
    device[:, 2:7] = on_device[:, 1:6]
    host[:, 2:7] = source[:, 1:6]
    same("device rows", device, host)
    device[::-1, 1:] = on_device[::-1, 1:]  # both reversed: one run each way
    host[::-1, 1:] = source[::-1, 1:]
    same("reversed rows", device, host)
    device[1:] = device[:-1]  # overlapping: NumPy's result
    host[1:] = host[:-1]
    same("overlapping rows", device, host)
    device[:, 1:] = device[:, :-1]
    host[:, 1:] = host[:, :-1]
    same("overlapping columns", device, host)
    out["by the driver"] = launches() - before
    before = launches()
    device[...] = np.arange(8, dtype=np.float32)  # a row, repeated on the device
    host[...] = np.arange(8, dtype=np.float32)
    same("broadcast", device, host)
    device[:, 0] = vg.asarray(np.arange(6, dtype=np.int32))  # converted on the device
    host[:, 0] = np.arange(6)
    same("converted", device, host)
    device[2:4] = on_device[::-1][2:4]  # rows in the other order: no 2-d copy has that
    host[2:4] = source[::-1][2:4]
    same("reversed source", device, host)
    device[1:, 1:] = device[:-1, :-1][::-1]  # overlapping, and a kernel
    host[1:, 1:] = host[:-1, :-1][::-1]
    same("overlapping and reversed", device, host)
    out["kernels"] = kernels
    """)
    assert got["by the driver"] == 0
    assert got["kernels"] == ["convert"] * 4


def test_copies_views_and_conversions():
    got = run("""
    host = rng.standard_normal((4, 6)).astype(np.float32) * 100
    device = vg.asarray(host)
    for name, view, want in [("copy", device.copy(), host), ("rows", device[:, 1:5].copy(), host[:, 1:5]),
                             ("one row", device[2].copy(), host[2]),
                             ("transpose of a transpose", device.T.T.copy(), host)]:
        same(name, view, want)
    ints = vg.asarray(np.arange(24, dtype=np.int32))
    same("reshape", ints.reshape(2, 3, -1), np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    same("view as bytes", ints.reshape(4, 6).view(vg.uint8), np.arange(24, dtype=np.int32).reshape(4, 6).view(np.uint8))
    same("view as int64", ints.reshape(4, 6).view(vg.int64), np.arange(24, dtype=np.int32).reshape(4, 6).view(np.int64))
    same("arange", vg.arange(3, 40, 3), np.arange(3, 40, 3))
    same("float arange", vg.arange(-1, 1, 0.1, vg.float32), np.arange(-1, 1, 0.1, np.float32))
    same("same dtype", device.astype(vg.float32, copy=False), host)
    out["kept"] = device.astype("float32", copy=False) is device
    out["sizes"] = [device.size, device.ndim, device.nbytes, device.itemsize, ints.view(vg.int16).itemsize]
    out["by the driver"] = len(kernels)
    for dtype in (vg.float16, vg.bfloat16, vg.int8, vg.uint8, vg.bool_, vg.float64, vg.int64):
        values = np.clip(host, -100, 100) if np.dtype(dtype).kind in "iu" else host
        if np.dtype(dtype).kind == "u":
            values = np.abs(values)
        on_device = vg.asarray(values)
        same(f"astype {dtype}", on_device.astype(dtype), values.astype(dtype.np))
        same(f"astype {dtype} of a view", on_device[::-1, ::2].astype(dtype), values[::-1, ::2].astype(dtype.np))
    same("asarray", vg.asarray(device, vg.bfloat16), host.astype(vg.bfloat16.np))
    same("strided copy", device[:, ::2].copy(), host[:, ::2])
    same("reversed copy", device[::-1].copy(), host[::-1])
    out["kernels"] = kernels
    """)
    assert got["kept"] and got["by the driver"] == 0
    assert got["sizes"] == [24, 2, 96, 4, 2]
    assert got["kernels"] == ["convert"] * 17


def test_copies_between_gpus_go_through_the_host():
    got = run("""
    values = rng.standard_normal((5, 6)).astype(np.float32)
    host, device = poisoned((5, 6))
    other = vg.asarray(values, device=1)
    device[:, 1:] = other[:, :5]
    host[:, 1:] = values[:, :5]
    same("from GPU 1", device, host)
    device[::2] = other[::2].astype(vg.float64)  # converted on GPU 1, copied, converted again
    host[::2] = values[::2]
    same("converted", device, host)
    out["devices"] = [device.device, other.device, other.copy().device, other.astype(vg.int8).device]
    """, devices=2)
    assert got["devices"] == [0, 1, 1, 1]


def test_many_axes_go_in_slices():
    got = run("""
    host, device = poisoned((3, 4, 5, 6))
    device[::2, ::2, ::2, ::2] = 1.0  # four axes that do not merge: a launch per first index
    host[::2, ::2, ::2, ::2] = 1.0
    same("fill", device, host)
    values = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    # two launches each: the conversion of the view, then the copy into another view
    device[::-2, ::2, ::2, ::3] = vg.asarray(values)[::2, 1::2, ::2, ::3].astype(vg.float64)
    host[::-2, ::2, ::2, ::3] = values[::2, 1::2, ::2, ::3]
    same("copy", device, host)
    out["kernels"] = kernels
    """)
    assert got["kernels"] == ["fill"] * 2 + ["convert"] * 4



def test_writes_that_are_refused():
    got = run("""
    from verdigris.runtime.arrays import Array
    a = vg.zeros((4, 5))
    attempts = {
        "read-only": lambda: Array(a.ptr, a.shape, a.strides, a.dtype, 0, True, a).fill(1),
        "broadcast": lambda: Array(a.ptr, (4, 5), (0, 1), a.dtype, 0, False, a).fill(1),
        "shape": lambda: a.__setitem__(slice(None), np.ones((5, 4))),
        "device shape": lambda: a.__setitem__(slice(0, 2), vg.ones((3, 5))),
        "value": lambda: a.fill("one"),
        "nan": lambda: vg.zeros(3, vg.int32).fill(float("nan")),
        "strings": lambda: a.__setitem__(0, ["a"] * 5),
        "reshape": lambda: a[:, :2].reshape(8),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            out[name] = "no error"
        except vg.ArrayError as err:
            out[name] = err.message
    same("untouched", a, np.zeros((4, 5), np.float32))
    """)
    assert "read-only" in got["read-only"]
    assert "share memory" in got["broadcast"]
    assert got["shape"] == "an array of shape (5, 4) does not broadcast to the shape (4, 5) it is assigned to"
    assert "shape (3, 5) does not broadcast to the shape (2, 5)" in got["device shape"]
    assert "not str" in got["value"] and "no NaN" in got["nan"]
    assert "cannot be read as an array of float32" in got["strings"]
    assert "not C-contiguous" in got["reshape"]


def test_array_operations_run_on_the_gpu_whatever_the_backend():
    got = run("""
    a = vg.zeros((2, 3), vg.float64)
    vg.set_backend("cpu")
    before = launches()
    a.fill(2.5)  # a kernel on the cuda backend: a is device memory
    a[0] = 0.0  # a memset
    out["launches"] = [launches() - before, last_launch().name]
    """, kernels_on_host=False)
    assert got["launches"][0] == 1 and got["launches"][1].startswith("fill")


def test_streams_are_made_used_and_destroyed():
    got = run("""
    from verdigris.runtime import driver
    from tests.fakecuda.kernels import axpy
    start = live_streams()
    s, quiet = vg.Stream(), vg.Stream(non_blocking=True)
    out["live"] = live_streams() - start
    drv = driver.api()
    out["flags"] = [int(driver.check(drv.cuStreamGetFlags(x.handle), "flags")) for x in (s, quiet)]
    out["protocol"] = s.__cuda_stream__() == (0, s.handle) and isinstance(s.handle, int)
    x = vg.ones(100)
    axpy[1, 128](2.0, x, x.copy(), vg.empty(100), stream=s)
    out["launched on"] = last_launch().stream == s.handle
    axpy[1, 128](2.0, x, x.copy(), vg.empty(100), stream=quiet)
    out["launched on the quiet one"] = last_launch().stream == quiet.handle
    s.synchronize()
    vg.synchronize(stream=s)
    out["query"] = s.query()
    vg.Event().record(s).wait(quiet)
    out["repr"] = [repr(s).startswith("vg.Stream(device=0, handle=0x"), "non_blocking=True" in repr(quiet)]
    del s, quiet
    gc.collect()
    out["after"] = live_streams() - start
    """)
    assert got == {"live": 2, "flags": [0, 1], "protocol": True, "launched on": True,
                   "launched on the quiet one": True, "query": True, "repr": [True, True],
                   "after": 0}
