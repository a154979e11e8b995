"""Source kernels launched on the GPU: interop arguments, launch errors, the disk cache."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import verdigris as vg
from verdigris.examples.axpy import axpy

pytestmark = pytest.mark.gpu


def poisoned(n, dtype=np.float32):
    return vg.asarray(np.full(n, np.nan, dtype))


def test_axpy_with_torch_tensors_on_torch_stream(rng):
    torch = pytest.importorskip("torch")
    n = 5000
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda()
    y = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda()
    out = torch.full_like(x, float("nan"))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        axpy[vg.cdiv(n, 128), 128](-1.5, x, y, out)
    stream.synchronize()
    want = -1.5 * x.double() + y.double()
    assert torch.allclose(out.double(), want, rtol=1e-6, atol=1e-6)


def test_axpy_with_cupy_arrays(rng):
    cp = pytest.importorskip("cupy")
    n = 3000
    x, y = (cp.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    out = cp.full(n, cp.nan, cp.float32)
    axpy[vg.cdiv(n, 256), 256](0.5, x, y, out)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_allclose(cp.asnumpy(out), 0.5 * cp.asnumpy(x).astype(np.float64)
                               + cp.asnumpy(y), rtol=1e-6)


def test_host_array_on_gpu_launch_says_how_to_move_it(rng):
    x = rng.standard_normal(16).astype(np.float32)
    with pytest.raises(vg.LaunchError, match=r"(?s)'x' is in host memory.*vg.asarray\(x\)"):
        axpy[1, 32](1.0, x, poisoned(16), poisoned(16))


def test_a_grid_of_zero_blocks_launches_nothing_and_still_refuses_host_arrays():
    torch = pytest.importorskip("torch")
    empty = torch.empty(0, device="cuda")
    axpy[vg.cdiv(0, 256), 256](2.0, empty, empty, empty)
    torch.cuda.synchronize()
    host = np.zeros(0, np.float32)
    with pytest.raises(vg.LaunchError, match="host"):
        axpy[0, 256](2.0, host, host, host)


def test_aliased_torch_launch_is_refused_before_it_runs():
    torch = pytest.importorskip("torch")
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    other = torch.ones(32, device="cuda")
    before = x.clone()
    with pytest.raises(vg.AliasError, match="axpy writes 'out', which overlaps 'y'"):
        axpy[1, 64](2.0, other, x[1:33], x[:32])
    torch.cuda.synchronize()
    assert torch.equal(x, before)


def test_disjoint_views_of_one_buffer_pass():
    torch = pytest.importorskip("torch")
    buf = torch.rand(200, device="cuda")
    x, out = buf[:100], buf[100:]
    want = 3.0 * x.double() + x.double()
    axpy[1, 128](3.0, x, x, out)
    torch.cuda.synchronize()
    assert torch.allclose(out.double(), want, rtol=1e-6)


def test_second_process_reuses_the_disk_cache(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, numpy as np
        sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..', '..', 'src')!r})
        import verdigris as vg
        from verdigris.examples.axpy import axpy
        x = vg.asarray(np.ones(64, np.float32))
        out = vg.empty(64, vg.float32)
        axpy[1, 64](2.0, x, x, out)
        assert (np.asarray(out) == 3.0).all()
    """)
    env = {**os.environ, "VERDIGRIS_CACHE_DIR": str(tmp_path), "VERDIGRIS_LOG": "compile"}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "compiled axpy" in first.stdout
    assert "from the disk cache" in second.stdout and "compiled axpy" not in second.stdout


def test_aliased_cupy_launch_is_refused():
    cp = pytest.importorskip("cupy")
    x = cp.arange(64, dtype=cp.float32)
    with pytest.raises(vg.AliasError, match="axpy writes 'out', which is the same memory as 'y'"):
        axpy[1, 64](2.0, cp.ones(64, cp.float32), x, x)


def test_aliased_vg_arrays_through_a_view_are_refused():
    x = vg.asarray(np.arange(128, dtype=np.float32))
    with pytest.raises(vg.AliasError, match="overlaps 'x'"):
        axpy[1, 64](2.0, x[::2], vg.asarray(np.ones(64, np.float32)), x[64:])


