"""`TileDot` on the GPU: tensor cores (mma.sync on sm_80+, wgmma on sm_90a) or FMA.

Takes: a tile kernel holding `TileDot`s and a target. Gives:
- `plan(kernel, target) -> Plan`: per product its engine and accumulator layout, the
  dynamic shared memory the kernel needs, and the K loops `pipeline` streams (with the
  TMA descriptors their launches need). The runtime calls it too (`runtime.tensormap`), so
  compiling and launching agree without storing anything beside the cubin.
- `MmaLowering`, the tile lowering of kernels with products (`tile.lower.lower` picks it).

Engines, chosen per product from its padded shapes, dtypes and the target:
- "wgmma" (sm_90a; float16/bfloat16, fp8 e4m3/e5m2, tf32; M >= 64, whole warpgroups): A
  and B in shared memory in the swizzled format of `operand`, read through descriptors.
- "mma.sync" (sm_80+; float16/bfloat16, fp8 as float16 (exact), tf32; M, N >= 16): the
  operands staged the same way, fragments loaded with `ldmatrix`.
- "fma" (everything else: float32 without tf32, float64, small tiles): operands through
  shared memory, one fused multiply-add per element per k, in the accumulator's precision.
Operands held in registers are written to shared memory ("staged"): in the orientation
their registers run along (16-byte stores), transposed when the engine needs K-major
(tf32, fp8). Loads streamed by `pipeline` arrive there without passing through registers.
Every staging is: writes, (async-proxy fence,) barrier, reads, barrier, so one staging area
serves every product of the kernel.

Precision: products are exact and sums float32 on every engine, except that wgmma adds fp8
products in the tensor cores' own narrower accumulator (about 2e-3 relative at K = 8192,
measured; cuBLAS promotes to float32 every few k steps, which this lowering does not yet).

The accumulator never leaves registers: a variable assigned a product gets the product's
layout for its whole life, so `acc = tile.mma(a, b, acc)` in a loop moves no data, and an
epilogue (bias, activation, cast, store) runs on the registers where the product left them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from types import MappingProxyType

from llvmlite import ir

from ..codegen.dtypes import DOUBLE, FLOAT, I8, I32, I64, reg_type
from ..errors import CompileError
from ..ir import nodes as N
from ..ir import tiles as X
from . import memory, operand, ptx
from .layout import Layout, blocked, padded
from .lower import TileLowering, TileValue, num_warps
from .mma_layout import GroupGeometry, SyncGeometry, group_fits, sync_fits

SHARED = 3
MAX_DYNAMIC_SHARED = 227 * 1024  # per block on sm_90 (sm_80: 163 KiB; checked at launch)
_K_STEP = {"wgmma": {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 32, "float8_e5m2": 32,
                     "tf32": 8},
           "mma.sync": {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 16,
                        "float8_e5m2": 16, "tf32": 8}}
_STAGED = {  # (engine, kind) -> element type staged in shared memory
    ("mma.sync", "float8_e4m3fn"): "float16", ("mma.sync", "float8_e5m2"): "float16",
    ("mma.sync", "tf32"): "float32", ("wgmma", "tf32"): "float32",
}


def kind_of(node: X.TileDot) -> str:
    """The operand kind of a product: its dtype name, or "tf32"."""
    return "tf32" if node.precision == "tf32" else node.a.dtype.name


@dataclass(frozen=True)
class DotPlan:
    engine: str  # "wgmma" | "mma.sync" | "fma"
    layout: Layout
    geometry: object  # GroupGeometry | SyncGeometry | None
    kind: str
    staged: str  # element type in shared memory ("" for fma: register type)
    k_major: tuple  # (A, B) stored K-major; None: decided by the registers


@dataclass
class Plan:
    dots: dict = field(default_factory=dict)  # id(TileDot) -> DotPlan
    staging_offset: int = 0
    staging_bytes: int = 0
    pipelines: dict = field(default_factory=dict)  # id(For) -> pipeline.Pipeline
    tensor_maps: list = field(default_factory=list)  # pipeline.TensorMap, kernel param order

    @property
    def dynamic_shared(self) -> int:
        return self.staging_offset + self.staging_bytes


def _store_bytes(s: X.TileStore) -> int:
    return prod(padded(s.value.shape)) * s.array.dtype.itemsize


def _walk(kernel):
    from ..frontend import walk

    return walk(kernel.body)


def has_dots(kernel: N.Kernel) -> bool:
    return any(isinstance(n, X.TileDot) for n in _walk(kernel))


def _engine(node: X.TileDot, target: str, warps: int) -> tuple:
    m, k = padded(node.a.shape)
    n = padded(node.b.shape)[1]
    kind = kind_of(node)
    if target == "sm_90a" and kind in _K_STEP["wgmma"] and group_fits(m, n, k, _K_STEP["wgmma"][kind], warps):
        return "wgmma", GroupGeometry(m, n, warps)
    if kind in _K_STEP["mma.sync"] and sync_fits(m, n, k, _K_STEP["mma.sync"][kind]):
        return "mma.sync", SyncGeometry(m, n, warps)
    return "fma", None


def _dot_plan(node: X.TileDot, target: str, warps: int) -> DotPlan:
    engine, geometry = _engine(node, target, warps)
    kind = kind_of(node)
    if engine == "fma":
        shape = padded(node.shape)
        per_thread = max(1, shape[0] * shape[1] // (32 * warps))
        return DotPlan("fma", blocked(shape, warps, min(4, per_thread)), None, kind, "", (None, None))
    staged = _STAGED.get((engine, kind), kind if kind != "tf32" else "float32")
    # tf32 and 8-bit types have no transposing loads (ldmatrix.trans, wgmma's transposes
    # are for 16-bit types): their operands are stored K-major.
    forced = (True, True) if kind == "tf32" or (engine == "wgmma" and kind.startswith("float8")) \
        else (None, None)
    return DotPlan(engine, geometry.layout(), geometry, kind, staged, forced)


def _staging_bytes(node: X.TileDot, dot: DotPlan) -> int:
    m, k = padded(node.a.shape)
    n = padded(node.b.shape)[1]
    size = 8 if node.dtype.bits == 64 else 4 if dot.engine == "fma" else _size(dot.staged)
    a = _align((m * k) * size)
    return a + _align(k * n * size)


def _size(dtype_name: str) -> int:
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}[dtype_name]


def _align(n: int, to: int = operand.BASE_ALIGN) -> int:
    return (n + to - 1) // to * to


_PLANS: dict = {}


def plan(kernel: N.Kernel, target: str) -> Plan:
    key = (id(kernel), target)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is kernel:
        return cached[1]
    from . import pipeline

    warps = num_warps(kernel)
    result = Plan()
    for node in _walk(kernel):
        if isinstance(node, X.TileDot):
            result.dots[id(node)] = _dot_plan(node, target, warps)
    pipeline.find(kernel, target, result)
    streamed = {id(d) for p in result.pipelines.values() for d in p.dots}
    sizes = [_staging_bytes(node, result.dots[id(node)]) for node in _walk(kernel)
             if isinstance(node, X.TileDot) and id(node) not in streamed]
    # Stores go through shared memory from offset 0 (`MmaLowering._through_shared`).
    stores = [_store_bytes(n) for n in _walk(kernel) if isinstance(n, X.TileStore)]
    result.staging_bytes = max(max(sizes, default=0), max(stores, default=0) - result.staging_offset)
    if result.dynamic_shared > MAX_DYNAMIC_SHARED:
        raise CompileError(f"the matrix products of {kernel.name} need {result.dynamic_shared} "
                           f"bytes of shared memory, more than a block has "
                           f"({MAX_DYNAMIC_SHARED})", kernel.loc, hint="use smaller tiles")
    _PLANS[key] = (kernel, result)
    return result


def _accumulators(kernel: N.Kernel, p: Plan) -> dict:
    """Variable name -> the layout of the product its first assignment computes (through
    elementwise ops, whose result is in their first non-splat operand's layout)."""
    found: dict = {}
    assigns = [n for n in _walk(kernel) if isinstance(n, N.Assign) and isinstance(n.value, X.TileExpr)]
    for _ in range(3):  # a variable computed from another one's product: a few rounds
        for node in assigns:
            if node.name not in found:
                layout = _product_layout(node.value, p, found)
                if layout is not None:
                    found[node.name] = layout
    return found


def _product_layout(e, p: Plan, found: dict):
    while isinstance(e, X.TileMap):
        e = next((a for a in e.args if not isinstance(a, X.Splat)), None)
    if isinstance(e, X.TileDot):
        return p.dots[id(e)].layout
    if isinstance(e, X.TileVar):
        return found.get(e.name)
    return None


run_along = operand._run


class _GridConstant(ir.values.ArgumentAttributes):
    """llvmlite's parameter attributes, plus a 128-byte byval and nvvm.grid_constant."""

    _known = MappingProxyType({**ir.values.ArgumentAttributes._known, "byval([128 x i8])": False,
                               '"nvvm.grid_constant"': False})


class MmaLowering(TileLowering):
    def __init__(self, kernel: N.Kernel, target: str):
        self.plan = plan(kernel, target)
        self.accumulators = _accumulators(kernel, self.plan)
        self.streams: dict = {}  # id(TileDot) -> (A, B) shared operands of this iteration
        self.pending = 0  # wgmma groups left in flight after a product (a streamed loop: 1)
        self.dsmem = None
        # Tiles reshaped from loads (3-d arrays seen as 2-d operands) keep the load's vectors.
        self.reshaped = {padded(n.shape): 16 // n.value.array.dtype.itemsize for n in _walk(kernel)
                         if isinstance(n, X.Reshape) and isinstance(n.value, X.TileLoad)}
        super().__init__(kernel, target)
        self.target = target
        first = len(self.fn.args) - len(self.plan.tensor_maps)
        self.tensor_map_args = []
        for arg in self.fn.args[first:]:
            arg.attributes = _GridConstant()
            arg.attributes.add("byval([128 x i8])")
            arg.attributes.add('"nvvm.grid_constant"')
            arg.attributes.align = 64
            self.tensor_map_args.append(self.allocas.ptrtoint(arg, I64))

    def default(self, shape: tuple) -> Layout:
        shape = padded(shape)
        if shape not in self.widths and shape in self.reshaped:
            per_thread = max(1, prod(shape) // (32 * self.num_warps))
            return blocked(shape, self.num_warps, min(self.reshaped[shape], per_thread))
        return super().default(shape)

    def extra_params(self) -> list:
        """One CUtensorMap per streamed operand, by value (`__grid_constant__`)."""
        return [ir.PointerType()] * len(self.plan.tensor_maps)

    # ------------------------------------------------------------------ hooks

    def _tile_slots(self, name: str, tt: X.TileType) -> tuple:
        layout = self.accumulators.get(name)
        if layout is None:
            return super()._tile_slots(name, tt)
        return layout, [self._alloca(reg_type(tt.dtype), f"{name}.{r}") for r in range(layout.num_regs)]

    def _tile_store(self, s: X.TileStore) -> None:
        """A tile in a product's layout (2 consecutive elements per thread) goes to the
        default layout through dynamic shared memory first, so that the global stores are
        16-byte vectors, coalesced; other tiles are stored from the layout they are in."""
        self._writable(s)
        value = self.tile(s.value)
        default = self.default(s.value.shape)
        if value.layout != default and value.layout.vector_width() < default.vector_width() \
                and _store_bytes(s) <= self.plan.dynamic_shared:
            value = self._through_shared(value, default, s.array.dtype)
        memory.store(self, s, value)

    def _through_shared(self, value: TileValue, layout: Layout, dtype) -> TileValue:
        """`value` in `layout`, through the swizzled format at the start of dynamic shared
        memory (free between products: every user of it ends with a barrier, and a streamed
        loop's last stage is read before its end; the barrier first covers other warps)."""
        from ..codegen.dtypes import mem_type, to_mem, to_reg

        b = self.b
        shape = value.layout.shape
        stored = operand.Stored(prod(shape[:-1]), shape[-1], dtype.itemsize)
        base = self.shared_dynamic(0)

        def pointer(coords):
            row = _c(0)
            for c, n in zip(coords[:-1], shape[:-1]):
                row = b.add(b.mul(row, _c(n)), c)
            offset = stored.chunk_offset(b, row, coords[-1])
            return b.gep(base, [b.zext(offset, I64)], inbounds=True, source_etype=I8)

        self.barrier()
        width = value.layout.vector_width()
        for r0 in range(0, value.layout.num_regs, width):
            for j in range(width):
                word = to_mem(b, dtype, value.regs[r0 + j])
                b.store(word, pointer(self.coords(value.layout, r0 + j)), align=dtype.itemsize)
        self.barrier()
        width = min(layout.vector_width(), 16 // dtype.itemsize)
        vector = ir.VectorType(mem_type(dtype), width)
        regs = []
        for r0 in range(0, layout.num_regs, width):
            got = b.load(pointer(self.coords(layout, r0)), typ=vector, align=width * dtype.itemsize)
            regs += [to_reg(b, dtype, b.extract_element(got, _c(j))) for j in range(width)]
        self.barrier()
        return TileValue(layout, regs, value.dtype)

    def shared_dynamic(self, offset: int) -> ir.Value:
        """A pointer `offset` bytes into the kernel's dynamic shared memory."""
        if self.dsmem is None:
            self.dsmem = ir.GlobalVariable(self.module, ir.ArrayType(I8, 0), "vg_dsmem", addrspace=SHARED)
            self.dsmem.type = ir.PointerType(addrspace=SHARED)
            self.dsmem.linkage = "external"
            self.dsmem.align = operand.BASE_ALIGN
        return self.b.gep(self.dsmem, [ir.Constant(I64, offset)], inbounds=True, source_etype=I8)

    def _for(self, s: N.For) -> None:
        from . import pipeline

        stream = self.plan.pipelines.get(id(s))
        if stream is None:
            return super()._for(s)
        self.depth += 1
        try:
            pipeline.lower_loop(self, s, stream)
        finally:
            self.depth -= 1

    _STMT = {**TileLowering._STMT, N.For: _for, X.TileStore: _tile_store}

    # ------------------------------------------------------------------ products

    def _tile_dot(self, e: X.TileDot, want) -> TileValue:
        dot = self.plan.dots[id(e)]
        acc = self._initial(e, dot.layout)
        if dot.engine == "fma":
            return _fma(self, e, dot, acc)
        streamed = self.streams.get(id(e))
        if streamed is None:
            streamed = self._stage_operands(e, dot)
        (a_stored, a_base, a_kmajor), (b_stored, b_base, b_kmajor) = streamed
        engine = _wgmma if dot.engine == "wgmma" else _mma_sync
        regs = engine(self, dot, acc.regs, a_stored, a_base, a_kmajor, b_stored, b_base, b_kmajor)
        if id(e) not in self.streams:
            self.barrier()  # the staging area is free again
        return TileValue(dot.layout, regs, e.dtype)

    _TILE = {**TileLowering._TILE, X.TileDot: _tile_dot}

    def _initial(self, e: X.TileDot, layout: Layout) -> TileValue:
        if e.acc is not None:
            return self.tile(e.acc, layout)
        zero = ir.Constant(reg_type(e.dtype), 0.0)
        return TileValue(layout, [zero] * layout.num_regs, e.dtype)

    def _stage_operands(self, e: X.TileDot, dot: DotPlan) -> tuple:
        """Registers -> the staging area; a barrier (and for wgmma a proxy fence) after."""
        staged_size = _size(dot.staged)
        offset = self.plan.staging_offset
        result = []
        for which, node, forced in (("a", e.a, dot.k_major[0]), ("b", e.b, dot.k_major[1])):
            value = self.tile(node)
            rows, cols = padded(node.shape)
            k_axis = 1 if which == "a" else 0
            # Store along the axis the registers run along (16-byte stores), unless forced.
            k_major = forced if forced is not None else \
                run_along(value.layout, k_axis) >= run_along(value.layout, 1 - k_axis)
            transposed = k_major != (k_axis == 1)
            stored = operand.Stored(cols, rows, staged_size) if transposed \
                else operand.Stored(rows, cols, staged_size)
            base = self.shared_dynamic(offset)
            operand.stage(self, stored, base, value, node.shape, transposed, dot.staged,
                          tf32=dot.kind == "tf32")
            result.append((stored, base, k_major))
            offset += _align(stored.nbytes)
        if dot.engine == "wgmma":
            ptx.fence_proxy_async(self.em)
        self.barrier()
        return tuple(result)

    def run(self) -> ir.Module:
        return super().run()


# ----------------------------------------------------------------------------- mma.sync


def _lane_parts(low):
    """(matrix index i = lane / 8, row within it j = lane % 8) as i32 values."""
    b = low.b
    return b.lshr(low.lane, ir.Constant(I32, 3)), b.and_(low.lane, ir.Constant(I32, 7))


def _c(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _mma_sync(low, dot: DotPlan, acc: list, a_stored, a_base, a_kmajor, b_stored, b_base, b_kmajor) -> list:
    """ldmatrix + mma.sync over the staged operands: this warp's m_tiles x n_tiles tiles."""
    b, em, g = low.b, low.em, dot.geometry
    k_step = _K_STEP["mma.sync"][dot.kind]
    half = k_step // 2  # columns of one 8x8 b16 matrix, in elements (4 for tf32)
    wm = b.and_(low.warp, _c(g.warps_m - 1))
    wn = b.and_(b.lshr(low.warp, _c(g.warps_m.bit_length() - 1)), _c(g.warps_n - 1))
    row0 = b.mul(wm, _c(16))
    col0 = b.mul(wn, _c(g.warp_cols))
    mat, j = _lane_parts(low)
    lo_bit = b.and_(mat, _c(1))
    hi_bit = b.lshr(mat, _c(1))
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
            m0 = b.add(row0, _c(16 * g.warps_m * i))
            if a_kmajor:  # rows m: matrices (m +0/+8) x (k +0/+half)
                addr = address(a_stored, a_base, b.add(b.add(m0, b.mul(lo_bit, _c(8))), j),
                               b.add(_c(k0), b.mul(hi_bit, _c(half))))
            else:  # rows k, columns m: transposed loads
                addr = address(a_stored, a_base, b.add(b.add(_c(k0), b.mul(hi_bit, _c(8))), j),
                               b.add(m0, b.mul(lo_bit, _c(8))))
            a_frags.append(ptx.ldmatrix(em, addr, trans=not a_kmajor))
        b_frags = []
        for jp in range(0, g.n_tiles, 2):
            n0 = b.add(col0, _c(8 * jp))
            if b_kmajor:  # rows n: matrices (n +0/+8) x (k +0/+half)
                addr = address(b_stored, b_base, b.add(b.add(n0, b.mul(hi_bit, _c(8))), j),
                               b.add(_c(k0), b.mul(lo_bit, _c(half))))
            else:  # rows k, columns n
                addr = address(b_stored, b_base, b.add(b.add(_c(k0), b.mul(lo_bit, _c(8))), j),
                               b.add(n0, b.mul(hi_bit, _c(8))))
            r = ptx.ldmatrix(em, addr, trans=not b_kmajor)
            b_frags += [r[0:2], r[2:4]]
        for i in range(g.m_tiles):
            for jj in range(g.n_tiles):
                base = 4 * (jj + g.n_tiles * i)
                regs[base:base + 4] = ptx.mma_sync(em, sync_kind, a_frags[i], b_frags[jj], regs[base:base + 4])
    return regs


# ----------------------------------------------------------------------------- wgmma


def _wgmma(low, dot: DotPlan, acc: list, a_stored, a_base, a_kmajor, b_stored, b_base, b_kmajor) -> list:
    """wgmma over operands in shared memory: each warpgroup its m_blocks x n_blocks
    instructions per k step; waits for completion before returning."""
    b, em, g = low.b, low.em, dot.geometry
    k_step = _K_STEP["wgmma"][dot.kind]
    size = a_stored.size
    group = b.lshr(low.warp, _c(2))
    gm = b.and_(group, _c(g.groups_m - 1))
    gn = b.lshr(group, _c(g.groups_m.bit_length() - 1))
    row0 = b.mul(gm, _c(g.group_rows))
    col0 = b.mul(gn, _c(g.group_cols))
    a_addr, b_addr = ptx.shared_address(b, a_base), ptx.shared_address(b, b_base)
    a_bits, b_bits = a_stored.descriptor_bits(a_kmajor), b_stored.descriptor_bits(b_kmajor)
    k_total = a_stored.cols if a_kmajor else a_stored.rows
    count = g.inst_n // 2
    regs = ptx.pin(em, list(acc))
    one = ir.Constant(I32, 1)
    ptx.wgmma_fence(em)
    for ks in range(k_total // k_step):
        k0 = ks * k_step
        for mb in range(g.m_blocks):
            m0 = b.add(row0, _c(64 * mb))
            desc_a = operand.descriptor(b, b.add(a_addr, _start(b, a_stored, a_kmajor, m0, k0, size)), a_bits)
            for nb in range(g.n_blocks):
                n0 = b.add(col0, _c(g.inst_n * nb))
                desc_b = operand.descriptor(b, b.add(b_addr, _start(b, b_stored, b_kmajor, n0, k0, size)), b_bits)
                first = count * (nb + g.n_blocks * mb)
                regs[first:first + count] = ptx.wgmma(
                    em, dot.kind, dot.kind, g.inst_n, regs[first:first + count], desc_a, desc_b, one,
                    int(not a_kmajor), int(not b_kmajor))
    ptx.wgmma_commit(em)
    if low.pending:  # a streamed loop: its end waits for the rest (`pipeline`)
        ptx.wgmma_wait(em, low.pending)
        return regs
    return ptx.wgmma_wait(em, 0, regs)


def _start(b, stored: operand.Stored, k_major: bool, mn0: ir.Value, k0: int, size: int) -> ir.Value:
    """The unswizzled byte offset where an instruction's operand starts: row mn0 (a multiple
    of 64) at column k0 (K-major), or row k0 at column mn0 (MN-major; a panel start)."""
    p, pc = stored.panel_bytes, stored.panel_cols
    if k_major:
        fixed = (k0 // pc) * stored.rows * p + (k0 % pc) * size
        return b.add(b.mul(mn0, _c(p)), _c(fixed))
    panel = b.lshr(mn0, _c(pc.bit_length() - 1))
    return b.add(b.mul(panel, _c(stored.rows * p)), _c(k0 * p))


# ----------------------------------------------------------------------------- fma


def _fma(low, e: X.TileDot, dot: DotPlan, acc: TileValue) -> TileValue:
    """acc[m, n] += a[m, k] * b[k, n] for k in a loop, operands read from shared memory."""
    b, em = low.b, low.em
    wide = DOUBLE if e.dtype.bits == 64 else FLOAT
    size = 8 if wide == DOUBLE else 4
    (m, k), n = padded(e.a.shape), padded(e.b.shape)[1]
    a_base = low.shared_dynamic(low.plan.staging_offset)
    b_base = low.shared_dynamic(low.plan.staging_offset + _align(m * k * size))
    for node, base, pitch in ((e.a, a_base, k), (e.b, b_base, n)):
        value = low.tile(node)
        for r, reg in enumerate(value.regs):
            row, col = low.coords(value.layout, r)
            reg = reg if reg.type == wide else b.fpext(reg, wide)
            index = b.add(b.mul(row, _c(pitch)), col)
            b.store(reg, b.gep(base, [b.zext(index, I64)], inbounds=True, source_etype=wide))
    low.barrier()
    layout = dot.layout
    coords = [low.coords(layout, r) for r in range(layout.num_regs)]
    start = b.block
    header, body, done = low._block("fma.k"), low._block("fma.body"), low._block("fma.done")
    b.branch(header)
    b.position_at_end(header)
    kk = b.phi(I32)
    kk.add_incoming(_c(0), start)
    phis = []
    for reg in acc.regs:
        phi = b.phi(wide)
        phi.add_incoming(reg if reg.type == wide else b.fpext(reg, wide), start)
        phis.append(phi)
    b.cbranch(b.icmp_unsigned("<", kk, _c(e.a.shape[1])), body, done)
    b.position_at_end(body)
    updated = []
    for phi, (row, col) in zip(phis, coords):
        x = b.load(b.gep(a_base, [b.zext(b.add(b.mul(row, _c(k)), kk), I64)], inbounds=True,
                         source_etype=wide), typ=wide)
        y = b.load(b.gep(b_base, [b.zext(b.add(b.mul(kk, _c(n)), col), I64)], inbounds=True,
                         source_etype=wide), typ=wide)
        updated.append(em.call(f"llvm.fma.{wide.intrinsic_name}", wide, x, y, phi))
    kk.add_incoming(b.add(kk, _c(1)), b.block)
    for phi, value in zip(phis, updated):
        phi.add_incoming(value, b.block)
    b.branch(header)
    b.position_at_end(done)
    low.barrier()
    return TileValue(layout, list(phis), e.dtype)
