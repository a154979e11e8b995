"""Where a tile kernel's shared buffers lie when they are past the static 48 KiB.

Takes: the most bytes one user of `TileLowering.shared` asked for in a first lowering
(and where), the dynamic shared memory the kernel uses otherwise (the matrix products'),
and the target. Gives: `exchange(...) -> Exchange` for the second lowering, and
`shared_per_block(target)`, the most shared memory a block may have there.
Guarantees: the buffers lie after the other dynamic shared memory, 16-byte aligned; two
where they fit the target's block, else one; else a CompileError with a caret at the user
and the limit named.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompileError

MAX_DYNAMIC_SHARED = 227 * 1024  # shared memory a block may opt in to on sm_90
SHARED_PER_BLOCK = {"sm_80": 163 * 1024, "sm_89": 99 * 1024}  # on the other targets
DYNAMIC_SHARED_SYMBOL = "vg_dynamic_shared_"  # + the bytes every launch must give
# (`TileLowering.run`)


def shared_per_block(target: str) -> int:
    """The most shared memory (static and dynamic) a block may have on `target`."""
    return SHARED_PER_BLOCK.get(target, MAX_DYNAMIC_SHARED)


@dataclass(frozen=True)
class Exchange:
    """Where the shared buffers of `TileLowering.shared` lie when the two do not fit the
    static 48 KiB: `buffers` (2 taking turns, or 1 with a barrier after each user) of
    `size` bytes each in dynamic shared memory from `offset` (after the products' part)."""

    offset: int
    size: int
    buffers: int

    @property
    def end(self) -> int:
        return self.offset + self.buffers * self.size


def exchange(nbytes: int, site, before: int, target: str) -> Exchange:
    """Two buffers of `nbytes` after the `before` bytes of dynamic shared memory the
    kernel uses otherwise, else one (a barrier after each user); past the target's limit,
    a CompileError at `site` (the user that asked for the most)."""
    size = -(-nbytes // 16) * 16
    offset = -(-before // 16) * 16
    limit = shared_per_block(target)
    for buffers in (2, 1):
        if offset + buffers * size <= limit:
            return Exchange(offset, size, buffers)
    besides = f" besides the {offset} bytes of the matrix products'" if offset else ""
    raise CompileError(
        f"this tile operation moves {nbytes} bytes through shared memory{besides}, "
        f"more than the {limit // 1024} KiB ({limit} bytes) a block has on {target}",
        site, hint="use a smaller tile here (or split it: a loop over parts of the tile)")
