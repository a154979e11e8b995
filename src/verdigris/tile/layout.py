"""Distributed layouts: which thread of a block holds which elements of a tile.

Takes: tile shapes (padded to powers of two, `padded`), the block's warp count and a vector
width. Gives: `Layout`, a linear layout in the sense of Triton's LinearLayout restricted to
powers of two: every bit of a thread's register number, of its lane (5 bits) and of its
warp number has a *basis*, a coordinate tuple with at most one non-zero component, itself
a power of two. The element a (register, lane, warp) triple holds is the sum of the bases
of its set bits (the bits are disjoint, so sum and xor agree). A zero basis means the bit
does not move the element: threads differing only there hold the same elements (a
broadcast), and `owner_bits` names those bits so stores and atomics happen once.

- `blocked(shape, num_warps, vec)`: the default layout of a padded shape, as Triton's
  blocked layout: `vec` consecutive elements of the last axis per thread (one 16-byte
  access), then lanes, then warps along the last axis and on towards the first, then the
  remaining bits as more registers (repetitions), so that each warp's access of one
  register group is one contiguous, coalesced stretch of a row.
- `sliced(axes)`: the layout of a reduction's result (axes kept with extent 1): their
  components vanish, registers along them merge, lanes and warps along them broadcast.
- `squeezed(axis)`/`unsqueezed(axis)`/`permuted(perm)` (and `unit_reshaped`, for a whole
  reshape that only adds or drops unit axes): relabellings, which move no data.
- `stacked(layout, axis, count)`: tiles of one layout one after another along an axis,
  as more register bits (a concatenation that moves no data).
- `register_map(source)`: for a broadcast from `source` (this layout sliced on the
  stretched axes), the source register of each register; None when data must move.

Guarantees: layouts are immutable and hashable; equal layouts place every element alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

WARP_SIZE = 32
LANE_BITS = 5


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def padded(shape: tuple) -> tuple:
    return tuple(next_pow2(n) for n in shape)


def _unit(rank: int, axis: int, value: int) -> tuple:
    return tuple(value if k == axis else 0 for k in range(rank))


@dataclass(frozen=True)
class Layout:
    shape: tuple  # padded extents (powers of two)
    regs: tuple  # basis of each register-number bit
    lanes: tuple  # basis of each lane bit (LANE_BITS of them)
    warps: tuple  # basis of each warp-number bit

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_regs(self) -> int:
        return 1 << len(self.regs)

    def register_coords(self, r: int) -> tuple:
        """The compile-time part of register `r`'s coordinates."""
        return _combine(self.regs, r, self.rank)

    def thread_bits(self, axis: int) -> list:
        """[(source, bit, log2 of the coordinate step)] of the lane and warp bits that move
        along `axis`; source is "lane" or "warp"."""
        out = []
        for source, bases in (("lane", self.lanes), ("warp", self.warps)):
            for bit, basis in enumerate(bases):
                if basis[axis]:
                    out.append((source, bit, basis[axis].bit_length() - 1))
        return out

    def owner_bits(self) -> tuple:
        """(lane mask, warp mask) of the bits that do not move the element (broadcast)."""
        def mask(bases):
            return sum(1 << i for i, basis in enumerate(bases) if not any(basis))
        return mask(self.lanes), mask(self.warps)

    def vector_width(self) -> int:
        """How many leading registers are consecutive elements of the last axis."""
        width = 1
        for basis in self.regs:
            if basis != _unit(self.rank, self.rank - 1, width):
                break
            width *= 2
        return width

    # ------------------------------------------------------------------ transformations

    def sliced(self, axes) -> "Layout":
        axes = frozenset(axes)

        def drop(basis):
            return tuple(0 if k in axes else c for k, c in enumerate(basis))
        regs = tuple(drop(b) for b in self.regs if any(drop(b)))
        shape = tuple(1 if k in axes else n for k, n in enumerate(self.shape))
        return Layout(shape, regs, tuple(map(drop, self.lanes)), tuple(map(drop, self.warps)))

    def reduced_register_bits(self, axes) -> tuple:
        """Positions of the register bits that move along `axes` (merged by a reduction)."""
        return tuple(i for i, b in enumerate(self.regs) if any(b[k] for k in axes))

    def squeezed(self, axis: int) -> "Layout":
        assert self.shape[axis] == 1

        def cut(basis):
            return basis[:axis] + basis[axis + 1:]
        return Layout(cut(self.shape), tuple(map(cut, self.regs)), tuple(map(cut, self.lanes)),
                      tuple(map(cut, self.warps)))

    def unsqueezed(self, axis: int) -> "Layout":
        def put(basis, value=0):
            return basis[:axis] + (value,) + basis[axis:]
        return Layout(put(self.shape, 1), tuple(map(put, self.regs)), tuple(map(put, self.lanes)),
                      tuple(map(put, self.warps)))

    def permuted(self, perm: tuple) -> "Layout":
        def move(basis):
            return tuple(basis[p] for p in perm)
        return Layout(move(self.shape), tuple(map(move, self.regs)), tuple(map(move, self.lanes)),
                      tuple(map(move, self.warps)))

    def register_map(self, source: "Layout", stretched) -> list | None:
        """For each register of this layout, the register of `source` holding its element
        once the `stretched` axes are set to 0; None unless `source` is exactly this layout
        sliced on them (then every thread already holds what it needs)."""
        if self.sliced(stretched) != source:
            return None
        kept = [i for i, b in enumerate(self.regs) if any(c for k, c in enumerate(b) if k not in stretched)]
        return [sum(1 << j for j, i in enumerate(kept) if r >> i & 1) for r in range(self.num_regs)]


