"""`verdigris check` (kernels and launch sites found without running files) and
`verdigris explain` (the long form of every safety code)."""
import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import verdigris as vg
from verdigris.cli import main
from verdigris.examples import axpy
from verdigris.safety.codes import CODES
from verdigris.safety.explain import EXPLANATIONS, explain
from verdigris.safety.explanation import PRELUDE_LINES, program
from verdigris.safety.usage import param_usage
from verdigris.safety.views import as_view, overlap

EXAMPLES = Path(vg.__file__).parent / "examples"
README = Path(__file__).resolve().parents[1] / "README.md"
# Codes that only a run can produce: the others are found by `check`.
DYNAMIC_CODES = {"VG302", "VG304"}

HEADER = """\
import numpy as np

import verdigris as vg
from verdigris import simt
"""

SHIFT = HEADER + """

@simt.kernel
def shift(a, b):
    i = simt.global_id(0)
    if i < a.shape[0]:
        a[i] = b[i]


def main(n):
    x = vg.asarray(np.ones(2 * n, np.float32))
    shift[vg.cdiv(n, 128), 128]({args})
"""


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def check_source(capsys, tmp_path, source: str, name: str = "user.py"):
    path = tmp_path / name
    path.write_text(source)
    return (path, *run(capsys, "check", str(path)))


def findings_at(out: str, path) -> list:
    """The finding lines (`path:line:col: CODE: ...`) of check's output about `path`; its
    verdict lines are `path:line: kernel 'name': verdict`."""
    return re.findall(rf"^{re.escape(str(path))}:\d+:\d+: .*$", out, re.M)


