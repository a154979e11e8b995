"""`verdigris check` gives every kernel one verdict (proven, refused, not compilable, not
proven), never reports a kernel it did not prove as fine, and goes on to the next kernel and
file whatever fails in one (docs/safety.md, "`verdigris check`")."""
import re

import pytest

from verdigris.cli import main

HEADER = """\
import numpy as np

import verdigris as vg
from verdigris import simt
"""

# Kernels that no launch could compile, each beside the twin that compiles and is proven.
NOT_COMPILABLE = {
    "a global list": ("TABLE = [1.0, 2.0]\n", "out[i] = x[i] * TABLE[1]", "a list"),
    "a float index": ("", "out[i] = x[i * 0.5]", "array indices must be integers"),
    "return value": ("", "out[i] = x[i]\n        return 3", "kernels return nothing"),
    "a try": ("", "try:\n            out[i] = x[i]\n        except Exception:\n            pass",
              "try/except is not supported"),
}
FIXED = "out[i] = x[i]"


def kernel_source(prelude: str, body: str, name: str = "k", params: str = "x, out") -> str:
    return HEADER + prelude + f"""

@simt.kernel
def {name}({params}):
    i = simt.global_id(0)
    if i < out.shape[0]:
        {body}
"""


def check(capsys, *argv):
    status = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    assert not err, err
    return status, out


def verdict_lines(out: str) -> list:
    return re.findall(r"^\S+:\d+: (?:kernel|file|launch of) .*$", out, re.M)


@pytest.mark.parametrize("case", sorted(NOT_COMPILABLE))
def test_a_kernel_no_launch_could_compile_is_not_compilable_and_its_fix_is_proven(
        capsys, tmp_path, case):
    prelude, body, words = NOT_COMPILABLE[case]
    path = tmp_path / "user.py"
    path.write_text(kernel_source(prelude, body))
    status, out = check(capsys, path)
    assert status == 1, out
    assert verdict_lines(out) == [line for line in verdict_lines(out) if "kernel 'k'" in line]
    (line,) = verdict_lines(out)
    assert re.match(rf"{re.escape(str(path))}:\d+: kernel 'k': not compilable: .*{re.escape(words)}",
                    line), out
    assert "1 problem (1 not compilable)" in out
    fixed = kernel_source(prelude, FIXED)
    path.write_text(fixed)
    status, out = check(capsys, path)
    line = fixed.splitlines().index("def k(x, out):") + 1
    assert status == 0 and verdict_lines(out) == [f"{path}:{line}: kernel 'k': proven"], out
    assert "no problems" in out and "verdicts: 1 proven" in out


def test_a_scalar_reaching_an_index_through_a_local_is_checked_not_passed_over(capsys, tmp_path):
    """`k = n; x[k]`: the body does not show `n` is an integer (check took it as float32,
    the build failed and the kernel was 'not checked', exit 0); built with integers, it is
    proven, and its racy twin refused."""
    path = tmp_path / "user.py"
    path.write_text(kernel_source("", "k = n\n        out[i] = x[k + i]", params="x, out, n"))
    status, out = check(capsys, path)
    assert status == 0 and "kernel 'k': proven" in out, out
    path.write_text(kernel_source("", "k = n\n        out[k] = x[i]", params="x, out, n"))
    status, out = check(capsys, path)
    assert status == 1 and "kernel 'k': refused (VG202)" in out and ": VG202: " in out, out


def test_a_kernel_with_star_args_does_not_stop_the_run(capsys, tmp_path):
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(kernel_source("", FIXED, name="starred", params="x, out, *rest")
                     + kernel_source("", FIXED, name="after").split(HEADER, 1)[1])
    second.write_text(kernel_source("", FIXED, name="other"))
    status, out = check(capsys, first, second)
    assert status == 1
    assert re.search(r"a\.py:\d+: kernel 'starred': not compilable: kernels cannot take "
                     r"\*args", out), out
    assert re.search(r"a\.py:\d+: kernel 'after': proven", out), out
    assert re.search(r"b\.py:\d+: kernel 'other': proven", out), out
    assert "in 2 files" in out and "verdicts: 2 proven, 1 not compilable" in out


