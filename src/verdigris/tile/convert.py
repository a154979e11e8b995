"""Moving a tile between layouts (and shapes) through shared memory.

Takes: the `TileLowering`, a `TileValue`, the layout wanted, the source's logical shape and
the result's. Gives: `relayout(low, value, layout, source_shape, shape) -> TileValue`, for
- a plain layout change (same shape),
- a broadcast (size-1 source axes stretch: element c reads the source at 0 there),
- a reshape (element c reads the source element of the same row-major position);
`moved(low, value, layout, source_of)`, where element c of the result reads the source
at `source_of(c)` (a flip, a slice), coordinates within the padded source shape; and
`staged(low, pieces, layout, shape, source_of)`, the same from several tiles written into
one buffer of the padded `shape`, each at the place its `place(c)` gives (a concatenation).
Guarantees: every thread writes the registers it holds (threads holding the same element
write the same bits; a piece writes only where its `place` keeps), a barrier, every thread
reads the elements its new registers hold
(`TileLowering.shared` says when the buffer may be written again). The buffer is row-major over the padded
source shape with each row one 4-byte bank longer when there are several rows of 32 or
more, so that reading a column (a transpose) does not hit one bank 32 times. Its elements
are the registers', except bool and 16-bit float tiles', which it holds in their memory
form (a byte, 2 bytes: exact, and half the shared memory of their float32 registers).
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from ..codegen.dtypes import BFLOAT, DOUBLE, FLOAT, HALF, I1, I32, I64, mem_type, to_mem, to_reg
from .values import TileValue


def _itemsize(ty: ir.Type) -> int:
    if ty == I1:
        return 1
    return {HALF: 2, BFLOAT: 2, FLOAT: 4, DOUBLE: 8}.get(ty, getattr(ty, "width", 0) // 8)


def _slot_type(dtype, ty: ir.Type) -> ir.Type:
    """What a buffer element holds for registers of type `ty` of a `dtype` tile: bool and
    16-bit floats in memory form (a byte, 2 bytes: exact, their registers hold values of
    the dtype), the rest as the registers are."""
    if ty == I1:
        assert dtype.is_bool, "i1 registers of a tile that is not bool"
    if ty == I1 or (ty == FLOAT and dtype.name in ("float16", "bfloat16")):
        return mem_type(dtype)
    return ty


def _pitches(padded: tuple, itemsize: int) -> list:
    rows = list(padded)
    if len(rows) >= 2 and rows[-1] >= 32:
        rows[-1] += max(1, 4 // itemsize)  # a 4-byte bank further on
    return [prod(rows[k + 1:]) for k in range(len(rows))]


def _source_coords(b, coords: list, source_shape: tuple, shape: tuple) -> list:
    """The source coordinates of the element at `coords` of the result (i32 values)."""
    if len(source_shape) == len(shape) and all(s in (1, n) for s, n in zip(source_shape, shape)):
        return [ir.Constant(I32, 0) if s == 1 else c for s, c in zip(source_shape, coords)]
    position = ir.Constant(I32, 0)
    for c, n in zip(coords, shape):
        position = b.add(b.mul(position, ir.Constant(I32, n)), c)
    return [b.urem(b.udiv(position, ir.Constant(I32, prod(source_shape[k + 1:]))), ir.Constant(I32, n))
            for k, n in enumerate(source_shape)]


def relayout(low, value, layout, source_shape: tuple, shape: tuple):
    return moved(low, value, layout, lambda coords: _source_coords(low.b, coords, source_shape, shape))


def moved(low, value, layout, source_of):
    return staged(low, [(value, lambda coords: (coords, None))], layout, value.layout.shape, source_of)


def staged(low, pieces: list, layout, shape: tuple, source_of):
    """The tile of `layout` whose element c is element `source_of(c)` of a buffer of the
    padded `shape`, into which each (value, place) of `pieces` first writes its element c
    at `place(c)[0]` where `place(c)[1]` (an i1, or None: always) holds."""
    b = low.b
    dtype = pieces[0][0].dtype
    ty = pieces[0][0].regs[0].type
    slot = _slot_type(dtype, ty)
    narrowed = slot != ty
    pitches = _pitches(shape, _itemsize(slot))
    smem = low.shared(_itemsize(slot) * pitches[0] * shape[0] if pitches else _itemsize(slot))

    def element(coords: list) -> ir.Value:
        index = ir.Constant(I32, 0)
        for c, pitch in zip(coords, pitches):
            index = b.add(index, b.mul(c, ir.Constant(I32, pitch)))
        return b.gep(smem, [b.zext(index, I64)], inbounds=True, source_etype=slot)

    for value, place in pieces:
        for r, reg in enumerate(value.regs):
            coords, keep = place(low.coords(value.layout, r))
            bits = to_mem(b, dtype, reg) if narrowed else reg
            if keep is None:
                b.store(bits, element(coords))
            else:
                with b.if_then(keep):
                    b.store(bits, element(coords))
    low.barrier()
    regs = []
    for r in range(layout.num_regs):
        got = b.load(element(source_of(low.coords(layout, r))), typ=slot)
        regs.append(to_reg(b, dtype, got) if narrowed else got)
    low.release_shared()
    return TileValue(layout, regs, dtype)
