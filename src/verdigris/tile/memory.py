"""Tile loads and stores: `TileLoad` and `TileStore` in any layout, vectorized where it can.

Takes: the `TileLowering`, the node, and the layout the registers are in. Gives:
`load(low, node, layout) -> TileValue`, `load_group(low, items)` (a statement's loads
together), `with_loads(low, items, then)` (a statement lowered once per path of its loads),
and `store(low, node, value, atomic=None)` (`atomic`: a `TileAtomic`'s op). A masked
element is read or written behind a branch around it (`CheckingBuilder.around`).

Guarantees (`ir.tiles`): element `index[k] * shape[k] + c` along axis k; elements outside
the array (or past the tile's own shape, when it is padded to a power of two) are never
read, take `padding`, and are never written. A thread's consecutive registers along the
last axis move as one vector of up to 16 bytes when the array has unit inner stride and a
16-byte-aligned pointer (its specialization) and the tile's rows start at multiples of the
width; a warp's vectors are consecutive, so each access is coalesced. A tile the bounds
proofs put inside its array (`kernel.facts["in_bounds"]`, the variant for launches meeting
their conditions) and that the layout does not pad takes one path: plain vector accesses,
no test at all (`_Access.inside`). Others take two paths behind one block-uniform branch
(`llvm.expect`ed to take the first):
- vectors, where every vector of the tile lies wholly inside the array or wholly outside
  (`_Access.whole_vectors`: full tiles, and edge tiles whose rows start at multiples of the
  width and whose last extent is one too): each vector is one predicated `ld.global`/
  `st.global` in inline PTX (`.nc` for arrays the kernel only reads), its predicate its
  first element's bounds test, in 32 bits (`_Access.vector_inside`; arrays of 2**31
  elements or more along an axis the tile spans take the rolled path): no branch per
  vector, so a statement's loads, its arithmetic and its store form one straight-line
  block the assembler schedules as a whole;
- rolled, where rows or the extent split vectors: element by element, one vector's
  elements per trip of a loop LLVM keeps rolled, the words passing through a local array.
  The kernel's register count is that of its worst path; this one holds a vector's
  elements, not a whole tile's (unrolled, the edge path of LayerNorm's `xc * rstd * w + b`
  held 64 loaded elements beside `xc`: 80 registers, three blocks of 256 threads per SM
  where 64 registers fit four).
Accesses without vectors (and atomics) go element by element on one path, each element
behind its own test. Threads that hold the same elements (a broadcast layout) store them
once: only the first.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen import atomics
from ..codegen.dtypes import FLOAT, I1, I32, I64, is_narrow_float, mem_type, to_mem, to_reg
from ..ir.nodes import ON_GRID_EXTENT
from . import control
from .values import Lazy, TileValue, forced


class _Access:
    """Addressing of one tile access. A register's coordinates are the thread's part
    (`bases`, i64) plus the register's part: ints for a register known at compile time
    (`layout.register_coords`), i32 values for one chosen at run time (`vector_coords`);
    `j` moves along the last axis, within a vector."""

    def __init__(self, low, node, layout, shape: tuple):
        self.low, self.b, self.layout, self.shape = low, low.b, layout, shape
        self.view = low._view(node.array, node)
        self.name, self.dtype, self.type = node.array.name, node.array.dtype, node.array.type
        b = self.b
        self.index = [low.expr(i) for i in node.index]
        self.starts = [self._start(i, n) for i, n in zip(self.index, shape)]
        self.bases = [b.add(s, b.zext(low.thread_coord(layout, k), I64)) for k, s in enumerate(self.starts)]
        self.width = self._vector_width()
        self.limits = None  # `vector_inside`'s, by axis, made at its first use (on the vector path)
        # the bounds proofs put the whole tile inside the array (`safety.bounds`; on launches
        # that meet their conditions) and the layout pads nothing: no element needs a test
        self.inside = id(node) in low.kernel.facts.get("in_bounds", ()) and tuple(layout.shape) == tuple(shape)

    def _start(self, index: ir.Value, n: int) -> ir.Value:
        """The tile's first element along an axis, `index * n`; -2**63 where that leaves
        int64 (a 64-bit index past 2**63 / n): past every extent (< 2**63), also once a
        thread's and a register's coordinates are added, as the exact element is. Wrapped
        around, it was an element inside the array (tile 2**62 of 4 elements, element 0)."""
        b = self.b
        product = b.smul_with_overflow(index, ir.Constant(I64, n))
        return b.select(b.extract_value(product, 1), ir.Constant(I64, -2**63), b.extract_value(product, 0))

    def _vector_width(self) -> int:
        """Registers per vector access (1: element by element): a thread's consecutive
        registers along the last axis, up to 16 bytes, when the array has unit inner
        stride and a 16-byte-aligned pointer and the tile's rows start at multiples of it."""
        if not (self.type.unit_inner_stride and self.type.aligned16) or not self.shape:
            return 1
        width = min(self.layout.vector_width(), max(1, 16 // self.dtype.itemsize))
        return width if self.shape[-1] % width == 0 else 1

    def _plus(self, k: int, coords, j: int, base: ir.Value) -> ir.Value:
        """`base` (i32 or i64) plus the register part of the coordinate along axis k."""
        b, c = self.b, coords[k]
        if k == len(coords) - 1 and j:
            c = c + j if isinstance(c, int) else b.add(c, ir.Constant(I32, j))
        if isinstance(c, int):
            return b.add(base, ir.Constant(base.type, c))
        return b.add(base, c if base.type == I32 else b.zext(c, base.type))

    def pointer(self, coords, j: int = 0) -> ir.Value:
        b, offset = self.b, None
        for k, (base, stride) in enumerate(zip(self.bases, self.view.strides)):
            term = self._plus(k, coords, j, base)
            term = term if stride is None else b.mul(term, stride)
            offset = term if offset is None else b.add(offset, term)
        offset = ir.Constant(I64, 0) if offset is None else offset
        return b.gep(self.view.ptr, [offset], inbounds=True, source_etype=mem_type(self.dtype))

    def contains(self, coords, j: int = 0) -> ir.Value:
        b, inside = self.b, ir.Constant(I1, True)
        for k, (base, extent) in enumerate(zip(self.bases, self.view.shape)):
            inside = b.and_(inside, b.icmp_unsigned("<", self._plus(k, coords, j, base), extent))
            inside = self._within_tile(inside, k, coords, j)
        return inside

    def _within_tile(self, inside: ir.Value, k: int, coords, j: int = 0) -> ir.Value:
        """`inside`, and along axis k the coordinate within the tile's own shape where the
        layout pads it (the padding is never loaded or stored)."""
        if self.shape[k] == self.layout.shape[k]:
            return inside
        coord = self._plus(k, coords, j, self.low.thread_coord(self.layout, k))
        return self.b.and_(inside, self.b.icmp_unsigned("<", coord, ir.Constant(I32, self.shape[k])))

    def _spanned(self) -> list:
        """The axes along which the tile spans more than one position: `vector_inside`
        tests those in 32 bits (along the others every vector has the same coordinate, the
        thread's base, and one 64-bit test serves them all)."""
        return [k for k, n in enumerate(self.layout.shape) if n > 1]

    def vector_inside(self, coords: tuple) -> ir.Value:
        """`contains(coords)` for the first element of a vector on the vector path. Along a
        spanned axis, in 32 bits: once, the thread's limit `extent - start - tc`; then per
        vector one comparison of the register's constant coordinate with it (`start + tc +
        c < extent` as `c < extent - start - tc`), where 64-bit coordinates cost two
        registers each and two comparisons. The limit is exact in 32 bits where
        `whole_vectors` holds (start and extent below 2**31); for an array on the grid
        (extents below `ON_GRID_EXTENT`, 2**30) with the start first clamped, unsigned, to
        2**30: a start at or past it, or negative, is past the extent either way."""
        b, spanned = self.b, self._spanned()
        if self.limits is None:
            self.limits = {k: self._limit(k) for k in spanned}
        inside = ir.Constant(I1, True)
        for k, (c, base, extent) in enumerate(zip(coords, self.bases, self.view.shape)):
            inside = b.and_(inside, b.icmp_signed("<", ir.Constant(I32, c), self.limits[k]) if k in spanned
                            else b.icmp_unsigned("<", base, extent))
            inside = self._within_tile(inside, k, coords)
        return inside

    def _limit(self, k: int) -> ir.Value:
        b, extent = self.b, self.view.shape[k]
        if not self.type.on_grid:
            return b.trunc(b.sub(extent, self.bases[k]), I32)
        start = self.low.em.call("llvm.umin.i64", I64, self.starts[k], ir.Constant(I64, ON_GRID_EXTENT))
        return b.sub(b.sub(b.trunc(extent, I32), b.trunc(start, I32)), self.low.thread_coord(self.layout, k))

    def at(self, r: int) -> tuple:
        return self.layout.register_coords(r)

    def vector_coords(self, v: ir.Value) -> list:
        """The register part of the coordinates of register `v * width` (v: i32)."""
        b = self.b
        coords = [ir.Constant(I32, 0)] * self.layout.rank
        skip = self.width.bit_length() - 1
        for bit, basis in enumerate(self.layout.regs[skip:]):
            for k, c in enumerate(basis):
                if c:
                    part = b.and_(b.lshr(v, ir.Constant(I32, bit)), ir.Constant(I32, 1))
                    coords[k] = b.or_(coords[k], b.shl(part, ir.Constant(I32, c.bit_length() - 1)))
        return coords

    def whole_vectors(self) -> ir.Value | None:
        """Whether every vector of this tile lies wholly inside the array or wholly outside
        (block-uniform, run time): every row starts at a multiple of the width, and the last
        axis's extent is a multiple of it too or the tile ends within it; and, for
        `vector_inside`'s 32 bits, along every spanned axis the extent is below 2**31 and
        the start `s` is `0 <= s <= 2**31 - n` (n: the tile's padded size along the axis).
        Arrays past 2**31 elements along a spanned axis take the rolled path (this test runs
        once per statement). A tile proven inside its array (`inside`) needs only its rows
        to start at multiples of the width: an `ld.global.v4` at an address off its 16 bytes
        faults. None where it holds on every launch, so there is no test and no rolled path:
        an array specialized as on the grid (`ArrayType.on_grid`: its extents and row strides
        multiples of 16, so of the width, its extents below 2**30), or a tile proven inside
        a 1-d array."""
        if self.type.on_grid or (self.inside and len(self.view.strides) == 1):
            return None
        b, width, ok = self.b, self.width, ir.Constant(I1, True)
        mask = ir.Constant(I64, width - 1)
        for stride in self.view.strides[:-1]:
            ok = b.and_(ok, b.icmp_unsigned("==", b.and_(stride, mask), ir.Constant(I64, 0)))
        if self.inside:
            return ok
        for k in self._spanned():
            ok = b.and_(ok, b.icmp_unsigned("<=", self.starts[k], ir.Constant(I64, 2**31 - self.layout.shape[k])))
            ok = b.and_(ok, b.icmp_unsigned("<", self.view.shape[k], ir.Constant(I64, 2**31)))
        extent = self.view.shape[-1]
        end = b.mul(b.add(self.index[-1], ir.Constant(I64, 1)), ir.Constant(I64, self.shape[-1]))
        whole = b.or_(b.icmp_unsigned("==", b.and_(extent, mask), ir.Constant(I64, 0)),
                      b.icmp_unsigned("<=", end, extent))
        return b.and_(ok, whole)


def _vector_path(low, accesses: list) -> ir.Value | None:
    """Whether the vector path may be taken: every access with vectors has whole vectors
    only (None: it is taken on every launch, there is one path)."""
    tests = [t for t in (a.whole_vectors() for a in accesses if a.width > 1) if t is not None]
    if not tests:
        return None
    whole = tests[0]
    for test in tests[1:]:
        whole = low.b.and_(whole, test)
    return low.likely(whole)


def _ptx_operands(words: _Words, first: int) -> tuple:
    """(PTX bit type, register constraint, operand list) of a vector of `words.count` words,
    numbered from `first`: `{$1, $2}` for a vector, `$1` for one word."""
    bits, reg = {16: ("b16", "h"), 32: ("b32", "r"), 64: ("b64", "l")}[words.word.width]
    names = ", ".join(f"${first + j}" for j in range(words.count))
    return (f"v{words.count}.{bits}" if words.count > 1 else bits), bits, reg, \
        (f"{{{names}}}" if words.count > 1 else names)


def _predicated_load(low, access, coords, words: _Words, padding: ir.Value, inside: bool) -> list:
    """The words of the vector at `coords`, loaded where its first element is inside the
    array, else `padding`: one predicated `ld.global` in inline assembly, so that the whole
    vector path stays one straight-line block (no branch per vector to split it up, and no
    merge); `inside` (the tile is proven inside the array): no predicate. `ld.global.nc` for
    arrays the kernel does not write (LLVM would choose it too); a load of a written array
    is `sideeffect`, so LLVM does not move it across stores."""
    b, count = low.b, words.count
    kind, bits, reg, outs = _ptx_operands(words, 0)
    read_only = access.name not in low.kernel.writes
    pointer = access.pointer(coords)
    operands, constraints, text = [], [], ""
    if not inside:  # the padding first, then the load where the predicate holds
        operands, constraints = [access.vector_inside(coords), padding], ["b", reg]
        text = "".join(f"mov.{bits} ${j}, ${count + 1}; " for j in range(count)) + f"@${count} "
    text += f"ld.global{'.nc' if read_only else ''}.{kind} {outs}, [${count + len(operands)}];"
    ret = words.word if count == 1 else ir.LiteralStructType([words.word] * count)
    asm = ir.InlineAsm(ir.FunctionType(ret, [o.type for o in operands] + [pointer.type]), text,
                       ",".join([f"={reg}"] * count + constraints + ["l"]), side_effect=not read_only)
    got = b.call(asm, operands + [pointer])
    return [got] if count == 1 else [b.extract_value(got, j) for j in range(count)]


def _predicated_store(low, access, coords, words: _Words, packed: list, inside: bool) -> None:
    """`packed` (words, as `words` packs them) stored as one vector at `coords` where its
    first element is inside the array: a predicated `st.global` (see `_predicated_load`;
    `inside`: without the predicate)."""
    pointer = access.pointer(coords)
    operands, constraints = ([], []) if inside else ([access.vector_inside(coords)], ["b"])
    kind, _, reg, ins = _ptx_operands(words, len(operands) + 1)
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [o.type for o in operands] + [pointer.type] + [words.word] * words.count),
                       f"{'' if inside else '@$0 '}st.global.{kind} [${len(operands)}], {ins};",
                       ",".join(constraints + ["l"] + [reg] * words.count + ["~{memory}"]), side_effect=True)
    low.b.call(asm, operands + [pointer] + packed)


