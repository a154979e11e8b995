"""The cuda launch path without a GPU: each test runs a script in a subprocess whose CUDA
driver is tests/fakecuda (launches record their arguments instead of running), and checks
that generated launchers (runtime.fastpath) pack exactly what the general path packs,
hand every call they cannot take to it, and keep contexts, streams and threads right."""
import json
import textwrap

import pytest

from tests import fakecuda

pytest.importorskip("cuda.bindings.driver")
pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

PRELUDE = """
import json, threading
import numpy as np
import verdigris as vg
from verdigris.runtime import dispatch, driver
from tests.fakecuda import last_launch
from tests.fakecuda.kernels import add, axpy, copy2d, sixteen

from tests import fakecuda
general_calls = fakecuda.count_general_calls()
NPARAMS = {"axpy": 8, "sixteen": 26, "copy2d": 10, "add": 7}

def record():
    launch = last_launch()
    launch = last_launch(NPARAMS[launch.name])
    return dict(count=launch.count, name=launch.name, function=launch.function,
                grid=list(launch.grid), block=list(launch.block), stream=launch.stream or 0,
                device=launch.device, slots=[int(v) for v in launch.slots])

def f32(*shape, device=0):
    return vg.asarray(np.random.default_rng().standard_normal(shape).astype(np.float32),
                      device=device)

out = {}
"""


def run(body: str, devices: int = 1) -> dict:
    done = fakecuda.run(PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n",
                        devices=devices)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_launchers_pack_what_the_general_path_packs():
    got = run("""
    x, y, o = f32(1000), f32(1000), f32(1000)
    ins = [f32(1000) for _ in range(8)]
    src, dst = f32(64, 64), f32(32, 32)
    launches = {
        "axpy": lambda: axpy[4, 256](2.5, x, y, o),
        "sixteen": lambda: sixteen[4, 256](*ins, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, o),
        "copy2d": lambda: copy2d[(4, 4), (8, 8)](src[::2, 1::2], dst),
        "add": lambda: add[8](x, y, o, BLOCK=128),
        "add_positional": lambda: add[8](x, y, o, 128),
    }
    for name, launch in launches.items():
        before = general_calls[0]
        launch()
        first = record()
        launch()
        second = record()
        out[name] = dict(first=first, second=second, general=general_calls[0] - before)
    """)
    for name, r in got.items():
        assert r["general"] == (1 if name != "add_positional" else 0), name
        assert r["second"]["count"] == r["first"]["count"] + 1
        assert {k: v for k, v in r["second"].items() if k != "count"} == \
               {k: v for k, v in r["first"].items() if k != "count"}, name


def test_each_changed_fact_goes_to_the_general_path():
    got = run("""
    n = 1000
    x, y, o = f32(n), f32(n), f32(n)
    def attempt(label, *args, **kwargs):
        before = general_calls[0]
        try:
            axpy[4, 256](*args, **kwargs)
            result = "ok"
        except vg.Error as err:
            result = f"{type(err).__name__}: {err.message}"
        out[label] = dict(result=result, general=general_calls[0] - before, launch=record())
    attempt("first", 2.0, x, y, o)
    attempt("fast", 2.0, x, y, o)
    attempt("float64", 2.0, vg.asarray(np.ones(n)), vg.asarray(np.ones(n)), vg.empty(n, vg.f64))
    attempt("host array", 2.0, np.ones(n, np.float32), y, o)
    attempt("misaligned view", 2.0, x[1:], y[1:], o[1:])
    attempt("strided view", 2.0, x[::2], y[::2], o[::2])
    attempt("alias", 2.0, x, y, x)
    attempt("overlap", 2.0, x[:600], y, x[500:])
    attempt("empty output inside an input", 2.0, x, y, x[10:10])
    attempt("int scalar", 2, x, y, o)
    attempt("too many", 2.0, x, y, o, o)
    attempt("missing", 2.0, x, y)
    attempt("keywords", alpha=2.0, x=x, y=y, out=o)
    attempt("unknown keyword", 2.0, x, y, o, z=1)
    stream = int(driver.check(driver.api().cuStreamCreate(0)))
    attempt("int stream", 2.0, x, y, o, stream=stream)
    attempt("CUstream", 2.0, x, y, o, stream=driver.api().CUstream(stream))
    out["stream"] = stream
    attempt("too large", 2**70, x, y, o)
    attempt("fast again", 2.0, x, y, o)
    """)
    assert got["first"]["general"] == 1 and got["fast"]["general"] == 0
    assert got["fast again"]["general"] == 0 and got["fast again"]["result"] == "ok"
    for label in ("float64", "misaligned view", "strided view", "int scalar"):
        assert got[label]["result"] == "ok" and got[label]["general"] == 1, label
    for label in ("keywords", "int stream", "CUstream"):  # the same launcher takes these
        assert got[label]["result"] == "ok" and got[label]["general"] == 0, label
    assert got["int stream"]["launch"]["stream"] == got["stream"]
    assert got["CUstream"]["launch"]["stream"] == got["stream"]
    assert got["keywords"]["launch"]["slots"] == got["fast"]["launch"]["slots"]
    assert got["host array"]["result"].startswith("LaunchError") and "host memory" in \
        got["host array"]["result"]
    for label in ("alias", "overlap"):
        assert got[label]["result"].startswith("AliasError"), label
    assert got["empty output inside an input"]["result"] == "ok"
    assert "takes 4 arguments" in got["too many"]["result"]
    assert "missing its argument 'out'" in got["missing"]["result"]
    assert "has no parameter 'z'" in got["unknown keyword"]["result"]
    assert got["too large"]["result"].startswith("LaunchError")
    assert got["misaligned view"]["launch"]["slots"][1] % 16 == 4


