"""The plan of a tile kernel's matrix products: engines, layouts, shared memory, streams.

Takes: a tile kernel holding `TileDot`s and a target. Gives `plan(kernel, target) -> Plan`:
per product (`DotPlan`) its engine and accumulator layout, the dynamic shared memory the
kernel needs, and the K loops `pipeline` streams (with the TMA descriptors their launches
need); `kind_of(node, which)`, an operand's element kind. The runtime calls `plan` too
(`runtime.tensormap`), so compiling and launching agree without storing anything beside the
cubin. Guarantees: the engines, staging and placement `matmul` describes; a plan that does
not fit the target's shared memory is a `CompileError` at the product.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..errors import CompileError
from ..ir import nodes as N
from ..ir import tiles as X
from ..types import from_name
from . import issue, operand, pieces, register_a, sorting
from .layout import Layout, blocked, only_unit_axes_differ, padded, unit_reshaped
from .mma_layout import GroupGeometry, SyncGeometry, a_layout, group_fits, sync_fits
from .sharedmem import MAX_DYNAMIC_SHARED, shared_per_block
from .warps import num_warps

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


def store_bytes(s: X.TileStore) -> int:
    return prod(padded(s.value.shape)) * s.array.dtype.itemsize


def walk_nodes(kernel):
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
    for node in walk_nodes(kernel):
        if isinstance(node, X.TileDot):
            result.dots[id(node)] = _dot_plan(node, target, warps)
    found = streams.find(kernel, target, result)
    result.specialized = specialize.decide(kernel, found, warps) if target == "sm_90a" else None
    layouts = accumulators(kernel, result)
    result.register_a = _registers_as_a(kernel, result, layouts)
    if result.specialized is not None:
        maps = list(result.tensor_maps)
        result.stores = epilogue.find(kernel, result, lambda e: product_layout(e, result, layouts), warps)
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
    """Products whose 16-bit or fp8 A wgmma takes from registers (`mma_layout.a_layout`):
    where the registers already are, A being an earlier product's result (a cast to A's
    dtype is folded into the packing, `register_a`)."""
    out = {}
    for node in walk_nodes(kernel):
        dot = result.dots.get(id(node)) if isinstance(node, X.TileDot) else None
        if dot is None or dot.engine != "wgmma" or dot.kind not in register_a.KINDS:
            continue
        wanted = a_layout(dot.geometry, padded(node.a.shape)[1], issue.K_STEP["wgmma"][dot.kind])
        if wanted is not None and product_layout(uncast(node.a), result, layouts) == wanted:
            out[id(node)] = wanted
    return out


def uncast(e):
    """A float32 tile cast to a 16-bit or fp8 dtype: the float32 tile (`register_a` rounds it)."""
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
              for node in walk_nodes(kernel) if isinstance(node, X.TileDot)]
    through = [store_bytes(n) for n in walk_nodes(kernel) if isinstance(n, X.TileStore) and id(n) not in result.stores]
    invariants = sum(inv.nbytes for p in found for inv in p.invariants)
    buffers = epilogue.buffer_bytes(result)
    specialized = result.specialized is not None
    staging = max(staged, default=0)
    if specialized:  # stores through shared memory must not meet the producer's copies
        staging = max(staging, max(through, default=0))
    reserve = max((_STATIC_NEEDS.get(type(n), 0) for n in walk_nodes(kernel)), default=0)
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


def accumulators(kernel: N.Kernel, p: Plan) -> dict:
    """Variable name -> the layout its tile lives in, where the products decide one: a
    product's own layout, carried forward through elementwise ops, reductions (sliced)
    unit reshapes and batches (`pieces.stackable`), and backward into the variables an expression in a known layout
    reads (a broadcast source sliced on its stretched axes). So an accumulator never moves
    (`acc = tile.mma(a, b, acc)` in a loop), and neither do attention's running maximum and
    sum, nor the row and column indices its mask compares: every statement's operands are
    already where its result is. A scattered product's indices and mask are wanted where
    its registers are (`MmaLowering.scatter_layout`): the grouped GEMM's row indices. A
    stored value (`tile.store`, `tile.atomic_*`, a scatter) in a product's layout places the
    variables it reads as an assignment of it would: `tile.store(out, tile=acc * h)` reads h
    where `y = acc * h` would."""
    found: dict = {}
    assigns = [n for n in walk_nodes(kernel) if isinstance(n, N.Assign) and isinstance(n.value, X.TileExpr)]
    writes = [n for n in walk_nodes(kernel) if isinstance(n, (X.TileStore, X.TileAtomic, X.Scatter))]
    for _ in range(4):  # variables computed from other variables: a few rounds
        for node in assigns:
            if node.name not in found:
                layout = product_layout(node.value, p, found)
                if layout is not None and layout.shape == padded(node.value.shape):
                    found[node.name] = layout
        for node in assigns:
            if node.name in found:
                _wanted(node.value, found[node.name], found)
        for node in writes:
            layout = product_layout(node.value, p, found)
            scattered = (*node.indices, node.mask) if isinstance(node, X.Scatter) else ()
            for e in (node.value, *scattered) if layout is not None else ():
                if e is not None:
                    _wanted(e, layout, found)
    return found


def product_layout(e, p: Plan, found: dict):
    """The layout a product gives `e` (None: no product decides it)."""
    if isinstance(e, X.TileMap):
        return next((layout for a in e.args if not isinstance(a, X.Splat)
                     for layout in [product_layout(a, p, found)] if layout is not None), None)
    if isinstance(e, X.TileDot):
        return p.dots[id(e)].layout
    if isinstance(e, X.TileVar):
        return found.get(e.name)
    if isinstance(e, X.TileReduce) and e.axis is not None:
        source = product_layout(e.value, p, found)
        return None if source is None else source.sliced({e.axis}).squeezed(e.axis)
    if isinstance(e, X.Reshape) and only_unit_axes_differ(e.value.shape, e.shape):
        source = product_layout(e.value, p, found)
        return None if source is None else unit_reshaped(source, e.value.shape, e.shape)
    if isinstance(e, X.Cat):  # a batch of products: their registers one after another
        return pieces.stackable(e, [product_layout(part, p, found) for part in e.parts])
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