def load(low, node, layout):
    return load_group(low, [(node, layout)])[0]


def load_group(low, items: list) -> list:
    """The `TileLoad`s of `items` ((node, layout) pairs) as TileValues, every vector of
    them issued before any is converted or used, so that their latencies overlap.

    Words (`_Words`) come out of both paths: narrow elements stay packed, two bfloat16 in
    one 32-bit register, up to the merge and beyond; each register is unpacked and
    converted where it is first used (`Lazy`), so a loaded tile holds half the registers
    until then."""
    group = _Group(low, items)
    flat = group.paths(lambda words: [forced(w) for k in range(len(items)) for w in words[k]])
    words = {}
    for k, access in enumerate(group.accesses):
        count = access.layout.num_regs // group.packing[k].per_word
        words[k], flat = flat[:count], flat[count:]
    return group.values(words)


def with_loads(low, items: list, then) -> None:
    """`then(values)` (the TileValues of `items`, as `load_group` gives them) once on each
    path of the loads: the code that uses the values is emitted twice, and on the vector
    path it shares one straight-line block with the loads, so the assembler can interleave
    loads and arithmetic (there is no merge where every loaded word is live at once).
    `then` must leave nothing to merge (it stores what it makes), and it must be safe to
    lower twice (only one of the copies runs)."""
    group = _Group(low, items)
    group.paths(lambda words: then(group.values(words)) or [])


