"""Where tensor cores leave a product: the accumulator layouts of `mma.sync` and `wgmma`.

Takes: a padded result shape (M, N) and the block's warp count. Gives `Layout`s (the linear
layouts of `layout`, so everything else of the tile lowering reads them: elementwise ops,
reductions, broadcasts, stores, conversions) and the geometry the engines need:
- `SyncGeometry` (mma.sync m16n8): warps split M in 16-row slices first (each warp then
  owns whole rows, so row reductions stay inside a warp), the warps left over split N (at
  least 16 columns each); every warp holds `m_tiles` x `n_tiles` 16x8 tiles, four float32
  registers each: register 4*(j + n_tiles*i) + (2h + e) is row 16*i*WM + 8h + lane/4 (+ the
  warp's row), column 8j + 2*(lane%4) + e (+ the warp's column).
- `GroupGeometry` (wgmma m64nN): warpgroups of 4 warps split M in 64-row blocks (N when M
  is 64), each warp of a group owning 16 rows of each block; per instruction N is at most
  256. Register order within one instruction is wgmma's (d[4j + 2h + e] as above).
- `a_layout(geometry, k, k_step)`: the layout in which wgmma can take an (M x k) A operand
  straight from registers (an earlier product's accumulator layout, as attention's
  probabilities), and `a_fragments(layout, geometry, k, k_step)`: which registers make
  each m64 x k_step fragment (k16 for 16-bit types, k32 for fp8).
Guarantees: every element of the padded shape is held by exactly one (register, lane,
warp) up to warps left over (zero bases: they hold copies).
"""
from __future__ import annotations

from dataclasses import dataclass

from .layout import Layout


def _log2(n: int) -> int:
    return n.bit_length() - 1


LANES = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))


@dataclass(frozen=True)
class SyncGeometry:
    m: int
    n: int
    warps: int

    @property
    def warps_m(self) -> int:
        return min(self.warps, self.m // 16)

    @property
    def warps_n(self) -> int:
        return max(1, min(self.warps // self.warps_m, self.n // 16))

    @property
    def warp_rows(self) -> int:
        return self.m // self.warps_m

    @property
    def warp_cols(self) -> int:
        return self.n // self.warps_n

    @property
    def m_tiles(self) -> int:
        return self.warp_rows // 16

    @property
    def n_tiles(self) -> int:
        return self.warp_cols // 8

    def layout(self) -> Layout:
        wm, wn = self.warps_m, self.warps_n
        regs = [(0, 1), (8, 0)] + [(0, 8 << b) for b in range(_log2(self.n_tiles))] \
            + [(16 * wm << b, 0) for b in range(_log2(self.m_tiles))]
        warps = [(16 << b, 0) for b in range(_log2(wm))] \
            + [(0, self.warp_cols << b) for b in range(_log2(wn))]
        warps += [(0, 0)] * (_log2(self.warps) - len(warps))
        return Layout((self.m, self.n), tuple(regs), LANES, tuple(warps))


def sync_fits(m: int, n: int, k: int, k_step: int) -> bool:
    return m >= 16 and n >= 16 and k >= k_step


@dataclass(frozen=True)
class GroupGeometry:
    m: int
    n: int
    warps: int

    @property
    def groups(self) -> int:
        return self.warps // 4

    @property
    def groups_m(self) -> int:
        return min(self.groups, self.m // 64)

    @property
    def groups_n(self) -> int:
        return self.groups // self.groups_m

    @property
    def group_rows(self) -> int:
        return self.m // self.groups_m

    @property
    def group_cols(self) -> int:
        return self.n // self.groups_n

    @property
    def inst_n(self) -> int:
        return min(self.group_cols, 256)

    @property
    def n_blocks(self) -> int:
        return self.group_cols // self.inst_n

    @property
    def m_blocks(self) -> int:
        return self.group_rows // 64

    def layout(self) -> Layout:
        regs = [(0, 1), (8, 0)] + [(0, 8 << b) for b in range(_log2(self.inst_n // 8))] \
            + [(0, self.inst_n << b) for b in range(_log2(self.n_blocks))] \
            + [(64 << b, 0) for b in range(_log2(self.m_blocks))]
        warps = [(16, 0), (32, 0)] + [(self.group_rows << b, 0) for b in range(_log2(self.groups_m))] \
            + [(0, self.group_cols << b) for b in range(_log2(self.groups_n))]
        return Layout((self.m, self.n), tuple(regs), LANES, tuple(warps))


def group_fits(m: int, n: int, k: int, k_step: int, warps: int) -> bool:
    """Whether wgmma can carry an (m x k) @ (k x n) product on `warps` warps: whole
    warpgroups, 64-row blocks, and each group's columns 64 or more when N is split (a
    group's instructions then start on a swizzle panel) and a multiple of 256 above 256."""
    if warps < 4 or warps % 4 or m < 64 or k < k_step or n < 16:
        return False
    g = GroupGeometry(m, n, warps)
    if g.groups_n > 1 and g.group_cols < 64:
        return False
    return g.group_cols % g.inst_n == 0


def a_layout(g: GroupGeometry, k: int, k_step: int = 16):
    """The accumulator layout of an (M x k) product on the same warps whose registers are
    the A fragments of `g`'s instructions, `k_step` columns each (each warpgroup holding
    whole rows of its own 64-row blocks); None when there is none."""
    if k % k_step or k > 256 or not group_fits(g.m, k, 16, 16, g.warps):
        return None
    layout = GroupGeometry(g.m, k, g.warps).layout()
    return layout if a_fragments(layout, g, k, k_step) is not None else None


def a_fragments(layout: Layout, g: GroupGeometry, k: int, k_step: int = 16):
    """For a product of geometry `g` whose A (M x k) is in registers of `layout`: per
    (64-row block mb, k step ks), mb-major, the registers of the fragment's elements this
    thread holds, in the accumulator's pairs: for each 8-column block j of the step, rows
    +0 and +8 (h), columns 8j + 2 * (lane % 4) + e (e = 0, 1), j-major. For 16-bit types
    (k16) pair (j, h) is word 2j + h of wgmma's A (mma.sync's A layout); fp8's words (k32)
    take 4 consecutive columns, which `register_a` gathers from the lanes of a quad. None
    unless each warp holds exactly its rows of the product, whole."""
    warps = ((16, 0), (32, 0)) + tuple((g.group_rows << b, 0) for b in range(_log2(g.groups_m))) \
        + ((0, 0),) * _log2(g.groups_n)
    if layout.shape != (g.m, k) or layout.lanes != LANES or layout.warps != warps or k % k_step:
        return None
    where = {layout.register_coords(r): r for r in range(layout.num_regs)}
    out = []
    for mb in range(g.m_blocks):
        for ks in range(k // k_step):
            regs = [where.get((64 * mb + 8 * h, k_step * ks + 8 * j + e))
                    for j in range(k_step // 8) for h in (0, 1) for e in (0, 1)]
            if None in regs:
                return None
            out.append(regs)
    return out
