"""Warp specialization of a streamed K loop that stands inside loops and ifs (issue #29,
`tile/specialize.py`): the producer warp group runs the way to it again, the loops and ifs
with the scalar statements their bounds, conditions and the streamed indices read (in a
loop around it, those after it too: a counter stepped at the end of each pass); a
`break` of a loop around it, a `while` on the way, or a bound read from an array the
kernel writes keep the kernel unspecialized. Each kernel also runs on the cpu backend
against float64 NumPy, and on sm_90a assembles without spills, with no serialized
wgmma. A product tile stored whole after ordinary stores of the same array that only
run before it leaves by TMA behind a global proxy fence; one that a later store may
overwrite does not. GPU twin: tests/gpu/test_tile_mma.py (`gemm_grouped`, a user's
persistent loop) and tests/gpu/test_matmul_shapes_gpu.py (the grouped GEMM)."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, safety, tile
from verdigris import types as T
from verdigris.examples.tile_gemm import _narrow
from verdigris.ir import ArrayType
from verdigris.ir import nodes as N
from verdigris.tile import matmul

from tests.test_linear_backward import needs_ptxas
from tests.test_norm_backward import relative_error
from tests.test_tile_mma import _ptxas_report

BM, BN, BK = 128, 128, 64


@tile.kernel
def panels(a, b, c, counts, PANEL: vg.constexpr = 2):
    """c's row tile: the product over the first counts[0] panels of PANEL K tiles, each
    panel's K loop inside the loop over panels and an if, summed panel by panel."""
    i = tile.bid(0)
    k_tiles = a.shape[1] // BK
    total = tile.zeros((BM, BN), vg.float32)
    for p in range(tile.load(counts, index=(0,), shape=())):
        first = p * PANEL
        if first < k_tiles:
            acc = tile.zeros((BM, BN), vg.float32)
            for k in range(first, min(first + PANEL, k_tiles)):
                acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                               tile.load(b, index=(k, 0), shape=(BK, BN)), acc)
            total += acc
    tile.store(c, index=(i, 0), tile=total)


@tile.kernel
def stepped_panels(a, b, c, counts):
    """The same with the panel's first K tile a counter stepped after the K loop: the
    producer steps it too."""
    i = tile.bid(0)
    first = 0
    total = tile.zeros((BM, BN), vg.float32)
    for p in range(tile.load(counts, index=(0,), shape=())):
        acc = tile.zeros((BM, BN), vg.float32)
        for k in range(first, min(first + 2, a.shape[1] // BK)):
            acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                           tile.load(b, index=(k, 0), shape=(BK, BN)), acc)
        total += acc
        first += 2
    tile.store(c, index=(i, 0), tile=total)


@tile.kernel
def panels_with_break(a, b, c, counts):
    """A `break` of the loop around the K loop: the consumers could leave it where the
    producer goes on."""
    i = tile.bid(0)
    total = tile.zeros((BM, BN), vg.float32)
    for p in range(a.shape[1] // BK):
        if p == tile.load(counts, index=(0,), shape=()):
            break
        acc = tile.zeros((BM, BN), vg.float32)
        for k in range(p, p + 1):
            acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                           tile.load(b, index=(k, 0), shape=(BK, BN)), acc)
        total += acc
    tile.store(c, index=(i, 0), tile=total)


@tile.kernel
def panels_counted_in_written_memory(a, b, c, counts):
    """The loop around the K loop counted from an array the kernel writes."""
    i = tile.bid(0)
    total = tile.zeros((BM, BN), vg.float32)
    for p in range(tile.load(counts, index=(0,), shape=())):
        acc = tile.zeros((BM, BN), vg.float32)
        for k in range(p, p + 1):
            acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                           tile.load(b, index=(k, 0), shape=(BK, BN)), acc)
        total += acc
    tile.store(c, index=(i, 0), tile=total)
    tile.store(counts, index=(i + 1,), tile=tile.full((1,), 0, counts.dtype))


@tile.kernel
def panels_in_a_while(a, b, c, counts):
    """A while loop around the K loop: not followed."""
    i = tile.bid(0)
    total = tile.zeros((BM, BN), vg.float32)
    p = 0
    while p < tile.load(counts, index=(0,), shape=()):
        acc = tile.zeros((BM, BN), vg.float32)
        for k in range(p, p + 1):
            acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                           tile.load(b, index=(k, 0), shape=(BK, BN)), acc)
        total += acc
        p += 1
    tile.store(c, index=(i, 0), tile=total)


def _specs(**more):
    def array(dtype, ndim=2):
        return ArrayType(dtype, ndim, "global", True, True)
    return dict(a=array(T.bfloat16), b=array(T.bfloat16), c=array(T.float32),
                counts=array(T.int32, 1), **more)


def _plan(kernel):
    return matmul.plan(kernel.specialize_types(_specs()), "sm_90a")


def _statements(code, streamed) -> list:
    """The producer's statements, ifs' and loops' bodies flattened, in order (the streamed
    loop's body left out: the producer lowers it as its copies)."""
    out = []
    for s in code:
        out.append(s)
        if s is not streamed:
            out += _statements(getattr(s, "then", []) + getattr(s, "orelse", []) + getattr(s, "body", []),
                               streamed)
    return out


