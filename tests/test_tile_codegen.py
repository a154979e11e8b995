"""The tile track's GPU lowering without a GPU: layouts (which thread holds which element),
PTX for every kernel below (and those it imports: the examples', `tile_scan_kernels`') on
sm_80 and sm_90a, assembled by ptxas, and the shape of that PTX (16-byte coalesced loads
and stores on full tiles, shuffles and barriers in reductions, loads issued together,
registers).
`tests/gpu/test_tile_gpu.py` runs these same kernels on the GPU against the cpu backend.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from itertools import product

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.codegen import checks
from verdigris.errors import LaunchError
from verdigris.ir import tiles as X
from verdigris.ir import ArrayType
from verdigris.tile import layout as L
from verdigris.examples.tile_layernorm import layernorm
from verdigris.examples.tile_rmsnorm import rmsnorm
from verdigris.examples.tile_row_reduce import row_sum
from verdigris.examples.tile_softmax import softmax
from verdigris.examples.tile_transpose import transpose
from verdigris.examples.tile_vector_add import add
from verdigris.tile.lower import launch_block, num_warps
from tile_scan_kernels import extremes, flipped, reversed_blocks, running, running_flags

# ----------------------------------------------------------------------------- kernels


@tile.kernel
def elementwise(x, y, out, flags, scale, BLOCK: vg.constexpr):
    i = tile.bid(0)
    a = tile.load(x, index=(i,), shape=(BLOCK,))
    b = tile.load(y, index=(i,), shape=(BLOCK,), padding=1)
    g = a * tile.sigmoid(1.702 * a) + tile.where(a > b, b * scale, -a)
    tile.store(out, index=(i,), tile=tile.maximum(g, tile.minimum(a, b) / (b * b + 1)))
    k = (tile.arange(BLOCK) + i * BLOCK).astype(vg.int32)
    tile.store(flags, index=(i,), tile=(k * 7 // 3) % 5 - (k >> 2) + (a < 0).astype(vg.int32))


@tile.kernel
def layernorm_of_n(x, w, b, out, n, eps, COLS: vg.constexpr):
    """LayerNorm with the row width an int parameter (as Triton's kernels take it)."""
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(vg.float32)
    mean = tile.sum(t) / n
    xc = tile.where(tile.arange(COLS) < n, t - mean, 0.0)
    rstd = tile.rsqrt(tile.sum(xc * xc) / n + eps)
    y = xc * rstd * tile.load(w, index=(0,), shape=(COLS,)).astype(vg.float32) \
        + tile.load(b, index=(0,), shape=(COLS,)).astype(vg.float32)
    tile.store(out, index=(r, 0), tile=y.astype(out.dtype))


@tile.kernel
def block_2d(x, out, R: vg.constexpr, C: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    t = tile.load(x, index=(i, j), shape=(R, C), padding=-1)
    tile.store(out, index=(i, j), tile=t * 2 + 1)


@tile.kernel
def row_stats(x, sums, maxes, R: vg.constexpr, C: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C), padding=0)
    tile.store(sums, index=(i,), tile=tile.sum(t, axis=1))
    centered = t - tile.max(t, axis=1, keepdims=True)
    tile.store(maxes, index=(i, 0), tile=centered)


@tile.kernel
def center_rows(x, out, n, R: vg.constexpr, C: vg.constexpr):
    """Each row minus its mean, R rows per block: a row statistic kept in a variable."""
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C)).astype(vg.float32)
    mean = tile.sum(t, axis=1, keepdims=True) / n
    tile.store(out, index=(i, 0), tile=(t - mean).astype(out.dtype))


@tile.kernel
def normalize_rows(x, out, n, eps, COLS: vg.constexpr):
    """LayerNorm without weight and bias: the row's mask is the only (COLS,) tile."""
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, COLS)).astype(vg.float32)
    xc = tile.where(tile.arange(COLS) < n, t - tile.sum(t) / n, 0.0)
    tile.store(out, index=(r, 0), tile=(xc * tile.rsqrt(tile.sum(xc * xc) / n + eps)).astype(out.dtype))


