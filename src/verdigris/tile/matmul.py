"""`TileDot` on the GPU: tensor cores (mma.sync on sm_80+, wgmma on sm_90a) or FMA.

Takes: a tile kernel holding `TileDot`s and a target. Gives:
- `plan(kernel, target) -> Plan`: per product its engine and accumulator layout, the
  dynamic shared memory the kernel needs, and the K loops `pipeline` streams (with the
  TMA descriptors their launches need). The runtime calls it too (`runtime.tensormap`), so
  compiling and launching agree without storing anything beside the cubin.
- `MmaLowering`, the tile lowering of kernels with products (`tile.lower.lower` picks it);
  the instructions of each product are `issue`'s.

Engines, chosen per product from its padded shapes, dtypes and the target:
- "wgmma" (sm_90a; float16/bfloat16, fp8 e4m3/e5m2, tf32; M >= 64, whole warpgroups): A
  and B in shared memory in the swizzled format of `operand`, read through descriptors.
- "mma.sync" (sm_80+; float16/bfloat16, fp8 as float16 (exact), tf32; M, N >= 16): the
  operands staged the same way, fragments loaded with `ldmatrix`. The loops `pipeline`
  would stream on sm_90a stream here too, by `cp.async` copies into the same format,
  several iterations ahead (`cpasync`; float16/bfloat16 loads: fp8 is converted to
  float16 on its way to shared memory, so it is staged from registers).
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

from llvmlite import ir

from ..codegen.dtypes import I8, I32, I64, i32, reg_type
from ..errors import CompileError
from ..ir import nodes as N
from ..ir import tiles as X
from ..types import from_name
from . import issue, memory, operand, pieces, ptx, sorting
from .layout import Layout, blocked, only_unit_axes_differ, padded, unit_reshaped
from ..codegen.attributes import grid_constant_attributes
from .lower import TileLowering
from .values import TileValue
from .warps import num_warps
from .sharedmem import MAX_DYNAMIC_SHARED, shared_per_block
from .mma_layout import GroupGeometry, SyncGeometry, a_fragments, a_layout, group_fits, sync_fits

_STAGED = {  # (engine, kind) -> element type staged in shared memory
    ("mma.sync", "float8_e4m3fn"): "float16", ("mma.sync", "float8_e5m2"): "float16",
    ("mma.sync", "tf32"): "float32", ("wgmma", "tf32"): "float32",
}


def kind_of(node: X.TileDot, which: int = 0) -> str:
    """The kind of a product's operand `which` (0: A, 1: B): its dtype name, or "tf32".
    Only fp8 products mix kinds (e4m3 with e5m2)."""
    return "tf32" if node.precision == "tf32" else (node.a, node.b)[which].dtype.name


@dataclass(frozen=True)
class DotPlan:
    engine: str  # "wgmma" | "mma.sync" | "fma"
    layout: Layout
    geometry: object  # GroupGeometry | SyncGeometry | None
    kind: str
    staged: str  # element type in shared memory ("" for fma: register type)
    k_major: tuple  # (A, B) stored K-major; None: decided by the registers
    b_kind: str = ""  # B's kind where it differs from A's (e5m2 with e4m3); else `kind`


@dataclass
class Plan:
    tma: bool = True  # loops may stream through the copy engine (False: a fallback build)
    dots: dict = field(default_factory=dict)  # id(TileDot) -> DotPlan
    staging_offset: int = 0
    staging_bytes: int = 0
    pipelines: dict = field(default_factory=dict)  # id(For) -> pipeline.Pipeline
    tensor_maps: list = field(default_factory=list)  # pipeline.TensorMap, kernel param order
    specialized: object = None  # specialize.Specialized, or None
    stores: dict = field(default_factory=dict)  # id(TileStore) -> epilogue.StoreChunks
    register_a: dict = field(default_factory=dict)  # id(TileDot) -> layout of A in registers
    store_buffers: int = 0  # offset of the epilogue's buffers
    through_offset: int = 0  # where stores through shared memory go (`_through_shared`)

    @property
    def dynamic_shared(self) -> int:
        return self.staging_offset + self.staging_bytes

    @property
    def persistent(self) -> bool:
        return self.specialized is not None and self.specialized.persistent

    @property
    def block_threads(self):
        """The block a warp-specialized kernel needs (None: the lowering's usual one)."""
        return None if self.specialized is None else self.specialized.threads


def _store_bytes(s: X.TileStore) -> int:
    return prod(padded(s.value.shape)) * s.array.dtype.itemsize


def _walk(kernel):
    from ..frontend import walk

    return walk(kernel.body)


def _engine(node: X.TileDot, target: str, warps: int) -> tuple:
    m, k = padded(node.a.shape)
    n = padded(node.b.shape)[1]
    kind = kind_of(node)
    steps = issue.K_STEP
    if target == "sm_90a" and kind in steps["wgmma"] and group_fits(m, n, k, steps["wgmma"][kind], warps):
        return "wgmma", GroupGeometry(m, n, warps)
    if kind in steps["mma.sync"] and sync_fits(m, n, k, steps["mma.sync"][kind]):
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
    return DotPlan(engine, geometry.layout(), geometry, kind, staged, forced, kind_of(node, 1))


def _operand_bytes(node: X.TileDot, dot: DotPlan, which: int) -> int:
    m, k = padded(node.a.shape)
    n = padded(node.b.shape)[1]
    size = 8 if node.dtype.bits == 64 else 4 if dot.engine == "fma" else from_name(dot.staged).itemsize
    return operand.aligned((m * k if which == 0 else k * n) * size)


_PLANS: dict = {}
STATIC_RESERVE = 8 * 1024  # static shared memory kept free for reductions, scans, flips, slices, cats
# Static shared memory kept free (beside the products' dynamic) for a kernel's tile ops that
# go through shared memory: node type -> bytes.
_STATIC_NEEDS = {X.TileReduce: STATIC_RESERVE, X.TileScan: STATIC_RESERVE, X.Flip: STATIC_RESERVE,
                 X.TileSlice: STATIC_RESERVE, X.Cat: STATIC_RESERVE, X.TileSort: sorting.STATIC_BYTES}
MIN_STAGES = {True: 3, False: 2}  # (warp-specialized) -> fewest stages worth the epilogue's buffers


def plan(kernel: N.Kernel, target: str) -> Plan:
    key = (id(kernel), target)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is kernel:
        return cached[1]
    from . import epilogue, specialize, streams

    warps = num_warps(kernel)
    result = Plan(tma=kernel.facts.get("tma", True))
    for node in _walk(kernel):
        if isinstance(node, X.TileDot):
            result.dots[id(node)] = _dot_plan(node, target, warps)
    found = streams.find(kernel, target, result)
    result.specialized = specialize.decide(kernel, found, warps) if target == "sm_90a" else None
    layouts = _accumulators(kernel, result)
    result.register_a = _registers_as_a(kernel, result, layouts)
    if result.specialized is not None:
        maps = list(result.tensor_maps)
        result.stores = epilogue.find(kernel, result, lambda e: _product_layout(e, result, layouts), warps)
        if not _place(kernel, result, found, warps):  # too little room: plain stores
            result.stores, result.tensor_maps[:] = {}, maps
            _place(kernel, result, found, warps)
    else:
        budget = shared_per_block(target)
        _place(kernel, result, found, warps, budget)
        if target != "sm_90a" and found and result.dynamic_shared > budget:  # not 2 stages: no stream
            found = []
            _place(kernel, result, found, warps, budget)
    if result.dynamic_shared > MAX_DYNAMIC_SHARED:
        raise CompileError(f"the matrix products of {kernel.name} need {result.dynamic_shared} "
                           f"bytes of shared memory, more than a block has "
                           f"({MAX_DYNAMIC_SHARED})", kernel.loc, hint="use smaller tiles")
    _PLANS[key] = (kernel, result)
    return result


def _registers_as_a(kernel: N.Kernel, result: Plan, layouts: dict) -> dict:
    """Products whose 16-bit A wgmma takes from registers (`mma_layout.a_layout`): where
    the registers already are, A being an earlier product's result (a cast to A's dtype
    is folded into the packing)."""
    out = {}
    for node in _walk(kernel):
        dot = result.dots.get(id(node)) if isinstance(node, X.TileDot) else None
        if dot is None or dot.engine != "wgmma" or dot.kind not in ("float16", "bfloat16"):
            continue
        wanted = a_layout(dot.geometry, padded(node.a.shape)[1])
        if wanted is not None and _product_layout(_uncast(node.a), result, layouts) == wanted:
            out[id(node)] = wanted
    return out


def _uncast(e):
    """A float32 tile cast to a 16-bit dtype: the float32 tile (`pack_half2` rounds it)."""
    if isinstance(e, X.TileMap) and e.op == "cast" and e.args[0].dtype.name == "float32":
        return e.args[0]
    return e


def _place(kernel: N.Kernel, result: Plan, found: list, warps: int, budget: int = MAX_DYNAMIC_SHARED) -> bool:
    """Lay out dynamic shared memory: the pipelines' stages and barriers, loop-invariant
    operands, the epilogue's buffers, then the staging area (operands staged from
    registers, and stores through shared memory); as many stages as `budget` bytes hold
    (at least 2). False when a warp-specialized kernel would get fewer than MIN_STAGES
    stages."""
    from . import epilogue

    streamed = {(id(op.dot), op.which) for p in found for op in p.operands} | \
        {(id(inv.dot), inv.which) for p in found for inv in p.invariants}
    streamed |= {(key, 0) for key in result.register_a}
    staged = [_operand_bytes(node, result.dots[id(node)], 0) * ((id(node), 0) not in streamed)
              + _operand_bytes(node, result.dots[id(node)], 1) * ((id(node), 1) not in streamed)
              for node in _walk(kernel) if isinstance(node, X.TileDot)]
    through = [_store_bytes(n) for n in _walk(kernel) if isinstance(n, X.TileStore) and id(n) not in result.stores]
    invariants = sum(inv.nbytes for p in found for inv in p.invariants)
    buffers = epilogue.buffer_bytes(result)
    specialized = result.specialized is not None
    staging = max(staged, default=0)
    if specialized:  # stores through shared memory must not meet the producer's copies
        staging = max(staging, max(through, default=0))
    reserve = max((_STATIC_NEEDS.get(type(n), 0) for n in _walk(kernel)), default=0)
    free = budget - reserve - invariants - buffers - operand.aligned(staging) - operand.BASE_ALIGN * len(found)
    offset = 0
    result.pipelines = {}
    for p in found:
        stages = max(2, min(p.max_stages, free // len(found) // p.stage_bytes))
        if specialized and stages < MIN_STAGES[bool(result.stores)]:
            return False
        offset = p.place(offset, stages)
        result.pipelines[id(p.loop)] = p
    for p in found:
        for inv in p.invariants:
            inv.offset, offset = offset, offset + inv.nbytes
    result.store_buffers, offset = offset, offset + buffers
    result.staging_offset = offset
    if specialized:
        result.through_offset = offset
        result.staging_bytes = staging
    else:  # stores through shared memory start at 0: the stages are free after their loop
        result.staging_bytes = max(staging, max(through, default=0) - offset)
    return True


def _accumulators(kernel: N.Kernel, p: Plan) -> dict:
    """Variable name -> the layout its tile lives in, where the products decide one: a
    product's own layout, carried forward through elementwise ops, reductions (sliced)
    unit reshapes and batches (`pieces.stackable`), and backward into the variables an expression in a known layout
    reads (a broadcast source sliced on its stretched axes). So an accumulator never moves
    (`acc = tile.mma(a, b, acc)` in a loop), and neither do attention's running maximum and
    sum, nor the row and column indices its mask compares: every statement's operands are
    already where its result is."""
    found: dict = {}
    assigns = [n for n in _walk(kernel) if isinstance(n, N.Assign) and isinstance(n.value, X.TileExpr)]
    for _ in range(4):  # variables computed from other variables: a few rounds
        for node in assigns:
            if node.name not in found:
                layout = _product_layout(node.value, p, found)
                if layout is not None and layout.shape == padded(node.value.shape):
                    found[node.name] = layout
        for node in assigns:
            if node.name in found:
                _wanted(node.value, found[node.name], found)
    return found


def _product_layout(e, p: Plan, found: dict):
    """The layout a product gives `e` (None: no product decides it)."""
    if isinstance(e, X.TileMap):
        return next((layout for a in e.args if not isinstance(a, X.Splat)
                     for layout in [_product_layout(a, p, found)] if layout is not None), None)
    if isinstance(e, X.TileDot):
        return p.dots[id(e)].layout
    if isinstance(e, X.TileVar):
        return found.get(e.name)
    if isinstance(e, X.TileReduce) and e.axis is not None:
        source = _product_layout(e.value, p, found)
        return None if source is None else source.sliced({e.axis}).squeezed(e.axis)
    if isinstance(e, X.Reshape) and only_unit_axes_differ(e.value.shape, e.shape):
        source = _product_layout(e.value, p, found)
        return None if source is None else unit_reshaped(source, e.value.shape, e.shape)
    if isinstance(e, X.Cat):  # a batch of products: their registers one after another
        return pieces.stackable(e, [_product_layout(part, p, found) for part in e.parts])
    return None


def _wanted(e, layout: Layout, found: dict) -> None:
    """Variables read by `e`, lowered in `layout`, that no product placed: there too."""
    if isinstance(e, X.TileVar):
        if e.name not in found and layout.shape == padded(e.shape):
            found[e.name] = layout
    elif isinstance(e, X.TileMap):
        for a in e.args:
            _wanted(a, layout, found)
    elif isinstance(e, X.Broadcast):
        _wanted(e.value, layout.sliced({k for k, (a, b) in enumerate(zip(e.value.shape, e.shape)) if a != b}),
                found)
    elif isinstance(e, X.Reshape) and only_unit_axes_differ(e.value.shape, e.shape):
        _wanted(e.value, unit_reshaped(layout, e.shape, e.value.shape), found)


run_along = operand._run


class MmaLowering(TileLowering):
    variables_where_made = False  # accumulators and operands have layouts of their own

    dynamic_align = operand.BASE_ALIGN  # the swizzled operands' base

    def __init__(self, kernel: N.Kernel, target: str, exchange=None):
        self.plan = plan(kernel, target)
        self.accumulators = _accumulators(kernel, self.plan)
        self.streams: dict = {}  # id(TileDot) -> (A, B): shared operands given, or None
        self.pending = False  # in an accumulating streamed loop: products left in flight
        self.turns = None  # in a general streamed loop: (this group's turn barrier, the next's)
        # Tiles reshaped from loads (3-d arrays seen as 2-d operands) keep the load's vectors.
        self.reshaped = {padded(n.shape): 16 // n.value.array.dtype.itemsize for n in _walk(kernel)
                         if isinstance(n, X.Reshape) and isinstance(n.value, X.TileLoad)}
        super().__init__(kernel, target, exchange)
        self.target = target
        self.stream_count = None  # running iteration count of a specialized kernel's stream
        args = self._extra_args()
        self.virtual_grid = []
        if self.plan.persistent:
            self.virtual_grid, args = list(args[:3]), args[3:]
            self.virtual_bid = [self._alloca(I32, f"bid.{'xyz'[k]}") for k in range(3)]
        self.tensor_map_args = []
        for arg in args:
            arg.attributes = grid_constant_attributes()
            arg.attributes.align = 64
            self.tensor_map_args.append(self.allocas.ptrtoint(arg, I64))

    def _extra_args(self) -> list:
        """The kernel's arguments after the fault block (`extra_params`)."""
        return self.fn.args[len(self.fn.args) - len(self.extra_params()):]

    def launch_dim(self, kind: str, axis: int) -> ir.Value:
        """A persistent kernel runs on one block per multiprocessor, its code on the grid it
        was launched for (the virtual grid, its first arguments after the fault block): the
        bounds proofs' launch conditions (`llvm.assume`) are about that one."""
        if self.plan.persistent and kind == "grid_dim":
            return self._extra_args()[axis]
        return super().launch_dim(kind, axis)

    def bounds(self) -> tuple | None:
        """A warp-specialized product: its threads and one block per multiprocessor, the
        register cap `setmaxnreg` needs."""
        if self.plan.specialized is None:
            return super().bounds()
        if (self.kernel.min_blocks_per_sm or 1) > 1:
            raise CompileError(
                f"min_blocks_per_sm={self.kernel.min_blocks_per_sm} cannot hold for this kernel: "
                "its warp-specialized matrix product takes a whole multiprocessor "
                "(leave the option out, or use smaller product tiles)", self.kernel.loc)
        return self.plan.specialized.threads, 1

    def default(self, shape: tuple) -> Layout:
        shape = padded(shape)
        if shape not in self.widths and shape in self.reshaped:
            per_thread = max(1, prod(shape) // (32 * self.num_warps))
            return blocked(shape, self.num_warps, min(self.reshaped[shape], per_thread))
        return super().default(shape)

    def extra_params(self) -> list:
        """The virtual grid of a persistent kernel (3 x i32), then one CUtensorMap per
        streamed operand and epilogue store, by value (`__grid_constant__`)."""
        grid = [I32] * 3 if self.plan.persistent else []
        return grid + [ir.PointerType()] * len(self.plan.tensor_maps)

    # ------------------------------------------------------------------ hooks

    def barrier(self) -> None:
        """The computing threads' barrier: with a producer warp group, a named barrier of
        the consumers alone."""
        spec = self.plan.specialized
        if spec is None:
            return super().barrier()
        from .specialize import CONSUMER_BARRIER

        ptx.named_barrier(self.em, CONSUMER_BARRIER, 32 * spec.consumer_warps)

    def _special(self, e: N.Special) -> ir.Value:
        if self.plan.persistent and e.kind == "block_id":
            return self.b.load(self.virtual_bid[e.axis], typ=I32)
        if self.plan.persistent and e.kind == "grid_dim":
            return self.virtual_grid[e.axis]
        return super()._special(e)

    _EXPR = {**TileLowering._EXPR, N.Special: _special}

    def _region(self, s: N.Region) -> None:
        if s.label == "kernel" and self.plan.specialized is not None:
            from . import specialize

            return specialize.kernel_region(self, s, self.plan.specialized)
        return super()._region(s)

    def _tile_slots(self, name: str, tt: X.TileType, layout: Layout | None = None) -> tuple:
        return super()._tile_slots(name, tt, layout or self.accumulators.get(name))

    def _tile_store(self, s: X.TileStore) -> None:
        """A product tile goes out through the copy engine (`epilogue`), or to the default
        layout through dynamic shared memory first, so that the global stores are 16-byte
        vectors, coalesced; other tiles are stored from the layout they are in."""
        self._writable(s)
        chunks = self.plan.stores.get(id(s))
        if chunks is not None:
            from . import epilogue

            value = self.tile(s.value, chunks.geometry.layout())
            self.order.access(s, s.array.name, "write")  # meets nothing (`epilogue.find`)
            return epilogue.store(self, s, value, chunks)
        value = self.tile(s.value)
        default = self.default(s.value.shape)
        room = self.plan.dynamic_shared - self.plan.through_offset
        # Without warp specialization the way through shared memory starts at 0, in the
        # streamed loops' stages: inside such a loop, with operands in flight, store directly.
        free = not self.streams or self.plan.through_offset > 0
        if free and value.layout != default and value.layout.vector_width() < default.vector_width() \
                and _store_bytes(s) <= room:
            value = self._through_shared(value, default, s.array.dtype)
        memory.store(self, s, value)

    def _through_shared(self, value: TileValue, layout: Layout, dtype) -> TileValue:
        """`value` in `layout`, through the swizzled format at `plan.through_offset` of
        dynamic shared memory (without warp specialization 0: free between products, as
        every user of it ends with a barrier and a streamed loop's last stage is read
        before its end; the barrier first covers other warps)."""
        from ..codegen.dtypes import mem_type, to_mem, to_reg

        b = self.b
        shape = value.layout.shape
        stored = operand.Stored(prod(shape[:-1]), shape[-1], dtype.itemsize)
        base = self.shared_dynamic(self.plan.through_offset)

        def pointer(coords):
            row = i32(0)
            for c, n in zip(coords[:-1], shape[:-1]):
                row = b.add(b.mul(row, i32(n)), c)
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
            regs += [to_reg(b, dtype, b.extract_element(got, i32(j))) for j in range(width)]
        self.barrier()
        return TileValue(layout, regs, value.dtype)

    def dynamic_shared_before(self) -> int:
        return self.plan.dynamic_shared

    def _for(self, s: N.For) -> None:
        from . import cpasync, pipeline

        stream = self.plan.pipelines.get(id(s))
        with self.order.around(s.body):
            if stream is None:
                return super()._for(s)
            self.depth += 1
            try:  # the body, peeled and staged: a barrier put in one copy orders no other
                with self.order.kept():
                    (pipeline if stream.engine == "wgmma" else cpasync).lower_loop(self, s, stream)
            finally:
                self.depth -= 1

    _STMT = {**TileLowering._STMT, N.For: _for, X.TileStore: _tile_store, N.Region: _region}

    # ------------------------------------------------------------------ products

    def _tile_dot(self, e: X.TileDot, want) -> TileValue:
        dot = self.plan.dots[id(e)]
        acc = self._initial(e, dot.layout)
        if dot.engine == "fma":
            return issue.fma(self, e, dot, acc)
        given = list(self.streams.get(id(e), (None, None)))
        fragments = None
        if given[0] is None and id(e) in self.plan.register_a:
            fragments = self._a_fragments(e, dot, self.plan.register_a[id(e)])
        needed = [which for which in (0, 1) if given[which] is None and not (which == 0 and fragments)]
        offset = self.plan.staging_offset
        for which in needed:
            node = (e.a, e.b)[which]
            stored, base, k_major, nbytes = self.stage_operand(node, which, dot, self.tile(node), offset)
            given[which] = (stored, base, k_major)
            offset += nbytes
        if needed:
            if dot.engine == "wgmma":
                ptx.fence_proxy_async(self.em)
            self.barrier()
        if dot.engine == "wgmma":
            regs = issue.wgmma(self, dot, acc.regs, given[0], given[1], fragments, zero=e.acc is None)
        else:
            regs = issue.mma_sync(self, dot, acc.regs, *given[0], *given[1])
        if needed:
            self.barrier()  # the staging area is free again
        return TileValue(dot.layout, regs, e.dtype)

    _TILE = {**TileLowering._TILE, X.TileDot: _tile_dot}

    def _a_fragments(self, e: X.TileDot, dot: DotPlan, layout: Layout) -> list:
        """A's registers (in `layout`, `plan.register_a`) as wgmma A fragments: per (m
        block, k step) four words, each a packed pair."""
        value = self.tile(_uncast(e.a), layout)
        where = a_fragments(layout, dot.geometry, padded(e.a.shape)[1])
        ptx_type = ptx.WGMMA[dot.kind][1]
        return [[ptx.pack_half2(self.em, value.regs[r[2 * w]], value.regs[r[2 * w + 1]], ptx_type)
                 for w in range(4)] for r in where]

    def _initial(self, e: X.TileDot, layout: Layout) -> TileValue:
        if e.acc is not None:
            return self.tile(e.acc, layout)
        zero = ir.Constant(reg_type(e.dtype), 0.0)
        return TileValue(layout, [zero] * layout.num_regs, e.dtype)

    def stage_operand(self, node, which: int, dot: DotPlan, value: TileValue, offset: int) -> tuple:
        """Write operand `which` (0: A, 1: B) of a product, held in registers as `value`,
        into shared memory at `offset`: (stored, base pointer, K-major, bytes used). Stored
        along the axis the registers run along (16-byte stores), unless the engine forces
        K-major. The caller fences and synchronizes."""
        rows, cols = padded(node.shape)
        k_axis = 1 if which == 0 else 0
        forced = dot.k_major[which]
        k_major = forced if forced is not None else \
            run_along(value.layout, k_axis) >= run_along(value.layout, 1 - k_axis)
        transposed = k_major != (k_axis == 1)
        # fp8 operands keep their own format (a product may mix e4m3 and e5m2)
        staged = node.dtype.name if dot.staged.startswith("float8") else dot.staged
        size = from_name(staged).itemsize
        stored = operand.Stored(cols, rows, size) if transposed else operand.Stored(rows, cols, size)
        base = self.shared_dynamic(offset)
        operand.stage(self, stored, base, value, node.shape, transposed, staged, tf32=dot.kind == "tf32")
        return stored, base, k_major, operand.aligned(stored.nbytes)

