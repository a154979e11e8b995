"""The state of a SIMT launch on the cpu backend: what its chunks share, and one chunk.

Takes: a launch (kernel name, grid and block of three ints each, its arrays as `Memory`,
its scalars, its observer, and what the compiled program needs: parked-lane slots, shared
arrays, whether accesses carry barrier epochs, whether the grid runs as one chunk).
Gives `Launch` (what all chunks of one launch share, including how many blocks a chunk
holds), `Frame` (one chunk: whole blocks running in lock step, one lane per thread, with
the lanes' ids, variables, memory and barrier epochs), `assign` (a variable's new value on
the active lanes), `Observer` and `CHUNK_LANES`.

Guarantees: a chunk holds whole blocks, in order, at most `CHUNK_LANES` lanes (at least one
block), or every block of the grid for a kernel that calls `grid_barrier()`. Lanes are
numbered block by block, threads in linear order (x fastest); a chunk's shared arrays are
fresh, one copy per block; variables start as the launch's scalars.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable

import numpy as np

from . import warp
from .memory import Access, Memory

CHUNK_LANES = 1 << 16

Observer = Callable[[Access], None]


class Frame:
    """The state of one chunk: whole blocks running in lock step, one lane per thread."""

    def __init__(self, launch: "Launch", first_block: int, n_blocks: int):
        lanes = n_blocks * launch.threads
        self.lanes = lanes
        self.kernel_name = launch.kernel_name
        self.observer = launch.observer
        self.env = dict(launch.scalars)  # variable -> register-form value (lanes or scalar)
        self.memory = dict(launch.memory)  # array name -> Memory; locals join per chunk
        self.memory.update({ref.name: Memory.shared(ref, n_blocks, shape)
                            for ref, shape in launch.shared})
        self.slots = [None] * launch.n_slots  # parked lanes of loops and regions
        self.changes = 0  # stores and memory-changing atomics so far (`memory`; the spin test)
        self.lane = launch.lane[:lanes]
        self.lane_thread = launch.lane_thread[:lanes]
        self.thread_id = [t[:lanes] for t in launch.thread_id]
        self.lane_block = np.repeat(np.arange(first_block, first_block + n_blocks), launch.threads)
        gx, gy, _ = launch.grid
        self.block_id = [(self.lane_block % gx).astype(np.int32),
                         (self.lane_block // gx % gy).astype(np.int32),
                         (self.lane_block // (gx * gy)).astype(np.int32)]
        self.block_dim = launch.block_dim
        self.grid_dim = launch.grid_dim
        self.block_slot = self.lane // launch.threads  # the lane's block within the chunk
        self.warps = warp.Warps(lanes, launch.threads, self.lane_thread)
        self.lane_id = [self.warps.lane_id]
        self.lane_warp = self.warps.of_lane
        # Barrier epochs per block and per warp, where shadow memory needs them.
        self.block_epoch = np.zeros(n_blocks, np.int64) if launch.epochs else None
        self.warp_epoch = np.zeros(len(self.warps.starts), np.int64) if launch.epochs else None
        # grid barriers passed (a cooperative kernel's chunk is the whole grid), else None
        self.grid_epoch = np.zeros(1, np.int64) if launch.whole_grid else None

    def describe(self, lane: int) -> str:
        """'block (bx, by, bz) thread (tx, ty, tz)' of a lane, for messages."""
        block = tuple(int(b[lane]) for b in self.block_id)
        thread = tuple(int(t[lane]) for t in self.thread_id)
        return f"block {block} thread {thread}"


@dataclass
class Launch:
    """What all chunks of one launch share."""

    kernel_name: str
    grid: tuple
    block: tuple
    memory: dict
    scalars: dict
    observer: Observer
    n_slots: int
    shared: list  # (ArrayRef, shape) of each shared array
    epochs: bool  # whether accesses carry barrier epochs (the kernel has barriers or shared memory)
    whole_grid: bool  # one chunk of every block (the kernel calls grid_barrier())

    def __post_init__(self):
        self.threads, self.n_blocks = prod(self.block), prod(self.grid)
        self.blocks_per_chunk = self.n_blocks if self.whole_grid else \
            min(self.n_blocks, max(1, CHUNK_LANES // self.threads))
        lanes = self.blocks_per_chunk * self.threads
        self.lane = np.arange(lanes, dtype=np.int64)
        self.lane_thread = self.lane % self.threads
        bx, by, _ = self.block
        self.thread_id = [(self.lane_thread % bx).astype(np.int32),
                          (self.lane_thread // bx % by).astype(np.int32),
                          (self.lane_thread // (bx * by)).astype(np.int32)]
        self.block_dim = tuple(np.int32(n) for n in self.block)
        self.grid_dim = tuple(np.int32(n) for n in self.grid)


def assign(fr, name, value, mask, undefined):
    """Give active lanes of variable `name` the value; other lanes keep theirs."""
    fr.env[name] = value if mask.all() else np.where(mask, value, fr.env.get(name, undefined))
