"""Plain helper functions (docs/api.md): an undecorated function written with `def`, in the
kernel's module or imported, is inlined into kernels of both tracks as a `@vg.func` is;
lambdas, classes, generators and host-library functions are refused with a clear error."""
import re
import statistics
import textwrap

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import simt, tile
from verdigris.ir import nodes as N
from verdigris.frontend import walk

from tests.sources import plain_helpers
from tests.sources.plain_helpers import broken, squared_distance


def typed_ir(kernel, *args, **kwargs):
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        typed_ir(kernel, *args, **kwargs)
    return info.value


def clamp(v, lo, hi):
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


def scaled(t, factor=2.0):
    return t * factor


@simt.kernel
def simt_plain(x, y, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        out[i] = clamp(squared_distance(x[i], y[i]), 0.0, 1.0)


def test_simt_kernels_inline_plain_functions_local_and_imported(rng):
    x, y = rng.standard_normal(50), rng.standard_normal(50)
    out = np.full(50, np.nan)
    simt_plain[2, 32](x, y, out)
    np.testing.assert_allclose(out, np.clip((x - y) ** 2, 0.0, 1.0))
    regions = [n.label for n in walk(typed_ir(simt_plain, x, y, out).body)
               if isinstance(n, N.Region)]
    assert any(r.startswith("clamp.") for r in regions)
    assert any(r.startswith("squared_distance.") for r in regions)


@tile.kernel
def tile_plain(x, out, B: vg.constexpr):
    t = tile.load(x, index=(tile.bid(0),), shape=(B,))
    tile.store(out, index=(tile.bid(0),), tile=scaled(t) + scaled(t, factor=0.5))


def test_tile_kernels_inline_plain_functions_with_defaults(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    tile_plain[4](x, out, B=16)
    np.testing.assert_allclose(out, 2.5 * x, rtol=1e-6)


@simt.kernel
def calls_broken(x, out):
    out[0] = broken(x[0])  # MARK-broken-call


def test_an_error_inside_a_plain_helper_points_at_its_line_and_the_call():
    err = compile_error(calls_broken, np.zeros(1, np.float32), np.zeros(1, np.float32))
    located.assert_points_at(err, "MARK-imported-broken", plain_helpers.__file__)
    assert "inlined from" in str(err) and "MARK-broken-call" in str(err)


def countdown(n):
    return countdown(n - 1)  # MARK-plain-recursion


@simt.kernel
def plain_recursion(out):
    out[0] = countdown(3)


def test_a_recursive_plain_helper_is_refused_at_its_call():
    err = compile_error(plain_recursion, np.zeros(1, np.int32))
    assert "recursion" in str(err)
    located.assert_points_at(err, "MARK-plain-recursion", __file__)


double = lambda v: v * 2  # noqa: E731


class Pair:
    pass


def numbers():
    yield 1


@simt.kernel
def calls_lambda(out):
    out[0] = double(out[0])  # MARK-lambda


@simt.kernel
def calls_class(out):
    out[0] = Pair()  # MARK-class


@simt.kernel
def calls_generator(out):
    out[0] = numbers()  # MARK-generator


@simt.kernel
def calls_stdlib(out):
    out[0] = statistics.fmean(out[0])  # MARK-stdlib


@pytest.mark.parametrize("kernel, marker, words", [
    (calls_lambda, "MARK-lambda", "lambda"),
    (calls_class, "MARK-class", "class"),
    (calls_generator, "MARK-generator", "generator"),
    (calls_stdlib, "MARK-stdlib", "standard library"),
])
def test_other_callables_are_refused_with_a_clear_error(kernel, marker, words):
    err = compile_error(kernel, np.zeros(1, np.float32))
    assert isinstance(err, vg.UnsupportedConstruct)
    assert words in str(err), str(err)
    located.assert_points_at(err, marker, __file__)


def _module_function(source: str, tmp_path, name: str, **globals_):
    """Function `name` of `source`, written to a file (so that it has source) and run."""
    path = tmp_path / f"{name}_{abs(hash(source))}.py"
    path.write_text(textwrap.dedent(source))
    namespace = dict(globals_, simt=simt)
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


def test_a_kernel_s_dependency_text_follows_its_plain_helpers(tmp_path):
    """Launch records (a disk-cache hit without the frontend) are keyed by the text of what
    a kernel reads: a plain helper's own text, as a @vg.func's, so editing it recompiles."""
    from verdigris.runtime import records

    def text(expr):
        helper = _module_function(f"def h(v):\n    return {expr}\n", tmp_path, "h")
        kernel = _module_function("""
            @simt.kernel
            def k(x, out):
                i = simt.global_id(0)
                out[i] = h(x[i])
        """, tmp_path, "k", h=helper)
        return records.dependencies(kernel)

    assert text("v + 1") is not None and text("v + 1") == text("v + 1")
    assert text("v + 2") != text("v + 1")


CHECKED_SOURCE = '''
import numpy as np
import verdigris as vg
from verdigris import simt


def shifted(i, k):
    return i + k{offset}


@simt.kernel
def shift(x, n, K: vg.constexpr):
    i = simt.global_id(0)
    if i < n - K:
        x[i] = x[shifted(i, K)]


shift[1, 128](np.zeros(100, np.float32), 100, K=1)
'''


@pytest.mark.parametrize("offset, status, verdict", [
    ("", 1, "VG203"),              # thread i reads x[i + 1], which thread i + 1 writes
    (" - 1", 0, "1 kernel and 1 launch checked"),
])
def test_verdigris_check_reads_the_plain_helpers_of_a_file(capsys, tmp_path, offset, status, verdict):
    from verdigris.cli import main

    source = tmp_path / "shift.py"
    source.write_text(CHECKED_SOURCE.format(offset=offset))
    assert main(["check", str(source)]) == status
    out, err = capsys.readouterr()
    assert verdict in out + err and "not checked" not in out + err


@tile.kernel
def tiles_counted_with_cdiv(x, out, B: vg.constexpr):
    for i in range(vg.cdiv(x.shape[0], B)):  # as tl.cdiv / ct.cdiv: the last tile partial
        tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(B,)) * 2.0)


