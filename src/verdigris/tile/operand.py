"""Matrix-product operands in shared memory: one swizzled format for every reader and writer.

Takes: the shape of a *stored* matrix (rows x cols, cols contiguous; powers of two), the
element size, and a shared-memory base. Gives: `Stored` (byte offsets, swizzle mode, the
wgmma descriptor fields, the byte size) and `stage(low, stored, base, value, transposed,
convert)`, which writes a tile held in registers into that format.

The format is the one the copy engine (TMA with SWIZZLE_32B/64B/128B) writes and wgmma and
ldmatrix read: columns are cut into *panels* of P = min(cols * size, 128) bytes per row;
panel p holds columns [p*P/size, (p+1)*P/size) of every row, rows P bytes apart; inside a
panel the 16-byte chunk of each row is XORed with bits 7.. of its byte offset
(cute's Swizzle<log2(P/16), 4, 3>), so that 8 consecutive rows read at one column hit 8
different bank groups. The base must be 1024-byte aligned (the swizzle is a function of
the absolute address bits, as the hardware applies it).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..codegen import fp8
from ..codegen.dtypes import BFLOAT, FLOAT, HALF, I8, I32, I64

SWIZZLE_MODE = {128: 1, 64: 2, 32: 3, 16: 0}  # panel bytes -> wgmma descriptor mode
BASE_ALIGN = 1024


@dataclass(frozen=True)
class Stored:
    rows: int
    cols: int
    size: int  # bytes per element

    @property
    def panel_bytes(self) -> int:
        return min(self.cols * self.size, 128)

    @property
    def panel_cols(self) -> int:
        return self.panel_bytes // self.size

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.size

    def offset(self, row: int, col: int) -> int:
        """The byte offset of element (row, col), as the swizzle places it."""
        p = self.panel_bytes
        within = row * p + (col % self.panel_cols) * self.size
        return (col // self.panel_cols) * self.rows * p + _swizzle(within, p)

    def chunk_offset(self, b, row: ir.Value, col: ir.Value) -> ir.Value:
        """`offset` at run time (i32 values); exact for any element, and the start of its
        16-byte chunk stays contiguous for elements of one aligned chunk."""
        p = self.panel_bytes
        shift = self.panel_cols.bit_length() - 1
        panel = b.lshr(col, ir.Constant(I32, shift))
        within = b.add(b.mul(row, ir.Constant(I32, p)),
                       b.mul(b.and_(col, ir.Constant(I32, self.panel_cols - 1)), ir.Constant(I32, self.size)))
        if p >= 32:
            mask = p // 16 - 1
            bits = b.and_(b.lshr(within, ir.Constant(I32, 7)), ir.Constant(I32, mask))
            within = b.xor(within, b.shl(bits, ir.Constant(I32, 4)))
        return b.add(b.mul(panel, ir.Constant(I32, self.rows * p)), within)

    # ---------------------------------------------------------------- wgmma descriptors

    def descriptor_bits(self, k_major: bool) -> int:
        """The constant fields (LBO, SBO, swizzle mode) of a wgmma descriptor of this
        matrix: K-major (rows are M or N, cols K) or MN-major (rows K, cols M or N)."""
        p = self.panel_bytes
        sbo = 8 * p  # the next 8 rows (K-major: of M/N; MN-major: of K)
        lbo = 16 if k_major else self.rows * p  # MN-major: the next panel of M/N
        return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWIZZLE_MODE[p] << 62)


def _swizzle(within: int, panel_bytes: int) -> int:
    if panel_bytes < 32:
        return within
    return within ^ (((within >> 7) & (panel_bytes // 16 - 1)) << 4)


def _run(layout, axis: int) -> int:
    """How many leading registers are consecutive elements along `axis`."""
    width = 1
    for basis in layout.regs:
        if basis != tuple(width if k == axis else 0 for k in range(layout.rank)):
            break
        width *= 2
    return width


def aligned(n: int, to: int = BASE_ALIGN) -> int:
    """`n` rounded up to a multiple of `to` (by default, a shared-memory base's alignment)."""
    return (n + to - 1) // to * to


def descriptor(b, address: ir.Value, bits: int) -> ir.Value:
    """A wgmma descriptor: shared address (i32) in bits 0-13 (>> 4), then `bits`."""
    start = b.lshr(b.and_(b.zext(address, I64), ir.Constant(I64, 0x3FFFF)), ir.Constant(I64, 4))
    return b.or_(start, ir.Constant(I64, bits))


# The LLVM element type of a staged dtype in shared memory (fp8: its byte, encoded from the
# float registers hold; wgmma reads fp8 K-major only, so a row-major B is staged this way)
_ELEMENT = {"bfloat16": BFLOAT, "float16": HALF, "float32": FLOAT,
            "float8_e4m3fn": I8, "float8_e5m2": I8}


def stage(low, stored: Stored, base: ir.Value, value, logical: tuple, transposed: bool,
          staged: str, tf32: bool = False) -> None:
    """Write `value` (a TileValue of an operand of logical shape `logical`, rows x cols of
    the operand) into `stored` at shared pointer `base`: element (r, c) of the operand goes to
    stored (c, r) when `transposed`. Elements past `logical` are written as zeros (the K
    padding must not add). `staged` names the stored element type; `tf32` stores float32
    as tf32 bits."""
    from . import ptx

    b, em, layout = low.b, low.em, value.layout
    ty = _ELEMENT[staged]
    padded = layout.shape
    zero = ir.Constant(FLOAT, 0.0) if value.regs[0].type == FLOAT else ir.Constant(value.regs[0].type, 0)
    width = max(1, min(_run(layout, 0 if transposed else 1), 16 // stored.size))
    for r0 in range(0, layout.num_regs, width):
        coords = low.coords(layout, r0)
        words = []
        for j in range(width):
            reg = value.regs[r0 + j]
            cj = low.coords(layout, r0 + j) if j else coords
            if tuple(logical) != tuple(padded):
                inside = None
                for c, n, m in zip(cj, logical, padded):
                    if n != m:
                        test = b.icmp_unsigned("<", c, ir.Constant(I32, n))
                        inside = test if inside is None else b.and_(inside, test)
                reg = b.select(inside, reg, zero)
            if tf32:
                words.append(ptx.cvt_tf32(em, reg))
            elif staged in fp8.FORMATS:  # registers hold it decoded: encoded below, exactly
                words.append(reg)
            elif reg.type != ty:
                words.append(b.fptrunc(reg, ty) if reg.type == FLOAT else b.fpext(reg, ty))
            else:
                words.append(reg)
        if staged in fp8.FORMATS:
            words = _fp8_bytes(low, words, staged)
        row, col = (coords[1], coords[0]) if transposed else (coords[0], coords[1])
        offset = stored.chunk_offset(b, row, col)
        pointer = b.gep(base, [b.zext(offset, I64)], inbounds=True, source_etype=I8)
        if width == 1:
            b.store(words[0], pointer, align=stored.size)
            continue
        vec = ir.Constant(ir.VectorType(ty, width), ir.Undefined)
        for j, w in enumerate(words):
            vec = b.insert_element(vec, w, ir.Constant(I32, j))
        b.store(vec, pointer, align=width * stored.size)


def _fp8_bytes(low, values: list, kind: str) -> list:
    """float32 values as fp8 bytes: two a conversion where the target has the hardware's
    (sm_89 on), else one by one in software (`codegen.fp8`); the same bits either way, but
    a NaN's sign."""
    from . import ptx

    if low.target not in ptx.FP8_CONVERSION_TARGETS:
        return [fp8.encode(low.b, v, kind) for v in values]
    out = []
    for first in range(0, len(values), 2):
        pair = ptx.cvt_fp8x2(low.em, values[first], values[min(first + 1, len(values) - 1)], kind)
        out += [low.b.trunc(pair, I8), low.b.trunc(low.b.lshr(pair, ir.Constant(pair.type, 8)), I8)]
    return out[:len(values)]