class _Group:
    """Loads sharing one branch between two paths (`paths`):
    - vectors (where every vectorized access has whole vectors, `whole_vectors`, which
      every full tile has): each vector loaded when its first element is inside the array,
      else padding; accesses without vectors element by element, each element so;
    - rolled (rows or extents that split vectors): a vectorized access one vector's
      elements at a time, in a loop kept rolled through a local array, so that this rare
      path holds few registers (the kernel's register count is its worst path's)."""

    def __init__(self, low, items: list):
        self.low, self.items = low, items
        for node, layout in items:
            low.order.access(node, node.array.name, "read", layout, node.shape)
        self.accesses = [_Access(low, node, layout, node.shape) for node, layout in items]
        self.paddings = [to_mem(low.b, a.dtype, low.expr(node.padding)) for a, (node, _) in zip(self.accesses, items)]
        self.packing = [_Words(a.dtype, a.width) for a in self.accesses]

    def paths(self, then) -> list:
        vectors = lambda: then({k: self.vectors(k) for k in range(len(self.items))})  # noqa: E731
        whole = _vector_path(self.low, self.accesses)
        if whole is None:
            return vectors()
        order = self.low.order
        with order.fork(exhaustive=True):  # the code `then` lowers on each path is ordered there
            return control.choose(self.low, whole, order.arm(vectors), order.arm(lambda: then(
                {k: self.rolled(k) if a.width > 1 else self.vectors(k) for k, a in enumerate(self.accesses)})),
                "load", ("vectors", "rolled"))

    def vectors(self, k: int) -> list:
        """Access k's words, each vector (or element) loaded where it is inside the array
        (without a test where the tile is proven inside)."""
        b, low, access, words = self.low.b, self.low, self.accesses[k], self.packing[k]
        padding = words.pack(b, [self.paddings[k]] * words.per_word)
        out = []
        for r0 in range(0, access.layout.num_regs, words.width):
            coords = access.at(r0)
            if words.width > 1:
                out += _predicated_load(low, access, coords, words, padding, access.inside)
                continue
            load = lambda coords=coords: b.load(access.pointer(coords), typ=words.word,  # noqa: E731
                                                align=access.dtype.itemsize)
            out.append(load() if access.inside else low.b.around(access.contains(coords), load, "load", padding))
        return out

    def rolled(self, k: int) -> list:
        """Access k's words, read back from the local array where each is first used."""
        b, low, access, words = self.low.b, self.low, self.accesses[k], self.packing[k]
        count = access.layout.num_regs // access.width
        local = _local_array(low, words.word, count * words.count)

        def element(coords, j: int) -> ir.Value:
            return low.b.around(access.contains(coords, j), lambda: b.load(
                access.pointer(coords, j), typ=mem_type(access.dtype), align=access.dtype.itemsize),
                "load", self.paddings[k])

        def vector(v: ir.Value) -> None:
            coords = access.vector_coords(v)
            for i in range(words.count):
                word = words.pack(b, [element(coords, j) for j in range(i * words.per_word, (i + 1) * words.per_word)])
                b.store(word, _slot(b, local, b.add(b.mul(v, ir.Constant(I32, words.count)), ir.Constant(I32, i))))
        control.rolled(low, count, vector, "load")
        return [Lazy(lambda i=i: b.load(_slot(b, local, ir.Constant(I32, i)), typ=words.word))
                for i in range(count * words.count)]

    def values(self, words: dict) -> list:
        b = self.low.b
        return [TileValue(layout, [Lazy(lambda word=word, j=j, packing=self.packing[k]:
                                        packing.register(b, forced(word), j))
                                   for word in words[k] for j in range(self.packing[k].per_word)], node.dtype)
                for k, (node, layout) in enumerate(self.items)]


