"""Line tables in the PTX (`codegen.debuginfo`): every kernel's PTX carries `.file` and
`.loc` directives naming the user's Python file and lines, for both tracks and through
inlined `@vg.func` helpers; ptxas assembles it; and the line table changes no
instruction (the PTX without it is the same apart from the directives)."""
import inspect
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris.codegen import lower as simt_lower
from verdigris.examples.tile_softmax import softmax, softmax_online
from verdigris.ir import ArrayType
from verdigris import types as T

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


@vg.func
def scaled(v, alpha):
    return v * alpha  # LINE: helper


@simt.kernel
def scale_rows(x, out, alpha):
    i = simt.global_id(0)  # LINE: index
    if i < out.shape[0]:
        for j in range(out.shape[1]):
            out[i, j] = scaled(x[i, j], alpha)  # LINE: store


@tile.kernel
def tile_scale(x, out, alpha, BLOCK: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(BLOCK,))  # LINE: load
    tile.store(out, index=(i,), tile=t * alpha)  # LINE: tile store


def line_of(tag: str) -> int:
    lines, first = inspect.getsourcelines(inspect.getmodule(line_of))
    return next(n for n, text in enumerate(lines, first) if text.rstrip().endswith(f"# LINE: {tag}"))


def f32(rank):
    return ArrayType(T.float32, rank)


def simt_ptx(target="sm_90"):
    kernel = scale_rows.specialize_types({"x": f32(2), "out": f32(2), "alpha": T.float32})
    return codegen.compile_to_ptx(kernel, target).ptx


def tile_ptx(target="sm_90"):
    kernel = tile_scale.specialize_types({"x": f32(1), "out": f32(1), "alpha": T.float32, "BLOCK": 1024})
    return codegen.compile_to_ptx(kernel, target).ptx


def files(ptx: str) -> dict:
    """file number -> path, from the PTX's `.file` directives."""
    return {int(n): path for n, path in re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M)}


def lines_in(ptx: str, path: str) -> set:
    numbers = {n for n, p in files(ptx).items() if p == path}
    return {int(line) for n, line in re.findall(r"^\s*\.loc\s+(\d+)\s+(\d+)", ptx, re.M) if int(n) in numbers}


def instructions(ptx: str) -> list:
    """The PTX without its line table: directives, labels the table adds, and sections."""
    ptx = re.sub(r"\.section\s+\.debug\w*\s*\{[^}]*\}", "", ptx)
    return [line for line in ptx.splitlines()
            if line.strip() and not re.match(r"\s*(\.loc|\.file|\$L__(tmp|func_begin|func_end)\d+:)", line)]


@pytest.mark.parametrize("make", [simt_ptx, tile_ptx], ids=["simt", "tile"])
def test_the_ptx_names_this_file(make):
    ptx = make()
    assert __file__ in files(ptx).values(), files(ptx)


def test_simt_lines_are_the_statements_lines():
    lines = lines_in(simt_ptx(), __file__)
    assert {line_of("index"), line_of("store")} <= lines, lines


def test_an_inlined_helper_shows_its_own_line():
    """The helper's multiply carries the helper's line (inlined at the call's line)."""
    lines = lines_in(simt_ptx(), __file__)
    assert line_of("helper") in lines, lines


def test_tile_lines_are_the_statements_lines():
    lines = lines_in(tile_ptx(), __file__)
    assert {line_of("load"), line_of("tile store")} <= lines, lines


def test_example_kernels_name_their_file():
    for kernel_fn in (softmax, softmax_online):
        specs = {"x": f32(2), "out": f32(2), **{p: 1024 for p in ("COLS", "BLOCK") if p in kernel_fn.fn.__code__.co_varnames}}
        ptx = codegen.compile_to_ptx(kernel_fn.specialize_types(specs), "sm_90").ptx
        path = inspect.getsourcefile(kernel_fn.fn)
        assert lines_in(ptx, path), files(ptx)


def without_line_table(monkeypatch, make):
    class NoLines(simt_lower.LineTable):
        def __init__(self, *args):
            pass

        def location(self, loc):
            return None
    monkeypatch.setattr(simt_lower, "LineTable", NoLines)
    try:
        return make()
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("make", [simt_ptx, tile_ptx], ids=["simt", "tile"])
def test_the_line_table_changes_no_instruction(monkeypatch, make):
    plain = without_line_table(monkeypatch, make)
    assert ".loc" not in plain and ".file" not in plain
    assert instructions(make()) == instructions(plain)


@needs_ptxas
@pytest.mark.parametrize("target", list(codegen.TARGETS))
@pytest.mark.parametrize("make", [simt_ptx, tile_ptx], ids=["simt", "tile"])
def test_ptxas_assembles_the_line_table(make, target):
    assert codegen.assemble(make(target), target)[:4] == b"\x7fELF"


@needs_ptxas
def test_emit_sass_shows_the_python_lines(capsys):
    """`verdigris compile --emit sass` with nvdisasm: the SASS names the kernel's file and
    lines (nvdisasm -g); with cuobjdump only, SASS without them; with neither, a message
    saying what to install."""
    from verdigris.cli import main
    from verdigris.codegen.toolkit import find_tool

    source = inspect.getsourcefile(scale_rows.fn)
    status = main(["compile", f"{source}::scale_rows", "--sig", "f32[:, ::1], f32[:, ::1], f32", "--emit", "sass"])
    out, err = capsys.readouterr()
    if find_tool("nvdisasm"):
        assert status == 0 and f'File "{source}", line {line_of("store")}' in out, out[-2000:]
    elif find_tool("cuobjdump"):
        assert status == 0 and "LDG" in out
    else:
        assert status == 1 and "nvdisasm" in err