@tile.kernel
def loop_max(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    best = tile.max(tile.load(x, index=(r, 0), shape=(1, COLS), padding=-math.inf))
    for c in range(1, (x.shape[1] + COLS - 1) // COLS):
        best = tile.maximum(best, tile.max(tile.load(x, index=(r, c), shape=(1, COLS), padding=-math.inf)))
    tile.store(out, index=(r,), tile=tile.full((1,), best, vg.float32))


@tile.kernel
def positions(x, amax, amin, best, R: vg.constexpr, C: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C), padding=0)
    tile.store(amax, index=(i,), tile=tile.argmax(t, axis=1))
    tile.store(amin, index=(i,), tile=tile.argmin(t, axis=1))
    overall = tile.argmax(t)
    if tile.max(t) > 0:
        tile.store(best, index=(i,), tile=tile.full((1,), overall, vg.int32))
    else:
        tile.store(best, index=(i,), tile=tile.full((1,), -1, vg.int32))


@tile.kernel
def outer(x, y, out, M: vg.constexpr, N: vg.constexpr):
    i = tile.bid(0)
    col = tile.load(x, index=(i,), shape=(M,)).reshape((M, 1))
    row = tile.load(y, index=(0,), shape=(N,))
    tile.store(out, index=(i, 0), tile=col * row + tile.arange(N))


@tile.kernel
def pairwise(x, y, out, M: vg.constexpr, N: vg.constexpr):
    """Triton's `a[:, None] - b[None, :]`: new axes by subscript."""
    i, j = tile.bid(0), tile.bid(1)
    a = tile.load(x, index=(i,), shape=(M,))
    b = tile.load(y, index=(j,), shape=(N,))
    tile.store(out, index=(i, j), tile=a[:, None] - b[None, :] * 2)


@tile.kernel
def center_and_clamp(x, means, out, R: vg.constexpr, C: vg.constexpr):
    """Triton's conveniences: t.to, t.mean, tile.broadcast_to, tile.clamp."""
    i = tile.bid(0)
    t = tile.load(x, index=(i, 0), shape=(R, C)).to(vg.float32)
    tile.store(means, index=(i,), tile=t.mean(axis=1).to(means.dtype))
    centered = t - tile.broadcast_to(t.mean(axis=1, keepdims=True), (R, C))
    tile.store(out, index=(i, 0), tile=tile.clamp(centered, -1.0, 1.0).to(out.dtype))


@tile.kernel
def cumsum_2d(x, out, R: vg.constexpr, C: vg.constexpr, AXIS: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i, 0), tile=tile.cumsum(tile.load(x, index=(i, 0), shape=(R, C)), AXIS))


@tile.kernel
def rand_tile(out, seed, R: vg.constexpr, C: vg.constexpr):
    i = tile.bid(0)
    offsets = (tile.arange(R).reshape((R, 1)) + i * R) * out.shape[1] + tile.arange(C)
    tile.store(out, index=(i, 0), tile=tile.rand(seed, offsets))


@tile.kernel
def permute_gather(x, idx, out, BLOCK: vg.constexpr):
    i = tile.bid(0)
    j = tile.load(idx, index=(i,), shape=(BLOCK,), padding=-1)
    tile.store(out, index=(i,), tile=tile.gather(x, j, padding=-5) * 2)


@tile.kernel
def scatter_rows(x, idx, out, R: vg.constexpr, C: vg.constexpr):
    i = tile.bid(0)
    rows = tile.load(idx, index=(i,), shape=(R,)).reshape((R, 1))
    cols = tile.arange(C).reshape((1, C))
    with vg.unsafe():  # idx is a permutation: the rows are distinct
        tile.scatter(out, (rows, cols), tile.load(x, index=(i, 0), shape=(R, C)))


@tile.kernel
def histogram(x, counts, BLOCK: vg.constexpr):
    i = tile.bid(0)
    tile.scatter_add(counts, tile.load(x, index=(i,), shape=(BLOCK,)), tile.full((BLOCK,), 1, vg.int32))


