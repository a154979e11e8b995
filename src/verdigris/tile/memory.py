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

    @property
    def can_be_full(self) -> bool:
        """False when the tile is padded (its shape is not a power of two): always masked."""
        return tuple(self.shape) == self.layout.shape

    def full(self) -> ir.Value:
        """Whether the whole tile is inside the array (block-uniform)."""
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


def _paths(low, accesses: list, fast, slow, name: str, vectors: bool = True) -> list:
    """Run `fast(widths)` when every access is a full tile and `slow(widths)` otherwise, behind
    one block-uniform branch; phi their results. `widths[k]` is access k's vector width (1
    unless `vectors` and the access can move vectors). Every access must `can_be_full`."""
    b = low.b
    widths = [a.vector() if vectors else 1 for a in accesses]
    full = ir.Constant(I1, True)
    for access, width in zip(accesses, widths):
        full = b.and_(full, access.full())
        if width > 1:
            full = b.and_(full, access.vector_ok(width))
    fast_bb, slow_bb, end_bb = (low._block(f"{name}.{n}") for n in ("full", "edge", "end"))
    b.cbranch(low.em.call("llvm.expect.i1", I1, full, ir.Constant(I1, True)), fast_bb, slow_bb)
    arms = []
    for bb, arm in ((fast_bb, fast), (slow_bb, slow)):
        b.position_at_end(bb)
        values = arm(widths)
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
    return load_group(low, [(node, layout)])[0]


def load_group(low, items: list) -> list:
    """The `TileLoad`s of `items` ((node, layout) pairs) as TileValues. The loads whose
    tiles can be full share one full/edge branch, and on full tiles every one of their
    vectors is loaded before any is converted or used, so their latencies overlap.

    Both paths give words (`_Words`): narrow elements stay packed, two bfloat16 in one
    32-bit register, up to the merge and beyond; each register is unpacked and converted
    where it is first used (`Lazy`), so a loaded tile holds half the registers until then.
    """
    from .lower import Lazy, TileValue

    b = low.b
    accesses = [_Access(low, node, layout, node.shape) for node, layout in items]
    paddings = [low.expr(node.padding) for node, _ in items]

    def slow(k: int, width: int = 1) -> list:
        """Access k element by element (padding where outside), packed into words."""
        access = accesses[k]
        words = _Words(access.dtype, width)
        padding = to_mem(b, access.dtype, paddings[k])

        def element(r: int) -> ir.Value:
            return guarded(low, access.inside(r), lambda: b.load(
                access.pointer(r), typ=mem_type(access.dtype), align=access.dtype.itemsize), "load", padding)
        return [words.pack(b, [element(r) for r in range(r0, r0 + words.per_word)])
                for r0 in range(0, access.layout.num_regs, words.per_word)]

    grouped = [k for k, a in enumerate(accesses) if a.can_be_full]
    packing = {k: _Words(accesses[k].dtype, 1) for k in range(len(accesses))}
    merged = {k: slow(k) for k in range(len(accesses)) if k not in grouped}
    if grouped:
        def fast(widths: list) -> list:
            packing.update((k, _Words(accesses[k].dtype, width)) for k, width in zip(grouped, widths))
            return [word for k in grouped for r0 in range(0, accesses[k].layout.num_regs, packing[k].width)
                    for word in packing[k].load(b, accesses[k], r0)]

        words = _paths(low, [accesses[k] for k in grouped], fast,
                       lambda widths: [w for k, width in zip(grouped, widths) for w in slow(k, width)], "load")
        for k in grouped:
            count = accesses[k].layout.num_regs // packing[k].per_word
            merged[k], words = words[:count], words[count:]
    return [TileValue(layout, [Lazy(lambda word=word, j=j, words=packing[k], dtype=node.dtype:
                                    to_reg(b, dtype, words.unpack(b, word, j)))
                               for word in merged[k] for j in range(packing[k].per_word)], node.dtype)
            for k, (node, layout) in enumerate(items)]


class _Words:
    """How `width` consecutive elements of `dtype` travel from a load to their first use:
    as one vector load of words of up to 32 bits (64 for 8-byte dtypes) when `width > 1`,
    each word holding `per_word` elements; when `width` is 1, element by element."""

    def __init__(self, dtype, width: int):
        self.dtype, self.width = dtype, width
        self.bits = 8 * dtype.itemsize
        self.word = ir.IntType(max(self.bits, min(32, self.bits * width))) if width > 1 else None
        self.per_word = self.word.width // self.bits if width > 1 else 1

    def load(self, b, access, r0: int) -> list:
        """The words of registers r0 .. r0 + width - 1 (one vector load)."""
        if self.word is None:
            return [b.load(access.pointer(r0), typ=mem_type(self.dtype), align=self.dtype.itemsize)]
        count = self.width // self.per_word
        vec = b.load(access.pointer(r0), typ=ir.VectorType(self.word, count), align=self.width * self.dtype.itemsize)
        return [b.extract_element(vec, ir.Constant(I32, j)) for j in range(count)]

    def pack(self, b, elements: list) -> ir.Value:
        """Elements in memory form -> one word (integer shifts and ors, which the compiler
        keeps as they are: the word stays one register)."""
        if self.word is None:
            return elements[0]
        word = None
        for j, e in enumerate(elements):
            bits = b.zext(_as_int(b, e, self.bits), self.word) if self.bits < self.word.width else _as_int(b, e, self.bits)
            bits = b.shl(bits, ir.Constant(self.word, j * self.bits)) if j else bits
            word = bits if word is None else b.or_(word, bits)
        return word

    def unpack(self, b, word: ir.Value, j: int) -> ir.Value:
        """Element j of `word`, in memory form."""
        if self.word is None:
            return word
        bits = b.lshr(word, ir.Constant(self.word, j * self.bits)) if j else word
        bits = b.trunc(bits, ir.IntType(self.bits)) if self.bits < self.word.width else bits
        ty = mem_type(self.dtype)
        return bits if isinstance(ty, ir.IntType) else b.bitcast(bits, ty)


def _as_int(b, value: ir.Value, bits: int) -> ir.Value:
    return value if isinstance(value.type, ir.IntType) else b.bitcast(value, ir.IntType(bits))


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

    def slow(widths=None) -> list:
        for r in range(layout.num_regs):
            guarded(low, access.inside(r), lambda r=r: write(r), "store")
        return []

    if not access.can_be_full:
        slow()
    else:
        _paths(low, [access], lambda widths: fast(widths[0]), slow, "store", vectors=not atomic)
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
