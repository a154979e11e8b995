"""Launch shapes past the limits the proofs assume are refused, on every backend.

Takes: a kernel's name, the grid and block of a launch (3-tuples; a tile launch's block is
None until its lowering chooses one) and, on the cuda backend, the device. Gives:
`check_shape(name, grid, block)`, against `ir.limits.MODEL` (what the race and bounds
proofs assume; the cpu backend runs as the GPU would, so it refuses the same launches), and
`check_device(name, grid, block, device)`, against the device's own limits (read from the
driver once per device) where they are smaller, and `check_extents(name, names, infos)`,
each array argument's extents against `ir.limits.MAX_EXTENT` (only a broadcast view passes
it: no memory holds 2**40 elements along one axis).

Guarantees: a launch that passes both has a grid and block that the proofs' model covers and
the device accepts; any other raises `LaunchError` naming the axis, the value and the limit,
located at the user's launch line. A grid with no blocks passes (it launches nothing; the
launch still specializes, checks and compiles the kernel).
"""
from __future__ import annotations

import math

from ..errors import LaunchError
from ..ir.limits import MAX_AXIS_THREADS, MAX_ELEMENTS, MAX_EXTENT, MODEL, LaunchLimits

AXES = "xyz"
_device_limits: dict = {}  # device ordinal -> its LaunchLimits, each at most MODEL's


def check_shape(name: str, grid: tuple, block: tuple | None,
                limits: LaunchLimits = MODEL, where: str = "") -> None:
    """LaunchError unless `grid` and `block` are within `limits` (and, along each axis, grid
    times block threads fit in int32)."""
    for axis in range(3):
        if grid[axis] > limits.grid[axis]:
            raise LaunchError(
                f"{name}: the grid has {grid[axis]} blocks along {AXES[axis]}, past the limit "
                f"of {limits.grid[axis]}{where}", hint="use a grid-stride loop over a smaller "
                "grid, or put the long axis on x (up to 2**31 - 1 blocks)")
    if block is None:
        return
    for axis in range(3):
        if block[axis] > limits.block[axis]:
            raise LaunchError(
                f"{name}: the block has {block[axis]} threads along {AXES[axis]}, past the "
                f"limit of {limits.block[axis]}{where}",
                hint=f"a block has at most {limits.block_threads} threads, at most "
                     f"{limits.block[0]}, {limits.block[1]} and {limits.block[2]} along x, y, z")
    threads = block[0] * block[1] * block[2]
    if threads > limits.block_threads:
        raise LaunchError(
            f"{name}: a block of {block} has {threads} threads, past the limit of "
            f"{limits.block_threads}{where}",
            hint=f"a block has at most {limits.block_threads} threads, e.g. 256 or (16, 16)")
    for axis in range(3):
        if grid[axis] * block[axis] > MAX_AXIS_THREADS:
            raise LaunchError(
                f"{name}: grid {grid} x block {block} has {grid[axis] * block[axis]} threads "
                f"along {AXES[axis]}, past the limit of {MAX_AXIS_THREADS} (thread ids along an "
                "axis are int32)", hint="use a grid-stride loop over a smaller grid")


def check_extents(name: str, names: list, infos: list) -> None:
    """LaunchError where an array argument (`infos`, None for the others) is longer than
    `MAX_EXTENT` along an axis, or whose extents other than 0 multiply past `MAX_ELEMENTS`
    (an array that holds no element, or one described by a foreign interface, may claim
    any): the proofs take both, so that a tile count times a tile size, or a row times a
    width, is exact in int64."""
    for param, info in zip(names, infos):
        shape = getattr(info, "shape", ())
        for axis, extent in enumerate(shape):
            if extent > MAX_EXTENT:
                raise LaunchError(
                    f"{name}: argument {param!r} has {extent} elements along axis {axis}, past "
                    f"the limit of 2**40 - 1 = {MAX_EXTENT} of one axis", hint="a view that long "
                    "is a broadcast (a zero stride): pass the array it repeats and index it")
        if math.prod(n for n in shape if n) > MAX_ELEMENTS:
            raise LaunchError(f"{name}: argument {param!r} of shape {tuple(shape)} has extents "
                              f"whose product passes 2**63 - 1", hint="pass an array whose "
                              "shape an array library would allow")


def check_device(name: str, grid: tuple, block: tuple, device: int) -> None:
    """`check_shape` against the device's own limits (each at most the model's)."""
    limits = _device_limits.get(device)
    if limits is None:
        limits = _device_limits[device] = _query(device)
    if limits != MODEL:
        check_shape(name, grid, block, limits, _describe_device(device))


def _describe_device(device: int) -> str:
    from . import driver

    return f" of GPU {device} ({driver.properties(device).name})"


def _query(device: int) -> LaunchLimits:
    from . import driver

    drv = driver.api()
    dev = driver._device(device)

    def attribute(name: str) -> int:
        attr = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return driver.check(drv.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute")

    grid = tuple(min(attribute(f"MAX_GRID_DIM_{a}"), m) for a, m in zip("XYZ", MODEL.grid))
    block = tuple(min(attribute(f"MAX_BLOCK_DIM_{a}"), m) for a, m in zip("XYZ", MODEL.block))
    return LaunchLimits(grid, block, min(attribute("MAX_THREADS_PER_BLOCK"), MODEL.block_threads))