class _Words:
    """How `width` consecutive elements of `dtype` travel from a load to their first use:
    as one vector of words of up to 32 bits (64 for 8-byte dtypes) when `width > 1`, each
    word holding `per_word` elements; when `width` is 1, element by element (the word is
    the element's memory type)."""

    def __init__(self, dtype, width: int):
        self.dtype, self.width = dtype, width
        self.bits = 8 * dtype.itemsize
        self.word = ir.IntType(max(self.bits, min(32, self.bits * width))) if width > 1 else mem_type(dtype)
        self.per_word = self.word.width // self.bits if width > 1 else 1
        self.count = width // self.per_word  # words per vector

    def pack(self, b, elements: list) -> ir.Value:
        """Elements in memory form -> one word (integer shifts and ors, which the compiler
        keeps as they are: the word stays one register)."""
        if self.width == 1:
            return elements[0]
        word = None
        for j, e in enumerate(elements):
            bits = b.zext(_as_int(b, e, self.bits), self.word) if self.bits < self.word.width else _as_int(b, e, self.bits)
            bits = b.shl(bits, ir.Constant(self.word, j * self.bits)) if j else bits
            word = bits if word is None else b.or_(word, bits)
        return word

    def words(self, b, regs: list) -> list:
        """Register values (of `dtype`'s register form) -> the words to store. Two float16
        or bfloat16 to a word round as one pair (`cvt.rn.bf16x2.f32`: one instruction, not
        two conversions and a permute); fp8 elements are converted one by one (`to_mem`)."""
        if self.per_word == 2 and self.dtype.itemsize == 2 and is_narrow_float(self.dtype):
            pair = ir.VectorType(FLOAT, 2)
            out = []
            for r in range(0, len(regs), 2):
                vector = b.insert_element(b.insert_element(ir.Constant(pair, ir.Undefined), regs[r], ir.Constant(
                    I32, 0)), regs[r + 1], ir.Constant(I32, 1))
                out.append(b.bitcast(b.fptrunc(vector, ir.VectorType(mem_type(self.dtype), 2)), self.word))
            return out
        return [self.pack(b, [to_mem(b, self.dtype, reg) for reg in regs[r:r + self.per_word]])
                for r in range(0, len(regs), self.per_word)]

    def register(self, b, word: ir.Value, j: int) -> ir.Value:
        """Element j of `word` in register form. A bfloat16 is the top half of its float32:
        a shift or a mask, no conversion."""
        if self.per_word > 1 and self.dtype.name == "bfloat16":
            bits = b.and_(word, ir.Constant(self.word, 0xFFFF0000)) if j else b.shl(word, ir.Constant(self.word, 16))
            return b.bitcast(bits, FLOAT)
        return to_reg(b, self.dtype, self.unpack(b, word, j))

    def unpack(self, b, word: ir.Value, j: int) -> ir.Value:
        """Element j of `word`, in memory form."""
        if self.width == 1:
            return word
        bits = b.lshr(word, ir.Constant(self.word, j * self.bits)) if j else word
        bits = b.trunc(bits, ir.IntType(self.bits)) if self.bits < self.word.width else bits
        ty = mem_type(self.dtype)
        return bits if isinstance(ty, ir.IntType) else b.bitcast(bits, ty)