def test_written_views_interleaved_with_other_arguments_stay_on_the_launcher():
    """Columns of one array (byte ranges that overlap, no element shared: the parts of a
    packed attention gradient) launch from the generated launcher after the first call,
    not from the general path; views that do share an element are still refused."""
    got = run("""
    pair, y = f32(1000, 2), f32(1000)
    def attempt(label, *args):
        before = general_calls[0]
        try:
            axpy[4, 256](*args)
            result = "ok"
        except vg.Error as err:
            result = type(err).__name__
        out[label] = dict(result=result, general=general_calls[0] - before)
    attempt("first", 2.0, pair[:, 0], y, pair[:, 1])
    attempt("again", 2.0, pair[:, 0], y, pair[:, 1])
    attempt("same column", 2.0, pair[:, 0], y, pair[:, 0])
    attempt("a column that meets a row", 2.0, pair.reshape(2000)[1000:], y, pair[:, 1])
    attempt("a column shifted by a row", 2.0, pair[1:, 1], y[1:], pair[:-1, 1])
    attempt("every other column of the rows", 2.0, pair[::2, 0], y[::2], pair.reshape(2000)[::4])
    other = f32(1000, 2)
    attempt("another pair", 2.0, other[:, 0], y, other[:, 1])
    """)
    assert got["first"] == dict(result="ok", general=1)
    assert got["again"] == dict(result="ok", general=0)
    assert got["another pair"] == dict(result="ok", general=0)
    assert got["same column"]["result"] == got["a column that meets a row"]["result"] == "AliasError"
    assert got["a column shifted by a row"]["result"] == "AliasError"
    assert got["every other column of the rows"]["result"] == "AliasError"


def test_a_constexpr_equal_in_value_but_not_in_type_is_another_specialization():
    """100 == 100.0 and they hash alike, but compile to different code: the launcher and the
    specialization cache must tell them apart (BLOCK=256.0 is refused, not run as 256)."""
    got = run("""
    n = 1000
    a, b, o = f32(n), f32(n), f32(n)
    for label, block in (("int", 256), ("int again", 256), ("float", 256.0), ("bool", True)):
        before = general_calls[0]
        try:
            add[4](a, b, o, BLOCK=block)
            result = "ok"
        except vg.Error as err:
            result = type(err).__name__
        out[label] = dict(result=result, general=general_calls[0] - before)
    """)
    assert got["int"] == {"result": "ok", "general": 1} and got["int again"] == {"result": "ok", "general": 0}
    assert got["float"]["general"] == 1 and got["float"]["result"] != "ok"
    assert got["bool"]["general"] == 1


