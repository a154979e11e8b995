"""Linear layers' products over the shapes LLMs run, y = x @ w.T for x (M, K) and a weight w
(N, K), with the tiles, split-K parts and operand order chosen per shape (issue #29).

A `Plan` says how one product runs: the tile (BM x BN x BK), split-K parts (1: one kernel;
more: `tile_gemm.gemm_split` then `split_sum`, deterministic, no float atomics) and whether
the operands are swapped: y.T = w @ x.T computed, so that a small M (decode, a few tokens)
is the tile's N side, which the tensor cores take from 8 up, instead of its M side (64 and
up on sm_90a's wgmma: a 1-row product would waste 63 of every 64 rows).

`heuristic(m, n, k, dtype, multiprocessors)`, the documented rule (`docs/performance.md`,
"Shapes"):
- M <= SMALL_M: swapped, BM = 128 along N, BN the smallest of 16, 32, 64 holding M;
- else 128 x 256 tiles where those already fill a wave of the multiprocessors (the square
  GEMM's best), else 128 x 128;
- BK 64 for 16-bit operands, 128 for fp8 (128 bytes of K either way);
- split-K parts as `tile_linear.k_parts` chooses them for the product's output tiles
  (until they fill two waves, no part shorter than 512 of K).
`candidates(...)`: the heuristic's plan first, then its neighbours (the other tile shape,
half and twice the parts, the other operand order where M is small); `linear(...)` times
them on the GPU the first time it sees a shape (`runtime.autotune.fastest`: CUDA events,
the winner kept in memory and on disk per shape, dtype and GPU) and runs the winner; on
the cpu backend it runs the heuristic's plan, untimed.

fp8 (float8_e4m3fn operands, w K-major as stored) takes scales, as torch._scaled_mm and
DeepSeek-V3's training do (`Scales`): "row", one float32 per row of x (M, 1) and per row of
w (1, N), applied once in the epilogue (`gemm_rowwise`); "block", one per row of x and 128
of K (M, K/128) and one per 128 x 128 block of w (N/128, K/128), applied to each 128-deep
step of the sum (`gemm_blockwise`, BK = 128). Both compute y = (x * its scales) @ (w * its
scales).T in float32, rounded once to y's dtype; with split-K, each part's scaled sum goes
to the workspace and `split_sum` adds them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

import verdigris as vg
from verdigris import tile
from verdigris.examples import Result, on_backend
from verdigris.examples.tile_gemm import (_narrow, available, output_tile, split_sum,
                                          workspace_shape)
from verdigris.examples.tile_linear import k_parts, launch_gemm, summing

SMALL_M = 64  # at most this many rows of x: swapped operands
SCALE_BLOCK = 128  # the "block" recipe's scales cover 128 of K (and 128 of N for w)
RECIPES = ("row", "block")


@dataclass(frozen=True)
class Plan:
    BM: int
    BN: int
    BK: int
    parts: int = 1  # split-K parts (1: one kernel)
    swapped: bool = False  # y.T = w @ x.T: tile rows run along N, columns along M

    @property
    def tiles(self) -> dict:
        return dict(BM=self.BM, BN=self.BN, BK=self.BK)

    def __str__(self) -> str:
        return (f"{self.BM}x{self.BN}x{self.BK}" + (f" split {self.parts}" if self.parts > 1 else "")
                + (" swapped" if self.swapped else ""))


@dataclass(frozen=True)
class Scales:
    """fp8 scales: recipe "row" (x (M, 1), w (1, N)) or "block" (x (M, K/128), w (N/128,
    K/128)), float32."""
    recipe: str
    x: object
    w: object


def product_shape(m: int, n: int, plan: Plan) -> tuple:
    """The shape of the product the plan's kernels compute: y's, or y.T's when swapped."""
    return (n, m) if plan.swapped else (m, n)


def _k_step(dtype_name: str) -> int:
    return 128 if dtype_name.startswith("float8") else 64


def _split(plan: Plan, m: int, n: int, k: int, multiprocessors: int) -> Plan:
    return replace(plan, parts=k_parts(*product_shape(m, n, plan), k, plan.tiles, multiprocessors))


def heuristic(m: int, n: int, k: int, dtype_name: str, multiprocessors: int) -> Plan:
    """The plan the module docstring's rule gives (multiprocessors: 0 on the cpu backend)."""
    bk = _k_step(dtype_name)
    if m <= SMALL_M:
        plan = Plan(128, next(b for b in (16, 32, 64) if m <= b), bk, swapped=True)
    else:
        wide = vg.cdiv(m, 128) * vg.cdiv(n, 256) >= max(multiprocessors, 1)
        plan = Plan(128, 256 if wide else 128, bk)
    return _split(plan, m, n, k, multiprocessors)