@tile.kernel
def reverse_scatter(x, out, B: vg.constexpr):
    """out = x[::-1] by a scatter whose last tile's lanes past the end are masked off."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    n = x.shape[0]
    tile.scatter(out, (n - 1 - offsets,), tile.load(x, index=(i,), shape=(B,)), mask=offsets < n)


@tile.kernel
def masked_histogram(x, counts, limit, BLOCK: vg.constexpr):
    """counts of the values below `limit` (the others, some outside counts, are skipped)."""
    i = tile.bid(0)
    v = tile.load(x, index=(i,), shape=(BLOCK,), padding=-1)
    tile.scatter_add(counts, v, tile.full((BLOCK,), 1, vg.int32), mask=(v >= 0) & (v < limit))


@tile.kernel
def split_sum(x, out, R: vg.constexpr, C: vg.constexpr):
    i, j = tile.bid(0), tile.bid(1)
    tile.atomic_add(out, (i,), tile.sum(tile.load(x, index=(i, j), shape=(R, C)), axis=1))


def arr(dtype, ndim=1, contiguous=True, aligned=True):
    return ArrayType(dtype, ndim, "global", contiguous, aligned)


f32, bf16, f16, i32 = T.float32, T.bfloat16, T.float16, T.int32


def running_spec(dtype, r, c, axis, reverse):
    return dict(x=arr(dtype, 2), sums=arr(dtype, 2), prods=arr(dtype, 2), maxes=arr(dtype, 2),
                mins=arr(dtype, 2), pad=dtype, R=r, C=c, AXIS=axis, REVERSE=reverse)


SPECS = {
    "add_f32": (add, dict(a=arr(f32), b=arr(f32), out=arr(f32), BLOCK=4096)),
    "add_bf16": (add, dict(a=arr(bf16), b=arr(bf16), out=arr(bf16), BLOCK=4096)),
    "add_i8_pairs": (add, dict(a=arr(T.int8), b=arr(T.int8), out=arr(T.int8), BLOCK=64)),  # 2 per thread
    "add_f64": (add, dict(a=arr(T.float64), b=arr(T.float64), out=arr(T.float64), BLOCK=512)),
    "elementwise": (elementwise, dict(x=arr(f32), y=arr(f32), out=arr(f32), flags=arr(i32),
                                      scale=f32, BLOCK=300)),
    "block_2d": (block_2d, dict(x=arr(f16, 2, False, False), out=arr(f16, 2), R=8, C=64)),
    "softmax": (softmax, dict(x=arr(f32, 2), out=arr(f32, 2), COLS=4096)),
    "layernorm": (layernorm, dict(x=arr(bf16, 2), w=arr(bf16), b=arr(bf16), out=arr(bf16, 2),
                                  eps=f32, COLS=8192)),
    "rmsnorm": (rmsnorm, dict(x=arr(bf16, 2), w=arr(bf16), out=arr(bf16, 2), eps=f32, COLS=8192)),
    "row_stats": (row_stats, dict(x=arr(f32, 2), sums=arr(f32), maxes=arr(f32, 2), R=4, C=100)),
    "row_sum": (row_sum, dict(x=arr(f32, 2), out=arr(f32), COLS=4096)),
    "loop_max": (loop_max, dict(x=arr(f32, 2), out=arr(f32), COLS=512)),
    "positions": (positions, dict(x=arr(f32, 2), amax=arr(i32), amin=arr(i32), best=arr(i32),
                                  R=4, C=48)),
    "outer": (outer, dict(x=arr(f32), y=arr(f32), out=arr(f32, 2), M=16, N=64)),
    "pairwise": (pairwise, dict(x=arr(f32), y=arr(f32), out=arr(f32, 2), M=16, N=32)),
    "center_and_clamp": (center_and_clamp, dict(x=arr(bf16, 2), means=arr(f32), out=arr(bf16, 2),
                                                R=4, C=64)),
    "transpose": (transpose, dict(x=arr(f32, 2), out=arr(f32, 2), B=32)),
    "cumsum_rows": (cumsum_2d, dict(x=arr(f32, 2), out=arr(f32, 2), R=4, C=1024, AXIS=1)),
    "cumsum_cols": (cumsum_2d, dict(x=arr(i32, 2), out=arr(i32, 2), R=64, C=48, AXIS=0)),
    "cumsum_bf16": (cumsum_2d, dict(x=arr(bf16, 2), out=arr(bf16, 2), R=2, C=300, AXIS=1)),
    "rand": (rand_tile, dict(out=arr(f32, 2), seed=T.int64, R=8, C=128)),
    "gather": (permute_gather, dict(x=arr(f32), idx=arr(T.int64), out=arr(f32), BLOCK=256)),
    "scatter": (scatter_rows, dict(x=arr(f32, 2), idx=arr(i32), out=arr(f32, 2), R=4, C=64)),
    "scatter_add": (histogram, dict(x=arr(i32), counts=arr(i32), BLOCK=300)),
    "scatter_masked": (reverse_scatter, dict(x=arr(f32), out=arr(f32), B=128)),
    "scatter_add_masked": (masked_histogram, dict(x=arr(i32), counts=arr(i32), limit=T.int32,
                                                  BLOCK=300)),
    "atomic_add": (split_sum, dict(x=arr(f32, 2), out=arr(f32), R=4, C=256)),
    "scans_rows_f32": (running, running_spec(f32, 4, 1024, 1, True)),
    "scans_cols_i32": (running, running_spec(i32, 64, 48, 0, True)),
    "scans_bf16": (running, running_spec(bf16, 3, 300, 1, True)),
    "scans_i8_forward": (running, running_spec(T.int8, 5, 33, 0, False)),
    "scans_bool": (running_flags, dict(x=arr(f32), flags=arr(T.bool_), firsts=arr(T.bool_), best=arr(f32),
                                       B=3000)),
    "flip_registers": (flipped, dict(x=arr(f32, 2), out=arr(f32, 2), R=64, C=32, AXES=1)),
    "flip_shared": (flipped, dict(x=arr(f32, 2), out=arr(f32, 2), R=64, C=48, AXES=None)),
    "flip_bool": (flipped, dict(x=arr(T.bool_, 2), out=arr(T.bool_, 2), R=3, C=300, AXES=(0, 1))),
    "flip_f64": (flipped, dict(x=arr(T.float64, 2), out=arr(T.float64, 2), R=16, C=48, AXES=-1)),
    "flip_scatter": (reversed_blocks, dict(x=arr(f32), out=arr(f32), B=100)),
    **{f"extremes_{d.name}": (extremes, dict(x=arr(d), idx=arr(T.int64), hi=arr(d), lo=arr(d),
                                             most=arr(d), least=arr(d), B=300))
       for d in (T.float32, T.float64, T.int32, T.uint32, T.int64, T.uint64)},
}

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def ptx_of(name: str, target: str = "sm_90") -> str:
    kernel_fn, specs = SPECS[name]
    return codegen.compile_to_ptx(kernel_fn.specialize_types(specs), target).ptx


# ----------------------------------------------------------------------------- layouts


def owners(layout: L.Layout, warps: int) -> dict:
    """element -> the (register, lane, warp) triples holding it."""
    held: dict = {}
    for r, lane, warp in product(range(layout.num_regs), range(32), range(warps)):
        coords = tuple(a + b + c for a, b, c in zip(
            layout.register_coords(r), L._combine(layout.lanes, lane, layout.rank),
            L._combine(layout.warps, warp, layout.rank)))
        held.setdefault(coords, []).append((r, lane, warp))
    return held


@pytest.mark.parametrize("shape,warps,vec", [((1, 4096), 8, 4), ((64,), 4, 4), ((8, 64), 2, 8),
                                             ((2, 2), 4, 4), ((16, 16), 1, 4), ((128,), 8, 4)])
def test_blocked_layout_covers_every_element_with_vectors_and_coalesced_lanes(shape, warps, vec):
    layout = L.blocked(shape, warps, vec)
    held = owners(layout, warps)
    assert sorted(held) == sorted(product(*(range(n) for n in shape)))
    copies = {len(v) for v in held.values()}
    assert len(copies) == 1 and copies.pop() == 32 * warps * layout.num_regs // math.prod(shape)
    width = layout.vector_width()
    assert width == min(vec, shape[-1])
    if math.prod(shape) >= 32 * width:  # lane l's vector follows lane l - 1's along a row
        assert layout.lanes[0] == L._unit(len(shape), len(shape) - 1, width)


def test_slice_then_broadcast_moves_no_data():
    layout = L.blocked((4, 128), 4, 4)
    sliced = layout.sliced({1})
    mapping = layout.register_map(sliced, {1})
    assert mapping is not None and len(mapping) == layout.num_regs
    held = owners(sliced, 4)
    assert sorted(held) == [(r, 0) for r in range(4)]
    for r in range(layout.num_regs):  # register r's row is the row of its source register
        assert layout.register_coords(r)[0] == sliced.register_coords(mapping[r])[0]
    assert L.blocked((4, 128), 4, 8).register_map(sliced, {1}) is None


def test_permute_and_unit_axes_are_relabelings():
    layout = L.blocked((8, 32), 2, 4)
    assert layout.permuted((1, 0)).permuted((1, 0)) == layout
    assert layout.sliced({0}).squeezed(0).unsqueezed(0) == layout.sliced({0})
    held = owners(layout.permuted((1, 0)), 2)
    assert sorted(held) == sorted(product(range(32), range(8)))


def test_warp_heuristic_and_launch_block():
    k = add.specialize_types(SPECS["add_f32"][1])
    assert num_warps(k) == 8 and launch_block(k) == (256, 1, 1)
    k = add.specialize_types({**SPECS["add_f32"][1], "BLOCK": 300})  # pads to 512
    assert num_warps(k) == 2
    k = add.specialize_types({**SPECS["add_f32"][1], "BLOCK": 8}, block=(128, 1, 1))
    assert num_warps(k) == 4


def test_num_warps_launch_option_is_checked():
    with pytest.raises(LaunchError, match="power of two"):
        add[4](np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32),
               BLOCK=4, num_warps=3)


def test_num_warps_launch_option_runs_on_the_cpu_backend(rng):
    a, b = (rng.standard_normal(1000).astype(np.float32) for _ in range(2))
    out = np.full(1000, np.nan, np.float32)
    add[vg.cdiv(1000, 256)](a, b, out, BLOCK=256, num_warps=2)
    np.testing.assert_array_equal(out, a + b)


# ----------------------------------------------------------------------------- PTX


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_kernel_assembles(name, target):
    codegen.assemble(ptx_of(name, target), target, optimize=False)


def test_full_tiles_move_16_bytes_per_access():
    ptx = ptx_of("add_f32")
    assert len(re.findall(r"ld\.global\.nc\.v4\.(b32|f32)", ptx)) == 2 * 4  # 16 per thread
    assert len(re.findall(r"st\.global\.v4\.(b32|f32)", ptx)) == 4
    ptx = ptx_of("add_bf16")  # 8 bfloat16 in one 16-byte vector
    assert len(re.findall(r"ld\.global\.nc\.v4\.b32", ptx)) == 2 * 2


def test_strided_unaligned_views_use_scalar_accesses():
    ptx = ptx_of("block_2d")  # x is a strided view; out is contiguous and aligned
    assert not re.search(r"ld\.global(\.nc)?\.v", ptx) and re.search(r"st\.global\.v4", ptx)


def test_reductions_shuffle_then_share():
    ptx = ptx_of("softmax")
    assert ptx.count("shfl.sync.bfly") == 2 * 5
    assert ptx.count("bar.sync") == 2  # two buffers take turns: one barrier per reduction
    assert ptx_of("loop_max").count("bar.sync") == 1 + 2  # in the loop: one more, after the reads
    assert len(re.findall(r"ld\.global\.nc\.v4", ptx)) == 4


def test_identical_input_gives_identical_ptx():
    assert ptx_of("layernorm") == ptx_of("layernorm")


def registers(name: str, target: str = "sm_90a") -> int:
    """Registers per thread ptxas gives the kernel (ptxas -v)."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx_of(name, target))
        f.flush()
        done = subprocess.run([codegen.ptxas_path(), f"-arch={target}", "-v", f.name, "-o", "/dev/null"],
                              capture_output=True, text=True, check=True)
    return int(re.search(r"Used (\d+) registers", done.stderr).group(1))