def test_and_or_give_an_operand_value_on_the_gpu(rng):
    from tests.sources import python_values as pv

    x = pv.and_or_inputs(rng)
    out = vg.asarray(np.full((7, len(x) + 37), np.nan, np.float32))
    pv.and_or_values[2, 128](vg.asarray(x), len(x), out)
    np.testing.assert_allclose(out.numpy(), pv.and_or_reference(x, out.shape[1]), rtol=1e-6)


def test_disjoint_column_halves_launch_on_the_gpu(rng):
    from tests.test_launch_checks import copy_plus_one

    host = rng.standard_normal((30, 30)).astype(np.float32)
    base = vg.asarray(host)
    for _ in range(2):  # the second launch goes through the generated launcher
        copy_plus_one[(2, 2), (16, 16)](base[:, :15], base[:, 15:])
    want = host.copy()
    want[:, 15:] = host[:, :15] + 1.0
    np.testing.assert_array_equal(base.numpy(), want)
    with pytest.raises(vg.AliasError):
        copy_plus_one[(2, 2), (16, 16)](base[:, :15], base[:, 14:29])


def test_min_max_are_minnum_maxnum_on_the_gpu():
    from tests.sources import python_values as pv

    x, y = pv.min_max_inputs()
    out = vg.asarray(np.zeros((4, len(x)), np.float32))
    pv.min_max[1, 32](vg.asarray(x), vg.asarray(y), out)
    np.testing.assert_array_equal(out.numpy(), pv.min_max_reference(x, y))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint64])
def test_bit_functions_on_the_gpu_match_the_cpu_backend(rng, dtype):
    from tests.test_cpu_backend import bit_functions
    from verdigris.cpu.ops import brev, clz, ffs, popc

    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 1000, dtype=dtype, endpoint=True)
    x[:3] = [0, info.max, info.min]
    counts, reversed_bits = vg.asarray(np.full((1000, 3), -1, np.int32)), vg.asarray(np.zeros(1000, dtype))
    bit_functions[8, 128](vg.asarray(x), counts, reversed_bits)
    np.testing.assert_array_equal(counts.numpy(), np.stack([popc(x), clz(x), ffs(x)], axis=1))
    np.testing.assert_array_equal(reversed_bits.numpy(), brev(x))


def test_the_device_limits_are_read_from_the_driver_and_the_model_holds_on_them():
    """The GPU's own grid and block limits (driver attributes), capped at the model's: on
    every GPU verdigris targets they are the model's."""
    from verdigris.ir.limits import MODEL
    from verdigris.runtime import limits

    assert limits._query(0) == MODEL


@pytest.mark.parametrize("grid, block, words", [
    ((1, 65536), 32, "65536 blocks along y, past the limit of 65535"),
    ((1, 1, 65536), 32, "65536 blocks along z, past the limit of 65535"),
    (1, (1, 1, 65), "65 threads along z, past the limit of 64"),
    (1, (64, 32), "2048 threads, past the limit of 1024"),
])
def test_a_launch_past_a_limit_is_refused_on_the_gpu(grid, block, words):
    out = poisoned(64)
    with pytest.raises(vg.LaunchError, match=words):
        axpy[grid, block](1.0, poisoned(64), poisoned(64), out)
    assert np.isnan(out.numpy()).all()


def test_a_grid_of_zero_blocks_compiles_and_race_checks_on_the_gpu():
    from verdigris import simt

    @simt.kernel
    def everyone_writes_out_0(x, out):
        out[0] = x[simt.global_id(0)]

    with pytest.raises(vg.SafetyError, match="VG202"):
        everyone_writes_out_0[0, 32](poisoned(64), poisoned(1))
    x = vg.asarray(np.arange(64, dtype=np.float32))
    with pytest.raises(vg.AliasError):
        axpy[0, 32](1.0, x, poisoned(64), x)
    out = poisoned(64)
    axpy[0, 32](1.0, x, x, out)
    vg.synchronize()
    assert np.isnan(out.numpy()).all()
