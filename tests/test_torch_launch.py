"""The compiled launcher (runtime.clauncher, claunch.c) on the fake driver (tests/fakecuda),
torch CPU tensors posing as device 0's (`fakecuda.torch_on_device_zero`).

Each launch is made twice: by a kernel whose launchers were installed under
VERDIGRIS_LAUNCHER=python and by its twin installed under =c. Both must launch the same
thing (variant, grid, block, stream, every packed slot) or raise the same error, with the
same calls of the general path; and the compiled launcher must take, without handing it
to the Python launcher behind it, every repeat of a launch that it was installed for."""
import json
import textwrap

import pytest

from tests import fakecuda

pytest.importorskip("cuda.bindings.driver")
pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

PRELUDE = """
import json, os, ctypes, threading
import numpy as np, torch
import verdigris as vg
from verdigris import simt, tile
from verdigris.runtime import driver, faults
from tests import fakecuda
from tests.fakecuda import kernels as K

fakecuda.torch_on_device_zero()
general_calls = fakecuda.count_general_calls()
MODES = ("python", "c")
twins = {}

def twin(name):
    if name not in twins:
        kernel = getattr(K, name)
        make = tile.kernel if kernel.track == "tile" else simt.kernel
        twins[name] = {mode: make(kernel.fn) for mode in MODES}
    return twins[name]

def record(kernel):
    function = fakecuda.last_launch().function
    for spec in list(kernel._specializations.values()) + list(kernel._recorded.values()):
        for variant, compiled in spec.compiled.items():
            if int(compiled.function) == function:
                launch = fakecuda.last_launch(len(compiled.packer.abi))
                return dict(variant=f"{spec.key!r} {variant!r}", grid=list(launch.grid),
                            block=list(launch.block), stream=launch.stream or 0,
                            slots=[int(v) for v in launch.slots])
    return "an unknown function"

def attempt(label, name, config, *args, **kwargs):
    row = {}
    for mode in MODES:
        kernel = twin(name)[mode]
        os.environ["VERDIGRIS_LAUNCHER"] = mode  # read where a launcher is installed
        head = kernel[config]
        before, count, misses = general_calls[0], fakecuda.last_launch().count, getattr(head, "misses", 0)
        try:
            kernel[config](*args, **kwargs)
            result = "ok"
        except vg.Error as err:
            result = f"{type(err).__name__}: {err.message}"
        launched = fakecuda.last_launch().count - count
        row[mode] = dict(result=result, general=general_calls[0] - before,
                         launch=record(kernel) if launched else None,
                         head=type(kernel[config]).__name__,
                         handed=getattr(head, "misses", 0) - misses)
    out[label] = row

out = {}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """One cache directory for this file's processes: the extension and the kernels are
    built once."""
    return str(tmp_path_factory.mktemp("vg-torch-launch-cache"))


def run(body: str, cache: str) -> dict:
    done = fakecuda.run(PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n",
                        VERDIGRIS_CACHE_DIR=cache)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def same_launches(got: dict) -> None:
    for label, row in got.items():
        assert row["python"]["result"] == row["c"]["result"], label
        assert row["python"]["general"] == row["c"]["general"], label
        assert row["python"]["launch"] == row["c"]["launch"], label
        assert row["python"]["head"] == "function", label


def taken(got: dict, labels) -> None:
    """The compiled launcher took these itself (the Python one did, without the general path)."""
    for label in labels:
        row = got[label]
        assert row["python"]["general"] == 0 and row["python"]["result"] == "ok", label
        assert row["c"]["head"] == "Launcher" and row["c"]["handed"] == 0, label


def test_the_compiled_launcher_launches_what_the_python_launcher_launches(cache):
    got = run("""
    n = 1000
    x, y, o = (torch.randn(n) for _ in range(3))
    x64, y64, o64 = (torch.randn(n, dtype=torch.float64) for _ in range(3))
    attempt("first", "axpy", (4, 256), 2.0, x, y, o)
    stream = int(driver.check(driver.api().cuStreamCreate(0)))
    attempt("fast", "axpy", (4, 256), 2.0, x, y, o)
    attempt("requires grad", "axpy", (4, 256), 2.0, x.clone().requires_grad_(), y, o)
    attempt("keywords", "axpy", (4, 256), alpha=2.0, x=x, y=y, out=o)
    attempt("int stream", "axpy", (4, 256), 2.0, x, y, o, stream=stream)
    attempt("CUstream", "axpy", (4, 256), 2.0, x, y, o, stream=driver.api().CUstream(stream))
    attempt("new scalar", "axpy", (4, 256), -3.5, x, y, o)
    attempt("longer tensors", "axpy", (4, 256), 2.0, *(torch.randn(3000) for _ in range(3)))
    attempt("short input: the checked variant", "axpy", (4, 256), 2.0, x[:10], y, o)
    attempt("short again", "axpy", (4, 256), 2.0, x[:10], y, o)
    attempt("proven again", "axpy", (4, 256), 2.0, x, y, o)
    attempt("float64", "axpy", (4, 256), 2.0, x64, y64, o64)
    attempt("float64 again", "axpy", (4, 256), 2.0, x64, y64, o64)
    attempt("float16 scalar", "axpy", (4, 256), np.float16(2.0), x, y, o)
    attempt("float16 scalar again", "axpy", (4, 256), np.float16(-0.1), x, y, o)
    attempt("int scalar", "axpy", (4, 256), 2, x, y, o)
    attempt("past float16's range", "axpy", (4, 256), 1e30, x, y, o)
    attempt("past float32's range", "axpy", (4, 256), 1e300, x, y, o)
    attempt("misaligned views", "axpy", (4, 256), 2.0, x[1:], y[1:], o[1:])
    attempt("misaligned again", "axpy", (4, 256), 2.0, x[1:], y[1:], o[1:])
    attempt("strided views", "axpy", (4, 256), 2.0, x[::2], y[::2], o[::2])
    attempt("strided again", "axpy", (4, 256), 2.0, x[4::2], y[4::2], o[4::2])
    attempt("too many", "axpy", (4, 256), 2.0, x, y, o, o)
    attempt("missing", "axpy", (4, 256), 2.0, x, y)
    attempt("unknown keyword", "axpy", (4, 256), 2.0, x, y, o, z=1)
    attempt("a NumPy array", "axpy", (4, 256), 2.0, np.ones(n, np.float32), y, o)
    attempt("sixteen", "sixteen", (4, 256), *(torch.randn(n) for _ in range(8)), 1.0, 2.0, 3.0,
            4.0, 5.0, 6.0, 7.0, o)
    attempt("sixteen again", "sixteen", (4, 256), *(torch.randn(n) for _ in range(8)), 1.0, 2.0,
            3.0, 4.0, 5.0, 6.0, 7.0, o)
    src, dst = torch.randn(66, 66), torch.randn(32, 32)
    attempt("2-D strided", "copy2d", ((4, 4), (8, 8)), src[::2, 1::2], dst)
    attempt("2-D strided again", "copy2d", ((4, 4), (8, 8)), src[2::2, 1::2], dst)
    attempt("2-D transposed", "copy2d", ((4, 4), (8, 8)), src.t(), dst)
    attempt("2-D rows of a wider matrix", "copy2d", ((4, 4), (8, 8)), src[:32, :32], dst)
    attempt("2-D C order", "copy2d", ((4, 4), (8, 8)), torch.randn(32, 32), dst)
    attempt("2-D C order again", "copy2d", ((4, 4), (8, 8)), torch.randn(40, 32), dst)
    attempt("2-D one column", "copy2d", ((4, 4), (8, 8)), torch.randn(32, 1), torch.randn(32, 1))
    a, b, c = torch.randn(1024), torch.randn(1024), torch.randn(1024)
    attempt("tile", "add", 8, a, b, c, BLOCK=128)
    attempt("tile again", "add", 8, a, b, c, BLOCK=128)
    attempt("tile positional constexpr", "add", 8, a, b, c, 128)
    attempt("tile other constexpr", "add", 8, a, b, c, BLOCK=64)
    attempt("tile off the grid", "add", 8, a[:1000], b[:1000], c[:1000], BLOCK=128)
    attempt("tile off the grid again", "add", 8, a[:1000], b[:1000], c[:1000], BLOCK=128)
    attempt("tile on the grid again", "add", 8, a, b, c, BLOCK=128)
    attempt("num_warps", "add", 8, a, b, c, BLOCK=128, num_warps=2)
    attempt("num_warps again", "add", 8, a, b, c, BLOCK=128, num_warps=2)
    attempt("other num_warps", "add", 8, a, b, c, BLOCK=128, num_warps=4)
    big, big_out = torch.randn(4096), torch.randn(4096)
    for n in (992, 1000, 992, 1000, 2**40):
        attempt(f"multiple {n}", "keep_prefix", 4, big, big_out, n, BLOCK=1024)
    rows, wide = torch.randn(4), torch.randn(64)
    for label, width in (("8", 8), ("2**62", 2**62), ("8 again", 8), ("-2**31", -2**31),
                         ("uint 8", np.uint64(8)), ("uint 2**31", np.uint64(2**31)),
                         ("uint 8 again", np.uint64(8))):
        attempt(f"width {label}", "rows_by_width", ((1, 4), (8, 1)), rows, wide, width)
    small, room = torch.randn(100), torch.randn(800)
    for m in (5, 5, 9, 5):
        attempt(f"assumed m={m}" + (" again" if f"assumed m={m}" in out else ""),
                "assumed_rows", (1, 128), small, room, 8, m)
    attempt("constant", "scaled", (4, 256), x, o)
    attempt("constant again", "scaled", (4, 256), x, o)
    K.SCALE = 3.0
    attempt("constant rebound", "scaled", (4, 256), x, o)
    attempt("constant rebound again", "scaled", (4, 256), x, o)
    """, cache)
    same_launches(got)
    taken(got, ["fast", "keywords", "new scalar", "short again", "longer tensors", "float64 again",
                "float16 scalar again", "misaligned again", "strided again", "requires grad",
                "int stream", "CUstream", "sixteen again", "2-D strided again",
                "2-D C order again", "tile again", "tile off the grid again", "num_warps again",
                "width 8 again", "width -2**31", "width uint 8 again", "assumed m=5 again",
                "constant again", "constant rebound again"])
    assert got["2-D transposed"]["c"]["result"] == "ok"
    assert got["assumed m=9"]["c"]["result"].startswith("AssumptionError")
    assert got["constant rebound"]["c"]["general"] == 1


def test_refusals_and_in_place_changes_on_the_compiled_path(cache):
    """The alias check runs at every launch (a hit goes to the general path, which refuses
    it); a tensor changed in place (`set_`, `resize_`, `.data =`) is read again; torch's
    own types only (a Parameter, not a subclass); a tensor with its negative bit set is
    refused."""
    got = run("""
    n = 1000
    x, y, o, z = (torch.randn(n) for _ in range(4))
    attempt("first", "axpy", (4, 256), 2.0, x, y, o)
    attempt("fast", "axpy", (4, 256), 2.0, x, y, o)
    attempt("alias", "axpy", (4, 256), 2.0, x, y, x)
    attempt("the same storage, another view", "axpy", (4, 256), 2.0, x, y, x.view(10, 100).view(-1))
    attempt("overlap", "axpy", (4, 256), 2.0, x[:600], y, x[500:])
    attempt("a broadcast output", "axpy", (4, 256), 2.0, x, y, o[:1].expand(n))
    attempt("an empty output inside an input", "axpy", (4, 256), 2.0, x, y, x[10:10])
    attempt("fast after the refusals", "axpy", (4, 256), 2.0, x, y, o)
    attempt("z", "axpy", (4, 256), 2.0, z, y, o)
    z.set_(torch.randn(3000))
    attempt("z set_", "axpy", (4, 256), 2.0, z, y, o)
    extra = {"z set_": [z.data_ptr(), 3000]}
    z.set_(o)
    attempt("z set_ to the output", "axpy", (4, 256), 2.0, z, y, o)
    z.set_(torch.randn(3000))
    z.resize_(10)
    attempt("z resize_", "axpy", (4, 256), 2.0, z, y, o)
    z.data = torch.randn(n, dtype=torch.float64)
    attempt("z .data = float64", "axpy", (4, 256), 2.0, z, y, o)
    class Mine(torch.Tensor):
        pass
    mine = torch.randn(n).as_subclass(Mine)
    attempt("a subclass", "axpy", (4, 128), 2.0, mine, y, o)
    attempt("a subclass again", "axpy", (4, 128), 2.0, mine, y, o)
    weights = torch.nn.Parameter(torch.randn(n))
    attempt("a Parameter", "axpy", (8, 128), 2.0, weights, y, o)
    attempt("a Parameter again", "axpy", (8, 128), 2.0, weights, y, o)
    attempt("a negative view", "axpy", (4, 256), 2.0, x._neg_view(), y, o)
    out["extra"] = extra
    """, cache)
    extra = got.pop("extra")
    same_launches(got)
    for label in ("alias", "the same storage, another view", "overlap", "a broadcast output",
                  "z set_ to the output"):
        assert got[label]["c"]["result"].startswith("AliasError"), label
        assert got[label]["c"]["handed"] == 1 and got[label]["c"]["launch"] is None, label
    taken(got, ["fast", "an empty output inside an input", "fast after the refusals", "z",
                "z set_", "a Parameter again"])
    # a subclass may override what the Python launcher reads: it keeps the Python launcher
    assert got["a subclass again"]["c"]["head"] == "function"
    assert got["z set_"]["c"]["launch"]["slots"][1:3] == extra["z set_"]  # x's address, extent
    assert got["z resize_"]["c"]["launch"]["variant"] != got["z"]["c"]["launch"]["variant"]
    assert got["z .data = float64"]["c"]["general"] == 1
    # a lazily negated view holds values its memory does not: refused, never launched
    assert got["a negative view"]["c"]["result"].startswith("LaunchError")
    assert got["a negative view"]["c"]["launch"] is None


def test_faults_contexts_threads_the_setting_and_a_backend_switch(cache):
    """A fault waiting in the fault block is raised by the launch (the compiled launcher
    hands it to Python); a launch from a thread with no current context is refused by the
    driver and retried in the kernel's context (`CudaKernel.launch_failed`);
    VERDIGRIS_LAUNCHER=python never uses the extension, unset a build that fails leaves the
    Python launcher silently, =c says why it cannot, another value is refused; a backend
    switch retires the compiled launcher too."""
    got = run("""
    from verdigris.errors import BackendError
    from verdigris.runtime import clauncher
    x, y, o = (torch.randn(64) for _ in range(3))
    K.axpy[1, 64](2.0, x, y, o)
    K.axpy[1, 64](2.0, x, y, o)
    head = K.axpy[1, 64]
    out["head"] = type(head).__name__
    ctypes.c_int64.from_address(faults.flag_address(0)).value = 1
    try:
        head(2.0, x, y, o)
        out["fault"] = "none"
    except vg.BoundsError as err:
        out["fault"] = err.code
    out["flag after"] = ctypes.c_int64.from_address(faults.flag_address(0)).value
    def elsewhere():
        before = fakecuda.last_launch().count
        head(3.0, x, y, o)
        out["launched from a thread"] = fakecuda.last_launch().count - before
    thread = threading.Thread(target=elsewhere)
    thread.start(); thread.join()
    out["misses"] = head.misses
    built = clauncher._build
    def no_compiler():
        raise BackendError("cc failed: no compiler here")
    for mode, build in (("python", built), ("", no_compiler), ("c", no_compiler), ("fortran", built)):
        os.environ["VERDIGRIS_LAUNCHER"] = mode
        clauncher._build = build
        clauncher._loaded.clear()
        kernel = simt.kernel(K.axpy.fn)
        try:
            kernel[1, 64](2.0, x, y, o)
            out[f"setting {mode}"] = type(kernel[1, 64]).__name__
        except BackendError as err:
            out[f"setting {mode}"] = err.message
    vg.set_backend("cpu")
    hx, hy, ho = np.ones(64, np.float32), np.ones(64, np.float32), np.zeros(64, np.float32)
    before = fakecuda.last_launch().count
    head(2.0, hx, hy, ho)
    out["cpu result"] = float(ho.sum())
    out["launched on the gpu"] = fakecuda.last_launch().count - before
    """, cache)
    assert got["head"] == "Launcher"
    assert got["fault"] == "VG302" and got["flag after"] == 0
    assert got["launched from a thread"] == 1 and got["misses"] == 1  # the fault's launch
    assert got["cpu result"] == 64 * 3.0 and got["launched on the gpu"] == 0
    assert got["setting python"] == got["setting "] == "function"
    assert "could not be built: cc failed: no compiler here" in got["setting c"]
    assert "VERDIGRIS_LAUNCHER='fortran'" in got["setting fortran"]
