"""A grid given as a function of the launch's arguments: `k[lambda meta: ...](...)`.

Takes: a kernel (`dispatch.KernelFunction`), the function and, for a SIMT kernel, the
block. Gives: `GridOfArguments`, what `k[grid_fn]` (tile) or `k[grid_fn, block]` (SIMT)
returns: called with the kernel's arguments, it binds them (defaults filled in), calls
`grid_fn(meta)` with `meta` the dict of every parameter's value by name (Triton's meaning:
`lambda meta: (vg.cdiv(meta["n"], meta["BLOCK"]),)`), and launches `k[grid]` (or
`k[grid, block]`) with the same arguments. Guarantees: the launch is the one `k[grid]`
would make (the same checks, cache and generated launcher); only the grid is computed per
call.
"""
from __future__ import annotations

_OPTIONS = ("stream", "num_warps", "shared_bytes")  # launch keywords, not arguments


class GridOfArguments:
    __slots__ = ("kernel", "grid", "block")

    def __init__(self, kernel, grid, block):
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args, **kwargs) -> None:
        kernel = self.kernel
        arguments = {k: v for k, v in kwargs.items() if k not in _OPTIONS}
        meta = dict(zip((p.name for p in kernel.params), kernel.bind(args, arguments)))
        grid = self.grid(meta)
        kernel[grid if self.block is None else (grid, self.block)](*args, **kwargs)
