"""Launch records (`runtime.records`), on the fake CUDA driver: a later process launches a
kernel compiled before without the frontend or the compiler, with every launch check of
a compiled kernel; a changed global, helper or option, or a value without a stamp, sends
the launch through the frontend again."""
import json
import os
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests import fakecuda
from verdigris import lang, simt
from verdigris.runtime import records

needs_fake_driver = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

KERNELS = Path(__file__).parent / "sources" / "fresh_kernels.py"

RACY = """
import verdigris as vg
from verdigris import tile

@tile.kernel
def store_tile_zero(x, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.load(x, index=(tile.bid(0),), shape=(B,)))
"""

LAUNCHES = """
import json, sys
import numpy as np
import verdigris as vg
from kernels import axpy, add, softmax
from verdigris.errors import AliasError, SafetyError
from verdigris.runtime import warmup
from tests.fakecuda import last_launch

x = vg.asarray(np.ones(1024, np.float32))
out = vg.asarray(np.zeros(1024, np.float32))
short = vg.asarray(np.ones(512, np.float32))
got = {}
axpy[4, 256](2.0, x, x, out)
got["axpy params"] = last_launch().count
add[4](x, x, out, BLOCK=256)
rows, rows_out = (vg.asarray(np.ones((4, 256), np.float32)) for _ in range(2))
softmax[4](rows, rows_out, COLS=256)
if CHECKED:
    axpy[4, 256](2.0, short, x, out)  # x shorter than out: the fully checked variant
try:
    add[4](x, x, x, BLOCK=256)
except AliasError as err:
    got["alias"] = err.code
got["launches"] = last_launch().count
warmup.join()  # (no warm-up when every kernel defined was compiled here before)
got["compiler loaded"] = "llvmlite.binding" in sys.modules
from racy import store_tile_zero  # defined only now: the warm-up would load the compiler
try:
    store_tile_zero[4](x, out, B=256)
except SafetyError as err:
    got["racy"] = err.code
print(json.dumps(got))
"""