def takes_block_scales(plan: Plan) -> bool:
    """Whether `gemm_blockwise` takes the plan: its tiles lie inside one scale block along N
    and step one scale block along K."""
    along_n = plan.BM if plan.swapped else plan.BN
    return plan.BK == SCALE_BLOCK and SCALE_BLOCK % along_n == 0


def _fits(plan: Plan, k: int, recipe) -> bool:
    """Whether a candidate is worth timing: no more parts than K tiles, and the kernels
    take it."""
    return plan.parts <= max(1, vg.cdiv(k, plan.BK)) and (recipe != "block"
                                                          or takes_block_scales(plan))


def candidates(m: int, n: int, k: int, dtype_name: str, multiprocessors: int,
               recipe=None) -> list:
    """The plans `linear` times for this shape: the heuristic's first, then neighbours;
    each one the kernels take (the block recipe: BN <= 128 along N)."""
    first = heuristic(m, n, k, dtype_name, multiprocessors)
    bk = first.BK
    if recipe == "block" and not first.swapped:
        first = _split(Plan(128, 128, bk), m, n, k, multiprocessors)
    plans = [first, replace(first, parts=1), replace(first, parts=max(1, first.parts // 2)),
             replace(first, parts=first.parts * 2)]
    if first.swapped:  # the unswapped product, 64 rows of x per tile
        plans.append(_split(Plan(64, 128, bk), m, n, k, multiprocessors))
    else:  # the other tile shape
        plans.append(_split(Plan(128, 384 - first.BN, bk), m, n, k, multiprocessors))
        if m <= 2 * SMALL_M:
            plans.append(_split(Plan(128, 64, bk, swapped=True), m, n, k, multiprocessors))
    unique = list(dict.fromkeys(plans))
    return [p for p in unique if _fits(p, k, recipe)]


# ----------------------------------------------------------------------------- fp8 kernels


@tile.kernel
def gemm_rowwise(p, q, p_scale, q_scale, out, BM: vg.constexpr = 64, BN: vg.constexpr = 64,
                 BK: vg.constexpr = 128, C_ORDER: vg.constexpr = "C"):
    """out = (p @ q.T) * p_scale * q_scale: p (R, K) and q (S, K) as stored (fp8: K-major),
    p_scale (R, 1), q_scale (1, S) float32, applied once to the float32 sum. On a grid of S
    parts along axis 2, block (i, j, s) sums part s of K into tile (s * tiles of R + i, j)
    of out, a float32 workspace (`tile_gemm.gemm_split`'s slices; `split_sum` adds them);
    with one part, out is the result (stored transposed with C_ORDER="F")."""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    acc = output_tile(p, q, i, j, BM, BN, BK, "C", "F", s, tile.num_blocks(2))
    acc = acc * tile.load(p_scale, index=(i, 0), shape=(BM, 1)) \
        * tile.load(q_scale, index=(0, j), shape=(1, BN))
    tile.store(out, index=(int(s) * int(tile.num_blocks(0)) + int(i), j),
               tile=acc.astype(out.dtype), order=C_ORDER)


@tile.kernel
def gemm_blockwise(p, q, p_scale, q_scale, out, BM: vg.constexpr = 64, BN: vg.constexpr = 64,
                   BK: vg.constexpr = 128, SWAPPED: vg.constexpr = False,
                   C_ORDER: vg.constexpr = "C"):
    """out = the sum over BK-deep steps of (p's step @ q's step.T) times their scales, BK the
    scale block (128): x's scales are per row and step, w's per BK rows and step. p = x,
    q = w (p_scale (M, K/BK), q_scale (N/BK, K/BK)); SWAPPED: p = w, q = x (p_scale
    (N/BK, K/BK), q_scale (M, K/BK)). The tile's side along N lies in one scale block (it
    divides BK). Grid axis 2: split-K parts, as `gemm_rowwise`'s."""
    i, j, s = tile.bid(0), tile.bid(1), tile.bid(2)
    k_tiles = (p.shape[1] + BK - 1) // BK
    parts = tile.num_blocks(2)
    acc = tile.zeros((BM, BN), vg.float32)
    for k in range(s * k_tiles // parts, (s + 1) * k_tiles // parts):
        if SWAPPED:  # rows: one block of w; columns: rows of x
            scale = tile.load(p_scale, index=(int(i) * BM // BK, k), shape=()) \
                * tile.load(q_scale, index=(k, j), shape=(1, BN), order="F")
        else:
            scale = tile.load(p_scale, index=(i, k), shape=(BM, 1)) \
                * tile.load(q_scale, index=(int(j) * BN // BK, k), shape=())
        step = tile.mma(tile.load(p, index=(i, k), shape=(BM, BK)),
                        tile.load(q, index=(k, j), shape=(BK, BN), order="F"),
                        tile.zeros((BM, BN), vg.float32))
        acc += step * scale
    tile.store(out, index=(int(s) * int(tile.num_blocks(0)) + int(i), j),
               tile=acc.astype(out.dtype), order=C_ORDER)


# ----------------------------------------------------------------------------- launching


def plan_workspace(m: int, n: int, plan: Plan):
    """The float32 workspace's shape the plan needs (its product's slices), or None."""
    return None if plan.parts == 1 else workspace_shape(*product_shape(m, n, plan), plan.parts,
                                                        plan.tiles)


def _column(v):
    """A (1, L) or (L, 1) scale array as the other of the two (a view)."""
    return v.reshape(v.shape[::-1])


def launch_plan(x, w, y, plan: Plan, workspace=None, scales: Scales | None = None, **launch):
    """y = x @ w.T (times the scales) as `plan` says; a split plan needs its workspace
    (`plan_workspace`, float32)."""
    order = "F" if plan.swapped else "C"
    p, q = (w, x) if plan.swapped else (x, w)
    if scales is None:
        return launch_gemm(p, q, y, B_ORDER="F", tiles=plan.tiles, workspace=workspace,
                           C_ORDER=order, **launch)
    rows, cols = product_shape(y.shape[0], y.shape[1], plan)
    out = y if workspace is None else workspace
    grid = (vg.cdiv(rows, plan.BM), vg.cdiv(cols, plan.BN), plan.parts)
    store = dict(C_ORDER="C" if workspace is not None else order, **plan.tiles, **launch)
    if scales.recipe == "row":
        p_scale, q_scale = (_column(scales.w), _column(scales.x)) if plan.swapped else \
            (scales.x, scales.w)
        gemm_rowwise[grid](p, q, p_scale, q_scale, out, **store)
    else:
        if not takes_block_scales(plan):
            raise ValueError(f"block-scaled fp8 takes BK = {SCALE_BLOCK} and a tile side along N "
                             f"that divides it; plan {plan} does not")
        p_scale, q_scale = (scales.w, scales.x) if plan.swapped else (scales.x, scales.w)
        gemm_blockwise[grid](p, q, p_scale, q_scale, out, SWAPPED=plan.swapped, **store)
    if workspace is not None:
        grid, tile_shape = summing(y, plan.tiles, order)
        split_sum[grid](workspace, y, plan.parts, C_ORDER=order, **tile_shape, **launch)


def _sources() -> tuple:
    """What a stored choice depends on besides the shape: this module's and the GEMM
    kernels' code."""
    import inspect
    import sys

    from verdigris.examples import tile_gemm

    return inspect.getsource(sys.modules[__name__]), inspect.getsource(tile_gemm)


def _multiprocessors() -> int:
    if vg.current_backend() != "cuda":
        return 0
    from verdigris.runtime import driver

    return driver.properties(0).multiprocessors


_CHOSEN: dict = {}  # (m, n, k, dtypes, recipe, multiprocessors) -> Plan


def choose(x, w, y, scales: Scales | None = None, timer=None, **launch) -> Plan:
    """The plan `linear` runs for these arrays' shape: the fastest candidate, timed once per
    shape on the GPU (kept in memory and on disk); the heuristic's on the cpu backend.
    `timer(run) -> seconds` replaces the GPU's timing (tests), as `vg.autotune`'s."""
    from verdigris.runtime.autotune import fastest

    (m, k), n = x.shape, w.shape[0]
    dtypes = tuple(str(a.dtype) for a in (x, w, y))
    recipe = scales and scales.recipe
    sms = _multiprocessors()
    key = (m, n, k, dtypes, recipe, sms)
    plan = _CHOSEN.get(key)
    if plan is None:
        plans = candidates(m, n, k, dtypes[0].rsplit(".", 1)[-1], sms, recipe)
        runs = [_runner(x, w, y, p, scales, launch) for p in plans]
        choice = fastest("linear", _sources(), [str(p) for p in plans], runs,
                         ((("m", m), ("n", n), ("k", k), ("recipe", recipe)), dtypes),
                         timer=timer)
        plan = _CHOSEN[key] = plans[choice]
    return plan


def new_workspace(like, shape):
    """A float32 array of `shape` beside `like`: from torch's caching allocator for a torch
    tensor (no driver allocation per call, ordered on its stream), else `vg.empty`."""
    if hasattr(like, "new_empty"):
        import torch

        return like.new_empty(shape, dtype=torch.float32)
    return vg.empty(shape, vg.float32)


def _runner(x, w, y, plan: Plan, scales, launch):
    shape = plan_workspace(x.shape[0], w.shape[0], plan)
    workspace = None if shape is None else new_workspace(x, shape)
    return lambda: launch_plan(x, w, y, plan, workspace, scales, **launch)


def linear(x, w, y, scales: Scales | None = None, timer=None, **launch):
    """y = x @ w.T (fp8: times `scales`) with the plan `choose` picks for the shape (a
    split plan's workspace: `new_workspace`, each call)."""
    _runner(x, w, y, choose(x, w, y, scales, timer, **launch), scales, launch)()


# ----------------------------------------------------------------------------- checks


def quantized(rng, shape, recipe):
    """fp8 e4m3 values and their scales in `recipe`'s layout, and the float64 matrix they
    stand for (values times the scale of their row, or of their block)."""
    values, values64 = _narrow(rng, shape, "float8_e4m3fn", 4.0)
    rows, cols = shape
    if recipe == "row":
        scale = rng.uniform(0.5, 2, (rows, 1)).astype(np.float32)
        return values, scale, values64 * scale
    scale = rng.uniform(0.5, 2, (rows, vg.cdiv(cols, SCALE_BLOCK))).astype(np.float32)
    return values, scale, values64 * np.repeat(scale, SCALE_BLOCK, axis=1)[:, :cols]


def block_scaled_weight(rng, shape):
    """w's 128 x 128 block scales (N/128, K/128) and the float64 weight they stand for."""
    values, values64 = _narrow(rng, shape, "float8_e4m3fn", 4.0)
    n, k = shape
    scale = rng.uniform(0.5, 2, (vg.cdiv(n, SCALE_BLOCK), vg.cdiv(k, SCALE_BLOCK))).astype(np.float32)
    full = np.repeat(np.repeat(scale, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)[:n, :k]
    return values, scale, values64 * full


def fp8_operands(rng, m, n, k, recipe):
    """x, w, their Scales and the float64 product they stand for."""
    x, x_scale, x64 = quantized(rng, (m, k), recipe)
    if recipe == "row":
        w, w_scale, w64 = quantized(rng, (n, k), "row")
        w_scale = _column(w_scale)  # (1, N), as torch._scaled_mm takes it
    else:
        w, w_scale, w64 = block_scaled_weight(rng, (n, k))
    return x, w, Scales(recipe, x_scale, w_scale), x64 @ w64.T


def run_plan(x, w, plan: Plan, scales: Scales | None = None) -> np.ndarray:
    """y = x @ w.T by `launch_plan` on the current backend (NumPy arrays in and out), y and
    the workspace poisoned (NaN) first."""
    m, n = x.shape[0], w.shape[0]
    y = np.full((m, n), np.nan, np.float32)
    shape = plan_workspace(m, n, plan)
    workspace = None if shape is None else np.full(shape, np.nan, np.float32)

    def launch(x, w, y, workspace, *scale_arrays):
        launch_plan(x, w, y, plan, workspace, scales and Scales(scales.recipe, *scale_arrays))

    return on_backend(launch, x, w, y, workspace, *((scales.x, scales.w) if scales else ()))[2]


CHECKED_PLANS = [Plan(32, 32, 32), Plan(32, 32, 32, parts=3), Plan(32, 16, 32, swapped=True),
                 Plan(32, 16, 32, parts=4, swapped=True)]


def check(rng, k=300) -> list:
    """Every kind of plan (plain, split, swapped, swapped and split) on shapes no tile
    divides, 16-bit and fp8 in both recipes (BK 128 for fp8)."""
    results = []
    half = "bfloat16" if available("bfloat16") else "float16"
    for m, n in ((70, 52), (5, 72)):
        (x, x64), (w, w64) = _narrow(rng, (m, k), half), _narrow(rng, (n, k), half)
        for plan in CHECKED_PLANS:
            results.append(Result(f"x @ w.T {half} {m}x{n}x{k}, {plan}", run_plan(x, w, plan),
                                  x64 @ w64.T, 1e-5))
    if available("float8_e4m3fn"):
        for recipe in RECIPES:
            for m, n in ((70, 52), (5, 72)):
                x, w, scales, want = fp8_operands(rng, m, n, k, recipe)
                for plan in CHECKED_PLANS:
                    plan = replace(plan, BK=SCALE_BLOCK)
                    results.append(Result(f"fp8 {recipe} scales {m}x{n}x{k}, {plan}",
                                          run_plan(x, w, plan, scales), want, 2e-3))
    return results


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
