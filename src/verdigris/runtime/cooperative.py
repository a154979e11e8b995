"""Cooperative launches: how a kernel that calls `grid_barrier()` runs on a GPU.

Takes: a loaded `CudaKernel` whose module holds the grid barrier's arrival counter
(`ir.abi.GRID_COUNTER`, which `codegen.gridsync` adds only to such kernels). Gives:
`is_cooperative(image)`, `Ordering(device)` (one per such module) and
`CooperativeLaunch(kernel, ordering)`, a callable with the arguments of the driver's
`cuLaunchKernel` (so that `module` and `fastpath` launch through it alike) that launches
with `cuLaunchCooperativeKernel`.

Guarantees: every block of the grid is resident on the GPU at once, which a grid barrier
needs (a block that is not yet running could never arrive, and the others would wait
forever): before each launch the grid's block count is checked against the occupancy the
driver reports for this kernel, block size and dynamic shared memory
(`cuOccupancyMaxActiveBlocksPerMultiprocessor` x the multiprocessor count), and a larger
grid raises LaunchError naming both numbers. The occupancy is asked once per block size
and shared memory size. Launches of one module never overlap, since they share its
arrival counter: a launch on another stream than the module's last one waits for that
one first (an event recorded after each launch).
"""
from __future__ import annotations

import threading

from ..errors import LaunchError
from ..ir.abi import GRID_COUNTER
from . import driver


def is_cooperative(image: bytes) -> bool:
    """Whether a module's image (PTX text or cubin: the symbol's name is in both) holds a
    grid barrier's arrival counter."""
    return GRID_COUNTER.encode() in image


class Ordering:
    """The launches of one module's cooperative kernels, one after the other."""

    def __init__(self, device: int):
        self.device, self.lock = device, threading.Lock()
        self.stream, self.event = None, None  # the last launch's stream, an event after it

    def launch(self, start, stream: int):
        """`start()` (a launch on `stream`), after the module's last launch."""
        drv = driver.api()
        with self.lock:
            if self.stream is not None and stream != self.stream:
                driver.check(drv.cuStreamWaitEvent(stream, self.event, 0), "cuStreamWaitEvent")
            result = start()
            if not result[0]:
                if self.event is None:
                    with driver.on_device(self.device):
                        self.event = driver.check(drv.cuEventCreate(
                            drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
                driver.check(drv.cuEventRecord(self.event, stream), "cuEventRecord")
                self.stream = stream
            return result


class CooperativeLaunch:
    def __init__(self, kernel, ordering: Ordering):
        self.kernel, self.ordering = kernel, ordering
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
        return self.ordering.launch(lambda: driver.api().cuLaunchCooperativeKernel(
            function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params), stream)
