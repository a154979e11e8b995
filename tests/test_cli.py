"""The `verdigris` command: compile stages, errors, doctor, demo."""
import subprocess
import sys
from pathlib import Path

import pytest

from verdigris import codegen
from verdigris.cli import main

ROOT = Path(__file__).resolve().parents[1]
AXPY = str(ROOT / "examples" / "axpy.py") + "::axpy"
SIG = "f32, f32[::1], f32[::1], f32[::1]"


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_compile_emits_each_stage(capsys):
    status, out, _ = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "ir")
    assert status == 0 and "out[i] = ((alpha * x[i]) + y[i])" in out
    status, out, _ = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "llvm")
    assert status == 0 and "define" in out and "@axpy" in out
    status, out, err = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "ptx",
                           "--target", "sm_80", "--time")
    assert status == 0 and ".target sm_80" in out and ".entry axpy" in out
    assert "frontend" in err and "ms" in err


def test_safe_axpy_ptx_uses_the_read_only_path(capsys):
    _, out, _ = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "ptx")
    assert "ld.global.nc" in out


def test_compile_applies_the_proofs_as_a_launch_does(capsys):
    status, out, err = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "ptx")
    assert status == 0 and "atom." not in out and "fence" not in out  # x[i], y[i] proven
    assert "out.shape[0] <= x.shape[0] and out.shape[0] <= y.shape[0]" in err and "--checked" in err
    status, out, _ = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "ptx", "--checked")
    assert status == 0 and out.count("atom.relaxed.gpu.global.cas") == 1  # one record for both loads


def test_compile_refuses_a_racy_kernel_as_a_launch_does(capsys):
    racy = str(ROOT / "examples" / "racy_shift.py") + "::shift_in_place"
    status, _, err = run(capsys, "compile", racy, "--sig", "f32[::1]", "--emit", "ptx")
    assert status == 1 and "VG203" in err and "x[i] = x[i + 1]" in err and "^" in err
    status, _, err = run(capsys, "compile", racy, "--sig", "f32[::1]", "--emit", "ptx", "--checked")
    assert status == 1 and "VG203" in err


def test_compile_without_signature_says_what_to_give(capsys):
    status, _, err = run(capsys, "compile", AXPY)
    assert status == 2
    assert "--sig" in err and "alpha, x, y, out" in err


@pytest.mark.parametrize("argv, words", [
    (["compile", "no/such/file.py::k", "--sig", "f32"], "no such file"),
    (["compile", AXPY.replace("::axpy", "::nope"), "--sig", SIG], "defines no kernel 'nope'"),
    (["compile", AXPY, "--sig", "f32, f32[::1]"], "has 4 parameters"),
    (["compile", AXPY, "--sig", "f32, q7[::1], f32[::1], f32[::1]"], "unknown dtype 'q7'"),
    (["compile", AXPY, "--sig", "f32, f32[::1, :], f32[::1], f32[::1]"], "bad array type"),
    (["compile", AXPY.replace("::axpy", ""), "--sig", SIG], "expected FILE::KERNEL"),
    (["compile", AXPY, "--sig", "f32, f32[::1, f32[::1], f32[::1]"], "unbalanced brackets"),
    (["check", str(ROOT / "README.md")], "is not a Python source file"),
    (["compile", AXPY, "--sig", SIG, "--block", "abc"], "--block takes 1 to 3 comma-separated ints"),
    (["compile", AXPY, "--sig", SIG, "--block", "0"], "--block 0: axpy: every block dimension must be positive"),
    (["compile", AXPY, "--sig", SIG, "--block", "32,32,32"], "a block has at most 1024 threads"),
    (["compile", AXPY, "--sig", SIG, "--grid", "1,2,3,4"], "--grid 1,2,3,4"),
    (["compile", AXPY, "--sig", SIG, "--out", "/no/such/folder/k.ptx"], "cannot write --out"),
    (["compile", AXPY, "--sig", SIG, "--block", "256", "--emit", "bundle", "--out",
      "/no/such/folder/k.vgb"], "cannot write --out"),
    (["compile", str(ROOT) + "::k", "--sig", "f32"], "is a directory"),
])
def test_usage_errors_are_one_line_not_a_traceback(capsys, argv, words):
    status, _, err = run(capsys, *argv)
    assert status == 2 and words in err and "Traceback" not in err


