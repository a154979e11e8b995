"""The launch shapes a kernel's meaning covers: CUDA's limits on grids and blocks.

Takes: nothing. Gives: `LaunchLimits` and `MODEL`, the limits of every GPU verdigris targets
(sm_80 to sm_90: grid x < 2**31, y and z <= 65535; block x and y <= 1024, z <= 64, at most
1024 threads), `MAX_AXIS_THREADS`, the threads along one axis of a launch (grid times
block), which fit in int32, and `MAX_EXTENT`, an array argument's extent along one axis.

Guarantees: the race and bounds proofs assume no more than these (`safety.algebra` takes its
ranges of `grid_dim`, `block_dim` and array extents from here), and every launch is refused,
on every backend, when its grid, block or an array passes them (`runtime.limits`); on the cuda backend the
device's own limits are checked too, where they are smaller.
"""
from __future__ import annotations

from typing import NamedTuple

MAX_AXIS_THREADS = 2**31 - 1  # grid_dim(a) * block_dim(a): thread ids along an axis fit in int32
# An array argument's extent along any axis: 2**40 elements are 1 TiB of bytes, past any
# GPU's memory; only a broadcast view (a zero stride) is longer, and a launch refuses it.
# Below it, a tile count times a tile size, or a row times a width, stays far from 2**63.
MAX_EXTENT = 2**40 - 1
MAX_ELEMENTS = 2**63 - 1  # an array argument's elements in all (its extents other than 0)


class LaunchLimits(NamedTuple):
    grid: tuple  # the most blocks along x, y, z
    block: tuple  # the most threads along x, y, z
    block_threads: int  # the most threads in one block


MODEL = LaunchLimits(grid=(2**31 - 1, 65535, 65535), block=(1024, 1024, 64), block_threads=1024)