def test_a_second_specialization_joins_the_chain():
    got = run("""
    x, y, o = f32(1000), f32(1000), f32(1000)
    d = [vg.asarray(np.ones(1000)) for _ in range(3)]
    for args in ((2.0, x, y, o), (2.0, *d), (2.0, x, y, o), (2.0, *d)):
        axpy[4, 256](*args)
    before = general_calls[0]
    for _ in range(3):
        axpy[4, 256](2.0, x, y, o)
        axpy[4, 256](2.0, *d)
    out["general"] = general_calls[0] - before
    out["depth"] = axpy[4, 256].depth
    """)
    assert got == {"general": 0, "depth": 2}


def test_a_launch_kept_from_before_the_first_call_goes_fast():
    got = run("""
    x, y, o = f32(1000), f32(1000), f32(1000)
    held = axpy[4, 256]
    for _ in range(3):
        held(2.0, x, y, o)
    out["general"] = general_calls[0]
    out["same kind"] = x.kind is y.kind is x[::1].kind and x.kind is not x[1:].kind
    """)
    assert got == {"general": 1, "same kind": True}


def test_bounds_preconditions_choose_the_checked_variant():
    got = run("""
    x, y, o, short = f32(1000), f32(1000), f32(1000), f32(10)
    axpy[4, 256](2.0, x, y, o)
    axpy[4, 256](2.0, x, y, o)
    out["proven"] = record()["function"]
    axpy[4, 256](2.0, short, y, o)
    out["checked"] = record()["function"]
    axpy[4, 256](2.0, short, y, o)
    out["checked again"] = record()["function"]
    axpy[4, 256](2.0, x, y, o)
    out["proven again"] = record()["function"]
    """)
    assert got["proven"] == got["proven again"] != got["checked"] == got["checked again"]


def test_devices_and_contexts():
    got = run("""
    x0, y0, o0 = f32(1000), f32(1000), f32(1000)
    x1, y1, o1 = f32(1000, device=1), f32(1000, device=1), f32(1000, device=1)
    api = driver.api()
    api.cuCtxSetCurrent(driver.context(0))
    for _ in range(2):
        axpy[4, 256](2.0, x1, y1, o1)
        out.setdefault("device1", []).append(record()["device"])
        axpy[4, 256](2.0, x0, y0, o0)
        out.setdefault("device0", []).append(record()["device"])
    out["current after"] = int(api.cuCtxGetCurrent()[1]) == int(driver.context(0))
    try:
        axpy[4, 256](2.0, x0, y1, o0)
    except vg.LaunchError as err:
        out["mixed"] = err.message
    """, devices=2)
    assert got["device1"] == [1, 1] and got["device0"] == [0, 0]
    assert got["current after"]
    assert "different GPUs" in got["mixed"] and "'y'" in got["mixed"]


def test_other_threads_get_their_own_slots():
    got = run("""
    x, y, o = f32(1000), f32(1000), f32(1000)
    axpy[4, 256](2.0, x, y, o)
    def work():
        axpy[4, 256](3.0, x, y, o)
        out["slots"] = record()["slots"][:8]
    thread = threading.Thread(target=work)
    thread.start(); thread.join()
    axpy[4, 256](3.0, x, y, o)
    out["main"] = record()["slots"][:8]
    """)
    assert got["slots"] == got["main"]


def test_a_backend_switch_retires_launchers():
    got = run("""
    x, y, o = f32(64), f32(64), f32(64)
    axpy[1, 64](2.0, x, y, o)
    held = axpy[1, 64]
    vg.set_backend("cpu")
    hx, hy, ho = np.ones(64, np.float32), np.ones(64, np.float32), np.zeros(64, np.float32)
    count = record()["count"]
    held(2.0, hx, hy, ho)
    out["cpu result"] = float(ho.sum())
    out["launched on the gpu"] = record()["count"] - count
    """)
    assert got == {"cpu result": 64 * 3.0, "launched on the gpu": 0}