def stacked(layout: Layout, axis: int, count: int) -> Layout:
    """`count` (a power of two) tiles held in `layout` one after another along `axis`, each
    thread's registers of the first, then of the second, ...: register bits moving by the
    tile's extent, twice that, ... along `axis` (a concatenation that moves no data)."""
    extent = layout.shape[axis]
    more = tuple(_unit(layout.rank, axis, extent << j) for j in range(count.bit_length() - 1))
    shape = tuple(extent * count if k == axis else n for k, n in enumerate(layout.shape))
    return Layout(shape, layout.regs + more, layout.lanes, layout.warps)


def _combine(bases: tuple, bits: int, rank: int) -> tuple:
    coords = [0] * rank
    for i, basis in enumerate(bases):
        if bits >> i & 1:
            coords = [c + b for c, b in zip(coords, basis)]
    return tuple(coords)


def only_unit_axes_differ(shape: tuple, new_shape: tuple) -> bool:
    """Whether a reshape from `shape` to `new_shape` only adds or drops axes of extent 1
    (`unit_reshaped` then relabels a layout; no data moves)."""
    return [n for n in shape if n != 1] == [n for n in new_shape if n != 1]


def unit_reshaped(layout: Layout, shape: tuple, new_shape: tuple) -> Layout:
    """`layout` of a tile of `shape` relabelled for `new_shape`, which has the same extents
    but for unit axes (no data moves)."""
    for axis in reversed(range(len(shape))):
        if shape[axis] == 1:
            layout = layout.squeezed(axis)
    for axis, n in enumerate(new_shape):
        if n == 1:
            layout = layout.unsqueezed(axis)
    return layout


def blocked(shape: tuple, num_warps: int, vec: int) -> Layout:
    """The default layout of padded `shape` over `num_warps` warps (see the module doc)."""
    rank = len(shape)
    covered = [1] * rank  # extent already covered along each axis
    vec = min(vec, shape[-1])
    regs = [_unit(rank, rank - 1, 1 << i) for i in range(vec.bit_length() - 1)]
    covered[-1] = vec

    def next_basis():
        for axis in reversed(range(rank)):
            if covered[axis] < shape[axis]:
                basis = _unit(rank, axis, covered[axis])
                covered[axis] *= 2
                return basis
        return (0,) * rank  # the tile is smaller than the threads: broadcast

    lanes = tuple(next_basis() for _ in range(LANE_BITS))
    warps = tuple(next_basis() for _ in range((num_warps - 1).bit_length()))
    while prod(covered) < prod(shape):
        regs.append(next_basis())
    return Layout(tuple(shape), tuple(regs), lanes, warps)