def test_the_loads_of_one_statement_are_issued_together():
    """LayerNorm's `xc * rstd * w + b`: both weight vectors' loads before any of them is used
    (one memory latency, not two in a row)."""
    ptx = ptx_of("layernorm")
    tail = ptx[ptx.rindex("bar.sync"):]
    first_use = re.search(r"(shl|and)\.b32", tail).start()  # a bfloat16 widened: a shift or a mask
    assert len(re.findall(r"@%p\d+ ld\.global\.nc\.v4\.b32", tail[:first_use])) == 2 * 4


@needs_ptxas
def test_register_budgets_keep_four_blocks_per_multiprocessor():
    """8 warps per block: 64 registers fit four blocks on an SM (85 three), 32 eight. Narrow
    loads stay packed until used, elementwise chains run register by register, a statement's
    loads share one straight-line block with its arithmetic, and the rolled edge path holds
    one vector's elements at a time."""
    assert registers("layernorm") <= 64
    assert registers("rmsnorm") <= 64
    assert registers("softmax") <= 32
    assert registers("add_bf16") <= 40


def test_too_much_shared_memory_is_a_located_compile_error():
    """A 128x128 float32 transpose moves 66 KiB in one trip through shared memory: past the
    static 48 KiB, its buffers are dynamic; a 256x256 one (257 KiB) fits no block of sm_90
    (227 KiB), and the error points at the line."""
    from verdigris.errors import CompileError

    assert "vg_dynamic_shared_132096" in ptx_of_spec(transpose, dict(x=arr(f32, 2), out=arr(f32, 2), B=128))
    with pytest.raises(CompileError, match="moves 263168 bytes through shared memory") as info:
        ptx_of_spec(transpose, dict(x=arr(f32, 2), out=arr(f32, 2), B=256))
    assert info.value.loc is not None and info.value.loc.file.endswith("tile_transpose.py")
    assert "227 KiB" in str(info.value)