def test_compile_keeps_what_the_file_prints_out_of_its_output(capsys, tmp_path):
    """compile imports the file (it runs): what it prints goes to stderr, not into the PTX."""
    path = tmp_path / "noisy.py"
    path.write_text(Path(AXPY.split("::")[0]).read_text() + "\nprint('program output')\n")
    status, out, err = run(capsys, "compile", f"{path}::axpy", "--sig", SIG, "--emit", "ptx")
    assert status == 0 and out.lstrip().startswith("//") and "program output" in err


def test_a_kernel_that_does_not_compile_is_reported_with_its_line(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from verdigris import simt\n\n@simt.kernel\ndef k(out):\n"
                   "    out[0] = [1, 2]\n")
    status, _, err = run(capsys, "compile", f"{bad}::k", "--sig", "f32[::1]", "--emit", "ir")
    assert status == 1
    assert f"{bad}:5:14" in err and "out[0] = [1, 2]" in err and "^" in err


def test_compile_and_check_an_autotuned_kernel(capsys, tmp_path):
    """`verdigris compile` compiles the kernel autotune times; `check` checks it with each
    config's constexprs (a racy one is a finding, not 'not checked')."""
    source = tmp_path / "tuned.py"
    source.write_text("import verdigris as vg\nfrom verdigris import simt\n\n"
                      "@vg.autotune(configs=[{'K': 1}, {'K': 2}], key=['n'])\n@simt.kernel\n"
                      "def shift(x, n, K: vg.constexpr):\n    i = simt.global_id(0)\n"
                      "    if i < n - K:\n        x[i] = x[i + K]\n")
    status, out, _ = run(capsys, "compile", f"{source}::shift", "--sig", "f32[::1], i64, 1",
                         "--emit", "ir")
    assert status == 0 and "x[i] = x[(i + 1:i64)]" in out
    status, out, _ = run(capsys, "check", str(source))
    assert status == 1 and f"{source}:9:16: VG203" in out


def test_compile_takes_the_grid_a_one_block_kernel_is_launched_with(capsys, tmp_path):
    source = tmp_path / "one.py"
    source.write_text("import verdigris as vg\nfrom verdigris import tile\n\n@tile.kernel\n"
                      "def one(x, out, B: vg.constexpr):\n"
                      "    tile.store(out, index=(0,), tile=tile.load(x, index=(0,), shape=(B,)))\n")
    argv = ("compile", f"{source}::one", "--sig", "f32[::1], f32[::1], 64", "--emit", "ptx")
    status, _, err = run(capsys, *argv)
    assert status == 1 and "VG202" in err and "--grid 1" in err
    status, out, _ = run(capsys, *argv, "--grid", "1")
    assert status == 0 and ".entry one" in out


