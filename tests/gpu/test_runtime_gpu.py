"""The runtime on a GPU: arrays, interop with torch / CuPy / numba / JAX, module loading and
launches of hand-written PTX with packed ABI arguments, streams, and driver errors."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import verdigris.types as T
from verdigris.errors import BackendError, LaunchError, Loc
from verdigris.ir import ArrayType, Kernel, Param, abi_params
from verdigris.runtime import arrays, constructors, dlpack, driver, streams
from verdigris.runtime.arrays import Array
from verdigris.runtime.interop import describe
from verdigris.runtime.module import CudaKernel, CudaModule

pytestmark = pytest.mark.gpu
LOC = Loc("<test>", 1)

AXPY_PTX = """
.version 8.0
.target sm_80
.address_size 64

.visible .entry axpy(
    .param .f32 alpha, .param .u64 x, .param .u64 x_n, .param .u64 y, .param .u64 y_n,
    .param .u64 out, .param .u64 out_n)
{
    .reg .pred %p;
    .reg .b32 %r<4>;
    .reg .b64 %rd<12>;
    .reg .f32 %f<5>;

    ld.param.f32 %f1, [alpha];
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [out];
    ld.param.u64 %rd4, [out_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    cvt.u64.u32 %rd5, %r3;
    mad.wide.u32 %rd6, %r1, %r2, %rd5;
    setp.ge.s64 %p, %rd6, %rd4;
    @%p bra DONE;
    shl.b64 %rd7, %rd6, 2;
    add.s64 %rd8, %rd1, %rd7;
    ld.global.f32 %f2, [%rd8];
    add.s64 %rd9, %rd2, %rd7;
    ld.global.f32 %f3, [%rd9];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    add.s64 %rd10, %rd3, %rd7;
    st.global.f32 [%rd10], %f4;
DONE:
    ret;
}
"""

# Writes each scalar parameter, converted to float64, to out[0..8].
SCALARS_PTX = """
.version 8.0
.target sm_80
.address_size 64

.visible .entry scalars(
    .param .u8 flag, .param .s8 i8, .param .u16 u16, .param .s32 i32, .param .s64 i64,
    .param .b16 h, .param .b16 bf, .param .f32 f, .param .f64 d, .param .u64 out,
    .param .u64 out_n)
{
    .reg .b16 %rs<4>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    .reg .f32 %f<3>;
    .reg .f64 %fd<10>;

    ld.param.u64 %rd1, [out];
    ld.param.u8 %rs1, [flag];
    cvt.rn.f64.u16 %fd1, %rs1;
    st.global.f64 [%rd1], %fd1;
    ld.param.s8 %rs2, [i8];
    cvt.rn.f64.s16 %fd2, %rs2;
    st.global.f64 [%rd1+8], %fd2;
    ld.param.u16 %rs3, [u16];
    cvt.rn.f64.u16 %fd3, %rs3;
    st.global.f64 [%rd1+16], %fd3;
    ld.param.s32 %r1, [i32];
    cvt.rn.f64.s32 %fd4, %r1;
    st.global.f64 [%rd1+24], %fd4;
    ld.param.s64 %rd2, [i64];
    cvt.rn.f64.s64 %fd5, %rd2;
    st.global.f64 [%rd1+32], %fd5;
    ld.param.b16 %rs1, [h];
    cvt.f32.f16 %f1, %rs1;
    cvt.f64.f32 %fd6, %f1;
    st.global.f64 [%rd1+40], %fd6;
    ld.param.b16 %rs2, [bf];
    cvt.u32.u16 %r2, %rs2;
    shl.b32 %r3, %r2, 16;
    mov.b32 %f2, %r3;
    cvt.f64.f32 %fd7, %f2;
    st.global.f64 [%rd1+48], %fd7;
    ld.param.f32 %f1, [f];
    cvt.f64.f32 %fd8, %f1;
    st.global.f64 [%rd1+56], %fd8;
    ld.param.f64 %fd9, [d];
    st.global.f64 [%rd1+64], %fd9;
    ret;
}
"""

TRAP_PTX = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry boom()
{
    trap;
}
"""


def array_param(name, dtype=T.float32, ndim=1):
    return Param(name, "array", LOC, type=ArrayType(dtype, ndim, unit_inner_stride=True))


def axpy_kernel():
    kernel = Kernel("axpy", "simt", [Param("alpha", "scalar", LOC, dtype=T.float32),
                                     array_param("x"), array_param("y"), array_param("out")],
                    {}, [], LOC)
    return CudaKernel(CudaModule(AXPY_PTX), "axpy", abi_params(kernel))


def axpy_values(alpha, x, y, out):
    return (alpha, x.ptr, x.shape[0], y.ptr, y.shape[0], out.ptr, out.shape[0])


def poisoned(n, dtype=T.float32):
    return constructors.asarray(np.full(n, np.nan, dtype.np))


def rel_error(got, want):
    want = np.asarray(want, np.float64)
    return np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want)