def _as_int(b, value: ir.Value, bits: int) -> ir.Value:
    return value if isinstance(value.type, ir.IntType) else b.bitcast(value, ir.IntType(bits))


def store(low, node, value, atomic: str | None = None) -> None:
    """A `TileStore`, or with `atomic` (an op of `TILE_ATOMIC_OPS`) a `TileAtomic`: one
    `atomicrmw` per element whose result is unused (`codegen.atomics`: NVPTX emits
    `red.global.add`/`max`/`min`; float max/min, which sm_80 and sm_90 have no instruction
    for, a compare-and-swap loop).
    Two paths, as loads: the vector path (each vector stored where its first element is
    inside) where the tile has whole vectors only; else the rolled path, element by element
    from the packed words through a local array. Atomics and accesses without vectors go
    element by element, each element behind its own test."""
    layout = value.layout
    low.order.access(node, node.array.name, "atomic" if atomic else "write", layout, node.value.shape)
    b, dtype = low.b, node.array.dtype
    owner = low.is_owner(layout)
    if owner is not None:
        write_bb, end_bb = low._block("store.owner"), low._block("store.done")
        b.cbranch(owner, write_bb, end_bb)
        b.position_at_end(write_bb)
    access = _Access(low, node, layout, node.value.shape)
    if atomic or access.width == 1:
        for r, reg in enumerate(value.regs):
            pointer = access.pointer(access.at(r))
            perform = (lambda reg=reg, pointer=pointer: atomics.atomic(  # noqa: E731
                low.em, atomic, dtype, pointer, reg, None)) if atomic else (lambda reg=reg, pointer=pointer: b.store(
                    to_mem(b, dtype, reg), pointer, align=dtype.itemsize))
            perform() if access.inside else low.b.around(access.contains(access.at(r)), perform, "store")
    else:
        packing = _Words(dtype, access.width)
        words = packing.words(b, value.regs)
        whole = _vector_path(low, [access])
        if whole is None:
            _store_vectors(low, access, packing, words)
        else:
            control.choose(low, whole, lambda: _store_vectors(low, access, packing, words),
                           lambda: _store_rolled(low, access, packing, words), "store", ("vectors", "rolled"))
    if owner is not None:
        b.branch(end_bb)
        b.position_at_end(end_bb)


