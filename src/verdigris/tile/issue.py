"""The instructions of one matrix product, per engine: `mma_sync` (ldmatrix + mma.sync over
staged operands), `wgmma` (descriptors, or A from registers; waits unless the loop keeps
products in flight) and `fma` (a K loop of fused multiply-adds over operands in shared
memory). `K_STEP`: each engine's K per instruction, per operand kind.

Takes: the lowering (`matmul.MmaLowering`: its builder, warp and lane, plan, shared
memory), the product's `mma_plan.DotPlan`, the accumulator's registers and where the operands
are. Gives: the accumulator's new registers. The choice of engine, layouts and shared
memory is `matmul.plan`'s; this module only issues.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..codegen.dtypes import DOUBLE, FLOAT, I8, I32, I64, i32
from ..ir import tiles as X
from . import operand, ptx
from .layout import padded
from .values import TileValue

if TYPE_CHECKING:
    from .mma_plan import DotPlan

K_STEP = {"wgmma": {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 32, "float8_e5m2": 32,
                    "tf32": 8},
          "mma.sync": {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 16,
                       "float8_e5m2": 16, "tf32": 8}}


# ----------------------------------------------------------------------------- mma.sync


def _lane_parts(low):
    """(matrix index i = lane / 8, row within it j = lane % 8) as i32 values."""
    b = low.b
    return b.lshr(low.lane, ir.Constant(I32, 3)), b.and_(low.lane, ir.Constant(I32, 7))



def mma_sync(low, dot: DotPlan, acc: list, a_stored, a_base, a_kmajor, b_stored, b_base, b_kmajor) -> list:
    """ldmatrix + mma.sync over the staged operands: this warp's m_tiles x n_tiles tiles."""
    b, em, g = low.b, low.em, dot.geometry
    k_step = K_STEP["mma.sync"][dot.kind]
    half = k_step // 2  # columns of one 8x8 b16 matrix, in elements (4 for tf32)
    wm = b.and_(low.warp, i32(g.warps_m - 1))
    wn = b.and_(b.lshr(low.warp, i32(g.warps_m.bit_length() - 1)), i32(g.warps_n - 1))
    row0 = b.mul(wm, i32(16))
    col0 = b.mul(wn, i32(g.warp_cols))
    mat, j = _lane_parts(low)
    lo_bit = b.and_(mat, i32(1))
    hi_bit = b.lshr(mat, i32(1))
    sync_kind = "float16" if dot.staged == "float16" and dot.kind != "float16" else dot.kind
    k_total = a_stored.cols if a_kmajor else a_stored.rows
    regs = list(acc)

    def address(stored, base, row, col):
        offset = stored.chunk_offset(b, row, col)
        return ptx.shared_address(b, b.gep(base, [b.zext(offset, I64)], inbounds=True, source_etype=I8))

    for ks in range(k_total // k_step):
        k0 = ks * k_step
        a_frags = []
        for i in range(g.m_tiles):
            m0 = b.add(row0, i32(16 * g.warps_m * i))
            if a_kmajor:  # rows m: matrices (m +0/+8) x (k +0/+half)
                addr = address(a_stored, a_base, b.add(b.add(m0, b.mul(lo_bit, i32(8))), j),
                               b.add(i32(k0), b.mul(hi_bit, i32(half))))
            else:  # rows k, columns m: transposed loads
                addr = address(a_stored, a_base, b.add(b.add(i32(k0), b.mul(hi_bit, i32(8))), j),
                               b.add(m0, b.mul(lo_bit, i32(8))))
            a_frags.append(ptx.ldmatrix(em, addr, trans=not a_kmajor))
        b_frags = []
        for jp in range(0, g.n_tiles, 2):
            n0 = b.add(col0, i32(8 * jp))
            if b_kmajor:  # rows n: matrices (n +0/+8) x (k +0/+half)
                addr = address(b_stored, b_base, b.add(b.add(n0, b.mul(hi_bit, i32(8))), j),
                               b.add(i32(k0), b.mul(lo_bit, i32(half))))
            else:  # rows k, columns n
                addr = address(b_stored, b_base, b.add(b.add(i32(k0), b.mul(lo_bit, i32(8))), j),
                               b.add(n0, b.mul(hi_bit, i32(8))))
            r = ptx.ldmatrix(em, addr, trans=not b_kmajor)
            b_frags += [r[0:2], r[2:4]]
        for i in range(g.m_tiles):
            for jj in range(g.n_tiles):
                base = 4 * (jj + g.n_tiles * i)
                regs[base:base + 4] = ptx.mma_sync(em, sync_kind, a_frags[i], b_frags[jj], regs[base:base + 4])
    return regs


# ----------------------------------------------------------------------------- wgmma


def wgmma(low, dot: DotPlan, acc: list, a_given, b_given, fragments=None, zero=False) -> list:
    """wgmma over operands in shared memory (`a_given`, `b_given`: (stored, base pointer,
    K-major)), or A from registers (`fragments`: per (m block, k step) four packed words):
    each warpgroup its m_blocks x n_blocks instructions per k step. Waits for completion
    before returning, except in an accumulating streamed loop (`low.pending`). `zero`: the
    accumulator starts at zero (the first k step does not read it)."""
    b, em, g = low.b, low.em, dot.geometry
    k_step = K_STEP["wgmma"][dot.kind]
    b_stored, b_base, b_kmajor = b_given
    size = b_stored.size
    group = b.lshr(low.warp, i32(2))
    gm = b.and_(group, i32(g.groups_m - 1))
    gn = b.lshr(group, i32(g.groups_m.bit_length() - 1))
    row0 = b.mul(gm, i32(g.group_rows))
    col0 = b.mul(gn, i32(g.group_cols))
    b_addr, b_bits = ptx.shared_address(b, b_base), b_stored.descriptor_bits(b_kmajor)
    k_total = b_stored.rows if not b_kmajor else b_stored.cols
    steps = k_total // k_step
    if fragments is None:
        a_stored, a_base, a_kmajor = a_given
        a_addr, a_bits = ptx.shared_address(b, a_base), a_stored.descriptor_bits(a_kmajor)
        words = []
    else:  # in registers before the fence, as the accumulators
        words = ptx.pin(em, [w for frag in fragments for w in frag])
    count = g.inst_n // 2
    regs = ptx.pin(em, list(acc))
    if low.turns:  # warp groups issue their products in turns (`pipeline.take_turns`)
        ptx.named_barrier(em, low.turns[0], 256)
    ptx.wgmma_fence(em)
    for ks in range(steps):
        k0 = ks * k_step
        accumulate = ir.Constant(I32, 0 if zero and ks == 0 else 1)
        for mb in range(g.m_blocks):
            m0 = b.add(row0, i32(64 * mb))
            if fragments is None:
                desc_a = operand.descriptor(b, b.add(a_addr, _start(b, a_stored, a_kmajor, m0, k0, size)), a_bits)
            for nb in range(g.n_blocks):
                n0 = b.add(col0, i32(g.inst_n * nb))
                desc_b = operand.descriptor(b, b.add(b_addr, _start(b, b_stored, b_kmajor, n0, k0, size)), b_bits)
                first = count * (nb + g.n_blocks * mb)
                if fragments is None:
                    regs[first:first + count] = ptx.wgmma(
                        em, dot.kind, dot.b_kind or dot.kind, g.inst_n, regs[first:first + count], desc_a, desc_b,
                        accumulate, int(not a_kmajor), int(not b_kmajor))
                else:
                    frag = 4 * (ks + steps * mb)
                    regs[first:first + count] = ptx.wgmma_ra(
                        em, dot.kind, dot.b_kind or dot.kind, g.inst_n, regs[first:first + count],
                        words[frag:frag + 4], desc_b,
                        accumulate, int(not b_kmajor))
    ptx.wgmma_commit(em)
    if low.turns:
        ptx.named_barrier(em, low.turns[1], 256, arrive=True)
    if low.pending:  # an accumulating streamed loop: one group in flight (`pipeline`)
        ptx.wgmma_wait(em, 1)
        return regs
    return ptx.wgmma_wait(em, 0, regs)


def _start(b, stored: operand.Stored, k_major: bool, mn0: ir.Value, k0: int, size: int) -> ir.Value:
    """The unswizzled byte offset where an instruction's operand starts: row mn0 (a multiple
    of 64) at column k0 (K-major), or row k0 at column mn0 (MN-major; a panel start)."""
    p, pc = stored.panel_bytes, stored.panel_cols
    if k_major:
        fixed = (k0 // pc) * stored.rows * p + (k0 % pc) * size
        return b.add(b.mul(mn0, i32(p)), i32(fixed))
    panel = b.lshr(mn0, i32(pc.bit_length() - 1))
    return b.add(b.mul(panel, i32(stored.rows * p)), i32(k0 * p))


# ----------------------------------------------------------------------------- fma


def fma(low, e: X.TileDot, dot: DotPlan, acc: TileValue) -> TileValue:
    """acc[m, n] += a[m, k] * b[k, n] for k in a loop, operands read from shared memory."""
    b, em = low.b, low.em
    wide = DOUBLE if e.dtype.bits == 64 else FLOAT
    size = 8 if wide == DOUBLE else 4
    (m, k), n = padded(e.a.shape), padded(e.b.shape)[1]
    a_base = low.shared_dynamic(low.plan.staging_offset)
    b_base = low.shared_dynamic(low.plan.staging_offset + operand.aligned(m * k * size))
    for node, base, pitch in ((e.a, a_base, k), (e.b, b_base, n)):
        value = low.tile(node)
        for r, reg in enumerate(value.regs):
            row, col = low.coords(value.layout, r)
            reg = reg if reg.type == wide else b.fpext(reg, wide)
            index = b.add(b.mul(row, i32(pitch)), col)
            b.store(reg, b.gep(base, [b.zext(index, I64)], inbounds=True, source_etype=wide))
    low.barrier()
    layout = dot.layout
    coords = [low.coords(layout, r) for r in range(layout.num_regs)]
    start = b.block
    header, body, done = low._block("fma.k"), low._block("fma.body"), low._block("fma.done")
    b.branch(header)
    b.position_at_end(header)
    kk = b.phi(I32)
    kk.add_incoming(i32(0), start)
    phis = []
    for reg in acc.regs:
        phi = b.phi(wide)
        phi.add_incoming(reg if reg.type == wide else b.fpext(reg, wide), start)
        phis.append(phi)
    b.cbranch(b.icmp_unsigned("<", kk, i32(e.a.shape[1])), body, done)
    b.position_at_end(body)
    updated = []
    for phi, (row, col) in zip(phis, coords):
        x = b.load(b.gep(a_base, [b.zext(b.add(b.mul(row, i32(k)), kk), I64)], inbounds=True,
                         source_etype=wide), typ=wide)
        y = b.load(b.gep(b_base, [b.zext(b.add(b.mul(kk, i32(n)), col), I64)], inbounds=True,
                         source_etype=wide), typ=wide)
        updated.append(em.call(f"llvm.fma.{wide.intrinsic_name}", wide, x, y, phi))
    following = b.add(kk, i32(1))
    b.branch(header)
    kk.add_incoming(following, b.block)
    for phi, value in zip(phis, updated):
        phi.add_incoming(value, b.block)
    b.position_at_end(done)
    low.barrier()
    return TileValue(layout, list(phis), e.dtype)
