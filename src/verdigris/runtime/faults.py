"""Out-of-bounds faults of GPU kernels: the per-device fault block, and raising what it holds.

Takes: device ordinals; compiled kernels' fault tables (`register`). Gives:
- `block_address(device)`: the device address of the device's fault block, the hidden last
  argument of every verdigris kernel (`codegen.checks` describes the protocol), allocated
  once per device: two words of device memory (the claim, and the record's address) and the
  record itself in pinned host memory mapped into the device's address space.
- `register(kernel_id, name, sites)`: what a fault of that kernel needs to be reported
  (its name, and per access site its `Loc` and array name).
- `flag_view(device)`, `FLAG`: the record as a memoryview of words, and the index of the
  word that says a fault is waiting (what generated launchers test); `flag_address(device)`,
  that word's host address.
- `raise_pending(device)`: if a kernel on `device` recorded a fault, clear the block and
  raise `BoundsError` ("out of bounds: out[1024] with shape (1024,) in kernel axpy, block
  (4, 0, 0) thread (0, 0, 0)", the access's line with a caret, code VG302), the same
  message as the cpu backend's. Without a fault it costs one read of host memory (no
  driver call, no synchronization), so it runs at every synchronization point and at the
  start of every launch.

Guarantees: only the first fault since the last report is recorded (a compare-and-swap on
the device claims the block); the record is complete when its flag is seen (the kernel
fences at system scope before setting it); after a report the block is free again, and
the CUDA context stays usable (kernels never trap on a bounds fault).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

from ..codegen import checks
from ..errors import BoundsError
from . import driver

_lock = threading.Lock()
_blocks: dict = {}  # device -> _FaultBlock
_kernels: dict = {}  # kernel id -> (name, [(Loc, array name) per site])


@dataclass(frozen=True)
class _FaultBlock:
    device_ptr: int  # the claim word, then the record's device address
    record: ctypes.Array  # RECORD_WORDS int64 in mapped pinned host memory
    host_ptr: int


def _allocate(device: int) -> _FaultBlock:
    with driver.on_device(device):
        return _allocate_here(device)


def _allocate_here(device: int) -> _FaultBlock:
    drv = driver.api()
    nbytes = checks.RECORD_WORDS * 8
    flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
    host = int(driver.check(drv.cuMemHostAlloc(nbytes, flags), "cuMemHostAlloc"))
    ctypes.memset(host, 0, nbytes)
    mapped = int(driver.check(drv.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
    block = int(driver.check(drv.cuMemAlloc(checks.BLOCK_WORDS * 8), "cuMemAlloc"))
    words = (ctypes.c_int64 * checks.BLOCK_WORDS)(0, mapped)
    driver.check(drv.cuMemcpyHtoD(block, ctypes.addressof(words), ctypes.sizeof(words)), "cuMemcpyHtoD")
    return _FaultBlock(block, (ctypes.c_int64 * checks.RECORD_WORDS).from_address(host), host)


def block_address(device: int) -> int:
    block = _blocks.get(device)
    if block is None:
        with _lock:
            block = _blocks.get(device)
            if block is None:
                block = _blocks[device] = _allocate(device)
    return block.device_ptr


FLAG = checks.RECORD_FLAG


def flag_view(device: int) -> memoryview:
    """The device's fault record as int64 words, for launchers: `view[FLAG]` is nonzero
    when a fault waits to be raised (`raise_pending`). A memoryview reads faster than the
    ctypes array."""
    block_address(device)
    return memoryview(_blocks[device].record).cast("B").cast("q")


def flag_address(device: int) -> int:
    """The host address of that word (what the compiled launcher reads, `clauncher`)."""
    block_address(device)
    return _blocks[device].host_ptr + FLAG * 8


def register(kernel_id: int, name: str, sites: list) -> None:
    _kernels[kernel_id] = (name, sites)


def raise_pending(device: int) -> None:
    block = _blocks.get(device)
    if block is None or not block.record[checks.RECORD_FLAG]:
        return
    words = list(block.record)
    _clear(device, block)
    raise _error(words)


def _clear(device: int, block: _FaultBlock) -> None:
    drv = driver.api()
    with driver.on_device(device):
        driver.check(drv.cuMemsetD32(block.device_ptr, 0, 2), "cuMemsetD32")  # the claim word
    ctypes.memset(block.host_ptr, 0, checks.RECORD_WORDS * 8)


def _error(words: list) -> BoundsError:
    name, sites = _kernels.get(words[checks.RECORD_KERNEL], ("<unknown kernel>", []))
    site = words[checks.RECORD_SITE]
    loc, array = sites[site] if 0 <= site < len(sites) else (None, "<array>")
    ndim = min(words[checks.RECORD_NDIM], checks.RECORD_DIMS)
    index = words[checks.RECORD_INDEX:checks.RECORD_INDEX + ndim]
    shape = tuple(words[checks.RECORD_EXTENT:checks.RECORD_EXTENT + ndim])
    block = tuple(words[checks.RECORD_BLOCK:checks.RECORD_BLOCK + 3])
    thread = tuple(words[checks.RECORD_THREAD:checks.RECORD_THREAD + 3])
    return BoundsError.of(array, index, shape, f"kernel {name}, block {block} thread {thread}", loc)
