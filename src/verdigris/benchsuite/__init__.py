"""The benchmark suite behind `verdigris bench`, and what bench scripts register cases with.

Gives, for bench scripts: `case` (the decorator that registers a case; see `registry`),
`Impl` (a callable with a correctness check), `checked(run, out, want, rtol)` (the usual
check: poison the output, run once, compare with a reference) and `has(peer)` (whether
torch, triton, cupy or cutile is installed). Importing this package imports none of them,
nor the GPU driver: registering is free, measuring happens in `verdigris bench`.

Modules: registry (cases, discovery, filters), peers, timing, ceilings (rooflines), runner,
report (table, JSON, Markdown), plots (PNG), progress, command (the CLI entry).
"""
from __future__ import annotations

from .peers import has
from .registry import ROOFLINE, Impl, case

__all__ = ["case", "Impl", "checked", "has", "ROOFLINE", "relative_error"]


def relative_error(got, want) -> float:
    """||got - want|| / ||want||, in float64, for torch tensors, CuPy arrays or anything
    NumPy can read (computed where the arrays live: no copy of a GPU array to the host)."""
    if hasattr(got, "double"):  # torch
        got, want = got.double(), want.double()
        return float((got - want).norm() / want.norm())
    if type(got).__module__.startswith("cupy"):
        import cupy

        got, want = got.astype(cupy.float64), want.astype(cupy.float64)
        return float(cupy.linalg.norm(got - want) / cupy.linalg.norm(want))
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


POISON_INT = 90  # fits every integer dtype, unsigned 8-bit included


def _poison(out) -> None:
    if hasattr(out, "fill_"):  # torch
        out.fill_(float("nan") if out.is_floating_point() else POISON_INT)
    else:  # CuPy and NumPy
        out.fill(float("nan") if out.dtype.kind in "fc" else POISON_INT)


def checked(run, out, want, rtol: float = 1e-5) -> Impl:
    """`run` with a check: `out` is poisoned (NaN, or POISON_INT for integers), `run()` is called
    once, and the relative error of `out` against `want` must be at most `rtol`."""
    def check():
        _poison(out)
        run()
        error = relative_error(out, want)
        return None if error <= rtol else f"relative error {error:.2e} > {rtol:.0e}"

    return Impl(run, check)