def test_a_tile_kernel_specializes_on_integers_being_multiples_of_16():
    """`n` a multiple of 16 and not: two specializations (the first compares its mask once
    per run, `Param.multiple_of`), each with its own launcher, which hands a value of the
    other kind down the chain; 2**40, a multiple of 16 beyond int32's range, a third (the
    wide variant, `Param.narrow` False)."""
    got = run("""
    from tests.fakecuda.kernels import keep_prefix
    x, o = f32(4096), f32(4096)
    for n in (992, 1000, 992, 1000, 2**40):
        before = general_calls[0]
        keep_prefix[4](x, o, n, BLOCK=1024)
        out[str(n)] = out.get(str(n), []) + [general_calls[0] - before]
    out["multiples"] = sorted([p.multiple_of for p in spec.kernel.params if p.name == "n"][0]
                              for spec in keep_prefix._specializations.values())
    """)
    assert got == {"992": [1, 0], "1000": [1, 0], str(2**40): [1], "multiples": [1, 16, 16]}


def test_a_tile_kernel_specializes_on_arrays_being_on_the_grid():
    """Extents (and row strides) multiples of 16 below 2**31 or not: two specializations of
    the tile add, the on-grid one without its rolled edge path; each launcher hands arrays
    of the other kind down the chain."""
    got = run("""
    on, off = f32(4096), f32(1000)
    for label, arrays in (("on", (on, on, f32(4096))), ("off", (off, off, f32(1000))),
                          ("on again", (on, on, f32(4096))), ("off again", (off, off, f32(1000)))):
        before = general_calls[0]
        add[4](*arrays, BLOCK=1024)
        out[label] = general_calls[0] - before
    out["grid"] = sorted(str(spec.kernel.param("a").type) for spec in add._specializations.values())
    """)
    assert got == {"on": 1, "off": 1, "on again": 0, "off again": 0,
                   "grid": ["float32[1d,ca]", "float32[1d,cag]"]}


def test_a_tile_launch_past_its_arrays_runs_the_masked_variant_from_its_first_launch():
    """The tile add's loads and store are proven inside the arrays on launches whose grid
    fits them (`128*grid_dim(0) <= a.shape[0]`...): a first launch of 8 tiles of 128 over 1000
    elements, while the race check still runs beside the compile, must already choose the
    masked variant; over 1024 elements the unmasked one."""
    got = run("""
    for n in (1000, 1024):
        add[8](f32(n), f32(n), f32(n), BLOCK=128)
        out[str(n)] = [sorted(map(str, spec.compiled)) for spec in add._specializations.values()]
    """)
    assert got["1000"] == [["(0, 'checked')"]]
    assert sorted(got["1024"]) == [["(0, 'checked')"], ["0"]]


def test_the_memo_of_the_last_launch_never_launches_stale_slots():
    """A launcher of vg.Arrays launches its slots as they are only for the same arrays
    (by serial) and the very same other arguments on the default stream; every other
    launch repacks, and a pack that fails part way clears the memo."""
    got = run("""
    from tests.fakecuda.kernels import keep_prefix
    x, y, o, x2 = f32(1000), f32(1000), f32(1000), f32(1000)
    def slots(*args, **kwargs):
        before = general_calls[0]
        try:
            axpy[4, 256](*args, **kwargs)
        except vg.Error as err:
            return type(err).__name__
        return dict(slots=record()["slots"], general=general_calls[0] - before,
                    stream=record()["stream"])
    out["first"], out["again"] = slots(2.0, x, y, o), slots(2.0, x, y, o)
    out["alpha"] = slots(2.5, x, y, o)
    out["new array"] = slots(2.5, x2, y, o)
    out["view"] = slots(2.5, x[::1], y, o)
    stream = int(driver.check(driver.api().cuStreamCreate(0)))
    out["stream"] = slots(2.5, x, y, o, stream=stream)
    out["after the stream"] = slots(2.5, x, y, o)
    out["alias"] = slots(2.5, x, y, x)
    out["after the alias"] = slots(2.5, x, y, o)
    out["overflow"] = slots(1e300, x, y, o)
    out["after the overflow"] = slots(2.5, x, y, o)
    del x2
    x3 = f32(1000)
    out["reused"] = slots(2.5, x3, y, o)
    out["x3"] = x3.ptr
    a, b, a2, b2, big = f32(4096), f32(4096), f32(4096), f32(4096), f32(4096 * 2)
    keep_prefix[4](a, b, 992, BLOCK=1024)  # the general path
    keep_prefix[4](a, b, 992, BLOCK=1024)  # packs the first set of slots
    out["prefix"] = last_launch(6).slots  # x, its extent, out, its extent, n, faults
    keep_prefix[4](a2, b2, 992, BLOCK=1024)  # packs the second
    try:  # n does not fit int64: packing the first set again fails after its arrays' slots
        keep_prefix[4](big, b, 2**70, BLOCK=1024)
    except vg.LaunchError:
        pass
    before = general_calls[0]
    keep_prefix[4](a, b, 992, BLOCK=1024)
    out["prefix after"] = last_launch(6).slots
    out["prefix general"] = general_calls[0] - before
    out["ptrs"] = dict(x=x.ptr, y=y.ptr, o=o.ptr, view=x[::1].ptr)
    """)
    ptr = got["ptrs"]
    first = got["first"]["slots"]
    assert got["again"] == got["first"] | dict(general=0)
    assert got["alpha"]["slots"][0] != first[0] and got["alpha"]["slots"][1:] == first[1:]
    assert got["new array"]["slots"][1] != ptr["x"] and got["new array"]["slots"][3:] == first[3:]
    assert got["view"]["slots"][1] == ptr["view"] == ptr["x"]
    assert got["stream"]["stream"] != 0 and got["after the stream"]["stream"] == 0
    assert got["alias"] == "AliasError" and got["overflow"] == "LaunchError"
    for label in ("after the stream", "after the alias", "after the overflow"):
        assert got[label]["slots"] == got["alpha"]["slots"], label
    assert got["reused"]["slots"][1] == got["x3"]
    assert got["prefix after"] == got["prefix"] and got["prefix general"] == 0


