"""`TileDot` on the GPU: tensor cores (mma.sync on sm_80+, wgmma on sm_90a) or FMA.

Takes: a tile kernel holding `TileDot`s and a target. Gives `MmaLowering`, the tile
lowering of kernels with products (`tile.lower.lower` picks it), which follows the kernel's
`plan` (`mma_plan`, whose `plan`, `Plan`, `DotPlan` and `MAX_DYNAMIC_SHARED` this module
re-exports: the runtime and the tests ask `matmul.plan`); the instructions of each
product are `issue`'s.

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
(tf32, fp8; fp8 rounded by the hardware's `cvt.rn.satfinite` from sm_89 on). Loads
streamed by `pipeline` arrive there without passing through registers. Every staging is:
writes, (async-proxy fence,) barrier, reads, barrier, so one staging area serves every
product of the kernel. A wgmma A (16-bit or fp8) that an earlier product left in registers
(`plan.register_a`: attention's probabilities) is not staged: `register_a` packs it into
the instruction's fragments.

Precision: products are exact and sums float32 on every engine, except that wgmma adds fp8
products in the tensor cores' own narrower accumulator (about 2e-3 relative at K = 8192,
measured; cuBLAS promotes to float32 every few k steps, which this lowering does not yet).

The accumulator never leaves registers: a variable assigned a product gets the product's
layout for its whole life, so `acc = tile.mma(a, b, acc)` in a loop moves no data, and an
epilogue (bias, activation, cast, store) runs on the registers where the product left them.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from ..codegen.dtypes import I8, I32, I64, i32, reg_type
from ..errors import CompileError
from ..ir import nodes as N
from ..ir import tiles as X
from ..types import from_name
from . import issue, memory, operand, ptx, register_a
from .layout import Layout, blocked, padded
from ..codegen.attributes import grid_constant_attributes
from .lower import TileLowering
from .values import TileValue
from .mma_layout import a_fragments
from .mma_plan import MAX_DYNAMIC_SHARED, Plan  # noqa: F401 -- re-exported: the runtime and tests ask matmul
from .mma_plan import DotPlan, product_layout, accumulators, plan, store_bytes, uncast, walk_nodes

run_along = operand._run


class MmaLowering(TileLowering):
    variables_where_made = False  # accumulators and operands have layouts of their own

    dynamic_align = operand.BASE_ALIGN  # the swizzled operands' base

    def __init__(self, kernel: N.Kernel, target: str, exchange=None):
        self.plan = plan(kernel, target)
        self.accumulators = accumulators(kernel, self.plan)
        self.streams: dict = {}  # id(TileDot) -> (A, B): shared operands given, or None
        self.pending = False  # in an accumulating streamed loop: products left in flight
        self.turns = None  # in a general streamed loop: (this group's turn barrier, the next's)
        # Tiles reshaped from loads (3-d to 5-d arrays seen as 2-d operands) keep the load's vectors.
        self.reshaped = {padded(n.shape): 16 // n.value.array.dtype.itemsize for n in walk_nodes(kernel)
                         if isinstance(n, X.Reshape) and isinstance(n.value, X.TileLoad)}
        super().__init__(kernel, target, exchange)
        self.target = target
        self.stream_count = None  # running iteration count of a specialized kernel's stream
        self.producing = False  # lowering the producer's code (`specialize`): a stream is its copies
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

    def scatter_layout(self, value: X.TileExpr) -> Layout:
        """A product tile (through its epilogue's elementwise ops) is scattered, or added
        atomically, from the registers the product left it in: the index tiles are computed
        there, and nothing moves through shared memory."""
        return product_layout(value, self.plan, self.accumulators) or super().scatter_layout(value)

    def _tile_store(self, s: X.TileStore) -> None:
        """A product tile goes out through the copy engine (`epilogue`), or to the default
        layout through dynamic shared memory first, so that the global stores are 16-byte
        vectors, coalesced; other tiles are stored from the layout they are in."""
        self._writable(s)
        chunks = self.plan.stores.get(id(s))
        if chunks is not None:
            return self._by_copy_engine(s, chunks, "write")  # meets nothing after it (`epilogue.find`)
        value = self.tile(s.value)
        default = self.default(s.value.shape)
        room = self.plan.dynamic_shared - self.plan.through_offset
        # Without warp specialization the way through shared memory starts at 0, in the
        # streamed loops' stages: inside such a loop, with operands in flight, store directly.
        free = not self.streams or self.plan.through_offset > 0
        if free and value.layout != default and value.layout.vector_width() < default.vector_width() \
                and store_bytes(s) <= room:
            value = self._through_shared(value, default, s.array.dtype)
        memory.store(self, s, value)

    def _tile_atomic(self, s: X.TileAtomic) -> None:
        """A product tile's atomic add goes out as the copy engine's bulk reductions
        (`epilogue`), or element by element from the product's registers (`scatter_layout`)."""
        chunks = self.plan.stores.get(id(s))
        if chunks is None:
            return super()._tile_atomic(s)
        self._writable(s)
        self._by_copy_engine(s, chunks, "atomic")

    def _by_copy_engine(self, s, chunks, kind: str) -> None:
        """Store (or add) `s`'s tile through `epilogue`'s buffers and the copy engine."""
        from . import epilogue

        value = self.tile(s.value, chunks.layout)
        if chunks.after_stores:  # ordinary writes first: each thread's, seen by the copy
            ptx.fence_proxy_async(self.em, "global")  # engine once a barrier follows
        self.order.access(s, s.array.name, kind)
        epilogue.store(self, s, value, chunks)

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
        if stream is not None and self.producing:
            return pipeline.produce_loop(self, stream)
        with self.order.around(s.body):
            if stream is None:
                return super()._for(s)
            self.depth += 1
            try:  # the body, peeled and staged: a barrier put in one copy orders no other
                with self.order.kept():
                    (pipeline if stream.engine == "wgmma" else cpasync).lower_loop(self, s, stream)
            finally:
                self.depth -= 1

    _STMT = {**TileLowering._STMT, N.For: _for, X.TileStore: _tile_store, X.TileAtomic: _tile_atomic,
             N.Region: _region}

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
        block, k step) four words (`register_a`)."""
        value = self.tile(uncast(e.a), layout)
        where = a_fragments(layout, dot.geometry, padded(e.a.shape)[1], issue.K_STEP["wgmma"][dot.kind])
        return register_a.words(self, dot.kind, [[value.regs[r] for r in regs] for regs in where])

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