@pytest.mark.parametrize("source, words", [
    ("import verdigris\nimport no_such_module_here\n", ":2: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("x = (\n", ":1: SyntaxError"),
    ("def f():\n    return 1 / 0\n\nf()\n", ":2: ZeroDivisionError"),
])
def test_a_file_that_fails_to_import_is_reported_with_its_line(capsys, tmp_path, source, words):
    broken = tmp_path / "broken.py"
    broken.write_text(source)
    status, _, err = run(capsys, "compile", f"{broken}::k", "--sig", "f32[::1]")
    assert status == 2 and f"importing {broken} failed" in err and words in err and "Traceback" not in err


def test_doctor_reports_versions_and_backend(capsys):
    status, out, _ = run(capsys, "doctor")
    assert status == 0
    for word in ("python", "llvmlite", "cuda-bindings", "ptxas", "libdevice", "disassembler", "backend"):
        assert word in out


def test_cache_reports_and_clears_only_its_own_entries(capsys, tmp_path, monkeypatch):
    from verdigris.runtime import cache

    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    for n in range(3):
        cache.put(cache.key(f"kernel {n}", (), "sm_90"), b"x" * 1000)
    (tmp_path / "notes.txt").write_text("the user's own file")
    status, out, _ = run(capsys, "cache")
    assert status == 0 and f"{tmp_path}: 3 entries" in out
    status, out, _ = run(capsys, "cache", "--clear")
    assert status == 0 and out.startswith("removed 3 entries")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert cache.usage() == (0, 0)


def test_demo_runs_every_example_and_refuses_the_alias(capsys):
    status, out, _ = run(capsys, "demo", "--backend", "cpu", "--seed", "3")
    assert status == 0, out
    assert out.count("[ok ]") >= 6 and "BAD" not in out
    assert "VG201" in out and "writes 'out'" in out


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
def test_emit_sass_or_a_clear_message(capsys):
    status, out, err = run(capsys, "compile", AXPY, "--sig", SIG, "--emit", "sass")
    assert (status == 0 and "LDG" in out) or (status == 1 and "cuobjdump" in err)


def test_python_dash_m_works():
    result = subprocess.run([sys.executable, "-m", "verdigris", "compile", AXPY, "--sig", SIG,
                             "--emit", "ir"], capture_output=True, text=True)
    assert result.returncode == 0 and "simt kernel axpy" in result.stdout


def test_signatures_say_multiples_of_16_for_tile_kernels():
    """`i64:16` and `bf16[:, ::1]:16` (Triton's spelling) give what a launch with such
    values specializes on; a SIMT kernel or a float refuses `:16`."""
    import verdigris as vg
    from verdigris.runtime.signatures import SignatureError, parse_signature
    from verdigris.examples.axpy import axpy
    from verdigris.examples.tile_dropout import dropout
    from verdigris.examples.tile_layernorm import layernorm
    from verdigris.frontend.typing import Multiple

    specs = parse_signature(layernorm, "bf16[:, ::1]:16, bf16[::1], bf16[::1]:16, bf16[:, ::1], f32, 8192")
    assert [specs[n].on_grid for n in ("x", "w", "b", "out")] == [True, False, True, False]
    assert layernorm.specialize_types(specs).param("x").type.on_grid
    specs = parse_signature(dropout, "f32[::1], f32[::1], i64:16, f32, 1024")
    assert specs["seed"] == Multiple(vg.int64, 16) and specs["p"] == vg.float32
    assert dropout.specialize_types(specs).param("seed").multiple_of == 16
    with pytest.raises(SignatureError, match="for integers and arrays"):
        parse_signature(layernorm, "bf16[:, ::1], bf16[::1], bf16[::1], bf16[:, ::1], f32:16, 8192")
    with pytest.raises(SignatureError, match="for tile kernels"):
        parse_signature(axpy, "f32, f32[::1]:16, f32[::1], f32[::1]")


ROWS = """
from verdigris import simt

@simt.kernel
def rows(x, out, width):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row < x.shape[0] and col < width:
        out[row * width + col] = x[row]
"""


def test_a_signature_compiles_a_64_bit_scalar_wide_or_narrow(capsys, tmp_path):
    """`i64` is the variant for any value (the row kernel's width may wrap: refused with the
    values), `i64:narrow` the one for values in int32's range (proven)."""
    source = tmp_path / "rows.py"
    source.write_text(ROWS)
    kernel = f"{source}::rows"
    status, _, err = run(capsys, "compile", kernel, "--sig", "f32[::1], f32[::1], i64",
                         "--block", "8,1", "--emit", "ptx")
    assert status == 1 and "VG202" in err and "wraps around in int64" in err
    status, out, _ = run(capsys, "compile", kernel, "--sig", "f32[::1], f32[::1], i64:narrow",
                         "--block", "8,1", "--emit", "ir")
    assert status == 0 and "width: int64 narrow" in out
    status, out, _ = run(capsys, "compile", kernel, "--sig", "f32[::1], f32[::1], i64:narrow",
                         "--block", "8,1", "--emit", "ptx")
    assert status == 0 and ".entry rows" in out
    status, _, err = run(capsys, "compile", kernel, "--sig", "f32[::1], f32[::1], i32:narrow",
                         "--emit", "ir")
    assert status == 2 and "':narrow' is for i64 and u64 scalars" in err


def test_doctor_says_when_the_backend_asked_for_cannot_run(capsys, monkeypatch):
    from verdigris.runtime import backend

    monkeypatch.setattr(backend, "_chosen", None)
    monkeypatch.setenv("VERDIGRIS_BACKEND", "bogus")
    status, out, _ = run(capsys, "doctor")
    assert status == 1 and "backend: NONE: unknown backend 'bogus'" in out


def test_signatures_take_every_dtype_spelling(capsys, tmp_path):
    source = tmp_path / "flags.py"
    source.write_text("from verdigris import simt\n\n@simt.kernel\ndef flip(x, out):\n"
                      "    i = simt.global_id(0)\n    if i < out.shape[0]:\n"
                      "        out[i] = not x[i]\n")
    for spelling in ("b1", "bool", "bool_"):
        status, out, _ = run(capsys, "compile", f"{source}::flip", "--sig",
                             f"{spelling}[::1], {spelling}[::1]", "--emit", "ir")
        assert status == 0 and "x: bool[1d" in out, spelling


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    out, _ = capsys.readouterr()
    assert done.value.code == 0 and out.startswith("verdigris 0.1")