def test_parameters_named_like_the_launchers_own_names():
    """`h` and `address` are the kernel's, not the launcher's; a parameter whose name starts
    with "_" keeps the general path."""
    got = run("""
    import struct
    from tests.fakecuda.kernels import fill
    o = f32(1000)
    for _ in range(3):
        before = general_calls[0]
        fill[4, 256](o, 7.5, 2.0, 0.25)
        out.setdefault("general", []).append(general_calls[0] - before)
        words = last_launch(5).slots[2:5]
        out["scalars"] = [struct.unpack("d", struct.pack("Q", w))[0] for w in words]  # Python floats: float64
    """)
    assert got["scalars"] == [7.5, 2.0, 0.25]
    assert got["general"] == [1, 1, 1]


def test_another_threads_launch_leaves_this_threads_memo():
    got = run("""
    x, y, o = f32(1000), f32(1000), f32(1000)
    axpy[4, 256](2.0, x, y, o)
    axpy[4, 256](2.0, x, y, o)
    out["main"] = record()["slots"]
    def work():
        axpy[4, 256](3.0, y, x, o)
        axpy[4, 256](3.0, y, x, o)
        out["thread"] = record()["slots"]
    thread = threading.Thread(target=work)
    thread.start(); thread.join()
    axpy[4, 256](2.0, x, y, o)
    out["main again"] = record()["slots"]
    """)
    assert got["main again"] == got["main"] != got["thread"]


def test_a_loop_over_two_sets_of_arrays_launches_without_packing():
    """A stencil's ping-pong (a -> b, then b -> a) hits the memo at every launch; a third
    set packs into the set packed longest ago, and every launch has its own arrays."""
    got = run("""
    x, y, o1, o2, o3 = (f32(1000) for _ in range(5))
    def launch(o):
        axpy[4, 256](2.0, x, y, o)
        return record()["slots"][5]
    launch(o1)
    packs = [0]
    launcher = axpy[4, 256]
    pack = launcher.__globals__["_pack_into"]
    def counting(*args):
        packs[0] += 1
        return pack(*args)
    launcher.__globals__["_pack_into"] = counting
    out["outs"] = [launch(o) for o in (o1, o2, o1, o2, o1, o2)]
    out["packs in the loop"] = packs[0]
    out["third"] = [launch(o) for o in (o3, o1, o3, o2)]
    out["packs after"] = packs[0]
    out["ptrs"] = [o.ptr for o in (o1, o2, o3)]
    """)
    p1, p2, p3 = got["ptrs"]
    assert got["outs"] == [p1, p2] * 3 and got["packs in the loop"] == 2
    assert got["third"] == [p3, p1, p3, p2]
    # o3 packs over o1's set, o1 then over o2's, o3 hits, o2 packs over o3's
    assert got["packs after"] == 2 + 3


