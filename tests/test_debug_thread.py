"""`k.debug[grid, block](...)`: one thread of a SIMT kernel run as its own Python function.
The thread sees its ids and writes only what it writes; element accesses are bounds
checked; shared and local arrays, atomics and barriers work for the one thread; warp
operations are refused; pdb stops on the kernel's lines; the intrinsics raise on the host
again afterwards."""
import bdb
import inspect
import sys

import numpy as np
import pytest

import verdigris as vg
from verdigris import simt


@vg.func
def twice(v):
    return v * 2.0


@simt.kernel
def axpy_like(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * twice(x[i]) + y[i]  # THE-STORE


@simt.kernel
def ids(out):
    t = simt.thread_id(0) + simt.thread_id(1) * simt.block_dim(0)
    out[simt.block_id(0), t, 0] = simt.lane_id()
    out[simt.block_id(0), t, 1] = simt.grid_dim(0)


@simt.kernel
def block_sum(x, out, counter):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[simt.global_id(0)]
    simt.barrier()
    total = buf[t]
    simt.atomic_add(counter, 0, 1)
    out[simt.block_id(0)] = total


@simt.kernel
def reads_past(x, out):
    i = simt.global_id(0)
    out[i] = x[i - 1]


@simt.kernel
def shuffles(x, out):
    i = simt.global_id(0)
    out[i] = simt.shfl_down(x[i], 1)


def test_one_thread_writes_its_element_only(rng):
    n = 100
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    b, t = int(rng.integers(0, 3)), int(rng.integers(0, 32))
    axpy_like.debug[4, 32](np.float32(1.5), x, y, out, block_id=b, thread_id=t)
    i = b * 32 + t
    assert out[i] == np.float32(1.5) * (x[i] * np.float32(2.0)) + y[i]
    assert np.isnan(np.delete(out, i)).all()


def test_the_thread_sees_its_ids():
    out = np.full((3, 8, 2), -1, np.int64)
    ids.debug[3, (4, 2)](out, block_id=2, thread_id=(1, 1))
    assert out[2, 5].tolist() == [5, 3]
    assert (np.delete(out.reshape(-1, 2), 2 * 8 + 5, axis=0) == -1).all()


def test_shared_memory_barriers_and_atomics_for_one_thread(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out, counter = np.zeros(2, np.float32), np.zeros(1, np.int32)
    block_sum.debug[2, 64](x, out, counter, block_id=1, thread_id=7)
    assert out[1] == x[64 + 7] and counter[0] == 1


def test_an_index_out_of_bounds_is_a_bounds_error_not_a_wrap():
    with pytest.raises(vg.BoundsError, match=r"\[-1\]"):
        reads_past.debug[1, 32](np.zeros(32, np.float32), np.zeros(32, np.float32), thread_id=0)


def test_warp_operations_are_refused_with_a_reason():
    with pytest.raises(vg.LaunchError, match="other threads"):
        shuffles.debug[1, 32](np.zeros(32, np.float32), np.zeros(32, np.float32))


def test_a_thread_outside_the_launch_is_refused():
    with pytest.raises(vg.LaunchError, match="outside"):
        ids.debug[1, 4](np.zeros((1, 4, 2), np.int64), thread_id=4)


def test_intrinsics_raise_on_the_host_again_afterwards():
    ids.debug[1, 4](np.zeros((1, 4, 2), np.int64))
    with pytest.raises(vg.CompileError, match="only be called inside"):
        simt.thread_id(0)


def test_a_breakpoint_stops_on_the_kernels_line():
    """A breakpoint on the kernel's store line stops there, with the thread's `i`."""
    lines, first = inspect.getsourcelines(axpy_like.fn)
    line = first + next(k for k, text in enumerate(lines) if "THE-STORE" in text)
    seen = []

    class Recorder(bdb.Bdb):  # pdb's machinery, without its prompt: `b file:line`, `c`
        def user_line(self, frame):
            if frame.f_code is axpy_like.fn.__code__ and frame.f_lineno == line:
                seen.append(int(frame.f_locals["i"]))
            self.set_continue()

    debugger = Recorder()
    debugger.set_break(axpy_like.fn.__code__.co_filename, line)
    out = np.zeros(64, np.float32)
    debugger.runcall(axpy_like.debug[2, 32], 1.0, np.ones(64, np.float32), np.ones(64, np.float32),
                     out, block_id=1, thread_id=3)
    sys.settrace(None)
    assert seen == [35] and out[35] == 3.0


def test_a_launch_refuses_breakpoint_pointing_at_k_debug(tmp_path):
    import importlib.util

    source = tmp_path / "kernel_bp.py"
    source.write_text("from verdigris import simt\n\n@simt.kernel\ndef k(x):\n    breakpoint()\n")
    spec = importlib.util.spec_from_file_location("kernel_bp", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(vg.CompileError) as err:
        module.k[1, 1](np.zeros(1, np.float32))
    assert err.value.loc.line == 5 and "k.debug[grid, block]" in err.value.hint


def test_arrays_of_the_cpu_backend_are_written_in_place():
    x, out = vg.asarray(np.ones(64, np.float32)), vg.zeros(64, vg.float32)
    axpy_like.debug[2, 32](np.float32(1.0), x, x, out, block_id=1, thread_id=3)
    assert out.numpy()[35] == 3.0 and np.count_nonzero(out.numpy()) == 1


def test_device_memory_is_refused():
    class OnDevice:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(vg.LaunchError, match="host arrays"):
        axpy_like.debug[1, 4](1.0, OnDevice(), OnDevice(), np.zeros(4, np.float32))
