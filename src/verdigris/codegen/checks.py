"""Bounds checks on the GPU: which accesses get one, and the fault record they fill in.

Takes: a specialized `ir.Kernel` (with `facts["in_bounds"]` from `safety.bounds`, the ids
of accesses proven in bounds). Gives:
- `sites(kernel)`: every Load, Store, Atomic and tile Scatter of the body, in a fixed
  (walk) order; a fault names its access by its position here, so the host can find its
  `Loc` again without the compiled code (`runtime.faults` keeps the table per kernel id).
- `checked_sites(kernel)`: the positions of the accesses that carry a check (all but the
  proven ones), a deterministic fingerprint of what the compiled code checks (cache keys).
- `as_launched(kernel, checked, tma)`: the kernel as a launch compiles it (its facts a copy).
- `kernel_id(kernel)`: a 31-bit number baked into the kernel's fault path, the CRC of its
  printed IR, so a fault read back at the next synchronization names its kernel.
- The fault record's layout (`RECORD_*`), shared with `runtime.faults`.

The hidden parameter: every compiled kernel takes one pointer more than `abi_params` lists,
appended last: `vg.faults`, the device's fault block (`runtime.faults`). Word 0 is the
claim (0 free, 1 taken), word 1 the address of the record, which lives in host memory
mapped into the device's address space (so the host sees a fault without a driver call).
The first thread to fault claims the block with a compare-and-swap, writes the record,
fences at system scope, then sets the record's flag; later faults are not recorded. A
faulting access is not performed: a load yields 0, a store or atomic is skipped, and the
kernel goes on (no trap, so the CUDA context stays usable).
"""
from __future__ import annotations

import dataclasses
import zlib

from ..ir import nodes as N
from ..ir import tiles as X
from ..ir.printer import format_kernel

FAULT_PARAM = "vg.faults"
RECORD_DIMS = 8  # indices and extents recorded per fault; higher axes are left out
# int64 words of the record: flag, kernel id, site, block xyz, thread xyz, ndim, the
# index per axis, the extent per axis.
RECORD_FLAG, RECORD_KERNEL, RECORD_SITE, RECORD_BLOCK, RECORD_THREAD, RECORD_NDIM = 0, 1, 2, 3, 6, 9
RECORD_INDEX = 10
RECORD_EXTENT = RECORD_INDEX + RECORD_DIMS
RECORD_WORDS = RECORD_EXTENT + RECORD_DIMS
BLOCK_WORDS = 2  # the device block: claim, record address

# TileLoad and TileStore never fault (edge tiles are masked); they are sites so that a proof
# that a tile lies inside its array (no mask) is part of what `checked_sites` fingerprints
ACCESS_NODES = (N.Load, N.Store, N.Atomic, X.Scatter, X.TileLoad, X.TileStore)


def sites(kernel: N.Kernel) -> list:
    from ..frontend import walk

    return [n for n in walk(kernel.body) if isinstance(n, ACCESS_NODES)]


def checked_sites(kernel: N.Kernel) -> tuple:
    proven = kernel.facts.get("in_bounds", frozenset())
    return tuple(i for i, n in enumerate(sites(kernel)) if id(n) not in proven)


def as_launched(kernel: N.Kernel, checked: bool, tma: bool = True) -> N.Kernel:
    """`kernel` with the facts a launch compiles it with, on a copy of its facts (the
    specialization's own may still be growing on the safety check's thread): written
    arrays are `noalias`, since every launch passes the alias check first; `checked`: no
    access counts as proven in bounds (the variant for launches that break the proofs'
    shape conditions, so no index is tested in 32 bits either); `tma` False: matrix products
    stream without the copy engine."""
    facts = {**kernel.facts, "noalias": True}
    if checked:
        facts["in_bounds"] = frozenset()
        facts["narrow_extents"] = ()
    if not tma:
        facts["tma"] = False
    return dataclasses.replace(kernel, facts=facts)


def kernel_id(kernel: N.Kernel) -> int:
    return zlib.crc32(format_kernel(kernel).encode()) & 0x7FFFFFFF
