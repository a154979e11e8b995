"""Streams, events and CUDA graphs on the GPU: launches captured by torch.cuda.graph and by
stream capture through cuda-bindings replay correctly; `stream=` takes torch, CuPy and
cuda.core streams and raw handles; vg.Event times work; vg.synchronize waits."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import simt
from verdigris.runtime import driver

pytestmark = pytest.mark.gpu


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_torch_cuda_graph_captures_launches(rng):
    torch = pytest.importorskip("torch")
    n = 100_003
    x, y = (torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda() for _ in range(2))
    out = torch.full_like(x, float("nan"))
    grid = vg.cdiv(n, 256)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compiles) outside capture, as torch asks
        axpy[grid, 256](2.0, x, y, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        axpy[grid, 256](3.0, x, y, out)
        axpy[grid, 256](0.5, out, y, x)  # reads what the first launch wrote
    x0 = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda()
    for _ in range(2):  # the graph reads x as it is at each replay
        x.copy_(x0)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want_out = 3.0 * x0.double() + y.double()
        assert rel_err(out.cpu(), want_out.cpu()) < 1e-6
        assert rel_err(x.cpu(), (0.5 * want_out + y.double()).cpu()) < 1e-6


def test_stream_capture_through_cuda_bindings(rng):
    drv = driver.api()
    n = 50_000
    x, y = (vg.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    out = vg.empty(n)
    stream = driver.check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING),
                          "cuStreamCreate")
    grid = vg.cdiv(n, 128)
    axpy[grid, 128](1.0, x, y, out, stream=stream)  # compiles outside capture
    driver.check(drv.cuStreamSynchronize(stream))
    driver.check(drv.cuStreamBeginCapture(
        stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    axpy[grid, 128](-2.0, x, y, out, stream=stream)
    graph = driver.check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")
    executable = driver.check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    driver.check(drv.cuMemsetD32(out.ptr, 0x7FC00000, n))  # NaN: every element must be written
    vg.synchronize()
    driver.check(drv.cuGraphLaunch(executable, stream), "cuGraphLaunch")
    vg.synchronize(stream=stream)
    assert rel_err(out.numpy(), -2.0 * x.numpy().astype(np.float64) + y.numpy()) < 1e-6
    driver.check(drv.cuGraphExecDestroy(executable))
    driver.check(drv.cuGraphDestroy(graph))
    driver.check(drv.cuStreamDestroy(stream))


def _streams():
    """(name, stream object, synchronize) for each stream kind present."""
    drv = driver.api()
    raw = driver.check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING))
    kinds = [("raw int", int(raw), lambda: vg.synchronize(stream=int(raw))),
             ("CUstream", raw, lambda: vg.synchronize(stream=raw))]
    try:
        import torch

        s = torch.cuda.Stream()
        kinds.append(("torch", s, s.synchronize))
    except ImportError:
        pass
    try:
        import cupy

        c = cupy.cuda.Stream(non_blocking=True)
        kinds.append(("cupy", c, c.synchronize))
    except ImportError:
        pass
    try:
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        device = Device(0)
        device.set_current()
        core = device.create_stream()
        kinds.append(("cuda.core", core, core.sync))
    except Exception:  # cuda.core absent, or of an older API
        pass
    return kinds


def test_stream_accepts_every_kind(rng):
    n = 20_000
    x, y = (vg.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    want = 4.0 * x.numpy().astype(np.float64) + y.numpy()
    seen = []
    for name, stream, sync in _streams():
        out = vg.asarray(np.full(n, np.nan, np.float32))
        vg.synchronize()
        axpy[vg.cdiv(n, 256), 256](4.0, x, y, out, stream=stream)
        sync()
        assert rel_err(out.numpy(), want) < 1e-6, name
        seen.append(name)
    print("streams:", ", ".join(seen))
    assert {"raw int", "CUstream"} <= set(seen)


def test_events_time_work_on_a_stream(rng):
    n = 1 << 22
    x, y, out = vg.asarray(np.ones(n, np.float32)), vg.zeros(n), vg.empty(n)
    start, end = vg.Event(), vg.Event()
    start.record()
    for _ in range(20):
        axpy[vg.cdiv(n, 256), 256](2.0, x, y, out)
    end.record()
    ms = start.elapsed_time(end)
    assert end.query() and 0 < ms < 1000
    untimed = vg.Event(timing=False)
    untimed.record()
    untimed.synchronize()
    assert untimed.query()
    assert np.all(out.numpy() == 2.0)
