"""The benchmark suite behind `verdigris bench`, and what bench scripts register cases with.

Gives, for bench scripts: `case` (the decorator that registers a case; see `registry`),
`Impl` (a callable with a correctness check), `checked(run, out, want, rtol)` (the usual
check: poison the output, run once, compare with a reference), `returning(run, want,
rtol)` (the same for a call that returns its result, e.g. `torch.softmax`), `has(peer)`
(whether torch, triton, cupy, cutile or flash_attn is installed) and `load_script(path)` (another bench
script's module, to borrow its peer kernels). Importing this package imports none of them,
nor the GPU driver: registering is free, measuring happens in `verdigris bench`.

Modules: registry (cases, discovery, filters), peers, timing, ceilings (rooflines), runner
(the two passes), report (table, JSON, Markdown), plots (PNG), machine (the commit and the
GPU's clocks), progress, command (the CLI entry).
"""
from __future__ import annotations

from .peers import has
from .registry import ROOFLINE, Impl, case, load_script

__all__ = ["case", "Impl", "checked", "returning", "has", "load_script", "ROOFLINE",
           "relative_error", "time_each"]


def _is_cupy(array) -> bool:
    return type(array).__module__.startswith("cupy")


def relative_error(got, want) -> float:
    """||got - want|| / ||want||, in float64, for torch tensors, CuPy arrays or anything
    NumPy can read (computed where the arrays live: no copy of a GPU array to the host). A
    CuPy result is compared with a torch reference through a zero-copy torch view."""
    if _is_cupy(got) and hasattr(want, "double"):
        import torch

        got = torch.as_tensor(got, device=want.device)
    if hasattr(got, "double"):  # torch
        got, want = got.double(), want.double()
        return float((got - want).norm() / want.norm())
    if _is_cupy(got):
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


def _within(got, want, rtol: float):
    error = relative_error(got, want)
    return None if error <= rtol else f"relative error {error:.2e} > {rtol:.0e}"


def time_each(runs: dict, out, want, rep_ms: int = 100) -> list:
    """(name, median ms, relative error) per callable of `runs` (name -> callable that
    writes `out`), in order, for the bench scripts' tables: `out` is poisoned, the callable
    runs once and is compared with `want` (reading the error waits for it), then timed by
    `triton.testing.do_bench`."""
    from triton.testing import do_bench

    rows = []
    for name, run in runs.items():
        _poison(out)
        run()
        error = relative_error(out, want)
        rows.append((name, do_bench(run, warmup=25, rep=rep_ms, return_mode="median"), error))
    return rows


def checked(run, out, want, rtol: float = 1e-5) -> Impl:
    """`run` with a check: `out` is poisoned (NaN, or POISON_INT for integers), `run()` is called
    once, and the relative error of `out` against `want` must be at most `rtol`. A kernel
    that adds into its output (a sum or a histogram with atomics) zeroes it in `run`, so
    that the zeroing is timed with it, as it is with a peer that returns a new array."""
    def check():
        _poison(out)
        run()
        return _within(out, want, rtol)

    return Impl(run, check)


def returning(run, want, rtol: float = 1e-5) -> Impl:
    """`run`, a call that returns its result (torch.softmax, cupy.cumsum), with a check: the
    relative error of what one call returns against `want` must be at most `rtol`."""
    return Impl(run, lambda: _within(run(), want, rtol))