def test_a_file_that_does_not_parse_or_import_is_not_compilable_and_the_run_goes_on(
        capsys, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    missing = tmp_path / "missing.py"
    missing.write_text("import no_such_module_of_verdigris_tests as simt\n"
                       + kernel_source("", FIXED, name="needs_it").split(HEADER, 1)[1])
    fine = tmp_path / "fine.py"
    fine.write_text(kernel_source("", FIXED, name="fine"))
    status, out = check(capsys, broken, missing, fine)
    assert status == 1
    assert f"{broken}:1: file: not compilable: cannot parse" in out, out
    assert re.search(rf"{re.escape(str(missing))}:\d+: kernel 'needs_it': not compilable: an "
                     rf"import fails at {re.escape(str(missing))}:1: ModuleNotFoundError", out), out
    assert "kernel 'fine': proven" in out
    assert "2 problems (2 not compilable)" in out and "in 3 files" in out


def test_a_failure_of_the_checker_is_not_proven_never_fine(capsys, tmp_path, monkeypatch):
    from verdigris.safety import scan

    def broken(ir):
        raise RuntimeError("a defect")

    monkeypatch.setattr(scan, "analyze", broken)
    path = tmp_path / "user.py"
    path.write_text(kernel_source("", FIXED) + kernel_source("", FIXED, name="k2").split(HEADER, 1)[1])
    status, out = check(capsys, path)
    assert status == 1 and "no problems" not in out
    assert len(re.findall(r"kernel 'k2?': not proven: the checker failed \(RuntimeError: a "
                          r"defect\)", out)) == 2, out
    status, out = check(capsys, "--allow-unproven", path)
    assert status == 0 and "verdicts: 2 not proven" in out


def test_allow_unproven_does_not_excuse_refused_or_not_compilable(capsys, tmp_path):
    racy = tmp_path / "racy.py"
    racy.write_text(kernel_source("", "out[0] = x[i]"))
    status, out = check(capsys, "--allow-unproven", racy)
    assert status == 1 and "kernel 'k': refused (VG202)" in out
    broken = tmp_path / "broken.py"
    broken.write_text(kernel_source("", "out[i] = x[i * 0.5]"))
    status, out = check(capsys, "--allow-unproven", broken)
    assert status == 1 and "not compilable" in out


def test_time_prints_each_kernels_check_time(capsys, tmp_path):
    path = tmp_path / "user.py"
    path.write_text(kernel_source("", FIXED) + kernel_source("", "out[0] = x[i]", name="racy")
                    .split(HEADER, 1)[1])
    status, out = check(capsys, "--time", path)
    lines = verdict_lines(out)
    assert len(lines) == 2 and all(re.search(r" \[\d+\.\d ms\]$", line) for line in lines), out
    assert re.search(r"; \d+\.\d ms checking$", out.strip()), out
    status, out = check(capsys, path)
    assert " ms" not in out


def test_a_definition_that_fails_is_not_compilable_one_not_run_is_not_proven(capsys, tmp_path):
    path = tmp_path / "user.py"
    source = kernel_source("", FIXED).replace("@simt.kernel", "@simt.kernel(fast=True)")
    path.write_text(source)
    status, out = check(capsys, path)
    assert status == 1 and re.search(r"kernel 'k': not compilable: its definition fails: "
                                     r"@simt.kernel: unknown option 'fast'", out), out
    path.write_text(kernel_source("", FIXED).replace("@simt.kernel", "@simt.kernel(fma=pick())"))
    status, out = check(capsys, path)
    assert status == 1 and "kernel 'k': not proven: its definition could not be evaluated" in out
