"""Cooperative launches: how a kernel that calls `grid_barrier()` runs on a GPU.

Takes: a loaded `CudaKernel` whose module holds the grid barrier's arrival counter
(`ir.abi.GRID_COUNTER`, which `codegen.gridsync` adds only to such kernels). Gives:
`is_cooperative(image)` and `CooperativeLaunch(kernel)`, a callable with the arguments of
the driver's `cuLaunchKernel` (so that `module` and `fastpath` launch through it alike)
that launches with `cuLaunchCooperativeKernel`.

Guarantees: every block of the grid is resident on the GPU at once, which a grid barrier
needs (a block that is not yet running could never arrive, and the others would wait
forever): before each launch the grid's block count is checked against the occupancy the
driver reports for this kernel, block size and dynamic shared memory
(`cuOccupancyMaxActiveBlocksPerMultiprocessor` x the multiprocessor count), and a larger
grid raises LaunchError naming both numbers. The occupancy is asked once per block size
and shared memory size.
"""
from __future__ import annotations

from ..errors import LaunchError
from ..ir.abi import GRID_COUNTER
from . import driver


def is_cooperative(image: bytes) -> bool:
    """Whether a module's image (PTX text or cubin: the symbol's name is in both) holds a
    grid barrier's arrival counter."""
    return GRID_COUNTER.encode() in image


class CooperativeLaunch:
    def __init__(self, kernel):
        self.kernel = kernel
        self.per_multiprocessor: dict = {}  # (threads per block, dynamic shared bytes) -> blocks

    def most_blocks(self, threads: int, shared_bytes: int) -> tuple:
        """(blocks per multiprocessor, multiprocessors) for blocks of `threads` threads."""
        key = (threads, shared_bytes)
        per_sm = self.per_multiprocessor.get(key)
        if per_sm is None:
            with driver.on_device(self.kernel.device):
                per_sm = self.per_multiprocessor[key] = driver.check(
                    driver.api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        self.kernel.function, threads, shared_bytes),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return per_sm, driver.properties(self.kernel.device).multiprocessors

    def check(self, grid: tuple, block: tuple, shared_bytes: int) -> None:
        blocks, threads = grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2]
        per_sm, sms = self.most_blocks(threads, shared_bytes)
        if blocks > per_sm * sms:
            raise LaunchError(
                f"{self.kernel.name}: grid_barrier() needs every block of the grid running at "
                f"once, but the grid has {blocks} blocks and at most {per_sm * sms} blocks of "
                f"{threads} threads fit on this GPU at once ({per_sm} per multiprocessor x {sms} "
                f"multiprocessors, with {shared_bytes} bytes of dynamic shared memory); launch "
                f"at most {per_sm * sms} blocks and let each thread loop over several elements "
                "(a grid-stride loop)")

    def __call__(self, function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, extra=0):
        self.check((gx, gy, gz), (bx, by, bz), shared_bytes)
        return driver.api().cuLaunchCooperativeKernel(function, gx, gy, gz, bx, by, bz,
                                                      shared_bytes, stream, params)