def test_launch_limits_and_grids_of_no_blocks_on_the_cuda_path():
    """The cuda backend refuses what the model refuses, and a device's own smaller limits
    (read from the driver once); a grid of no blocks compiles the kernel (and refuses
    aliased arguments) but enqueues nothing, and installs no launcher."""
    got = run("""
    from verdigris.runtime import limits
    x, y, o = f32(1000), f32(1000), f32(1000)
    errors = []
    for config in [((1, 65536), 32), (1, (1, 1, 65)), ((4, 2), (64, 32))]:
        try:
            axpy[config](2.0, x, y, o)
        except vg.LaunchError as err:
            errors.append(err.message)
    out["errors"] = errors
    enqueued = last_launch().count
    axpy[0, 256](2.0, x, y, o)
    out["enqueued"] = last_launch().count - enqueued
    out["compiled"] = len(axpy._specializations) == 1 and all(
        s.compiled for s in axpy._specializations.values())
    out["launched"] = general_calls[0]
    try:
        axpy[0, 256](2.0, x, y, x)
    except vg.AliasError:
        out["alias"] = True
    out["launcher"] = type(axpy[0, 256]).__name__
    limits._device_limits[0] = limits.MODEL._replace(block=(256, 256, 64), block_threads=256)
    try:
        axpy[2, 512](2.0, x, y, o)
    except vg.LaunchError as err:
        out["device"] = err.message
    axpy[4, 256](2.0, x, y, o)
    out["last"] = record()["grid"]
    """)
    assert got["errors"] == [
        "axpy: the grid has 65536 blocks along y, past the limit of 65535",
        "axpy: the block has 65 threads along z, past the limit of 64",
        "axpy: a block of (64, 32, 1) has 2048 threads, past the limit of 1024"]
    assert got["compiled"] and got["launched"] == 1 and got["enqueued"] == 0 and got["alias"]
    assert got["launcher"] == "Launch"  # no generated launcher for a grid of no blocks
    assert got["device"] == ("axpy: the block has 512 threads along x, past the limit of 256 "
                             "of GPU 0 (Fake GPU 0)")
    assert got["last"] == [4, 1, 1]


def test_a_python_float_beyond_float32_leaves_the_generated_launcher_and_is_refused():
    """axpy converts alpha to float32 (x is float32): the launcher specialized for 2.0 hands
    1e300 down to the general path, which refuses it; NaN and infinity stay on the launcher."""
    got = run("""
    x, y, o = f32(1000), f32(1000), f32(1000)
    def attempt(label, alpha):
        before = general_calls[0]
        try:
            axpy[4, 256](alpha, x, y, o)
            out[label] = ["ok", general_calls[0] - before]
        except vg.Error as err:
            out[label] = [type(err).__name__, general_calls[0] - before]
    for label, alpha in (("first", 2.0), ("fast", 0.1), ("huge", 1e300), ("inf", float("inf")),
                         ("nan", float("nan")), ("after", 2.5), ("large", 1e10),
                         ("large again", -3e38), ("small again", 1.0)):
        attempt(label, alpha)
    """)
    assert got["first"] == ["ok", 1] and got["fast"] == ["ok", 0]
    assert got["huge"] == ["LaunchError", 1]
    assert got["inf"] == ["ok", 0] and got["nan"] == ["ok", 0] and got["after"] == ["ok", 0]
    # beyond float16's range, within float32's: another specialization, then its launcher
    assert got["large"] == ["ok", 1] and got["large again"] == ["ok", 0]
    assert got["small again"] == ["ok", 0]