def line_of(source: str, text: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


# ----------------------------------------------------------------------------- check


def test_a_racy_kernel_is_reported_with_its_code_and_line(capsys, tmp_path):
    source = HEADER + """

@simt.kernel
def scale(x, out):
    i = simt.thread_id(0)
    if i < out.shape[0]:
        out[i] = 2.0 * x[i]


def main(x, out):
    scale[8, 256](x, out)
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 1
    line = line_of(source, "out[i] = 2.0 * x[i]")
    assert re.search(rf"^{re.escape(str(path))}:{line}:\d+: VG202: ", out, re.M), out
    assert "out[i] = 2.0 * x[i]" in out and "^" in out
    assert "1 problem (1 VG202)" in out


def test_the_examples_are_clean_except_the_two_deliberate_mistakes(capsys):
    status, out, _ = run(capsys, "check", str(EXAMPLES))
    assert status == 1, out
    findings = [line for line in out.splitlines() if re.match(r"\S+:\d+:\d+: VG", line)]
    aliased = inspect.getsourcelines(axpy.aliased)
    line = aliased[1] + next(i for i, text in enumerate(aliased[0]) if "axpy[" in text)
    assert sorted(f.split(": VG")[0].rsplit("/", 1)[1] + f[f.index(": VG"):][:7] for f in findings) \
        == [f"axpy.py:{line}:27: VG201", f"axpy.py:{line}:30: VG201", "racy_shift.py:13:16: VG203"], out
    kernels = int(re.search(r"(\d+) kernels", out).group(1))
    launches = int(re.search(r"(\d+) launches", out).group(1))
    assert kernels >= 7 and launches >= 7 and ": not proven" not in out


def test_the_same_array_as_input_and_output_is_vg201(capsys, tmp_path):
    source = HEADER + """from verdigris.examples.axpy import axpy


def main(n):
    x = vg.asarray(np.ones(n, np.float32))
    axpy[vg.cdiv(n, 256), 256](2.0, x, x, x)
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    line = line_of(source, "axpy[")
    assert status == 1
    findings = re.findall(rf"^{re.escape(str(path))}:{line}:(\d+): VG201: (.*)$", out, re.M)
    # out is written and is also x and y: one finding per pair, caret at the other argument
    x_col = source.splitlines()[line - 1].index("x, x, x)") + 1
    assert [(int(col), msg.split(":")[0]) for col, msg in findings] == [
        (x_col, "axpy writes 'out', which is the same memory as 'x'"),
        (x_col + 3, "axpy writes 'out', which is the same memory as 'y'")]
    assert "hint: pass a separate output array for 'out'" in out


def test_overlapping_slices_of_one_array_are_vg201(capsys, tmp_path):
    source = SHIFT.format(args="x[1:], x[:-1]")
    path, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 1
    assert f"{path}:{line_of(source, 'shift[')}:" in out
    assert "VG201: shift writes 'a', which overlaps 'b' (x[1:] and x[:-1] are views of 'x')" in out


@pytest.mark.parametrize("args", ["x[:n], x[n:]", "x[::2], x[1::2]", "x[0:4], x[4:8]",
                                  "x, vg.empty_like(x)", "b=x[n:], a=x[:n]"])
def test_disjoint_views_pass(capsys, tmp_path, args):
    _, status, out, _ = check_source(capsys, tmp_path, SHIFT.format(args=args))
    assert status == 0, out
    assert "no problems" in out and "1 kernel and 1 launch checked" in out


@pytest.mark.parametrize("a, b, how", [
    ("x", "x", "is the same memory as"),
    ("x[1:]", "x[:-1]", "overlaps"),
    ("x", "x[::2]", "overlaps"),
    ("x.T", "x", "overlaps"),
    ("x.reshape(4, 4)", "x[0]", "overlaps"),
    ("x[2:6]", "x[4:8]", "overlaps"),
    ("x[i:j]", "x[k:m]", "may overlap"),
    ("x[0, :]", "x[:, 0]", "overlaps"),
    ("self.x[0]", "self.x[0]", "is the same memory as"),
    ("x[:n]", "x[n:]", None),
    ("x[:4]", "x[4:]", None),
    ("x[-2:]", "x[:-2]", None),
    ("x[0]", "x[1]", None),
    ("x[1, :]", "x[2]", None),
    ("x[::2]", "x[1::2]", None),
    ("x[::4]", "x[2::4]", None),
    ("x", "y", None),
    ("x", "self.x", None),
])
def test_view_overlap_rules(a, b, how):
    views = [as_view(ast.parse(text, mode="eval").body) for text in (a, b)]
    assert overlap(*views) == how
    assert overlap(*reversed(views)) == how


def test_arrays_made_by_calls_are_not_compared():
    assert as_view(ast.parse("vg.empty_like(x)", mode="eval").body) is None


def test_unsafe_regions_are_notes_not_problems(capsys, tmp_path):
    source = HEADER + """

@simt.kernel
def permute(x, index, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        with vg.unsafe():
            out[index[i]] = x[i]
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    line = line_of(source, "with vg.unsafe()")
    assert f"note: unsafe region at {path}:{line}" in out
    assert status == 0 and "no problems" in out and "1 unsafe region" in out


def test_64_bit_scalars_are_checked_in_int32s_range_with_a_note(capsys, tmp_path):
    """check does not see a width's value: it checks the narrow variant (what a launch with
    a width in int32's range gets), proven, and says so; its twin that scales the index by
    2**32 is refused (a wrap in the narrow variant too)."""
    source = HEADER + """

@simt.kernel
def rows(x, out, width):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row < x.shape[0] and col < width:
        out[row * width + col] = x[row]


@simt.kernel
def rows_racy(x, out, width):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row < x.shape[0] and col < width:
        out[row * width * 2**32 + col] = x[row]
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    assert f"{path}:{line_of(source, 'def rows(')}: kernel 'rows': proven" in out
    assert f"{path}:{line_of(source, 'def rows_racy(')}: kernel 'rows_racy': refused" in out
    assert "note: int32 range: width checked for values in int32's range (kernel rows)" in out
    assert status == 1


def test_a_literal_width_beyond_int32s_range_is_checked_in_the_wide_variant(capsys, tmp_path):
    """A launch site whose literal width is 2**62 gets the wide variant, as its launch
    does: the row kernel is refused there (its wrap), and proven where the width is small."""
    kernel = HEADER + """

@simt.kernel
def rows(x, out, width):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row < x.shape[0] and col < width:
        out[row * width + col] = x[row]
"""
    for width, verdict in (("8", "proven"), ("2**62", "refused"), ("-2**31 - 1", "refused")):
        source = kernel + f"""

def main(x, out):
    rows[(1, 4), (8, 1)](x, out, {width})
"""
        path, status, out, _ = check_source(capsys, tmp_path, source)
        assert f"{path}:{line_of(source, 'def rows(')}: kernel 'rows': {verdict}" in out, out
        assert status == (verdict != "proven")
        assert ("int32 range" in out) == (verdict == "proven")


def test_accesses_that_keep_a_runtime_check_are_notes(capsys, tmp_path):
    source = HEADER + """

@simt.kernel
def gather(x, index, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[index[i]] + x[i % 4] + x[index[i] % 8]
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    line = line_of(source, "out[i] = x[index[i]]")
    text = source.splitlines()[line - 1]
    notes = [n for n in out.splitlines() if n.startswith("note: bounds check kept at run time")]
    # out[i] and index[i] are proven under the launch's shape conditions, x[i % 4] and
    # x[index[i] % 8] when x has 4 and 8 elements; a read through a loaded index is not
    assert notes == [f"note: bounds check kept at run time: x[...] at {path}:{line}:{text.index('x[index[i]]') + 1} "
                     "(kernel gather); its index is read from memory"]
    assert status == 0 and "no problems" in out and "1 access checked at run time" in out


def test_python_no_kernel_can_have_is_a_problem(capsys, tmp_path):
    """Whatever the types check assumes, a launch would refuse these: errors, status 1."""
    source = HEADER + """

@simt.kernel
def noisy(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        breakpoint()
        out[i] = x[i]


@simt.kernel
def host_math(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = np.exp(x[i])
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 1
    assert f"{path}:{line_of(source, 'breakpoint(')}:9: error: cannot call 'breakpoint' inside a kernel" in out
    assert f"{path}:{line_of(source, 'np.exp')}:18: error: cannot call 'exp' inside a kernel" in out
    assert "2 problems (2 not compilable)" in out
    assert f"{path}:{line_of(source, 'def noisy')}: kernel 'noisy': not compilable: cannot call 'breakpoint'" in out


BYTE_INDEX = HEADER + """

@simt.kernel
def lookup(table, keys, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = table[int(keys[i])]


def main(n, rng):
    table = vg.asarray(np.arange(256, dtype=np.float32))
    {binding}
    out = vg.empty(n)
    lookup[vg.cdiv(n, 256), 256](table, {argument}, out)
"""


@pytest.mark.parametrize("binding, argument, proven", [
    ("keys = rng.integers(0, 256, n).astype(np.uint8)", "vg.asarray(keys)", True),
    ("keys = vg.asarray(np.zeros(n, dtype=np.uint8))", "keys", True),
    ("keys = vg.zeros(n, vg.uint8)", "keys[1:]", True),
    ("keys = vg.zeros(n, vg.int32)", "keys", False),
    ("keys = make_keys(n)", "keys", False),  # not stated: int64, as an index's default
])
def test_check_takes_element_types_from_the_launch(capsys, tmp_path, binding, argument, proven):
    """A uint8 key cannot pass a table of 256 elements: the check is dropped; where the
    launch does not state a byte type, the read keeps its run-time check."""
    source = BYTE_INDEX.format(binding=binding, argument=argument)
    path, status, out, _ = check_source(capsys, tmp_path, source)
    notes = [n for n in out.splitlines() if n.startswith("note: bounds check kept at run time")]
    assert status == 0 and "no problems" in out
    assert notes == ([] if proven else [
        f"note: bounds check kept at run time: table[...] at {path}:"
        f"{line_of(source, 'table[int(keys[i])]')}:18 (kernel lookup); its index is read "
        "from memory"])


@pytest.mark.parametrize("expression, dtype", [
    ("np.zeros(n, dtype=np.int32)", "int32"), ("np.full(n, 7, np.int16)", "int16"),
    ("vg.zeros((4, 4), vg.bf16)", "bfloat16"), ("torch.arange(n, dtype=torch.long)", "int64"),
    ("x.astype('float16')", "float16"), ("x.astype(float)", "float64"),
    ("torch.from_numpy(np.ones(3, np.uint16)).cuda()", "uint16"),
    ("bound.T[::2].reshape(-1)", "int8"), ("t.to(torch.float)", "float32"),
    ("t.to('cuda')", None), ("t.view(torch.int8)", "int8"), ("x.astype(my_type)", None),
    ("np.zeros(n)", None), ("vg.empty_like(bound)", "int8"), ("f(bound)", None),
])
def test_element_types_stated_in_source(expression, dtype):
    from verdigris.safety.elements import element_dtype

    bindings = {"bound": ast.parse("np.ones(3, np.int8)", mode="eval").body}
    found = element_dtype(ast.parse(expression, mode="eval").body, bindings)
    assert (found and found.name) == dtype


def test_check_runs_no_user_code(capsys, tmp_path):
    marker = tmp_path / "ran"
    source = HEADER + f"""
open({str(marker)!r}, "w").close()
SIZE = 256
CONFIG = dict(block=SIZE)


@simt.kernel
def copy(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i]


def side_effect():
    open({str(marker)!r}, "w").close()


copy[4, side_effect()](np.ones(4), np.ones(4))
"""
    _, status, out, _ = check_source(capsys, tmp_path, source)
    assert not marker.exists()
    assert status == 0 and "1 kernel and 1 launch checked" in out


def test_kernels_it_cannot_reach_are_notes(capsys, tmp_path):
    source = HEADER + """

def make():
    @simt.kernel
    def inner(out):
        out[simt.global_id(0)] = 1.0
    return inner


@simt.kernel
def tiled(out, BLOCK: vg.constexpr):
    out[simt.global_id(0)] = 1.0


def main(out, block):
    tiled[4, 256](out, BLOCK=block)
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    assert f"{path}:{line_of(source, 'def inner')}: kernel 'inner': not proven: " \
           "it is defined inside a function" in out
    assert f"{path}:{line_of(source, 'def tiled')}: kernel 'tiled': not proven: no literal " \
           "value for constexpr 'BLOCK'" in out
    assert status == 1 and "2 problems (2 not proven)" in out and "verdicts: 2 not proven" in out
    status, out, _ = run(capsys, "check", "--allow-unproven", str(path))
    assert status == 0 and "verdicts: 2 not proven" in out


def test_constexprs_come_from_the_defaults_of_the_launching_function(capsys, tmp_path):
    source = HEADER + """

@simt.kernel
def strided(out, STEP: vg.constexpr):
    i = simt.global_id(0)
    if i * STEP < out.shape[0]:
        out[i * STEP] = 1.0


def main(out, step=0):
    strided[4, 256](out, STEP=step)
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    # with the default STEP = 0 every thread writes out[0]
    assert status == 1 and re.search(rf"^{re.escape(str(path))}:\d+:\d+: VG202: ", out, re.M), out
    path, status, out, _ = check_source(capsys, tmp_path, source.replace("step=0", "step=1"))
    assert status == 0 and "1 kernel and 1 launch checked" in out, out


def test_a_tile_kernel_storing_one_tile_from_every_block_is_refused(capsys, tmp_path):
    source = HEADER + """from verdigris import tile


@tile.kernel
def fill(x, out, BLOCK: vg.constexpr = 64):
    t = tile.load(x, index=(tile.bid(0),), shape=(BLOCK,))
    tile.store(out, index=(0,), tile=t)


def main(x, out):
    fill[vg.cdiv(x.shape[0], 64)](x, out)
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    line = line_of(source, "tile.store(out")
    assert status == 1 and re.search(rf"^{re.escape(str(path))}:{line}:\d+: VG202: ", out, re.M), out
    fixed = source.replace("index=(0,), tile=t", "index=(tile.bid(0),), tile=t")
    path, status, out, _ = check_source(capsys, tmp_path, fixed)
    assert status == 0 and ": not proven" not in out, out


CONSTANT_FROM_MATH = HEADER + """import math

LOG2_E = math.log2(math.e)


@simt.kernel
def scaled(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * LOG2_E
"""


def test_constants_computed_with_math_are_known_to_the_check(capsys, tmp_path):
    path, status, out, _ = check_source(capsys, tmp_path, CONSTANT_FROM_MATH)
    assert status == 0 and "1 kernel" in out and ": not proven" not in out, out
    # `math` bound to another module: its calls are not run, and the kernel is not proven.
    other = CONSTANT_FROM_MATH.replace("import math\n", "import numpy as math\n")
    path, status, out, _ = check_source(capsys, tmp_path, other)
    assert status == 1 and "kernel 'scaled': not proven: name 'LOG2_E' is not defined" in out, out


def test_constexprs_and_blocks_come_from_literal_launches(capsys, tmp_path):
    source = HEADER + """
BLOCK = 64


@simt.kernel
def fill(out, K: vg.constexpr):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = K


def main(out):
    for k in (3, 5):
        fill[4, BLOCK](out, K=k)
"""
    _, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 0 and "1 kernel and 1 launch checked" in out


def test_parameter_specs_follow_the_body():
    from verdigris.examples.mandelbrot import mandelbrot

    usage = param_usage(mandelbrot.fn)
    assert usage["out"].array and usage["out"].rank == 2
    assert not usage["x0"].array and not usage["x0"].int_scalar

    src = EXAMPLES.parent / "_spec_probe.py"
    try:
        src.write_text(HEADER + """

@vg.func
def pick(table, j):
    return table[j, 0]


@simt.kernel
def k(table, index, out, n, scale):
    i = simt.global_id(0)
    if i < n:
        out[i] = pick(table, index[i]) * scale
""")
        namespace = {}
        exec(compile(src.read_text(), str(src), "exec"), namespace)
        usage = param_usage(namespace["k"].fn)
    finally:
        src.unlink()
    assert usage["table"].array and usage["table"].rank == 2  # seen through the helper
    assert usage["index"].array and usage["index"].int_elements
    assert usage["n"].int_scalar and not usage["scale"].int_scalar


def test_elements_that_reach_a_tile_index_are_integers(capsys, tmp_path):
    source = HEADER + """from verdigris import tile


@vg.func
def pick(x, r, col):
    return tile.load(x, index=(r, col), shape=())


@tile.kernel
def picked(x, cols, out, BLOCK: vg.constexpr = 64):
    r = tile.bid(0)
    col = tile.load(cols, index=(r,), shape=())
    tile.store(out, index=(r,), tile=tile.full((1,), pick(x, r, col), vg.float32))
"""
    _, status, out, _ = check_source(capsys, tmp_path, source)
    assert "kernel 'picked': proven" in out and status == 0, out


def test_elements_that_reach_an_index_through_names_are_integers(capsys, tmp_path):
    source = HEADER + """

@simt.kernel
def gather(x, idx, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        j = idx[i]
        k = j + 1
        out[i] = x[k] if 0 <= k < x.shape[0] else 0.0


@simt.kernel
def compact(x, out, count):
    i = simt.global_id(0)
    if i < x.shape[0] and x[i] > 0.5:
        slot = simt.atomic_add(count, 0, 1)
        with vg.unsafe():
            out[slot] = x[i]
"""
    _, status, out, _ = check_source(capsys, tmp_path, source)
    assert ": not proven" not in out and "2 kernels" in out
    assert status == 0


def test_a_library_module_without_launches_is_checked_for_any_block(capsys, tmp_path):
    """The index CUDA spells `blockIdx.x * blockDim.x + threadIdx.x` stays below 2**31 on
    any launch; a racy twin still gets a counterexample a GPU could run: at most 1024
    threads a block, and no division by zero."""
    source = HEADER + """

@simt.kernel
def scale(x, out):
    i = simt.block_id(0) * simt.block_dim(0) + simt.thread_id(0)
    if i < out.shape[0]:
        out[i] = x[i] * 2.0


@simt.kernel
def scale_2d(x, out):
    r = simt.block_id(1) * simt.block_dim(1) + simt.thread_id(1)
    c = simt.block_id(0) * simt.block_dim(0) + simt.thread_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c] * 2.0


@simt.kernel
def folded(x, out, m):
    i = simt.global_id(0)
    j = simt.global_id(1)
    if i < x.shape[0]:
        out[i % m, j % m] = x[i]
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    findings = findings_at(out, path)
    assert len(findings) == 1 and "VG202" in findings[0], out
    blocks = re.search(r"blocks of \((\d+), (\d+)\) threads", findings[0])
    assert blocks is None or int(blocks[1]) * int(blocks[2]) <= 1024, findings[0]
    assert "m = 0" not in findings[0]


def test_literal_grids_and_constants_bound_in_tuples(capsys, tmp_path):
    """`k[1, 128]` is checked as one block, as its launch is; `BX, BY = 16, 16` binds two
    constants (the kernel was 'not checked', and its race went unreported)."""
    source = HEADER + """
BX, BY = 16, 16


@simt.kernel
def bump(x):
    t = simt.thread_id(0)
    x[t] = x[t] + 1


@simt.kernel
def racy(out):
    s = simt.shared.array((BY, BX), vg.float32)
    s[0, 0] = simt.thread_id(0)
    simt.barrier()
    out[simt.global_id(1), simt.global_id(0)] = s[0, 0]


def main():
    bump[1, 128](np.ones(128, np.int32))
    racy[(2, 2), (BX, BY)](np.zeros((32, 32), np.float32))
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    findings = findings_at(out, path)
    assert status == 1 and ": not proven" not in out
    assert len(findings) == 1 and "VG211" in findings[0] and "s[0, 0]" in findings[0]


def test_launches_in_one_file_specialize_kernels_defined_in_another(capsys, tmp_path):
    """Kernels in a module, launches in the program that imports it (by name, by `*` or
    through the module): checking the program checks the kernels as launched there, at
    their own lines, once; checking the module alone checks them with their defaults."""
    library = tmp_path / "spread_kernels.py"
    library.write_text(HEADER + """

@simt.kernel
def spread(x, out, S: vg.constexpr = 1):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i // S] = x[i]
""")
    program = tmp_path / "program.py"
    program.write_text(HEADER + """
from spread_kernels import *
import spread_kernels


def main(n):
    x = vg.asarray(np.ones(n, np.float32))
    y = vg.empty_like(x)
    spread[vg.cdiv(n, 128), 128](x, y, S=2)
    spread_kernels.spread[vg.cdiv(n, 128), 128](x, x)
""")
    store = f"{library}:{line_of(library.read_text(), 'out[i // S]')}:"
    for paths in ([program], [tmp_path], [library, program]):
        status, out, _ = run(capsys, "check", *map(str, paths))
        findings = sorted((line.split()[1].rstrip(":"), line) for line in out.splitlines() if ": VG" in line)
        assert status == 1 and "2 files" in out, out
        assert [code for code, _ in findings] == ["VG201", "VG202"], out
        assert findings[0][1].startswith(f"{program}:") and findings[1][1].startswith(store), out
    status, out, _ = run(capsys, "check", str(library))
    assert status == 0 and "1 kernel and 0 launches checked" in out, out


def test_tile_loads_that_reach_scatter_indices_make_integer_arrays(capsys, tmp_path):
    """Where the source does not state an argument's element type (here x is bound twice),
    an array whose loaded tile indexes a scatter is taken as integers (it was float32,
    and the kernel 'not checked')."""
    source = HEADER + """
from verdigris import tile


@tile.kernel
def histogram(x, bins, BLOCK: vg.constexpr):
    i = int(tile.bid(0))
    v = tile.load(x, index=(i,), shape=(BLOCK,))
    tile.scatter_add(bins, (v,), tile.full((BLOCK,), 1, vg.int32),
                     mask=i * BLOCK + tile.arange(BLOCK) < x.shape[0])


x = np.random.rand(5).astype(np.float32)
x = np.random.randint(0, 37, 10001).astype(np.int32)
histogram[vg.cdiv(10001, 512)](x, np.zeros(37, np.int32), BLOCK=512)
"""
    _, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 0 and ": not proven" not in out and "1 kernel and 1 launch checked" in out, out


def test_launches_in_lambdas_and_through_helpers_are_found(capsys, tmp_path):
    """A launch inside a lambda, and one written with a helper's parameter that the file
    calls with a kernel (positionally or by keyword), specialize the kernel: the block the
    helper launches with, the constexpr the lambda gives."""
    source = HEADER + """
from verdigris import tile
B = 256


@simt.kernel
def pairs(x, out):
    buf = simt.shared.array(2 * B, vg.float32)  # written for blocks of B threads
    t = simt.thread_id(0)
    i = simt.block_id(0) * (2 * B) + t
    buf[t] = x[i] if i < x.shape[0] else vg.float32(0)
    buf[t + B] = x[i + B] if i + B < x.shape[0] else vg.float32(0)
    simt.barrier()
    if i < out.shape[0]:
        out[i] = buf[2 * B - 1 - t]


@tile.kernel
def halves(x, out, T: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i // 2,), tile=tile.load(x, index=(i,), shape=(T,)))


def launch(kernel, x, out):
    kernel[vg.cdiv(x.shape[0], 2 * B), B](x, out)


def main(run):
    x = vg.asarray(np.ones(1000, np.float32))
    out = vg.empty_like(x)
    launch(pairs, x, out)
    launch(x=x, out=out, kernel=pairs)
    run(lambda: halves[4](x, out, T=64))
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    findings = [line for line in out.splitlines() if ": VG" in line]
    assert status == 1 and ": not proven" not in out, out
    assert len(findings) == 1 and "VG202" in findings[0] and "halves" not in findings[0], out
    assert findings[0].startswith(f"{path}:{line_of(source, 'i // 2')}:"), out


def test_a_finding_for_any_block_says_so(capsys, tmp_path):
    """A kernel written for blocks of B threads, with no launch in the file: check proves it
    for any block, and the finding says that is what it assumed."""
    source = HEADER + """
B = 256


@simt.kernel
def pairs(x, out):
    buf = simt.shared.array(2 * B, vg.float32)
    t = simt.thread_id(0)
    buf[t] = x[t]
    buf[t + B] = x[t + B]
    simt.barrier()
    out[simt.global_id(0)] = buf[2 * B - 1 - t]
"""
    _, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 1 and "VG211" in out and "'pairs' at" in out and "was checked for any block" in out, out


def test_a_name_the_file_binds_nowhere_is_a_problem(capsys, tmp_path):
    """A kernel reading a name the module never binds fails whatever its types: a problem
    (exit 1). A name the module binds in code check does not run stays a note."""
    source = HEADER + """

@simt.kernel
def shift(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = x[i] + OFFSET
"""
    path, status, out, _ = check_source(capsys, tmp_path, source)
    assert status == 1 and f"{path}:{line_of(source, 'OFFSET')}:" in out and "error: name 'OFFSET'" in out, out
    bound = source + "\nOFFSET = np.float32(np.pi)  # a call check does not run\n"
    path, status, out, _ = check_source(capsys, tmp_path, bound)
    assert status == 1 and "kernel 'shift': not proven: name 'OFFSET' is not defined" in out, out


def test_a_missing_path_is_a_usage_error(capsys, tmp_path):
    status, _, err = run(capsys, "check", str(tmp_path / "nope.py"))
    assert status == 2 and "no such file or directory" in err


def test_a_file_that_does_not_parse_is_reported(capsys, tmp_path):
    path, status, out, _ = check_source(capsys, tmp_path, "def broken(:\n")
    assert status == 1 and f"{path}:1:" in out and "error: cannot parse" in out


# ----------------------------------------------------------------------------- explain


def test_every_code_has_an_explanation():
    assert set(EXPLANATIONS) == set(CODES)


@pytest.mark.parametrize("code", sorted(CODES))
def test_explain_prints_rule_example_message_and_fix(capsys, code):
    status, out, _ = run(capsys, "explain", code.lower())
    assert status == 0
    entry = EXPLANATIONS[code]
    assert out.startswith(f"{code}: {CODES[code].title}\n")
    for heading in ("Rule", "Why it matters", "Racy", "Message", "Fixed"):
        assert f"\n{heading}\n" in out
    assert entry.racy.splitlines()[1] in out and entry.fixed.splitlines()[1] in out
    assert out == explain(code) + "\n"


@pytest.mark.parametrize("code", sorted(CODES))
def test_explanation_examples_are_python_and_the_message_points_into_the_racy_one(code):
    entry = EXPLANATIONS[code]
    for snippet in (entry.racy, entry.fixed):
        ast.parse(program(snippet))
    assert entry.racy != entry.fixed
    where = re.match(rf"kernel\.py:(\d+):(\d+): {code}: ", " ".join(entry.message.split()))
    assert where, entry.message
    line, col = int(where.group(1)), int(where.group(2))
    lines = entry.racy.splitlines()
    assert 1 <= line <= len(lines) and 1 <= col <= len(lines[line - 1])


def test_explain_an_unknown_code_lists_the_codes(capsys):
    status, _, err = run(capsys, "explain", "VG999")
    assert status == 2 and "unknown code 'VG999'" in err
    assert all(code in err for code in CODES)


def _check_snippet(capsys, tmp_path, snippet: str, name: str):
    return check_source(capsys, tmp_path, program(snippet), name)


@pytest.mark.parametrize("code", sorted(set(CODES) - DYNAMIC_CODES))
def test_check_refuses_each_racy_example_and_accepts_its_fix(capsys, tmp_path, code):
    entry = EXPLANATIONS[code]
    path, status, out, _ = _check_snippet(capsys, tmp_path, entry.racy, "racy.py")
    if ": not proven" in out:
        pytest.skip(f"the frontend cannot build the {code} example yet: {out}")
    assert status == 1 and re.search(rf"^{re.escape(str(path))}:(\d+):\d+: {code}: ", out, re.M), out
    if code != "VG201":  # a launch finding points at the launch, the message at the write
        line = int(re.search(r"kernel\.py:(\d+):", entry.message).group(1))
        assert f"{path}:{line + PRELUDE_LINES}:" in out
    _, status, out, _ = _check_snippet(capsys, tmp_path, entry.fixed, "fixed.py")
    assert status == 0, out


def test_check_refuses_a_partial_warp_as_explain_describes_it(capsys, tmp_path):
    """The VG214 example's fixed kernel, launched with one block of 40 threads: its last warp
    has 8 lanes, which must not reach the shuffles."""
    from verdigris.safety.diagnose import HINTS

    fixed = EXPLANATIONS["VG214"].fixed
    assert "warp_sums[4, 256](x, out)" in fixed
    partial = fixed.replace("[4, 256]", "[1, 40]")
    path, status, out, _ = _check_snippet(capsys, tmp_path, partial, "partial.py")
    line = PRELUDE_LINES + line_of(fixed, "simt.shfl_down")
    assert status == 1 and f"{path}:{line}:" in out and "which has 8 lanes" in out, out
    assert f"hint: {HINTS['VG214 partial']}" in out
    text = " ".join(explain("VG214").split())
    assert "not a multiple of 32" in text and "`if simt.thread_id(0) < 32:`" in text


def test_the_vg302_example_faults_and_its_fix_runs(tmp_path):
    entry = EXPLANATIONS["VG302"]
    for name, snippet in (("racy", entry.racy), ("fixed", entry.fixed)):
        path = tmp_path / f"{name}.py"
        path.write_text(program(snippet))
        code = compile(path.read_text(), str(path), "exec")
        if name == "racy":
            with pytest.raises(vg.BoundsError, match=r"x\[1000\] with shape \(1000,\)"):
                exec(code, {"__name__": name})
        else:
            namespace = {"__name__": name}
            exec(code, namespace)
            assert np.array_equal(np.asarray(namespace["out"]), np.full(1000, 2.0, np.float32))


# ----------------------------------------------------------------------------- README


def readme_safety_section() -> str:
    text = README.read_text()
    start = text.index("\n## Safety\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_lists_every_code_with_its_title():
    section = readme_safety_section()
    for code in CODES.values():
        assert f"| `{code.code}` | {code.title} |" in section


def test_the_readme_racy_example_gets_the_message_it_shows(capsys, tmp_path):
    section = readme_safety_section()
    racy = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    shown = re.search(r"```text\nsmooth\.py:(\d+):(\d+): (VG\d+):", section)
    path, status, out, _ = check_source(capsys, tmp_path, racy, "smooth.py")
    assert status == 1
    assert f"{path}:{shown.group(1)}:{shown.group(2)}: {shown.group(3)}: " in out, out


@pytest.mark.parametrize("code", sorted(set(CODES) - DYNAMIC_CODES - {"VG201"}))
def test_each_explanation_shows_the_message_and_hint_check_gives(capsys, tmp_path, code):
    """The place, the words up to the first colon, and the hint `explain` shows are what
    `check` prints for the racy program (the threads of a counterexample may differ from
    run to run)."""
    entry = EXPLANATIONS[code]
    path, _, out, _ = _check_snippet(capsys, tmp_path, entry.racy, "racy.py")
    found = re.search(rf"^{re.escape(str(path))}:(\d+):(\d+): {code}: ([^:]*)", out, re.M)
    shown = " ".join(entry.message.split())
    assert shown.startswith(f"kernel.py:{int(found[1]) - PRELUDE_LINES}:{found[2]}: {code}: "
                            f"{found[3]}"), (shown, found[0])
    hint = re.search(r"^  hint: (.*)$", out[found.end():], re.M)
    assert " ".join(entry.hint.split()) == (hint[1] if hint else "")
