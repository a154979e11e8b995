"""Symbolic execution of a tile kernel for one generic block, at element level.

Takes: a specialized tile-track `ir.Kernel`. Gives: `execute(kernel) -> Trace`: every
global-memory access of one symbolic block as a `TileAccess` (the `symbolic.Access` fields,
with element indices, plus the tile the access covers), and the `Space` of atoms they are
written in. `safety.tilerace` asks the race questions of these accesses.

The model is `symbolic`'s (its executor runs the scalar code, the control flow, loops as one
arbitrary iteration, `vg.unsafe()`), with a block as the thread:
- The space has a block of one thread, so the ids that tell two "threads" apart are the
  block ids `bid0@`, `bid1@`, `bid2@`; axes 1 and 2 whose `bid` the kernel never reads have
  one block (the launch guarantees it: each specialization knows which grid axes are 1).
- A tile value is an integer polynomial over *lane* atoms `lane{axis}x{extent}@`, the
  position of an element along each axis of the value's shape, in [0, extent) (an axis of
  extent 1 has no lane: position 0). `arange(n)` is lane 0; a splat is its scalar; a
  broadcast keeps its value (a stretched axis had extent 1); `permute`, `flip` and
  `reshape` map lanes (a flip of extent n sends lane j to n-1-j; a reshape that moves
  elements between axes, through floor division and modulo of the flat position), and so
  does a slice (lane j to start + step*j); a `cat` is the parts' values, each on its run of
  the axis' lane (an `ite` of integer parts, a formula of boolean ones).
  Integer elementwise ops are the scalar ops of `symbolic` applied to these polynomials
  (wrap-around included: a narrow result that may leave its dtype is a
  `wrap` atom of the exact result, so `2 * bid` past 2**31 is a negative tile index, not
  any int32). Loaded, gathered, reduced, scanned or multiplied (`dot`) integer tiles are
  unknowns that depend on their lanes: an atom whose definition mentions a lane is copied
  afresh when lanes are mapped, so `u.T` is not `u` (masks of float comparisons likewise).
  Boolean tiles are formulas; float tiles are not modelled.
- A tile access at tile index `i` of shape `S` touches the elements `i[k]*S[k] + lane_k`;
  the race query's `0 <= element < array.shape` is exactly the masking of edge tiles. A
  gather or scatter touches its index tiles' values (those inside the array: the same bound
  is a gather's padding and a `skip_out_of_bounds` scatter's skip); a scalar load or store
  is a tile of one element.
- An access inside `with tile.lock(locks, index):` keeps the lock element held around it
  (`TileAccess.locks`: the lock array and the index, evaluated where the block takes it).
- Each access keeps a `View` where one is known: tile indices and a tile shape such that
  every element it touches lies in that tile. Loads, stores, tile atomics and scalar accesses
  have one; a gather or scatter has one when its index along each axis is `E*t + lane`
  (lane of extent E, `t` free of lanes) or free of lanes (extent 1). Two views of one shape
  share an element only if their tile indices are equal: the fast path asks that.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import types as T
from ..frontend import walk
from ..ir import nodes as N
from ..ir import tiles as X
from ..ir.locks import Locked
from ..frontend.access_nodes import ACCESSING
from .encoder import _depends
from .algebra import FALSE, TRUE, Atom, Poly, Space, compare, conj, dtype_range
from .intops import INT_OPS
from .bounds import Remembering
from .symbolic import _STMT, _Thread
from .trace import Access, Trace

LANE = "lane"  # the atom kind of an element's position along one axis of a tile


@dataclass(frozen=True)
class View:
    """The tile at `tiles` (one Poly per array axis) of `shape` holds every element an
    access touches; `lanes[k]` is the lane atom indexing axis k within it (None: extent 1)."""

    tiles: tuple
    shape: tuple
    lanes: tuple


@dataclass
class TileAccess(Access):
    op: str = ""  # "load", "store", "atomic_<op>", "gather", "scatter"; "" for a scalar access
    shape: tuple = ()  # the tile's shape (() for a scalar access)
    view: View | None = None
    lanes: tuple = ()  # the lane atoms of the tile's shape (the positions of its elements)
    node: int = 0  # id() of the IR node that makes it (what the lowering orders, `blockorder`)
    loops: tuple = ()  # the counters of the loops around it
    locks: tuple = ()  # the lock elements held around it: (lock array, index Polys) (`locks`)


@dataclass(eq=False)
class _Given(N.Expr):
    """A value already computed, as an operand of a scalar node (to reuse scalar rules)."""

    value: object
    dtype: T.DType


def execute(kernel: N.Kernel) -> Trace:
    used = {(n.kind, n.axis) for n in walk(kernel.body) if isinstance(n, N.Special)}
    unit_grid = kernel.unit_grid_axes if kernel.unit_grid_axes is not None else \
        tuple(a for a in (1, 2) if ("block_id", a) not in used)
    space = Space((1, 1, 1), unit_grid, ())
    run = _Block(kernel, space)
    run.block(kernel.body)
    return Trace(space, run.accesses)


def lane_atoms(space: Space, shape: tuple) -> tuple:
    """The lane atom names of a tile shape, one per axis of extent > 1."""
    return tuple(n for p in (lane(space, k, e) for k, e in enumerate(shape)) for n in p.atoms())


def lane(space: Space, axis: int, extent: int) -> Poly:
    if extent == 1:
        return Poly.const(0)
    return space.add(Atom(f"{LANE}{axis}x{extent}@", LANE, 0, extent - 1,
                          label=f"the position along axis {axis}"))


# scalar IR node that computes a TileMap's op, given its operands
_AS_SCALAR = {
    **{op: lambda e, a: N.Binary(e.loc, e.op, *a, e.dtype) for op in N.BINARY_OPS},
    **{op: lambda e, a: N.Compare(e.loc, e.op, *a, e.dtype) for op in N.COMPARE_OPS},
    **{op: lambda e, a: N.Unary(e.loc, e.op, *a, e.dtype) for op in N.UNARY_OPS},
    **{op: lambda e, a: N.MathCall(e.loc, e.op, tuple(a), e.dtype) for op in (*N.MATH_FUNCS, *N.ROUNDED_FUNCS)},
    "cast": lambda e, a: N.Cast(e.loc, a[0], e.dtype),
    "where": lambda e, a: N.Select(e.loc, *a, e.dtype),
}


class _Block(_Thread):
    """`symbolic`'s executor, with the tile nodes."""

    elementwise = None  # the shape of the TileMap whose scalar rule is running, if any
    node = None  # the innermost node that accesses memory, being executed
    held: tuple = ()  # the lock elements held, around the statement being executed

    def eval(self, e: N.Expr):
        handler = _TILE_EXPR.get(type(e))
        run = (lambda: handler(self, e)) if handler is not None else (lambda: super(_Block, self).eval(e))
        return self.making(e, run) if isinstance(e, ACCESSING) else run()

    def block(self, stmts) -> None:
        for s in stmts:
            if self.pc == FALSE:
                return
            run = _TILE_STMT.get(type(s)) or _STMT[type(s)]
            self.making(s, lambda: run(self, s)) if isinstance(s, ACCESSING) else run(self, s)

    def making(self, node, run):
        """`run()`, with the accesses it records made by `node` (unless a node inside it
        makes them)."""
        outer, self.node = self.node, node
        try:
            return run()
        finally:
            self.node = outer

    # ---------------------------------------------------------------- values

    def lanes(self, shape: tuple) -> tuple:
        return tuple(lane(self.space, k, e) for k, e in enumerate(shape))

    def unknown(self, dtype, label: str = "", bounds: tuple | None = None):
        """An unknown value (within `bounds` where known); of a tile type (or made by an
        elementwise op of a tile: a wrapped sum, a bit operation), one that depends on the
        tile's lanes."""
        if not isinstance(dtype, X.TileType):
            if self.elementwise is None:
                return super().unknown(dtype, label, bounds)
            dtype = X.TileType(dtype, self.elementwise)
        lanes = tuple(p for p in self.lanes(dtype.shape) if p.atoms())
        if dtype.dtype.is_bool:
            return self.lane_bool(lanes, label)
        if not dtype.dtype.is_int:
            return None
        lo, hi = bounds or dtype_range(dtype.dtype)
        return self.space.fresh("unknown", lo, hi, lanes, label)

    def lane_bool(self, lanes: tuple, label: str) -> tuple:
        """An unknown boolean of each element: its definition names the lanes (the solver
        ignores it; `remap` copies the atom when they change)."""
        formula = self.space.fresh_bool(label)
        self.space.atoms[formula[1]].definition = lanes
        return formula

    def ite(self, cond, a, b, dtype):
        return super().ite(cond, a, b, dtype.dtype if isinstance(dtype, X.TileType) else dtype)

    def observe(self, value, dtype):
        """An int tile wraps element by element, as a scalar of its dtype (a tile a loop
        carries is observed at the loop's head, as any variable it carries)."""
        return super().observe(value, dtype.dtype if isinstance(dtype, X.TileType) else dtype)

    def remap(self, value, mapping: dict):
        """`value` with lane atoms replaced (`mapping`: name -> Poly); atoms defined in terms
        of a replaced lane are copied with their definitions mapped."""
        copies: dict = {}

        def atom(name: str) -> Poly:
            if name in mapping:
                return mapping[name]
            if name not in copies:
                old = self.space.atoms[name]
                parts = tuple(sub(p) for p in old.definition)
                copies[name] = Poly.atom(name) if parts == old.definition else \
                    self.space.fresh(old.kind, old.lo, old.hi, parts, old.label)
            return copies[name]

        def boolean(name: str) -> tuple:
            if name not in copies:
                old = self.space.atoms[name]
                parts = tuple(sub(p) for p in old.definition)
                copies[name] = ("bool", name) if parts == old.definition else \
                    self.lane_bool(parts, old.label)
            return copies[name]

        def poly(p: Poly) -> Poly:
            result = Poly({})
            for mono, coef in p.terms.items():
                term = Poly.const(coef)
                for name in mono:
                    term = term * atom(name)
                result = result + term
            return result

        def sub(x):
            if isinstance(x, Poly):
                return poly(x)
            if x[0] == "cmp":
                return ("cmp", x[1], poly(x[2]))
            if x[0] in ("and", "or", "not"):
                return (x[0], *(sub(f) for f in x[1:]))
            return boolean(x[1]) if x[0] == "bool" else x  # or true, false
        return None if value is None else sub(value)

    # ---------------------------------------------------------------- tile expressions

    def t_var(self, e: X.TileVar):
        return self.env[e.name] if e.name in self.env else self.unknown(e.type, e.name)

    def t_map(self, e: X.TileMap):
        make = _AS_SCALAR.get(e.op)
        if make is None:  # sigmoid: a float
            return self.unknown(e.type, e.op)
        operands = [_Given(a.loc, self.eval(a), a.dtype) for a in e.args]
        if e.op in N.COMPARE_OPS and e.args[0].dtype.is_float:  # a mask of the values
            return self.unknown(e.type, "a float comparison")
        outer, self.elementwise = self.elementwise, e.shape
        try:
            return self.eval(make(e, operands))
        finally:
            self.elementwise = outer

    def t_given(self, e: _Given):
        return e.value

    def t_splat(self, e: X.Splat):
        return self.eval(e.value)

    def t_broadcast(self, e: X.Broadcast):
        return self.eval(e.value)  # a stretched axis has extent 1 in the value: no lane there

    def t_arange(self, e: X.Arange):
        return lane(self.space, 0, e.shape[0])

    def t_permute(self, e: X.Permute):
        value, src = self.eval(e.value), e.value.shape
        mapping = {name: lane(self.space, k, e.shape[k])
                   for k, p in enumerate(e.perm) for name in lane(self.space, p, src[p]).atoms()}
        return self.remap(value, mapping)

    def t_flip(self, e: X.Flip):
        value = self.eval(e.value)
        mapping = {name: Poly.const(e.shape[k] - 1) - lane(self.space, k, e.shape[k])
                   for k in e.axes for name in lane(self.space, k, e.shape[k]).atoms()}
        return self.remap(value, mapping)

    def t_slice(self, e: X.TileSlice):
        value, src = self.eval(e.value), e.value.shape
        mapping = {name: Poly.const(start) + Poly.const(step) * lane(self.space, k, e.shape[k])
                   for k, (start, step) in enumerate(zip(e.starts, e.steps))
                   for name in lane(self.space, k, src[k]).atoms()}
        return self.remap(value, mapping)

    def t_cat(self, e: X.Cat):
        """The last part's value, then each earlier part's where the axis' lane is before
        that part's end."""
        axis, ends, at = e.axis, [], 0
        for part in e.parts:
            at += part.shape[axis]
            ends.append(at)
        position = lane(self.space, axis, e.shape[axis])
        values = []
        for part, end in zip(e.parts, ends):
            start = end - part.shape[axis]
            mapping = {name: position - Poly.const(start)
                       for name in lane(self.space, axis, part.shape[axis]).atoms()}
            values.append(self.remap(self.eval(part), mapping))
        result = values[-1]
        for value, end in zip(reversed(values[:-1]), reversed(ends[:-1])):
            result = self.ite(compare("lt", position, Poly.const(end)), value, result, e.type)
        return result

    def t_reshape(self, e: X.Reshape):
        value, src, dst = self.eval(e.value), e.value.shape, e.shape
        kept_src = [(k, n) for k, n in enumerate(src) if n != 1]
        kept_dst = [(k, n) for k, n in enumerate(dst) if n != 1]
        if [n for _, n in kept_src] == [n for _, n in kept_dst]:  # size-1 axes come or go
            mapping = {f"{LANE}{k}x{n}@": lane(self.space, j, n)
                       for (k, n), (j, _) in zip(kept_src, kept_dst)}
        else:  # elements move between axes: through the flat (row-major) position
            flat = Poly({})
            for k, n in enumerate(dst):
                flat = flat * Poly.const(n) + lane(self.space, k, n)
            mapping, stride = {}, 1
            for k, n in reversed(kept_src):
                over = INT_OPS["floordiv"](self, flat, Poly.const(stride), T.int64)
                mapping[f"{LANE}{k}x{n}@"] = INT_OPS["mod"](self, over, Poly.const(n), T.int64)
                stride *= n
        return self.remap(value, mapping)

    def t_load(self, e: X.TileLoad):
        self.eval(e.padding)
        self.tile_access(e.array, "read", e.index, e.shape, e.loc, "load")
        return self.unknown(e.type, f"{e.array.name}[...]")

    def t_gather(self, e: X.Gather):
        indices = self.indices(e.indices)
        self.eval(e.padding)
        self.element_access(e.array, "read", indices, e.shape, e.loc, "gather")
        return self.unknown(e.type, f"{e.array.name}[...]")

    def t_opaque(self, e):
        """A reduction, scan, sort, matrix product or random tile: its operands are evaluated
        (their accesses recorded); its value is an unknown of its type."""
        for operand in vars(e).values():
            if isinstance(operand, N.Expr):
                self.eval(operand)
        return self.unknown(e.type, f"a tile.{getattr(e, 'op', type(e).__name__.lower())}")

    # ---------------------------------------------------------------- accesses

    def access(self, array: N.ArrayRef, kind: str, indices, loc) -> None:
        """A scalar Load, Store or Atomic: a tile of one element."""
        polys = self.indices(indices)
        ones = (1,) * len(polys)
        self.record(array, kind, polys, loc, "", (), View(polys, ones, (None,) * len(polys)))

    def tile_access(self, array: N.ArrayRef, kind: str, index, shape: tuple, loc, op: str) -> None:
        tiles = self.indices(index)
        lanes = self.lanes(shape)
        # the lowering's `index * n` saturates past int64 to an element outside every array
        # (`tile.memory`), as the exact product is: only the index itself wraps
        elements = tuple(t * Poly.const(n) + p for t, n, p in zip(tiles, shape, lanes))
        view = View(tiles, shape, tuple(next(iter(p.atoms()), None) for p in lanes))
        self.record(array, kind, elements, loc, op, shape, view)

    def element_access(self, array: N.ArrayRef, kind: str, indices, shape: tuple, loc, op) -> None:
        self.record(array, kind, indices, loc, op, shape, self.view_of(indices))

    def view_of(self, indices: tuple):
        """The view of element indices `E*t + lane` (or free of lanes) per axis, or None."""
        tiles, shape, lanes = [], [], []
        for p in indices:
            moving = {m: c for m, c in p.terms.items() if any(self.is_lane(n) for n in m)}
            rest = p - Poly(moving)
            if any(self.is_lane(n) for n in _depends(rest, self.space)) or len(moving) > 1:
                return None
            (mono, coef), = moving.items() if moving else (((), 1),)
            if coef != 1 or len(mono) > 1:
                return None
            extent = self.space.atoms[mono[0]].hi + 1 if mono else 1
            if any(c % extent for c in rest.terms.values()):
                return None
            tiles.append(Poly({m: c // extent for m, c in rest.terms.items()}))
            shape.append(extent)
            lanes.append(mono[0] if mono else None)
        return View(tuple(tiles), tuple(shape), tuple(lanes))

    def is_lane(self, name: str) -> bool:
        return self.space.atoms[name].kind == LANE

    def record(self, array, kind, elements, loc, op, shape, view) -> None:
        if array.type.space == "global" and self.pc != FALSE:
            self.accesses.append(TileAccess(array.name, kind, elements, self.pc, loc,
                                            self.unsafe > 0, op, shape, view,
                                            lane_atoms(self.space, shape), id(self.node),
                                            self.counters(), self.held))

    # ---------------------------------------------------------------- tile statements

    def s_locked(self, s: Locked):
        """A critical section: its accesses name the lock element the block holds."""
        self.eval(s.acquire)
        outer = self.held
        self.held = outer + ((s.locks.name, self.indices(s.indices)),)
        self.block(s.body)
        self.held = outer
        self.eval(s.release)

    def s_tile_store(self, s: X.TileStore):
        self.eval(s.value)
        self.tile_access(s.array, "write", s.index, s.value.shape, s.loc, "store")

    def s_tile_atomic(self, s: X.TileAtomic):
        self.eval(s.value)
        self.tile_access(s.array, "atomic", s.index, s.value.shape, s.loc, f"atomic_{s.op}")

    def s_scatter(self, s: X.Scatter):
        indices = self.indices(s.indices)
        self.eval(s.value)
        keep = TRUE if s.mask is None else self.eval(s.mask)  # a formula of the lanes, or
        outer = self.pc  # a value the checker cannot see: then every lane is taken to write
        self.pc = conj(outer, keep) if isinstance(keep, tuple) else outer
        self.element_access(s.array, "atomic" if s.atomic else "write", indices,
                            s.value.shape, s.loc, "scatter")
        self.pc = outer


class Recorder(Remembering, _Block):
    """The executor, remembering which TileLoad or TileStore made each tile access, as
    (node, array, element indices, path condition) in `found` (for `bounds`; scalar accesses,
    gathers and scatters are not recorded: they keep their checks and masks)."""

    VALUE_NODES = (X.TileLoad,)

    def record(self, array, kind, elements, loc, op, shape, view) -> None:
        super().record(array, kind, elements, loc, op, shape, view)
        node = {"load": self.evaluating[-1] if self.evaluating else None, "store": self.statement}.get(op)
        if isinstance(node, (X.TileLoad, X.TileStore)) and self.pc != FALSE:
            self.found.append((node, array, elements, self.pc))


_TILE_EXPR = {X.TileVar: _Block.t_var, X.TileMap: _Block.t_map, _Given: _Block.t_given,
              X.Splat: _Block.t_splat, X.Broadcast: _Block.t_broadcast,
              X.Arange: _Block.t_arange, X.Permute: _Block.t_permute, X.Flip: _Block.t_flip,
              X.Reshape: _Block.t_reshape, X.TileLoad: _Block.t_load,
              X.TileSlice: _Block.t_slice, X.Cat: _Block.t_cat,
              X.Gather: _Block.t_gather, X.TileReduce: _Block.t_opaque,
              X.TileScan: _Block.t_opaque, X.TileSort: _Block.t_opaque, X.TileDot: _Block.t_opaque,
              X.Rand: _Block.t_opaque}

_TILE_STMT = {X.TileStore: _Block.s_tile_store, X.TileAtomic: _Block.s_tile_atomic,
              X.Scatter: _Block.s_scatter, Locked: _Block.s_locked}