def test_the_producer_runs_the_loops_and_ifs_on_the_way():
    plan = _plan(panels)
    (pipe,) = plan.pipelines.values()
    assert pipe.specialized and plan.persistent and plan.block_threads == 384
    outer, = [s for s in plan.specialized.producer if isinstance(s, N.For)]
    branch, = [s for s in outer.body if isinstance(s, N.If)]
    assert branch.then[-1] is pipe.loop and not branch.orelse
    # the tile statements stay the consumers' alone
    assert not any(isinstance(s, N.Assign) and s.name in ("acc", "total")
                   for s in _statements(plan.specialized.producer, pipe.loop))


def test_a_counter_stepped_after_the_k_loop_is_stepped_by_the_producer():
    plan = _plan(stepped_panels)
    assert plan.specialized is not None
    outer, = [s for s in plan.specialized.producer if isinstance(s, N.For)]
    assert outer.body[0] is plan.specialized.pipeline.loop
    assert [s.name for s in outer.body[1:]] == ["first"]


@pytest.mark.parametrize("kernel", [panels_with_break, panels_counted_in_written_memory,
                                    panels_in_a_while])
def test_ways_the_producer_cannot_follow_keep_the_kernel_unspecialized(kernel):
    plan = _plan(kernel)
    (pipe,) = plan.pipelines.values()  # streamed all the same
    assert plan.specialized is None and not pipe.specialized


@pytest.mark.parametrize("kernel", [panels, stepped_panels])
def test_nested_k_loops_match_float64(rng, kernel):
    k_tiles, count = 5, 3
    a, a64 = _narrow(rng, (2 * BM, k_tiles * BK), "bfloat16")
    b, b64 = _narrow(rng, (k_tiles * BK, BN), "bfloat16")
    c = np.full((2 * BM, BN), np.nan, np.float32)
    kernel[2](a, b, c, np.array([count], np.int32))
    used = min(2 * count, k_tiles) * BK  # count panels of 2 K tiles
    assert relative_error(c, a64[:, :used] @ b64[:used]) < 1e-5


@needs_ptxas
@pytest.mark.parametrize("kernel", [panels, stepped_panels])
def test_nested_k_loops_assemble_without_spills(kernel):
    ptx = codegen.compile_to_ptx(kernel.specialize_types(_specs()), "sm_90a").ptx
    assert "setmaxnreg.inc" in ptx and "cp.async.bulk.tensor.2d" in ptx
    report = _ptxas_report(ptx)
    assert "0 bytes spill stores" in report
    assert not any(code in report for code in ("C7514", "C7517", "C7508")), report


@tile.kernel
def scattered_then_stored(a, b, c, SPLIT: vg.constexpr = 0):
    """A product scattered under one condition, stored whole under the other: the store
    comes after the scatter (SPLIT 0), or the scatter after the store (SPLIT 1)."""
    i = tile.bid(0)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(a.shape[1] // BK):
        acc = tile.mma(tile.load(a, index=(i, k), shape=(BM, BK)),
                       tile.load(b, index=(k, 0), shape=(BK, BN)), acc)
    rows = (int(i) * BM + tile.arange(BM)).reshape((BM, 1))
    cols = tile.arange(BN).reshape((1, BN))
    if SPLIT == 1:
        tile.store(c, index=(i, 0), tile=acc)
    if a.shape[0] < 2 * BM:
        tile.scatter(c, (tile.where(rows % 2 == 0, rows, -1), cols), acc, skip_out_of_bounds=True)
    if SPLIT == 0:
        tile.store(c, index=(i, 0), tile=acc)


def _checked(split):
    kernel = scattered_then_stored.specialize_types(_specs(SPLIT=split))
    safety.check(kernel)  # as a launch does: which statements may meet in one block
    return kernel


def test_a_product_stored_after_ordinary_stores_leaves_by_tma_behind_a_proxy_fence():
    kernel = _checked(0)
    (chunks,) = matmul.plan(kernel, "sm_90a").stores.values()
    assert chunks.after_stores
    ptx = codegen.compile_to_ptx(kernel, "sm_90a").ptx
    assert "fence.proxy.async.global;" in ptx and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    if codegen.ptxas_available():
        assert "0 bytes spill stores" in _ptxas_report(ptx)


def test_a_product_stored_before_an_ordinary_store_of_its_elements_does_not_leave_by_tma():
    assert not matmul.plan(_checked(1), "sm_90a").stores


@pytest.mark.parametrize("split", [0, 1])
def test_scattered_and_stored_products_match_float64(rng, split):
    a, a64 = _narrow(rng, (BM, 2 * BK), "bfloat16")
    b, b64 = _narrow(rng, (2 * BK, BN), "bfloat16")
    c = np.full((BM, BN), np.nan, np.float32)
    scattered_then_stored[1](a, b, c, SPLIT=split)
    assert relative_error(c, a64 @ b64) < 1e-5
