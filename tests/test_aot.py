"""Ahead-of-time bundles (runtime.bundle): what a bundle holds, the CLI that writes one, and
loading and launching one without the compiler (llvmlite blocked) on the fake driver."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import verdigris as vg
from tests import fakecuda
from tests.fakecuda.kernels import add, axpy, keep_prefix
from verdigris.codegen import ptxas
from verdigris.runtime import bundle as B

AXPY_SIG = "f32, f32[::1], f32[::1], f32[::1]"
ADD_SIGS = ["f32[::1], f32[::1], f32[::1], 1024", "f64[::1], f64[::1], f64[::1], 512"]
needs_assembler = pytest.mark.skipif(
    not (ptxas.ptxas_available() or ptxas.nvjitlink_available()), reason="needs ptxas or nvJitLink")
needs_fake_driver = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundles")
    axpy.compile_aot(AXPY_SIG, block=256, targets=["sm_80", "sm_90", "ptx"]).save(folder / "axpy.vgb")
    add.compile_aot(ADD_SIGS, targets=["sm_90"]).save(folder / "add.vgb")
    keep_prefix.compile_aot(["f32[::1], f32[::1], i64, 1024"], targets=["sm_90"]).save(
        folder / "keep_prefix.vgb")
    keep_prefix.compile_aot(["f32[::1]:16, f32[::1]:16, i64:16, 1024"], targets=["sm_90"]).save(
        folder / "keep_prefix16.vgb")
    return folder


@needs_assembler
def test_a_bundle_holds_each_target_and_variant(bundles):
    k = vg.load_bundle(bundles / "axpy.vgb")
    assert k.__name__ == "axpy" and [p.name for p in k.params] == ["alpha", "x", "y", "out"]
    (key, entry), = k._entries.items()
    assert key == ((256, 1, 1), (1, 2), ("s", "float32"), *[("a", "float32", 1, True, True)] * 3)
    assert set(entry["images"]) == {"sm_80", "sm_90", "ptx"}
    # axpy's proofs assume x and y are at least as long as out: a checked variant comes along
    assert entry["guard"] and all(set(v) == {"proven", "checked"} for v in entry["images"].values())
    for arch, variants in entry["images"].items():
        for variant in variants.values():
            image = bytes(k._slice(variant))
            assert image.startswith(b"\x7fELF") == (arch != "ptx"), arch
            if arch == "ptx":
                assert b".target sm_80" in image and b".entry axpy" in image
    assert sorted(s[4] for s in entry["sites"]) == ["out", "x", "y"]
    assert entry["writes"]["out"][1] == axpy.fn.__code__.co_firstlineno + 4
    two = vg.load_bundle(bundles / "add.vgb")
    assert sorted(k[-1][1] for k in two._entries) == [512, 1024]


def test_which_cubins_run_where():
    assert B._runs_on("sm_80", (8, 0)) and B._runs_on("sm_80", (8, 9))
    assert not B._runs_on("sm_89", (8, 0)) and not B._runs_on("sm_80", (9, 0))
    assert B._runs_on("sm_90a", (9, 0)) and not B._runs_on("sm_90a", (10, 0))


def test_bundles_refuse_what_they_cannot_hold():
    with pytest.raises(vg.CompileError, match="unknown target 'sm_75'"):
        axpy.compile_aot(AXPY_SIG, block=256, targets=["sm_75"])
    with pytest.raises(vg.CompileError, match="pass block="):
        axpy.compile_aot(AXPY_SIG)
    with pytest.raises(vg.CompileError, match="has 4 parameters"):
        axpy.compile_aot("f32, f32[::1]", block=256)


def test_a_bundle_is_not_a_file_of_another_kind(tmp_path):
    (tmp_path / "x.vgb").write_bytes(b"not a bundle")
    with pytest.raises(vg.LaunchError, match="not a verdigris bundle"):
        vg.load_bundle(tmp_path / "x.vgb")
    with pytest.raises(vg.LaunchError, match="cannot read the bundle"):
        vg.load_bundle(tmp_path)


@needs_assembler
def test_a_bundle_cut_short_is_damaged(tmp_path):
    axpy.compile_aot(AXPY_SIG, block=256).save(tmp_path / "k.vgb")
    data = (tmp_path / "k.vgb").read_bytes()
    (tmp_path / "cut.vgb").write_bytes(data[:40])
    with pytest.raises(vg.LaunchError, match="damaged verdigris bundle"):
        vg.load_bundle(tmp_path / "cut.vgb")


@needs_assembler
def test_the_cli_writes_a_bundle(tmp_path):
    out = tmp_path / "k.vgb"
    done = subprocess.run(
        [sys.executable, "-m", "verdigris", "compile", "tests/fakecuda/kernels.py::add",
         "--sig", "; ".join(ADD_SIGS), "--emit", "bundle", "--out", str(out), "--target",
         "sm_80", "--target", "sm_90a", "--time"], capture_output=True, text=True,
        cwd=fakecuda.ROOT)
    assert done.returncode == 0, done.stderr
    # 2 signatures x 2 targets x (the variant using the bounds proofs, the checked one)
    assert "2 specialization(s), 8 image(s)" in done.stdout and "bundle:" in done.stderr
    k = vg.load_bundle(out)
    assert all(set(e["images"]) == {"sm_80", "sm_90a"} for e in k._entries.values())
    done = subprocess.run(
        [sys.executable, "-m", "verdigris", "compile", "tests/fakecuda/kernels.py::axpy",
         "--sig", AXPY_SIG, "--emit", "bundle", "--out", str(out)], capture_output=True,
        text=True, cwd=fakecuda.ROOT)
    assert done.returncode == 2 and "give --block" in done.stderr


@needs_assembler
@needs_fake_driver
def test_a_bundle_launches_without_the_compiler(bundles):
    code = textwrap.dedent(f"""
        import json, sys
        sys.modules["llvmlite"] = None  # any import of the compiler fails
        import numpy as np
        import verdigris as vg
        from tests.fakecuda import last_launch
        out = {{}}
        k = vg.load_bundle({str(bundles / "axpy.vgb")!r})
        x, y, o = (vg.asarray(np.ones(1000, np.float32)) for _ in range(3))
        k[4, 256](2.0, x, y, o)
        first = last_launch(8)
        k[4, 256](2.0, x, y, o)
        second = last_launch(8)
        out["same"] = first.slots == second.slots and first.function == second.function
        out["slots"] = first.slots[:7]
        out["pointers"] = [x.ptr, y.ptr, o.ptr]
        for label, args in (("f64", (2.0, vg.asarray(np.ones(1000)), y, o)), ("alias", (2.0, x, y, x))):
            try:
                k[4, 256](*args)
            except vg.Error as err:
                out[label] = [type(err).__name__, str(err)]
        k[4, 256](2.0, x[:10], y, o)
        out["checked"] = last_launch().function != first.function
        k[1, 256](2.0, x, y, o)  # one block: the entry compiled for any grid serves it
        out["one block"] = list(last_launch().grid)
        a = vg.load_bundle({str(bundles / "add.vgb")!r})
        a[8](x, y, o, BLOCK=1024)
        out["tile block"] = list(last_launch().block)
        p = vg.load_bundle({str(bundles / "keep_prefix.vgb")!r})
        for n in (992, 1000):  # compiled for any n: a multiple of 16 is one too
            p[4](x, o, n, BLOCK=1024)
        out["any n"] = len(p._specializations)
        p16 = vg.load_bundle({str(bundles / "keep_prefix16.vgb")!r})
        g, h = (vg.asarray(np.ones(4096, np.float32)) for _ in range(2))
        p16[4](g, h, 992, BLOCK=1024)  # 4096-element arrays, n = 992: all multiples of 16
        try:
            p16[4](g, h, 1000, BLOCK=1024)
        except vg.Error as err:
            out["1000"] = [type(err).__name__, str(err)]
        out["loaded"] = sorted(m for m in sys.modules if m.startswith(("llvmlite.",
                               "verdigris.codegen.lower", "verdigris.safety", "verdigris.tile.lower")))
        print(json.dumps(out))
    """)
    done = fakecuda.run(code)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["same"] and got["checked"] and got["loaded"] == [] and got["one block"] == [1, 1, 1]
    p = got["pointers"]
    assert got["slots"] == [0x40000000, p[0], 1000, p[1], 1000, p[2], 1000]  # 2.0f, then arrays
    assert got["f64"][0] == "LaunchError" and "no specialization for this launch" in got["f64"][1]
    assert "x: float64[::1]" in got["f64"][1] and "x: float32[::1]" in got["f64"][1]
    assert got["alias"][0] == "AliasError" and "out[i] = alpha * x[i] + y[i]" in got["alias"][1]
    assert got["tile block"][1:] == [1, 1] and got["tile block"][0] % 32 == 0
    assert got["any n"] == 2
    assert got["1000"][0] == "LaunchError" and "no specialization for this launch" in got["1000"][1]
    # the launch (n = 1000) and the bundle's one specialization (compiled for `:16`) differ visibly
    launch, _, has = got["1000"][1].partition("it has:")
    assert "n: int64:16," in has and "n: int64:narrow," in launch  # 1000: in int32's range


@needs_assembler
@needs_fake_driver
def test_a_bundled_product_of_matrices_launches_as_the_compiled_one(tmp_path):
    """The specialized GEMM of tests/test_tile_mma.py from a bundle, without the compiler:
    the same persistent grid, producer warps, shared memory and tensor maps as the kernel
    compiled in the process, and for an array the copy engine cannot describe, the
    bundle's variant without it; a target without the copy engine (sm_80) has no such
    variant."""
    from tests.test_tile_mma import FAKE_LAUNCH
    from verdigris.examples.tile_gemm import gemm

    bundle = gemm.compile_aot("f16[:, ::1], f16[:, ::1], f32[:, ::1], 128, 256, 64",
                              grid=(2, 2), targets=["sm_90a", "sm_80"])
    bundle.save(tmp_path / "gemm.vgb")
    (entry,) = bundle.manifest["specializations"]
    # the store of c is proven inside c on launches whose grid fits it: "checked" for the others
    assert set(entry["images"]["sm_90a"]) == {"proven", "proven without tma", "checked", "checked without tma"}
    assert set(entry["images"]["sm_80"]) == {"proven", "checked"}
    assert entry["matmul"]["sm_90a"]["proven"]["maps"] and not entry["matmul"]["sm_80"]["proven"]["maps"]
    from_bundle = FAKE_LAUNCH.replace(
        "from verdigris.examples.tile_gemm import gemm",
        f"import sys\nsys.modules['llvmlite'] = None\ngemm = vg.load_bundle({str(tmp_path / 'gemm.vgb')!r})")
    from_bundle += textwrap.dedent("""
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("llvmlite.",
                         "verdigris.tile.", "verdigris.safety", "verdigris.codegen.lower")))))
    """)
    runs = []
    for code in (FAKE_LAUNCH, from_bundle):
        done = fakecuda.run(code)
        assert done.returncode == 0, done.stderr
        runs.append(done.stdout.strip().splitlines())
    compiled, bundled = runs
    assert json.loads(bundled[-2]) == json.loads(compiled[-1])
    assert json.loads(bundled[-1]) == []  # neither the compiler nor the tile lowering


def test_a_bundle_on_the_cpu_backend_says_it_runs_on_cuda_only(bundles, monkeypatch):
    from verdigris.runtime import backend

    monkeypatch.setattr(backend, "_chosen", "cpu")
    k = vg.load_bundle(str(bundles / "axpy.vgb"))
    x = np.ones(8, np.float32)
    with pytest.raises(vg.LaunchError, match="comes from a bundle, which runs on the cuda backend only"):
        k[1, 256](2.0, x, x, np.zeros(8, np.float32))


@needs_assembler
@needs_fake_driver
def test_a_bundle_compiled_narrow_serves_small_values_only(tmp_path):
    """`i64:narrow`: the row kernel's variant for widths in int32's range (its wide variant
    is refused, so a bundle cannot hold it); a launch with a larger width finds no entry
    and says so, naming both, instead of running the narrow image."""
    from tests.fakecuda.kernels import rows_by_width

    with pytest.raises(vg.SafetyError, match="wraps around"):
        rows_by_width.compile_aot("f32[::1], f32[::1], i64", block=(8, 1), grid=(1, 4))
    rows_by_width.compile_aot("f32[::1], f32[::1], i64:narrow", block=(8, 1), grid=(1, 4),
                              targets=["sm_90"]).save(tmp_path / "rows.vgb")
    code = textwrap.dedent(f"""
        import json
        import numpy as np
        import verdigris as vg
        from tests.fakecuda import last_launch
        k = vg.load_bundle({str(tmp_path / "rows.vgb")!r})
        x, o = vg.asarray(np.ones(4, np.float32)), vg.asarray(np.zeros(64, np.float32))
        out = {{}}
        for label, width in (("8", 8), ("2**62", 2**62), ("u 2**31", np.uint64(2**31)), ("-8", -8)):
            before = last_launch().count
            try:
                k[(1, 4), (8, 1)](x, o, width)
                out[label] = ["ok", last_launch().count - before]
            except vg.Error as err:
                out[label] = [type(err).__name__, str(err)]
        print(json.dumps(out))
    """)
    done = fakecuda.run(code)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["8"] == ["ok", 1] and got["-8"] == ["ok", 1]
    assert got["2**62"][0] == "LaunchError" and "no specialization for this launch" in got["2**62"][1]
    launch, _, has = got["2**62"][1].partition("it has:")
    assert "width: int64 block" in launch and "width: int64:narrow" in has
    assert got["u 2**31"][0] == "LaunchError"