def test_an_array_past_the_longest_extent_leaves_the_generated_launcher_and_is_refused():
    """The proofs take every extent below 2**40 (`ir.limits.MAX_EXTENT`): a launcher made
    for strided views hands a broadcast view 2**40 long (a view of the same kind) down to
    the general path, which refuses it; one 2**40 - 1 long passes the check and launches."""
    got = run("""
    x, y, o = f32(2000), f32(1000), f32(1000)
    def attempt(label, view):
        before = general_calls[0]
        try:
            axpy[4, 256](2.0, view, y, o)
            out[label] = ["ok", general_calls[0] - before]
        except vg.Error as err:
            out[label] = [type(err).__name__, general_calls[0] - before, str(err)]
    attempt("strided", x[::2])
    attempt("again", x[::2])
    attempt("long", vg.Array(x.ptr, (2**40,), (0,), x.dtype, x.device, True, x))
    attempt("longest", vg.Array(x.ptr, (2**40 - 1,), (0,), x.dtype, x.device, True, x))
    """)
    assert got["strided"] == ["ok", 1] and got["again"] == ["ok", 0]
    assert got["long"][:2] == ["LaunchError", 1], got["long"]
    assert "argument 'x' has 1099511627776 elements along axis 0" in got["long"][2]
    assert got["longest"] == ["ok", 0]


def test_a_rebound_module_constant_leaves_the_generated_launcher():
    """`runtime.constants`: a launcher tests the constants the kernel read by identity; a
    rebound one sends the launch to the general path, which builds the kernel again (another
    function) for a new value and reuses it for an equal one."""
    got = run("""
    from tests.fakecuda import kernels
    x, o = f32(1000), f32(1000)
    def attempt(label):
        before = general_calls[0]
        kernels.scaled[4, 256](x, o)
        out[label] = [general_calls[0] - before, last_launch().function]
    attempt("first"); attempt("fast"); attempt("fast again")  # the memo's launch too
    kernels.SCALE = 3.0
    attempt("rebound"); attempt("fast after")
    kernels.SCALE = float("3.0")
    attempt("equal"); attempt("fast after equal")
    """)
    assert [got[k][0] for k in ("first", "fast", "fast again")] == [1, 0, 0]
    assert got["rebound"][0] == 1 and got["rebound"][1] != got["first"][1]
    assert got["fast after"][0] == 0 and got["fast after"][1] == got["rebound"][1]
    assert got["equal"] == [1, got["rebound"][1]] and got["fast after equal"][0] == 0


def test_a_launch_with_a_large_64_bit_value_never_reuses_the_narrow_variant():
    """A row kernel launched with widths in int32's range (narrow, proven) and beyond it
    (wide, refused), alternating, on one configuration: each narrow launch after the first
    takes the generated launcher, each wide one leaves it for the general path, which
    refuses it (nothing launched); int64 and uint64 on SIMT, and the tile kernel's n."""
    got = run("""
    from tests.fakecuda.kernels import rows_by_width, keep_prefix
    NPARAMS["rows_by_width"] = 6
    x, o = f32(4), f32(64)
    for label, width in (("8", 8), ("2**62", 2**62), ("8 again", 8), ("np 2**62", np.int64(2**62)),
                         ("-2**31", -2**31), ("2**31", 2**31), ("uint 8", np.uint64(8)),
                         ("uint 2**31", np.uint64(2**31)), ("uint 8 again", np.uint64(8)),
                         ("8 last", 8)):
        before, launched = general_calls[0], last_launch().count
        try:
            rows_by_width[(1, 4), (8, 1)](x, o, width)
            out[label] = ["ok", general_calls[0] - before, int(width) % 2**64 in record()["slots"]]
        except vg.SafetyError as err:
            out[label] = [err.code, general_calls[0] - before, last_launch().count - launched]
    for n in (992, 2**40, 992, 2**40):
        before = general_calls[0]
        keep_prefix[4](x, o, n, BLOCK=1024)
        out[str(n)] = out.get(str(n), []) + [general_calls[0] - before]
    out["tile narrow"] = sorted([p.narrow for p in spec.kernel.params if p.name == "n"][0]
                                for spec in keep_prefix._specializations.values())
    """)
    # [the outcome, general-path calls, whether the width was packed (as 64 bits)]
    assert got["8"] == ["ok", 1, True] and got["8 again"] == got["8 last"] == ["ok", 0, True]
    for label in ("2**62", "np 2**62", "2**31", "uint 2**31"):
        assert got[label][0] in ("VG202", "VG205") and got[label][1:] == [1, 0], label
    assert got["-2**31"] == ["ok", 0, True]  # int32's least value: narrow, fast
    assert got["uint 8"] == ["ok", 1, True] and got["uint 8 again"] == ["ok", 0, True]
    assert got["992"] == [1, 0] and got[str(2**40)] == [1, 0]
    assert got["tile narrow"] == [False, True]
