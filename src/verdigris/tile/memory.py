"""Tile loads and stores: `TileLoad` and `TileStore` in any layout, vectorized where it can.

Takes: the `TileLowering`, the node, and the layout the registers are in. Gives:
`load(low, node, layout) -> TileValue`, `store(low, node, value, atomic=False)` (the
atomic form is `TileAtomicAdd`), and `guarded(low, condition, perform, ...)`, the branch
around one masked access that `indexed` uses too.

Guarantees (`ir.tiles`): element `index[k] * shape[k] + c` along axis k; elements outside
the array (or past the tile's own shape, when it is padded to a power of two) are never
read, take `padding`, and are never written. Two paths behind one block-uniform branch:
- full tiles (the tile's shape is its padded shape and every element is inside the array):
  no masks; when the array has unit inner stride and a 16-byte-aligned pointer and every
  other stride is a multiple of the vector width (checked at run time, once per access),
  a thread's consecutive registers along the last axis move as one vector of up to 16 bytes
  (`ld.global.nc.v4` for arrays the kernel only reads); a warp's vectors are consecutive,
  so each access is coalesced;
- edge tiles: one element at a time, each behind its own bounds test.
Threads that hold the same elements (a broadcast layout) store them once: only the first.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen import atomics
from ..codegen.dtypes import I1, I32, I64, mem_type, to_mem, to_reg


class _Access:
    """Addressing of one tile access: per-register element offsets and bounds tests."""

    def __init__(self, low, node, layout, shape: tuple):
        self.low, self.b, self.layout, self.shape = low, low.b, layout, shape
        self.view = low._view(node.array, node)
        self.dtype = node.array.dtype
        self.type = node.array.type
        b = self.b
        self.index = [low.expr(i) for i in node.index]
        starts = [b.mul(i, ir.Constant(I64, n)) for i, n in zip(self.index, shape)]
        self.bases = [b.add(s, b.zext(low.thread_coord(layout, k), I64)) for k, s in enumerate(starts)]

    def offset(self, r: int) -> ir.Value:
        b, offset = self.b, None
        for base, c, stride in zip(self.bases, self.layout.register_coords(r), self.view.strides):
            term = b.add(base, ir.Constant(I64, c))
            term = term if stride is None else b.mul(term, stride)
            offset = term if offset is None else b.add(offset, term)
        return ir.Constant(I64, 0) if offset is None else offset

    def pointer(self, r: int) -> ir.Value:
        return self.b.gep(self.view.ptr, [self.offset(r)], inbounds=True, source_etype=mem_type(self.dtype))

    def inside(self, r: int) -> ir.Value:
        b, low, inside = self.b, self.low, ir.Constant(I1, True)
        padded_shape = self.layout.shape
        for k, (base, c, extent) in enumerate(zip(self.bases, self.layout.register_coords(r), self.view.shape)):
            inside = b.and_(inside, b.icmp_unsigned("<", b.add(base, ir.Constant(I64, c)), extent))
            if self.shape[k] != padded_shape[k]:
                coord = b.add(low.thread_coord(self.layout, k), ir.Constant(I32, c))
                inside = b.and_(inside, b.icmp_unsigned("<", coord, ir.Constant(I32, self.shape[k])))
        return inside

    def full(self) -> ir.Value | None:
        """Whether the whole tile is inside the array (block-uniform); None: never known."""
        if tuple(self.shape) != self.layout.shape:
            return None
        b, full = self.b, ir.Constant(I1, True)
        for i, n, extent in zip(self.index, self.shape, self.view.shape):
            tiles = b.lshr(extent, ir.Constant(I64, n.bit_length() - 1))
            full = b.and_(full, b.icmp_unsigned("<", i, tiles))
        return full

    def vector(self) -> int:
        """Registers per vector access (1: scalar accesses)."""
        if not (self.type.unit_inner_stride and self.type.aligned16):
            return 1
        return min(self.layout.vector_width(), max(1, 16 // self.dtype.itemsize))

    def vector_ok(self, width: int) -> ir.Value:
        """Whether every row starts at a multiple of `width` elements (run time)."""
        b, ok = self.b, ir.Constant(I1, True)
        for stride in self.view.strides[:-1]:
            rem = b.and_(stride, ir.Constant(I64, width - 1))
            ok = b.and_(ok, b.icmp_unsigned("==", rem, ir.Constant(I64, 0)))
        return ok

    def paths(self, fast, slow, name: str, vectors: bool = True) -> list:
        """Run `fast(width)` for full tiles and `slow()` for edge tiles; phi their results.
        `width` is 1 unless `vectors` and the access can move vectors."""
        low, b = self.low, self.b
        full = self.full()
        if full is None:
            return slow()
        width = self.vector() if vectors else 1
        if width > 1:
            full = b.and_(full, self.vector_ok(width))
        fast_bb, slow_bb, end_bb = (low._block(f"{name}.{n}") for n in ("full", "edge", "end"))
        b.cbranch(low.em.call("llvm.expect.i1", I1, full, ir.Constant(I1, True)), fast_bb, slow_bb)
        arms = []
        for bb, arm in ((fast_bb, lambda: fast(width)), (slow_bb, slow)):
            b.position_at_end(bb)
            values = arm()
            arms.append((values, b.block))
            b.branch(end_bb)
        b.position_at_end(end_bb)
        merged = []
        for k in range(len(arms[0][0] or ())):
            phi = b.phi(arms[0][0][k].type)
            for values, bb in arms:
                phi.add_incoming(values[k], bb)
            merged.append(phi)
        return merged


def load(low, node, layout):
    from .lower import TileValue

    access = _Access(low, node, layout, node.shape)
    b, dtype, mem = low.b, node.array.dtype, mem_type(node.array.dtype)
    padding = low.expr(node.padding)

    def fast(width: int) -> list:
        regs = []
        for r0 in range(0, layout.num_regs, width):
            if width == 1:
                regs.append(to_reg(b, dtype, b.load(access.pointer(r0), typ=mem, align=dtype.itemsize)))
                continue
            vec = b.load(access.pointer(r0), typ=ir.VectorType(mem, width), align=width * dtype.itemsize)
            regs.extend(to_reg(b, dtype, b.extract_element(vec, ir.Constant(I32, j))) for j in range(width))
        return regs

    def slow() -> list:
        return [guarded(low, access.inside(r), lambda r=r: to_reg(b, dtype, b.load(
            access.pointer(r), typ=mem, align=dtype.itemsize)), "load", padding)
            for r in range(layout.num_regs)]

    return TileValue(layout, access.paths(fast, slow, "load"), dtype)


def store(low, node, value, atomic: bool = False) -> None:
    """A `TileStore`, or with `atomic` a `TileAtomicAdd` (one atomic add per element: an
    `atomicrmw fadd`/`add` whose result is unused, which NVPTX emits as `red.global.add`)."""
    layout = value.layout
    b, dtype = low.b, node.array.dtype
    owner = low.is_owner(layout)
    if owner is not None:
        write_bb, end_bb = low._block("store.owner"), low._block("store.done")
        b.cbranch(owner, write_bb, end_bb)
        b.position_at_end(write_bb)
    access = _Access(low, node, layout, node.value.shape)
    if atomic:
        def write(r: int) -> None:
            atomics.atomic(low.em, "add", dtype, access.pointer(r), value.regs[r], None)
    else:
        words = [to_mem(b, dtype, r) for r in value.regs]

        def write(r: int) -> None:
            b.store(words[r], access.pointer(r), align=dtype.itemsize)

    def fast(width: int) -> list:
        for r0 in range(0, layout.num_regs, width):
            if width == 1:
                write(r0)
                continue
            vec = ir.Constant(ir.VectorType(mem_type(dtype), width), ir.Undefined)
            for j in range(width):
                vec = b.insert_element(vec, words[r0 + j], ir.Constant(I32, j))
            b.store(vec, access.pointer(r0), align=width * dtype.itemsize)
        return []

    def slow() -> list:
        for r in range(layout.num_regs):
            guarded(low, access.inside(r), lambda r=r: write(r), "store")
        return []

    access.paths(fast, slow, "store", vectors=not atomic)
    if owner is not None:
        b.branch(end_bb)
        b.position_at_end(end_bb)


def guarded(low, condition: ir.Value, perform, name: str, otherwise: ir.Value | None = None):
    """`perform()` only where `condition` holds (a branch around it); its value where it
    ran, else `otherwise` (None: `perform` gives no value)."""
    b = low.b
    then_bb, end_bb = low._block(f"{name}.in"), low._block(f"{name}.next")
    before = b.block
    b.cbranch(condition, then_bb, end_bb)
    b.position_at_end(then_bb)
    value = perform()
    then_end = b.block
    b.branch(end_bb)
    b.position_at_end(end_bb)
    if otherwise is None:
        return None
    phi = b.phi(value.type)
    phi.add_incoming(value, then_end)
    phi.add_incoming(otherwise, before)
    return phi