DTYPES = [T.float32, T.float64, T.float16, T.int8, T.uint16, T.int32, T.int64, T.bool_]
if T.bfloat16.np.kind == "V":  # ml_dtypes present
    DTYPES.append(T.bfloat16)


def random_host(rng, shape, dtype):
    if dtype.is_bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype.np)
    return rng.standard_normal(shape).astype(dtype.np)


# ----------------------------------------------------------------------------- driver


def test_device_properties():
    props = driver.properties(0)
    assert props.name and props.cc >= (7, 0) and props.multiprocessors > 0
    assert props.arch == f"sm_{props.cc[0]}{props.cc[1]}"
    assert props.max_shared_per_block_optin >= 48 * 1024 and props.warp_size == 32


# ----------------------------------------------------------------------------- arrays


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_asarray_round_trip(rng, dtype):
    host = random_host(rng, (5, 33), dtype)
    device = constructors.asarray(host)
    assert isinstance(device, Array) and device.dtype is dtype and device.shape == (5, 33)
    assert device.strides == (33, 1) and device.nbytes == host.nbytes and device.device == 0
    np.testing.assert_array_equal(device.numpy(), host)


def test_asarray_converts_dtype(rng):
    host = rng.standard_normal(100)
    device = constructors.asarray(host, T.float32)
    assert device.dtype is T.float32
    np.testing.assert_array_equal(device.numpy(), host.astype(np.float32))


def test_zeros_overwrite_old_contents(rng):
    for _ in range(3):
        constructors.asarray(rng.standard_normal(4096))  # freed at once: its memory gets reused
        z = constructors.zeros((64, 64), T.float64)
        assert z.numpy().shape == (64, 64) and not z.numpy().any()


def test_views_copy_back_like_numpy(rng):
    host = rng.standard_normal((6, 7, 5)).astype(np.float32)
    device = constructors.asarray(host)
    keys = [(slice(None, None, -1),), (1, slice(6, 0, -2)), (Ellipsis, 3), (slice(1, 5), 2, slice(None, None, 3)),
            (slice(None), slice(3, 3))]
    for key in keys:
        np.testing.assert_array_equal(device[key].numpy(), host[key])


def test_copies_are_new_memory_with_the_same_values(rng):
    import copy
    import pickle

    host = rng.standard_normal((33, 40)).astype(np.float32)
    device = constructors.asarray(host)
    for make, want in ((copy.copy, host), (copy.deepcopy, host), (lambda a: a.copy(), host),
                       (lambda a: pickle.loads(pickle.dumps(a)), host),
                       (lambda a: a[1:, ::3].copy(), host[1:, ::3])):
        got = make(device)
        assert got.ptr != device.ptr and got.is_c_contiguous
        np.testing.assert_array_equal(got.numpy(), want)


# ----------------------------------------------------------------------------- torch


def test_torch_dlpack_both_ways(rng):
    torch = pytest.importorskip("torch")
    host = rng.standard_normal((8, 6)).astype(np.float32)
    device = constructors.asarray(host)
    t = torch.from_dlpack(device)
    assert t.data_ptr() == device.ptr and t.device.type == "cuda"
    t.mul_(2)  # written through torch, read through verdigris: the same memory
    np.testing.assert_array_equal(device.numpy(), host * 2)

    source = torch.from_numpy(host).cuda().t()[1::2]  # torch has no negative steps
    view = arrays.from_dlpack(source)
    assert isinstance(view, Array) and view.ptr == source.data_ptr()
    assert view.strides == source.stride()
    np.testing.assert_array_equal(view.numpy(), source.cpu().numpy())


def test_torch_export_is_released():
    torch = pytest.importorskip("torch")
    before = len(dlpack._exports)
    t = torch.from_dlpack(constructors.zeros(16))
    assert len(dlpack._exports) == before + 1
    del t
    assert len(dlpack._exports) == before


