"""The kernels and checks that bench/debug_tools_gpu.sh runs on a GPU machine (issue #27):

  python bench/debug_tools_gpu.py oob      a read past the end of its allocation, which the
                                           bounds check cannot see (the array claims a larger
                                           shape than its memory): compute-sanitizer's memcheck
                                           names this file and the line marked OOB-LINE
  python bench/debug_tools_gpu.py race     a shared-memory race inside vg.unsafe(): racecheck
                                           names the lines marked RACE-LINE
  python bench/debug_tools_gpu.py print    print() inside a SIMT and a tile kernel (vprintf)
  python bench/debug_tools_gpu.py profile  the softmax bench case, for ncu's source page
  python bench/debug_tools_gpu.py sass     the bench cases' SASS with and without the line
                                           table: the instructions must be identical (line info
                                           costs nothing at run time), and a timing of each
Run with PYTHONPATH=src from the repository root.
"""
import re
import sys
import time

import numpy as np

import verdigris as vg
from verdigris import simt, tile


@simt.kernel
def read_past_the_end(x, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        with vg.unsafe():
            out[i] = x[i + 1_000_000]  # OOB-LINE


@simt.kernel
def shared_race(out):
    buf = simt.shared.array(64, vg.float32)
    t = simt.thread_id(0)
    with vg.unsafe():  # each warp reads what the other writes, with no barrier between
        buf[t] = float(t)  # RACE-LINE
        out[t] = buf[(t + 32) % 64]  # RACE-LINE


@simt.kernel
def say_hello(x, n):
    i = simt.global_id(0)
    if i < n:
        print("hello from the GPU: i =", i, "x[i] =", x[i], "positive:", x[i] > 0)


@tile.kernel
def block_sums(x, out, B: vg.constexpr):
    b = tile.bid(0)
    t = tile.load(x, index=(b,), shape=(B,))
    print("tile block sum", tile.sum(t))
    if b == 0:
        print("tile element", t)
    tile.store(out, index=(b,), tile=t)


class Lying:
    """A device array that claims more elements than its memory holds."""

    def __init__(self, array, n):
        interface = dict(array.__cuda_array_interface__)
        interface["shape"] = (n,)
        interface["strides"] = None
        self.__cuda_array_interface__ = interface


def oob():
    # x is the later of two buffers: the lie's range, from x on, stays clear of out (the
    # alias check refuses a launch where they would overlap); what x holds is never read
    out, x = sorted((vg.empty(256, vg.float32), vg.empty(256, vg.float32)), key=lambda a: a.ptr)
    read_past_the_end[1, 256](Lying(x, 1_000_256), out)
    vg.synchronize()


def race():
    out = vg.empty(64, vg.float32)
    shared_race[1, 64](out)  # two warps: the hazard is between them
    vg.synchronize()


def hello():
    x = vg.asarray(np.linspace(-1, 1, 8).astype(np.float32))
    say_hello[2, 4](x, 8)
    vg.synchronize()
    out = vg.empty(32, vg.float32)
    block_sums[4](vg.asarray(np.arange(32, dtype=np.float32)), out, B=8)
    vg.synchronize()


def profile():
    from verdigris.examples.tile_softmax import softmax

    x = vg.asarray(np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32))
    out = vg.empty((4096, 1024), vg.float32)
    softmax[4096](x, out, COLS=1024)
    vg.synchronize()


def _bench_cases():
    from verdigris import types as T
    from verdigris.examples.axpy import axpy
    from verdigris.examples.tile_softmax import softmax
    from verdigris.ir import ArrayType

    f32 = ArrayType(T.float32, 1)
    return [("axpy", axpy.specialize_types({"alpha": T.float32, "x": f32, "y": f32, "out": f32})),
            ("softmax", softmax.specialize_types({"x": ArrayType(T.float32, 2), "out": ArrayType(T.float32, 2),
                                                  "COLS": 1024}))]


def sass():
    """SASS of each bench case with and without the line table, and their run times."""
    from verdigris import codegen
    from verdigris.codegen import lower

    plain_table = lower.LineTable

    class NoLines(plain_table):
        def __init__(self, *args):
            pass

        def location(self, loc):
            return None

    def instructions(text):
        return [re.sub(r"/\*[0-9a-f]+\*/", "", line).strip() for line in text.splitlines()
                if re.search(r"/\*[0-9a-f]{4}\*/", line)]

    for name, kernel in _bench_cases():
        images = {}
        for label, table in (("with line table", plain_table), ("without", NoLines)):
            lower.LineTable = table
            try:
                ptx = codegen.compile_to_ptx(kernel, "sm_90").ptx
            finally:
                lower.LineTable = plain_table
            images[label] = (ptx, codegen.assemble(ptx, "sm_90"))
            print(f"{name} {label}: {ptx.count('.loc')} .loc lines in the PTX")
        with_sass, without_sass = (instructions(codegen.disassemble(cubin)) for _, cubin in images.values())
        same = with_sass == without_sass
        print(f"{name}: {len(with_sass)} SASS instructions; identical with and without the line table: {same}")
        if not same:
            sys.exit(1)
    _time_softmax()


def _time_softmax():
    """The softmax bench case's run time, for the record (the SASS being identical is the proof)."""
    from verdigris.examples.tile_softmax import softmax

    x = vg.asarray(np.random.default_rng(0).standard_normal((32768, 4096)).astype(np.float32))
    out = vg.empty((32768, 4096), vg.float32)
    for _ in range(3):
        softmax[32768](x, out, COLS=4096)
    vg.synchronize()
    start, runs = time.perf_counter(), 50
    for _ in range(runs):
        softmax[32768](x, out, COLS=4096)
    vg.synchronize()
    seconds = (time.perf_counter() - start) / runs
    print(f"softmax 32768x4096 f32 (with line table): {seconds * 1e6:.1f} us, "
          f"{2 * x.numpy().nbytes / seconds / 1e12:.2f} TB/s")


if __name__ == "__main__":
    {"oob": oob, "race": race, "print": hello, "profile": profile, "sass": sass}[sys.argv[1]]()
