"""What `k[grid, block]` returns: a launch configuration to call with the kernel's arguments.

Takes: a kernel (`dispatch.KernelFunction`), its grid and block (a tile kernel's block is
None until its lowering chooses one, or `num_warps=` gives it). Gives: `Launch`, whose
`general` is the general launch path (`KernelFunction.launch`, then `fastpath.install` of a
generated launcher at the head of the configuration); `skipping_launches()`, inside which
launches on this thread do nothing (`runtime.torch_ops` traces with fake tensors).
Guarantees: a refusal of a tile kernel launched `k[a, b]` says that this is an a x b grid
of blocks, not SIMT's grid and block; `num_warps=` is a power of two within a block's
threads, on tile kernels only.
"""
from __future__ import annotations

import contextlib
import threading

from ..errors import LaunchError, SafetyError, format_message
from ..ir.limits import MODEL

MAX_BLOCK_THREADS = MODEL.block_threads


class Launch:
    """`k[grid, block]`: call it with the kernel's arguments (and `stream=`; SIMT kernels
    also take `shared_bytes=`, the size of their `simt.shared.dynamic` array, tile kernels
    `num_warps=`, which overrides the lowering's choice of warps per block).

    `general` is the general launch path; on the cuda backend each of its launches puts a
    generated launcher for the arguments' kinds (`fastpath`) at the head of the
    configuration, which `k[grid, block]` then returns. Calling a `Launch` kept from before
    goes to that head too."""

    __slots__ = ("kernel", "grid", "block", "config")

    def __init__(self, kernel, grid: tuple, block: tuple | None, config=None):
        self.kernel, self.grid, self.block, self.config = kernel, grid, block, config

    def __call__(self, *args, **kwargs) -> None:
        head = self.kernel._launches.get(self.config, self)
        (self.general if head is self else head)(*args, **kwargs)

    def general(self, *args, stream=None, num_warps=None, shared_bytes=0, **kwargs) -> None:
        if _skipping.depth:  # tracing a torch op with fake tensors (`runtime.torch_ops`)
            return
        block = self.block if num_warps is None else _warps_block(self.kernel, num_warps)
        # a grid with no blocks runs nothing, but is checked and compiled like any launch
        try:
            plan = self.kernel.launch(self.grid, block, args, kwargs, stream, shared_bytes)
        except SafetyError as err:
            if self.kernel.track == "tile" and isinstance(self.config, tuple) and len(self.config) > 1:
                _explain_tile_grid(err, self.kernel.__name__, self.config)
            raise
        # Launches given dynamic shared memory stay on this path (generated launchers pass
        # ABI values and the kernel's own `CudaKernel.shared` only).
        if plan is not None and self.config is not None and not shared_bytes \
                and not plan.spec.dynamic_shared:
            from . import fastpath

            fastpath.install(self, plan, num_warps)


def _explain_tile_grid(err: SafetyError, name: str, config: tuple) -> None:
    """Add to a refusal of a tile kernel launched `k[a, b]` that this is an a x b grid of
    blocks, not SIMT's grid and block, in case that is what went wrong."""
    note = (f"{name}{list(config)} launches a grid of {' x '.join(map(str, config))} blocks: "
            f"a tile kernel takes only a grid (it chooses its own threads, num_warps=); "
            f"if {config[-1]} was meant as a block size, launch {name}[{config[0]}]")
    if note not in err.hint:
        err.hint = f"{err.hint}; {note}" if err.hint else note
        err.args = (format_message(err.message, err.loc, err.hint, err.code),)


class _Skipping(threading.local):
    depth = 0


_skipping = _Skipping()


@contextlib.contextmanager
def skipping_launches():
    """Launches on this thread do nothing inside the block (`runtime.torch_ops`)."""
    _skipping.depth += 1
    try:
        yield
    finally:
        _skipping.depth -= 1


def _warps_block(kernel, num_warps) -> tuple:
    """The block of a tile launch with `num_warps=` (a power of two, 1 to 32)."""
    if kernel.track != "tile":
        raise LaunchError(f"{kernel.__name__}: num_warps= is for tile kernels; a SIMT launch "
                          "gives its block: k[grid, block](...)")
    if not (isinstance(num_warps, int) and num_warps > 0 and num_warps & (num_warps - 1) == 0
            and num_warps * 32 <= MAX_BLOCK_THREADS):
        raise LaunchError(f"{kernel.__name__}: num_warps must be a power of two from 1 to "
                          f"{MAX_BLOCK_THREADS // 32}, not {num_warps!r}")
    return (num_warps * 32, 1, 1)