def test_torch_cuda_array_interface(rng):
    torch = pytest.importorskip("torch")
    host = rng.standard_normal((4, 9)).astype(np.float32)
    device = constructors.asarray(host)[:, 1::2]
    t = torch.as_tensor(device, device="cuda")
    assert t.data_ptr() == device.ptr and t.stride() == device.strides
    np.testing.assert_array_equal(t.cpu().numpy(), host[:, 1::2])


def test_describe_torch(rng):
    torch = pytest.importorskip("torch")
    t = torch.randn(5, 7, device="cuda", dtype=torch.bfloat16).t()
    info = describe(t)
    assert (info.ptr, info.shape, info.strides, info.dtype, info.device) == (
        t.data_ptr(), (7, 5), (1, 7), T.bfloat16, 0)
    assert describe(torch.zeros(3)).device == -1
    assert constructors.asarray(t).ptr == t.data_ptr()  # a zero-copy view


# ----------------------------------------------------------------------------- CuPy, numba, JAX


def test_cupy_both_ways(rng):
    cupy = pytest.importorskip("cupy")
    host = rng.standard_normal((6, 10)).astype(np.float32)
    c = cupy.asarray(host)[::-1, ::3]
    info = describe(c)
    cai = c.__cuda_array_interface__
    assert info.ptr == cai["data"][0] and info.shape == cai["shape"]
    assert info.strides == tuple(s // 4 for s in c.strides) and info.device == c.device.id
    # CuPy's DLPack export mangles negative strides (it divides them by an unsigned
    # itemsize), so the DLPack import is checked on a positive-step view.
    view = arrays.from_dlpack(c[::-1])
    assert view.strides == (10, 3)
    np.testing.assert_array_equal(view.numpy(), host[:, ::3])

    device = constructors.asarray(host)
    via_cai = cupy.asarray(device)
    via_dlpack = cupy.from_dlpack(device)
    assert via_cai.data.ptr == via_dlpack.data.ptr == device.ptr
    np.testing.assert_array_equal(cupy.asnumpy(via_dlpack), host)


def test_numba_device_array(rng):
    numba_cuda = pytest.importorskip("numba.cuda")
    host = rng.standard_normal((3, 8))
    d = numba_cuda.to_device(host)
    info = describe(d)
    assert info.ptr == d.__cuda_array_interface__["data"][0] and info.dtype is T.float64
    np.testing.assert_array_equal(constructors.asarray(d).numpy(), host)


def test_jax_array(rng):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    host = rng.standard_normal((4, 5)).astype(np.float32)
    x = jax.device_put(host, gpu)
    x.block_until_ready()
    info = describe(x)
    assert info.device == 0 and info.shape == (4, 5) and info.dtype is T.float32
    np.testing.assert_array_equal(constructors.asarray(x).numpy(), host)


# ----------------------------------------------------------------------------- launches


def test_launch_axpy(rng):
    kernel = axpy_kernel()
    n = int(rng.integers(1000, 5000))
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    alpha = float(rng.standard_normal())
    dx, dy, out = constructors.asarray(x), constructors.asarray(y), poisoned(n)
    kernel.launch(((n + 127) // 128, 1, 1), (128, 1, 1), axpy_values(alpha, dx, dy, out))
    driver.synchronize()
    got = out.numpy()
    assert not np.isnan(got).any()
    assert rel_error(got, np.float64(alpha) * x + y) < 1e-6


def test_load_cubin_from_ptxas(rng, tmp_path):
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas on PATH")
    (tmp_path / "axpy.ptx").write_text(AXPY_PTX)
    subprocess.run([ptxas, f"-arch={driver.properties(0).arch}", "-o", str(tmp_path / "axpy.cubin"),
                    str(tmp_path / "axpy.ptx")], check=True)
    image = (tmp_path / "axpy.cubin").read_bytes()
    abi = axpy_kernel().packer.abi
    kernel = CudaKernel(CudaModule(image), "axpy", abi)
    n = 777
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = poisoned(n)
    kernel.launch((7, 1, 1), (128, 1, 1), axpy_values(-1.5, constructors.asarray(x), constructors.asarray(y), out))
    driver.synchronize()
    assert rel_error(out.numpy(), -1.5 * x.astype(np.float64) + y) < 1e-6


def test_launch_packs_every_scalar_dtype(rng):
    dtypes = [T.bool_, T.int8, T.uint16, T.int32, T.int64, T.float16, T.bfloat16, T.float32,
              T.float64]
    params = [Param(f"s{i}", "scalar", LOC, dtype=d) for i, d in enumerate(dtypes)]
    kernel = Kernel("scalars", "simt", params + [array_param("out", T.float64)], {}, [], LOC)
    launcher = CudaKernel(CudaModule(SCALARS_PTX), "scalars", abi_params(kernel))
    scalars = [True, int(rng.integers(-128, 128)), int(rng.integers(2**16)),
               int(rng.integers(-2**31, 2**31)), int(rng.integers(-2**53, 2**53)),
               float(np.float16(rng.standard_normal())), 1.5 + 2.0 ** -7,
               float(np.float32(rng.standard_normal())), float(rng.standard_normal())]
    out = poisoned(9, T.float64)
    launcher.launch((1, 1, 1), (1, 1, 1), scalars + [out.ptr, 9])
    driver.synchronize()
    np.testing.assert_array_equal(out.numpy(), np.array(scalars, np.float64))


def test_launch_on_torch_current_stream(rng):
    torch = pytest.importorskip("torch")
    kernel = axpy_kernel()
    n = 1 << 16
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        stream = streams.resolve(None, 0, torch_args=True)
        assert stream == side.cuda_stream != 0
        kernel.launch((n // 256, 1, 1), (256, 1, 1), axpy_values(0.5, describe(x), describe(y),
                                                                  describe(out)), stream)
    assert streams.handle(side) == side.cuda_stream
    side.synchronize()
    want = 0.5 * x.double() + y.double()
    assert rel_error(out.cpu().numpy(), want.cpu().numpy()) < 1e-6


def test_launch_captured_in_a_torch_graph():
    torch = pytest.importorskip("torch")
    kernel = axpy_kernel()
    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    values = axpy_values(2.0, describe(x), describe(y), describe(out))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # makes its capture stream the current one
        kernel.launch((n // 128, 1, 1), (128, 1, 1), values, streams.resolve(None, 0, True))
    assert torch.isnan(out).all()  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(out.cpu().numpy(), (2.0 * x.double() + y.double()).cpu().numpy()) < 1e-6


def test_refused_launch_is_a_launch_error():
    kernel = axpy_kernel()
    out = poisoned(8)
    with pytest.raises(LaunchError, match="block=\\(4096, 1, 1\\)"):
        kernel.launch((1, 1, 1), (4096, 1, 1), axpy_values(1.0, out, out, out))


def test_bad_ptx_reports_the_jit_log():
    with pytest.raises(BackendError, match="could not load the module"):
        CudaModule(AXPY_PTX.replace("fma.rn.f32", "fma.bogus.f32"))


@pytest.mark.skipif(os.environ.get("VERDIGRIS_TEST_FAULTS") != "1",
                    reason="opt-in (VERDIGRIS_TEST_FAULTS=1): on the lent H200 a second CUDA "
                           "process started from the test process never got as far as "
                           "loading a module (2026-11-30), cause not established")
def test_kernel_fault_is_a_kernel_error():
    # A trap poisons the context for good, so it runs in a process of its own, which leaves
    # with os._exit (tearing down a faulted context can be slow). If the child hangs,
    # faulthandler prints where, and the timestamps show how far it got.
    script = textwrap.dedent(f"""
        import faulthandler, os, sys, time
        faulthandler.dump_traceback_later(20, exit=True)
        start = time.perf_counter()
        from verdigris.errors import KernelError
        from verdigris.runtime import driver
        driver.context(0)
        print(f"context {{time.perf_counter() - start:.2f}}s", flush=True)
        from verdigris.runtime.module import CudaKernel, CudaModule
        kernel = CudaKernel(CudaModule({TRAP_PTX!r}), "boom", [])
        print(f"loaded {{time.perf_counter() - start:.2f}}s", flush=True)
        kernel.launch((1, 1, 1), (1, 1, 1), ())
        print(f"launched {{time.perf_counter() - start:.2f}}s", flush=True)
        try:
            driver.synchronize()
        except KernelError as exc:
            print(f"KernelError: {{exc}} after {{time.perf_counter() - start:.2f}}s", flush=True)
        os._exit(0)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    output = result.stdout + result.stderr
    assert "KernelError: cuCtxSynchronize failed: CUDA_ERROR" in output, output
