"""Example kernels, one file each; every one runs as a script and checks itself.

Each module has `check(rng)`, which runs its kernel on the current backend with fresh
random inputs and returns `Result`s comparing what the kernel computed with a NumPy
float64 reference. `verdigris demo` and the tests run them all.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

SIMT_EXAMPLES = ("axpy", "strided_2d", "grid_stride", "mandelbrot", "helpers_math",
                 "dot_unrolled", "reduce_sum", "histogram", "scan", "transpose", "jacobi",
                 "sgemm", "gather_sum", "spmv")
TILE_EXAMPLES = ("tile_vector_add", "tile_bias_gelu", "tile_softmax", "tile_layernorm",
                 "tile_rmsnorm", "tile_row_reduce", "tile_cumsum", "tile_transpose",
                 "tile_dropout", "tile_column_sums")


@dataclass
class Result:
    name: str  # what was computed, in words
    got: np.ndarray
    want: np.ndarray
    rtol: float
    absolute: bool = False  # compare plain differences, not relative to the reference

    @functools.cached_property
    def error(self) -> float:
        """Largest difference, relative to the reference's largest magnitude (computed once:
        `report` asks for it twice)."""
        got, want = self.got.astype(np.float64), self.want.astype(np.float64)
        if got.shape != want.shape or not np.isfinite(got).all():
            return float("inf")
        scale = 1.0 if self.absolute else max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
        return float(np.max(np.abs(got - want), initial=0.0)) / scale

    @property
    def ok(self) -> bool:
        return self.error <= self.rtol


def on_backend(launch, *args, **options):
    """launch(*args, **options) on the current backend: NumPy arrays copied to the GPU
    and back on cuda; gives the arguments (NumPy arrays)."""
    import verdigris as vg

    on_gpu = vg.current_backend() == "cuda"
    moved = [vg.asarray(x) if on_gpu and isinstance(x, np.ndarray) else x for x in args]
    launch(*moved, **options)
    return [m.numpy() if on_gpu and hasattr(m, "numpy") else m for m in moved]


def report(results) -> bool:
    """Print one line per result; True if all match."""
    for r in results:
        mark = "ok " if r.ok else "BAD"
        print(f"  [{mark}] {r.name}: max relative error {r.error:.2e} (tolerance {r.rtol:.0e})")
    return all(r.ok for r in results)