def _run(folder, checked=False, **env):
    shutil.copy(KERNELS, folder / "kernels.py")
    (folder / "racy.py").write_text(RACY)
    code = (f"import sys\nsys.path.insert(0, {str(folder)!r})\nCHECKED = {checked}\n"
            + textwrap.dedent(LAUNCHES))
    done = fakecuda.run(code, VERDIGRIS_CACHE_DIR=str(folder / "cache"),
                        VERDIGRIS_LOG="compile", **env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    logs = [line for line in lines if line.startswith("verdigris:")]
    return json.loads(lines[-1]), logs


def _how(logs: list, name: str) -> list:
    """How each launch of `name` got its kernel, from the log's lines."""
    how = []
    for line in logs:
        words = line.split()
        compiled = words[1] == "compiled"
        if words[2 if compiled else 1] == name:
            how.append("compiled" if compiled else "record" if "launch record" in line
                       else "disk cache")
    return how


@needs_fake_driver
def test_a_later_process_launches_from_the_record_with_every_check(tmp_path):
    first, logs = _run(tmp_path)
    assert _how(logs, "axpy") == ["compiled"] and _how(logs, "add") == ["compiled"]
    again, logs = _run(tmp_path)
    assert _how(logs, "axpy") == ["record"] and _how(logs, "add") == ["record"]
    assert again == dict(first, **{"compiler loaded": False})
    assert again["alias"] == "VG201" and again["racy"] == "VG202"


@needs_fake_driver
def test_a_variant_the_record_lacks_is_compiled_and_then_recorded(tmp_path):
    _run(tmp_path)
    _, logs = _run(tmp_path, checked=True)  # the checked axpy: not compiled before
    assert _how(logs, "axpy") == ["record", "compiled"]
    _, logs = _run(tmp_path, checked=True)
    assert _how(logs, "axpy") == ["record", "record"]


@needs_fake_driver
def test_a_changed_global_goes_through_the_frontend(tmp_path):
    _run(tmp_path, SCALE="2")
    _, logs = _run(tmp_path, SCALE="3")  # the helper reads SCALE: another dependency text
    assert _how(logs, "axpy") == ["compiled"] and _how(logs, "add") == ["record"]


def _kernel(source: str, tmp_path, name="k", **globals_):
    path = tmp_path / f"{name}_{abs(hash(source))}.py"
    path.write_text(textwrap.dedent(source))
    namespace = dict(globals_, simt=simt, vg=__import__("verdigris"))
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


def test_dependency_texts_follow_helpers_options_and_values(tmp_path):
    body = """
        @simt.kernel{options}
        def k(x, out):
            i = simt.global_id(0)
            out[i] = helper(x[i]) + LIMIT
    """

    def helper_returning(expr):
        return lang.func(_kernel(f"def h(v):\n    return {expr}\n", tmp_path, "h"))

    def text(options="", expr="v + 1", limit=1.0):
        return records.dependencies(_kernel(body.format(options=options), tmp_path,
                                            helper=helper_returning(expr), LIMIT=limit))

    base = text()
    assert base is not None and base == text()
    assert text(expr="v + 2") != base
    assert text(limit=2.0) != base
    assert text(limit=np.float32(1.0)) != base
    assert text(options="(fma=True)") != base
    assert text(limit=[1.0]) is None  # a list may change: no records
    assert text(limit=os) is None  # a module of the user's (any module but math, numpy, verdigris)


@needs_fake_driver
def test_a_product_of_matrices_launches_from_its_record_with_its_maps(tmp_path):
    """The specialized GEMM of tests/test_tile_mma.py: the second process launches from the
    record with the same persistent grid, producer warps, shared memory and tensor maps;
    an array the copy engine cannot describe still gets the variant without it."""
    from tests.test_tile_mma import FAKE_LAUNCH, needs_ptxas

    if needs_ptxas.args[0]:
        pytest.skip("needs ptxas")
    runs = []
    for _ in range(2):
        done = fakecuda.run(FAKE_LAUNCH, VERDIGRIS_CACHE_DIR=str(tmp_path), VERDIGRIS_LOG="compile")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        runs.append((json.loads(lines[-1]), [line for line in lines if line.startswith("verdigris:")]))
    (first, first_log), (again, again_log) = runs
    assert again == first
    assert _how(first_log, "gemm") == ["compiled"]
    # the odd pitch's variant without the copy engine: the IR through the frontend, whose
    # specialization's image is in the disk cache
    assert _how(again_log, "gemm") == ["record", "disk cache"]


ROWS = """
import json
import numpy as np
import verdigris as vg
from tests.fakecuda.kernels import rows_by_width

x, o = vg.asarray(np.ones(4, np.float32)), vg.asarray(np.zeros(64, np.float32))
got = []
for width in WIDTHS:
    try:
        rows_by_width[(1, 4), (8, 1)](x, o, width)
        got.append("ok")
    except vg.SafetyError as err:
        got.append(err.code)
print(json.dumps(got))
"""


@needs_fake_driver
def test_a_record_of_the_narrow_variant_never_serves_a_large_value(tmp_path):
    """The record of a launch with a width in int32's range (the narrow variant) is keyed by
    that fact: a later process launching with 2**62 gets the wide variant, which is refused,
    and a small width again launches from the record."""
    def launch(*widths):
        code = f"WIDTHS = {list(widths)!r}\n" + textwrap.dedent(ROWS)
        done = fakecuda.run(code, VERDIGRIS_CACHE_DIR=str(tmp_path / "cache"),
                            VERDIGRIS_LOG="compile")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        return json.loads(lines[-1]), [line for line in lines if line.startswith("verdigris:")]

    got, logs = launch(8)
    assert got == ["ok"] and _how(logs, "rows_by_width") == ["compiled"]
    got, logs = launch(2**62, 8)
    assert got[0] in ("VG202", "VG205") and got[1] == "ok"
    assert _how(logs, "rows_by_width") == ["record"]  # only the narrow launch had one