def _store_vectors(low, access, packing: _Words, words: list) -> None:
    for v, r0 in enumerate(range(0, access.layout.num_regs, access.width)):
        _predicated_store(low, access, access.at(r0), packing, words[v * packing.count:(v + 1) * packing.count],
                          access.inside)


def _store_rolled(low, access, packing: _Words, words: list) -> None:
    b, local = low.b, _local_array(low, packing.word, len(words))
    for i, word in enumerate(words):
        b.store(word, _slot(b, local, ir.Constant(I32, i)))

    def vector(v: ir.Value) -> None:
        coords = access.vector_coords(v)
        for i in range(packing.count):
            word = b.load(_slot(b, local, b.add(b.mul(v, ir.Constant(I32, packing.count)), ir.Constant(I32, i))),
                          typ=packing.word)
            for e in range(packing.per_word):
                j = i * packing.per_word + e
                element = packing.unpack(b, word, e)
                low.b.around(access.contains(coords, j), lambda element=element, j=j: b.store(
                    element, access.pointer(coords, j), align=access.dtype.itemsize), "store")
    control.rolled(low, access.layout.num_regs // access.width, vector, "store")


def _local_array(low, word: ir.Type, count: int) -> ir.Value:
    """A local (per-thread) array of `count` words; indexed at run time, it stays in local
    memory, out of the registers."""
    return low._alloca(ir.ArrayType(word, count), "rolled")


def _slot(b, local, i: ir.Value) -> ir.Value:
    return b.gep(local, [ir.Constant(I32, 0), i], inbounds=True, source_etype=local.allocated_type)