def ptx_of_spec(kernel_fn, specs, target: str = "sm_90") -> str:
    return codegen.compile_to_ptx(kernel_fn.specialize_types(specs), target).ptx


def test_a_mask_against_a_multiple_of_16_compares_once_per_vector():
    """LayerNorm's `tile.arange(COLS) < n` at 8 warps (8 consecutive elements per thread
    and vector): one comparison per element in general, one per run of 8 when the launch's
    n is a multiple of 16 (the dispatcher specializes tile kernels on it, as Triton does);
    the selects stay one per element."""
    from verdigris.frontend import build_kernel
    from verdigris.frontend.typing import Static

    _, specs = SPECS["layernorm"]
    specs = {k: Static(v) if k == "COLS" else v for k, v in specs.items()} | {"n": T.int64}

    def mask_compares(multiples):
        kernel = build_kernel(layernorm_of_n.fn, "tile", specs, (256, 1, 1), multiples=multiples)
        ptx = codegen.compile_to_ptx(kernel, "sm_90").ptx
        where = ptx[ptx.index("min.s64"):ptx.index("bar.sync", ptx.index("min.s64"))]
        return len(re.findall(r"setp\.gt\.s32", where)), where.count("selp.f32")

    columns = SPECS["layernorm"][1]["COLS"] // 256
    assert mask_compares(None) == (columns, columns)
    assert mask_compares({"n": 16}) == (columns // 8, columns)


def test_arrays_on_the_grid_need_no_rolled_path():
    """LayerNorm over arrays whose extents and row strides are multiples of 16
    (`ArrayType.on_grid`, what a launch with such arrays specializes on): its vectors can
    never straddle an edge, so neither the run-time test of that nor the element-by-element
    path behind it (a local array per vector) is emitted."""
    from verdigris.frontend import build_kernel
    from verdigris.frontend.typing import Static

    _, specs = SPECS["layernorm"]
    specs = {k: Static(v) if k == "COLS" else v for k, v in specs.items()}

    def ptx(grid: bool) -> str:
        typed = {k: replace(v, on_grid=grid) if isinstance(v, ArrayType) else v for k, v in specs.items()}
        return codegen.compile_to_ptx(build_kernel(layernorm.fn, "tile", typed, (256, 1, 1)), "sm_90").ptx

    off, on = ptx(False), ptx(True)
    assert "st.local" in off and "st.local" not in on
    assert on.count("ld.global.nc.v4.b32") == off.count("ld.global.nc.v4.b32") == 12
    assert on.count("st.global.v4.b32") == 4 and len(on) < 0.6 * len(off)


def test_tiles_of_several_rows_on_the_grid_need_no_rolled_path():
    """Two rows of 8192 per block: the tile's first row is a run-time value, which a 32-bit
    bounds test cannot take as it is; on the grid it is clamped first (`_Access._limit`),
    so there is still no rolled path (it cost 8 registers and a 128-byte local frame),
    and every bounds test stays 32-bit."""
    specs = dict(x=replace(arr(bf16, 2), on_grid=True), out=replace(arr(bf16, 2), on_grid=True),
                 n=T.int64, R=2, C=8192)
    ptx = codegen.compile_to_ptx(center_rows.specialize_types(specs, block=(512,)), "sm_90").ptx
    assert "st.local" not in ptx and "__local_depot" not in ptx
    assert ptx.count("ld.global.nc.v4.b32") == ptx.count("st.global.v4.b32") == 4
    assert not re.findall(r"setp\.\w+\.[su]64", ptx)


def test_a_mask_is_made_in_the_layout_of_the_row_it_masks():
    """`tile.where(tile.arange(COLS) < n, t - mean, 0.0)` over a bfloat16 row of 8192: the
    mask can be made in any layout, so the where takes the row's (8 elements per vector)
    and nothing crosses shared memory but the two reductions. It used to take the mask's
    (the default of a (COLS,) tile, 4 per vector) and convert the row into it: 32 KiB, over
    the 48 KiB of static shared memory, so the kernel did not compile."""
    kernel = normalize_rows.specialize_types(
        dict(x=arr(bf16, 2), out=arr(bf16, 2), n=T.int64, eps=f32, COLS=8192), block=(256,))
    ptx = codegen.compile_to_ptx(kernel, "sm_90").ptx
    assert ptx.count("bar.sync") == 2 and ptx.count("st.global.v4.b32") == 4


def test_many_partials_per_thread_are_combined_in_two_stages():
    """Row sums of R rows of 8192 over 16 warps: every thread holds R rows' partials and
    every warp's must join. One row (16 partials per thread): one barrier, each thread
    reading the 16 as 4 broadcast vectors. Two or four rows (32, 64): the first warps
    combine them once and write the results back, a second barrier, then each thread
    reads one partial and its rows' results."""
    def shared_traffic(rows):
        specs = dict(x=arr(bf16, 2), out=arr(bf16, 2), n=T.int64, R=rows, C=8192)
        ptx = codegen.compile_to_ptx(center_rows.specialize_types(specs, block=(512,)), "sm_90").ptx
        return ptx.count("bar.sync"), len(re.findall(r"ld\.shared", ptx)), ptx.count("shfl.sync.bfly")

    assert shared_traffic(1) == (1, 4, 5)
    # each row's lanes, then the 16 warps' partials; the rows' results read as one vector
    assert shared_traffic(2) == (2, 2, 2 * 5 + 4)
    assert shared_traffic(4) == (2, 2, 4 * 5 + 4)


def test_a_row_statistic_in_a_variable_stays_where_it_was_made():
    """`mean = tile.sum(t, axis=1, keepdims=True) / n` over 2 rows of 8192 on 16 warps: the
    variable lives in the reduction's own layout (`tile.varlayout`), where each thread holds
    its rows' means, so only the reduction crosses shared memory (two barriers: its 32
    partials per thread are combined in two stages, `reduce.TWO_STAGE_AFTER`); in the
    default layout of its (2, 1) shape it crossed twice more, in and back out."""
    from verdigris.codegen import nvptx
    from verdigris.tile.lower import TileLowering

    class DefaultLayouts(TileLowering):
        variables_where_made = False

    specs = dict(x=arr(bf16, 2), out=arr(bf16, 2), n=T.int64, R=2, C=8192)
    kernel = center_rows.specialize_types(specs, block=(512,))
    assert codegen.compile_to_ptx(kernel, "sm_90").ptx.count("bar.sync") == 2
    module = nvptx.parse(str(DefaultLayouts(kernel, "sm_90").run()))
    nvptx.optimize(module, "sm_90")
    assert nvptx.emit_ptx(module, "sm_90").count("bar.sync") == 4


# ----------------------------------------------------------------------------- tiles proven inside


def launched_ptx(name: str, checked: bool, emit: str = "ptx", on_grid: bool = False) -> str:
    """The kernel as a launch compiles it after the safety check: the variant that uses the
    bounds proofs (for launches meeting their conditions), or with `checked` the other;
    `on_grid`: its 2-d arrays specialized as on the grid (`ArrayType.on_grid`)."""
    from verdigris import safety

    kernel_fn, specs = SPECS[name]
    kernel = kernel_fn.specialize_types({k: replace(v, on_grid=True) if on_grid and isinstance(v, ArrayType)
                                         and v.ndim == 2 else v for k, v in specs.items()})
    safety.check(kernel)
    launched = checks.as_launched(kernel, checked)
    return codegen.lower_to_llvm(launched, "sm_90") if emit == "llvm" else codegen.compile_to_ptx(launched, "sm_90").ptx


def test_layernorm_tiles_are_proven_inside_their_arrays_under_launch_conditions():
    from verdigris import safety

    kernel_fn, specs = SPECS["layernorm"]
    kernel = kernel_fn.specialize_types(specs)
    safety.check(kernel)
    tiles = [n for n in checks.sites(kernel) if isinstance(n, (X.TileLoad, X.TileStore))]
    assert len(tiles) == 4 and all(id(n) in kernel.facts["in_bounds"] for n in tiles)
    assert sorted(t for _, t in kernel.facts["bounds_preconditions"]) == [
        "8192 <= b.shape[0]", "8192 <= out.shape[1]", "8192 <= w.shape[0]", "8192 <= x.shape[1]",
        "grid_dim(0) <= out.shape[0]", "grid_dim(0) <= x.shape[0]"]


def test_tiles_proven_inside_need_no_masks_and_the_conditions_fold_the_where():
    """On launches meeting the proofs' conditions, with rows on the grid (at multiples of 16
    elements, as LayerNorm's usually are), LayerNorm's loads and store are plain vector
    accesses (no predicate, no rolled edge path), and `tile.arange(COLS) < x.shape[1]`
    folds to true under the assumed `8192 <= x.shape[1]` (no select per element); the
    variant for the other launches keeps every mask. Rows off the grid keep one test of
    their alignment, and the rolled path for rows that split vectors."""
    proven, checked = launched_ptx("layernorm", False, on_grid=True), launched_ptx("layernorm", True)
    assert not re.search(r"@%p\d+ (ld|st)\.global", proven) and "st.local" not in proven
    assert "st.local" in launched_ptx("layernorm", False)
    assert len(re.findall(r"ld\.global\.nc\.v4\.b32", proven)) == 3 * 4
    assert proven.count("selp.f32") < checked.count("selp.f32") // 4
    assert len(re.findall(r"@%p\d+ ld\.global\.nc\.v4\.b32", checked)) == 3 * 4
    assert "llvm.assume" in launched_ptx("layernorm", False, "llvm")
    assert "llvm.assume" not in launched_ptx("layernorm", True, "llvm")


@tile.kernel
def tile_from_a_parameter(x, out, k, B: vg.constexpr):
    tile.store(out, index=(tile.bid(0),), tile=tile.load(x, index=(k,), shape=(B,)))


@tile.kernel
def padded_rows(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    tile.store(out, index=(r, 0), tile=tile.load(x, index=(r, 0), shape=(1, COLS)) * 2)


def test_what_the_tile_proofs_leave_masked():
    """A tile index that may be negative (a parameter) keeps its load masked, the store by
    block id is proven; a tile the layout pads (1000 columns in 1024) is proven inside but
    keeps the test that leaves its padding alone."""
    from verdigris import safety

    kernel = tile_from_a_parameter.specialize_types(
        dict(x=arr(f32), out=arr(f32), k=T.int64, B=256))
    safety.check(kernel)
    (load_node,), (store_node,) = ([n for n in checks.sites(kernel) if isinstance(n, kind)]
                                   for kind in (X.TileLoad, X.TileStore))
    assert id(load_node) not in kernel.facts["in_bounds"] and id(store_node) in kernel.facts["in_bounds"]
    kernel = padded_rows.specialize_types(dict(x=arr(f32, 2), out=arr(f32, 2), COLS=1000))
    safety.check(kernel)
    assert len(kernel.facts["in_bounds"]) == 2
    ptx = codegen.compile_to_ptx(checks.as_launched(kernel, False), "sm_90").ptx
    assert re.search(r"@%p\d+ ld\.global", ptx)


def test_a_persistent_product_assumes_its_launch_conditions_of_the_grid_its_code_sees():
    """A persistent product runs min(tiles, multiprocessors) blocks along x and its code on
    the grid it was launched for (the virtual grid, arguments after the fault block): the
    proofs' launch conditions (`128*grid_dim(0) <= c.shape[0]`, ...) hold of that grid, and
    of the one launched they may not (2 x 64 tiles of c run on 128 blocks along x), which
    would make each `llvm.assume` of them false: undefined behaviour."""
    from verdigris import safety
    from verdigris.examples.tile_gemm import gemm_bias_gelu
    from verdigris.tile import matmul

    kernel = gemm_bias_gelu.specialize_types(dict(a=arr(bf16, 2), b=arr(bf16, 2), bias=arr(bf16, 2),
                                                  c=arr(bf16, 2), BM=128, BN=256, BK=64))
    safety.check(kernel)
    assert matmul.plan(kernel, "sm_90a").persistent
    assert "128*grid_dim(0) <= c.shape[0]" in [t for _, t in kernel.facts["bounds_preconditions"]]
    llvm = codegen.lower_to_llvm(checks.as_launched(kernel, False), "sm_90a")
    entry = llvm[llvm.index("entry:"):llvm.index("br label %body")]
    assert entry.count("call void @llvm.assume") == 4 and "nctaid" not in entry


@tile.kernel
def scaled_rows(x, out, COLS: vg.constexpr):
    r = tile.bid(0)
    tile.store(out, index=(r, 0), tile=tile.load(x, index=(r, 0), shape=(1, COLS)) * 2)


def test_tiles_proven_inside_rows_off_sixteen_bytes_keep_the_test_of_their_alignment():
    """A row of a tile proven inside its array is one vector access per 4 floats, which
    faults where the row does not start at a multiple of 16 bytes (a view `wide[:, :128]`
    of rows of 130): off the grid, the variant that uses the proofs tests the row strides
    once and takes the element-by-element path for such rows; 1-d arrays and arrays on the
    grid need no test."""
    from verdigris import safety

    def proven_ptx(on_grid: bool) -> str:
        kernel = scaled_rows.specialize_types(dict(x=replace(arr(f32, 2), on_grid=on_grid),
                                                   out=replace(arr(f32, 2), on_grid=on_grid), COLS=128))
        safety.check(kernel)
        assert len(kernel.facts["in_bounds"]) == 2
        return codegen.compile_to_ptx(checks.as_launched(kernel, False), "sm_90").ptx

    off, on = proven_ptx(False), proven_ptx(True)
    assert "st.local" in off and re.search(r"ld\.global\.nc\.b32", off)  # the rolled path
    assert "st.local" not in on and not re.search(r"\bsetp\.", on)
    assert not re.search(r"@%p\d+ (ld|st)\.global", off + on)  # no masks either way


@tile.kernel
def picked_row(x, idx, out, n):
    u = idx[tile.bid(0)]
    total = tile.sum(tile.load(x, index=(u,), shape=(1,))) if u < n else 0.0
    tile.store(out, index=(tile.bid(0),), tile=tile.full((1,), total))


@tile.kernel
def positive_row(x, idx, out, n):
    u = idx[tile.bid(0)]
    if u < n and tile.sum(tile.load(x, index=(u,), shape=(1,))) > 0.0:
        tile.store(out, index=(tile.bid(0),), tile=tile.full((1,), 1.0))


def block_of(llvm: str, marker: str) -> str:
    """The label of the basic block of the first instruction of `llvm` containing `marker`."""
    label = None
    for line in llvm.splitlines():
        found = re.match(r"([\w.]+):", line)
        label = found.group(1) if found else label
        if marker in line:
            return label
    raise AssertionError(f"no {marker!r}")


@pytest.mark.parametrize("kernel_fn, arm", [(picked_row, "select.then"), (positive_row, "and.then")])
def test_a_tile_load_proven_under_the_condition_that_chooses_it_runs_behind_it(kernel_fn, arm):
    """`x[u]`'s tile is proven inside x under `u < n` and `n <= x.shape[0]`, the condition of
    a conditional expression (or the left of an `and`) that chooses it: with no mask, it
    must run only where the condition holds, behind a branch (computed unconditionally and
    selected, a row u past x, up to 2**32 - 1, was read)."""
    from verdigris import safety

    kernel = kernel_fn.specialize_types(dict(x=arr(f32), idx=arr(T.uint32), out=arr(f32), n=T.uint32))
    safety.check(kernel)
    (load_node,) = [n for n in checks.sites(kernel) if isinstance(n, X.TileLoad)]
    assert id(load_node) in kernel.facts["in_bounds"]
    assert "n <= x.shape[0]" in [t for _, t in kernel.facts["bounds_preconditions"]]
    llvm = codegen.lower_to_llvm(checks.as_launched(kernel, False), "sm_90")
    assert block_of(llvm, "getelementptr inbounds float, ptr addrspace(1) %x") == arm
