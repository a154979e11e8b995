"""A lock-step emulator of one thread block for the tile lowering's straight-line parts, so
that scans, reductions, layout conversions and the Philox rounds are checked without a GPU.

Takes: the lowering code itself (`tile.scan`, `tile.reduce`, `tile.convert`,
`tile.random`, `tile.register_a`), run against `Block` in place of a `TileLowering`:
every LLVM value is a NumPy array over the block's threads, `Block.b` stands in for the
`IRBuilder` (the instructions those modules emit, evaluated at once for every thread),
`shfl.sync.bfly` and `shfl.sync.idx` exchange lanes of a warp, `prmt` permutes bytes,
`cvt.rn.satfinite` rounds to fp8 (ml_dtypes), shared memory is a byte array and a barrier
is a no-op (all threads run in lock step). Branches are not emulated: code that branches (loads, stores,
masked accesses) is out of its reach.

Gives: `Block(num_warps)`, `Block.tile_value(layout, array)` (a tile held in `layout`) and
`Block.gather(value, shape)` (the tile back as an array, checking that threads holding the
same element agree bit for bit).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

import numpy as np
from llvmlite import ir

from verdigris.codegen.dtypes import BFLOAT, DOUBLE, FLOAT, HALF, I1
from verdigris.tile import layout as L

try:
    import ml_dtypes
except ImportError:  # bfloat16 rounding is then not emulated
    ml_dtypes = None


@lru_cache(maxsize=None)
def _thread_coords(layout: L.Layout, threads: int) -> np.ndarray:
    """Each thread's coordinate along each axis of `layout`'s register 0: (rank, threads)."""
    tid = np.arange(threads, dtype=np.uint64)
    coords = np.zeros((layout.rank, threads), np.uint64)
    for bases, first in ((layout.lanes, 0), (layout.warps, L.LANE_BITS)):
        for i, basis in enumerate(bases):
            bit = (tid >> np.uint64(first + i)) & np.uint64(1)
            coords += np.array(basis, np.uint64)[:, None] * bit
    coords.flags.writeable = False
    return coords


@dataclass
class V:
    """One LLVM value: `data[t]` is thread t's (ints as unsigned words of the type's width)."""

    data: np.ndarray
    type: ir.Type


def _np(ty: ir.Type):
    floats = {FLOAT: np.float32, DOUBLE: np.float64, HALF: np.float16}
    if ml_dtypes is not None:
        floats[BFLOAT] = ml_dtypes.bfloat16
    return floats.get(ty) or (bool if ty == I1 else np.uint64)


def _mask(ty: ir.Type, data: np.ndarray) -> np.ndarray:
    if isinstance(ty, ir.IntType) and ty.width < 64 and ty != I1:
        return data & np.uint64((1 << ty.width) - 1)
    return data


def _signed(v: V) -> np.ndarray:
    width = v.type.width
    return ((v.data.astype(np.uint64) ^ np.uint64(1 << (width - 1))).astype(np.int64)
            - np.int64(1 << (width - 1)) if width < 64 else v.data.view(np.int64))


class _Pointer:
    def __init__(self, memory: np.ndarray, offset=0):
        self.memory, self.offset = memory, offset


class Builder:
    def __init__(self, block: "Block"):
        self.block = block

    def v(self, x) -> V:
        if isinstance(x, V):
            return x
        assert isinstance(x, ir.Constant), x
        if isinstance(x.type, ir.VectorType):  # an undefined vector, to insert elements into
            return V(np.zeros((self.block.threads, x.type.count), _np(x.type.element)), x.type)
        value = x.constant
        if isinstance(x.type, ir.IntType) and x.type != I1:
            value = int(value) & ((1 << x.type.width) - 1)
        return V(np.full(self.block.threads, value, _np(x.type)), x.type)

    def _int(self, fn, a, b):
        a, b = self.v(a), self.v(b)
        with np.errstate(over="ignore"):
            return V(_mask(a.type, fn(a.data.astype(np.uint64), b.data.astype(np.uint64))), a.type)

    def _float(self, fn, a, b):
        a, b = self.v(a), self.v(b)
        return V(fn(a.data, b.data).astype(a.data.dtype), a.type)

    def add(self, a, b): return self._int(np.add, a, b)
    def sub(self, a, b): return self._int(np.subtract, a, b)
    def mul(self, a, b): return self._int(np.multiply, a, b)
    def and_(self, a, b): return self._bool_or_int(np.bitwise_and, a, b)
    def or_(self, a, b): return self._bool_or_int(np.bitwise_or, a, b)
    def xor(self, a, b): return self._bool_or_int(np.bitwise_xor, a, b)
    def lshr(self, a, b): return self._int(np.right_shift, a, b)
    def shl(self, a, b): return self._int(np.left_shift, a, b)
    def fadd(self, a, b): return self._float(np.add, a, b)
    def fmul(self, a, b): return self._float(np.multiply, a, b)

    def ashr(self, a, b):
        a = self.v(a)
        return V(_mask(a.type, (_signed(a) >> self.v(b).data.astype(np.int64)).astype(np.uint64)), a.type)

    def _bool_or_int(self, fn, a, b):
        a, b = self.v(a), self.v(b)
        if a.type == I1:
            return V(fn(a.data, b.data), I1)
        return self._int(fn, a, b)

    def not_(self, a):
        a = self.v(a)
        return V(~a.data, I1) if a.type == I1 else V(_mask(a.type, ~a.data.astype(np.uint64)), a.type)

    def select(self, c, a, b):
        c, a, b = self.v(c), self.v(a), self.v(b)
        return V(np.where(c.data, a.data, b.data).astype(a.data.dtype), a.type)

    def icmp_unsigned(self, op, a, b):
        a, b = self.v(a), self.v(b)
        return V(_COMPARE[op](a.data, b.data), I1)

    def icmp_signed(self, op, a, b):
        return V(_COMPARE[op](_signed(self.v(a)), _signed(self.v(b))), I1)

    def fcmp_ordered(self, op, a, b):
        return V(_COMPARE[op](self.v(a).data, self.v(b).data), I1)

    def fcmp_unordered(self, op, a, b):
        a, b = self.v(a), self.v(b)
        assert op == "uno"
        return V(np.isnan(a.data) | np.isnan(b.data), I1)

    def zext(self, a, ty):
        a = self.v(a)
        return V(a.data.astype(np.uint64), ty)

    def sext(self, a, ty):
        return V(_mask(ty, _signed(self.v(a)).astype(np.uint64)), ty)

    def trunc(self, a, ty):
        a = self.v(a)
        return V(a.data.astype(np.uint64) & np.uint64(1) != 0, ty) if ty == I1 else V(_mask(ty, a.data), ty)

    def uitofp(self, a, ty):
        return V(self.v(a).data.astype(_np(ty)), ty)

    def fptrunc(self, a, ty):
        return V(self.v(a).data.astype(_np(ty)), ty)

    def fpext(self, a, ty):
        return V(self.v(a).data.astype(_np(ty)), ty)

    def bitcast(self, a, ty):
        """Between a 64-bit scalar and two 32-bit words (the shuffles of 64-bit values), and
        between a float and the integer of its width (its bits)."""
        a = self.v(a)
        if not isinstance(a.type, ir.VectorType) and not isinstance(ty, ir.VectorType):
            bits = np.dtype(f"u{(a.type if isinstance(a.type, ir.IntType) else ty).width // 8}")
            if isinstance(ty, ir.IntType):
                return V(a.data.view(bits).astype(np.uint64), ty)
            return V(a.data.astype(bits).view(_np(ty)), ty)
        raw = np.ascontiguousarray(a.data.astype(_np(a.type.element)) if isinstance(a.type, ir.VectorType)
                                   else a.data.astype(np.uint64) if isinstance(a.type, ir.IntType) else a.data)
        if isinstance(ty, ir.VectorType):
            return V(raw.view(np.uint32).reshape(-1, 2).astype(np.uint64), ty)
        words = raw.astype(np.uint32).reshape(-1)
        return V(words.view(_np(ty) if not isinstance(ty, ir.IntType) else np.uint64), ty)

    def extract_element(self, vec, index):
        vec = self.v(vec)
        return V(vec.data[:, int(index.constant)], vec.type.element)

    def insert_element(self, vec, value, index):
        vec = self.v(vec)
        data = vec.data.copy()
        data[:, int(index.constant)] = self.v(value).data
        return V(data, vec.type)

    def gep(self, ptr, indices, inbounds=True, source_etype=None):
        index = self.v(indices[0]).data.astype(np.int64)
        size = 1 if source_etype == ir.IntType(8) else np.dtype(_np(source_etype)).itemsize \
            if not isinstance(source_etype, ir.IntType) else source_etype.width // 8
        return _Pointer(ptr.memory, ptr.offset + index * size)

    def store(self, value, ptr, align=None):
        value = self.v(value)
        width = value.type.width // 8 if isinstance(value.type, ir.IntType) else np.dtype(value.data.dtype).itemsize
        raw = value.data.astype(np.uint64).view(np.uint8).reshape(-1, 8)[:, :width] \
            if isinstance(value.type, ir.IntType) else value.data.view(np.uint8).reshape(-1, width)
        for t in range(self.block.threads):
            ptr.memory[ptr.offset[t]:ptr.offset[t] + width] = raw[t]

    def load(self, ptr, typ=None, align=None):
        if isinstance(typ, ir.VectorType):  # consecutive elements, one row per thread
            element = typ.element
            size = element.width // 8 if isinstance(element, ir.IntType) else np.dtype(_np(element)).itemsize
            rows = [self.load(_Pointer(ptr.memory, ptr.offset + j * size), element).data for j in range(typ.count)]
            return V(np.stack(rows, axis=1), typ)
        if isinstance(typ, ir.IntType):
            width = typ.width // 8
            raw = np.zeros((self.block.threads, 8), np.uint8)
            for t in range(self.block.threads):
                raw[t, :width] = ptr.memory[ptr.offset[t]:ptr.offset[t] + width]
            return V(raw.view(np.uint64).reshape(-1), typ)
        dtype = np.dtype(_np(typ))
        raw = np.stack([ptr.memory[o:o + dtype.itemsize] for o in ptr.offset])
        return V(raw.view(dtype).reshape(-1), typ)


_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}


class _Emitter:
    float_flags = ()  # codegen.emitter.Emitter's, of a kernel without `fma`: nothing contracts

    def __init__(self, block):
        self.block, self.b = block, block.b

    def flagged(self, value):
        return value

    def call(self, name: str, ret, *args):
        if name.startswith("llvm.nvvm.shfl.sync.bfly"):
            value, mask = self.b.v(args[1]), int(args[2].constant)
            partner = np.arange(self.block.threads) ^ mask
            return V(value.data[partner], value.type)
        if name.startswith(("llvm.maxnum", "llvm.minnum")):
            a, b = self.b.v(args[0]), self.b.v(args[1])
            return V((np.fmax if "max" in name else np.fmin)(a.data, b.data), a.type)
        if name == "llvm.nvvm.shfl.sync.idx.i32":  # a full warp (clamp 31)
            value, source = self.b.v(args[1]), self.b.v(args[2])
            threads = np.arange(self.block.threads)
            partner = (threads & ~31) | (source.data.astype(np.int64) & 31)
            return V(value.data[partner], value.type)
        if name == "llvm.nvvm.prmt":  # byte i of the result: byte (selector >> 4i) & 7 of b:a
            a, b, selector = (self.b.v(x).data.astype(np.uint64) for x in args)
            both = a | (b << np.uint64(32))
            out = np.zeros_like(a)
            for i in range(4):
                at = ((selector >> np.uint64(4 * i)) & np.uint64(7)) * np.uint64(8)
                out |= ((both >> at) & np.uint64(0xFF)) << np.uint64(8 * i)
            return V(out, ret)
        if name.startswith("llvm.nvvm.ff.to.") and ml_dtypes is not None:  # cvt.rn.satfinite
            fp8 = {"e4m3x2": ml_dtypes.float8_e4m3fn, "e5m2x2": ml_dtypes.float8_e5m2}[name.split(".")[4]]
            largest = float(ml_dtypes.finfo(fp8).max)
            hi, lo = (np.clip(self.b.v(x).data, -largest, largest).astype(fp8).view(np.uint8).astype(np.uint64)
                      for x in args)
            return V((hi << np.uint64(8)) | lo, ret)
        extremum = _INT_EXTREMA.get(name.split(".")[1])
        if extremum is not None:
            a, b = self.b.v(args[0]), self.b.v(args[1])
            signed = name.split(".")[1][0] == "s"
            pick = extremum(_signed(a), _signed(b)) if signed else extremum(a.data, b.data)
            return V(_mask(a.type, pick.astype(np.uint64)), a.type)
        raise NotImplementedError(name)


_INT_EXTREMA = {"smax": np.maximum, "smin": np.minimum, "umax": np.maximum, "umin": np.minimum}


class Block:
    """Stands in for `TileLowering` in the straight-line lowering code."""

    def __init__(self, num_warps: int):
        self.num_warps = num_warps
        self.threads = 32 * num_warps
        self.b = Builder(self)
        self.em = _Emitter(self)
        tid = np.arange(self.threads, dtype=np.uint64)
        self.lane = V(tid & np.uint64(31), ir.IntType(32))
        self.warp = V(tid >> np.uint64(5), ir.IntType(32))
        self.inputs: dict = {}
        self.barriers = 0

    # ---- what the lowering modules call on the TileLowering
    def shared(self, nbytes: int) -> _Pointer:
        return _Pointer(np.zeros(nbytes + 16, np.uint8))

    def barrier(self) -> None:
        self.barriers += 1

    def release_shared(self) -> None:
        pass

    def tile(self, node, want=None, lazy=False):
        value = self.inputs[id(node)]
        assert want is None or value.layout == want
        return value

    def expr(self, node):
        return self.inputs[id(node)]

    def thread_coord(self, layout: L.Layout, axis: int) -> V:
        return V(_thread_coords(layout, self.threads)[axis], ir.IntType(32))

    def coords(self, layout: L.Layout, r: int) -> list:
        return [self.b.add(self.thread_coord(layout, k), ir.Constant(ir.IntType(32), c))
                for k, c in enumerate(layout.register_coords(r))]

    # ---- test helpers
    def tile_value(self, layout: L.Layout, array: np.ndarray, dtype, reg_type: ir.Type):
        """`array` (of `layout`'s padded shape) held in `layout`, as a TileValue."""
        from verdigris.tile.values import TileValue

        regs = []
        for r in range(layout.num_regs):
            coords = [self.thread_coord(layout, k).data.astype(np.int64) + c
                      for k, c in enumerate(layout.register_coords(r))]
            data = array[tuple(coords)]
            if isinstance(reg_type, ir.IntType):
                data = _mask(reg_type, data.astype(np.int64).view(np.uint64) if data.dtype.kind == "i"
                             else data.astype(np.uint64))
            else:
                data = data.astype(_np(reg_type))
            regs.append(V(data, reg_type))
        return TileValue(layout, regs, dtype)

    def gather(self, value, shape: tuple) -> np.ndarray:
        """The tile's elements as an array of `shape` (a prefix of the padded shape);
        asserts that every thread holding one element holds the same bits."""
        layout = value.layout
        out: dict = {}
        for r, reg in enumerate(value.regs):
            reg = self.b.v(reg)
            coords = [self.thread_coord(layout, k).data.astype(np.int64) + c
                      for k, c in enumerate(layout.register_coords(r))]
            words = reg.data.view(f"V{reg.data.itemsize}")
            for at, bits in zip(zip(*(c.tolist() for c in coords)), words.tolist()):
                assert out.setdefault(at, bits) == bits, f"threads disagree on element {at}"
        dtype = self.b.v(value.regs[0]).data.dtype
        result = np.empty(shape, dtype)
        for at in product(*(range(n) for n in shape)):
            result[at] = np.frombuffer(out[at], dtype)[0]
        return result