@simt.kernel
def rows_counted_with_cdiv(x, out, w):
    i = simt.global_id(0)
    if i < vg.cdiv(x.shape[0], w):  # one thread per run of w elements
        for j in range(i * w, min(i * w + w, x.shape[0])):
            out[j] = x[j] + 1.0


def test_vg_cdiv_is_kernel_code_in_both_tracks(rng):
    """`vg.cdiv` runs on the host and inside kernels (verdigris marks it kernel code, as
    Triton's and cuTile's cdiv are), with Python's meaning: -(-a // b)."""
    x = rng.standard_normal(37).astype(np.float32)
    out = np.full_like(x, np.nan)
    tiles_counted_with_cdiv[1](x, out, B=8)
    np.testing.assert_array_equal(out, x * 2)
    out = np.full_like(x, np.nan)
    rows_counted_with_cdiv[1, 8](x, out, 5)  # ceil(37 / 5) = 8 threads
    np.testing.assert_array_equal(out, x + 1)
    assert vg.cdiv(37, 5) == 8 and vg.cdiv(-7, 2) == -3


CHECKED_THROUGH_HELPERS = '''
import verdigris as vg
from verdigris import tile


def scaled_tile(x, i, B):
    return tile.load(x, index=(i,), shape=(B,)) * 2


def store_at(out, i, t):
    tile.store(out, index=(i,), tile=t)


@tile.kernel
def doubled(x, out, B: vg.constexpr = 64):
    i = tile.bid(0)
    store_at(out, i, scaled_tile(x, i, B))


@tile.kernel
def doubled_into_one_tile(x, out, B: vg.constexpr = 64):
    i = tile.bid(0)
    store_at(out, 0, scaled_tile(x, i, B))   # every block: tile 0
'''


def test_verdigris_check_follows_plain_helpers_to_the_arrays_they_use(tmp_path):
    """`verdigris check` specializes a kernel whose array parameters only plain helpers
    touch as arrays (it took them for numbers, and could not compile the kernel), proves
    the one whose blocks store their own tiles and refuses its twin whose blocks all store
    one tile."""
    from verdigris.safety.scan import check_paths

    path = tmp_path / "through_helpers.py"
    path.write_text(CHECKED_THROUGH_HELPERS)
    verdicts = dict(re.findall(r"kernel '(\w+)': (.*)", check_paths([str(path)]).format()))
    assert verdicts == {"doubled": "proven", "doubled_into_one_tile": "refused (VG202)"}, verdicts
