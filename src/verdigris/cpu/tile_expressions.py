"""The expressions of the cpu backend's tile interpreter: scalar and tile `ir` expressions
compiled into closures f(block) -> value.

Takes (as `tiles._Compiler`'s base class): expression nodes of `ir.nodes` and `ir.tiles`.
Gives `TileExpressions.expr(node)`, the closure of one expression, which reads the running
block's scalar environment (`bl.env`), ids and memory; `Site`, what shadow memory is told of
an access; `settle`, 0-d arrays as NumPy scalars. Guarantees: the semantics stated in
`tiles` (elementwise operations through the `ops` tables, bit for bit the SIMT
interpreter's; loads of padding outside arrays; reductions, scans, sorts, products as
stated there); a node this backend has no rule for is a `CompileError` at its location.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import ir
from ..errors import CompileError
from ..ir import tiles as t
from . import atomics, ops, philox, tile_ops


def settle(value):
    """0-d arrays (which some NumPy calls give for scalars) as NumPy scalars."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


@dataclass(frozen=True)
class Site:
    loc: object
    is_write: bool
    atomic: bool
    unsafe: bool


class TileExpressions:
    """Mixed into `tiles._Compiler`, whose `kernel` and `unsafe` state it reads."""

    def _missing(self, what: str, node):
        raise CompileError(f"the cpu tile backend has no {what}", node.loc)

    def _site(self, node, is_write=False, atomic=False) -> Site:
        return Site(node.loc, is_write, atomic, self.unsafe)

    # ------------------------------------------------------------------ scalar expressions

    def expr(self, node):
        compile_expr = self._EXPR.get(type(node))
        if compile_expr is None:
            self._missing(type(node).__name__, node)
        return compile_expr(self, node)

    def _const(self, node):
        value = settle(ops.constant(node.value, node.dtype))
        return lambda bl: value

    def _var(self, node):
        name, declared = node.name, self.kernel.locals.get(node.name, node.dtype)
        if isinstance(declared, t.TileType):  # a tile variable read before any assignment
            undefined = np.zeros(declared.shape, ops.register_dtype(declared.dtype))
        else:
            undefined = settle(ops.constant(0, node.dtype))
        return lambda bl: bl.env.get(name, undefined)

    def _special(self, node):
        if node.kind not in ("block_id", "grid_dim"):
            self._missing(f"{node.kind} (tile kernels have blocks, not threads)", node)
        kind, axis = node.kind, node.axis
        return lambda bl: getattr(bl, kind)[axis]

    def _apply(self, node, op: str, args: tuple, operand_dtype):
        make = tile_ops.ELEMENTWISE.get(op)
        f = None if make is None else make(op, operand_dtype, node.dtype)
        if f is None:
            self._missing(f"{op} on {operand_dtype.name}", node)
        compiled = [self.expr(a) for a in args]
        return lambda bl: settle(f(*(arg(bl) for arg in compiled)))

    def _unary(self, node):
        return self._apply(node, node.op, (node.operand,), node.operand.dtype)

    def _binary(self, node):
        return self._apply(node, node.op, (node.lhs, node.rhs), node.lhs.dtype)

    def _cast(self, node):
        return self._apply(node, "cast", (node.value,), node.value.dtype)

    def _math(self, node):
        return self._apply(node, node.func, node.args, node.args[0].dtype)

    def _logical(self, node):
        lhs, rhs, is_and = self.expr(node.lhs), self.expr(node.rhs), node.op == "and"

        def logical(bl):
            a = lhs(bl)
            return (rhs(bl) if a else a) if is_and else (a if a else rhs(bl))
        return logical

    def _select(self, node):
        cond, a, b = self.expr(node.cond), self.expr(node.a), self.expr(node.b)
        return lambda bl: a(bl) if cond(bl) else b(bl)

    def _element(self, node, indices):
        """f(block) -> (memory, element index as ints) of a scalar Load or Store."""
        name, index = node.array.name, [self.expr(i) for i in indices]
        loc = node.loc

        def element(bl):
            mem = bl.launch.memory[name]
            at = [int(i(bl)) for i in index] or [0]  # a 0-d array: its one-element view
            if any(not 0 <= i < n for i, n in zip(at, mem.shape)):
                raise bl.out_of_bounds(mem, at, loc)
            return mem, at
        return element

    def _load(self, node):
        element, site = self._element(node, node.indices), self._site(node)

        def load(bl):
            mem, at = element(bl)
            bl.observe(mem, np.array([np.ravel_multi_index(at, mem.shape)]), site)
            return settle(mem.decode(mem.data[tuple(at)]))
        return load

    def _shape(self, node):
        name, axis = node.array.name, node.axis
        return lambda bl: np.int64(bl.launch.memory[name].shape[axis])

    def _atomic(self, node):
        """`tile.atomic_cas`/`tile.atomic_xchg`: once for the block, which gets the old value."""
        element, site = self._element(node, node.indices), self._site(node, is_write=True, atomic=True)
        scan = self._atomic_scan(node, node.op)
        value = self.expr(node.value)
        compare = None if node.compare is None else self.expr(node.compare)
        dtype = ops.register_dtype(node.dtype)

        def atomic(bl):
            mem, at = element(bl)  # Python's order: index, compare, value
            expected = None if compare is None else np.array([compare(bl)], dtype)
            bl.observe(mem, np.array([np.ravel_multi_index(at, mem.shape)]), site)
            old = atomics.perform(scan, mem.data, tuple(np.array([i]) for i in at),
                                  np.array([value(bl)], dtype), expected, mem.decode, mem.encode)
            return settle(old[0])
        return atomic

    # ------------------------------------------------------------------ tile expressions

    def _tile_map(self, node):
        operand = node.args[1 if node.op == "where" else 0].dtype
        return self._apply(node, node.op, node.args, operand)

    def _splat(self, node):
        value, shape = self.expr(node.value), node.shape
        dtype = ops.register_dtype(node.dtype)
        return lambda bl: np.full(shape, value(bl), dtype)

    def _broadcast(self, node):
        value, shape = self.expr(node.value), node.shape
        return lambda bl: np.broadcast_to(value(bl), shape)

    def _arange(self, node):
        values = np.arange(node.shape[0], dtype=np.int32)
        values.flags.writeable = False
        return lambda bl: values

    def _tile_load(self, node):
        name, index = node.array.name, [self.expr(i) for i in node.index]
        padding, shape = self.expr(node.padding), node.shape
        dtype, site = ops.register_dtype(node.dtype), self._site(node)

        def tile_load(bl):
            mem = bl.launch.memory[name]
            at = [i(bl) for i in index]
            tile = np.full(shape, padding(bl), dtype)
            window = tile_ops.window(at, shape, mem.shape)
            if window is not None:
                inside, within = window
                bl.observe(mem, tile_ops.flat_indices(inside, mem.shape), site)
                tile[within] = mem.decode(mem.data[inside])
            return tile
        return tile_load

    def _gather(self, node):
        name, indices = node.array.name, [self.expr(i) for i in node.indices]
        padding, shape = self.expr(node.padding), node.shape
        dtype, site = ops.register_dtype(node.dtype), self._site(node)

        def gather(bl):
            mem = bl.launch.memory[name]
            at = [np.broadcast_to(np.asarray(i(bl), np.int64), shape) for i in indices]
            inside = np.ones(shape, bool)
            for i, extent in zip(at, mem.shape):
                inside &= (i >= 0) & (i < extent)
            tile = np.full(shape, padding(bl), dtype)
            read = tuple(i[inside] for i in at)
            bl.observe(mem, np.ravel_multi_index(read, mem.shape), site)
            tile[inside] = mem.decode(mem.data[read])
            return tile
        return gather

    def _reduce_with(self, table, node, reverse: bool = False):
        make = table.get(node.op)
        source = node.value.dtype
        if make is None:
            self._missing(f"{node.op} of {source.name} tiles", node)
        f, value, axis = make(source, node.dtype), self.expr(node.value), node.axis
        if reverse:
            f = tile_ops.from_the_end(f)
        return lambda bl: settle(f(value(bl), axis))

    def _tile_reduce(self, node):
        return self._reduce_with(tile_ops.REDUCTIONS, node)

    def _tile_scan(self, node):
        return self._reduce_with(tile_ops.SCANS, node, node.reverse)

    def _flip(self, node):
        value, axes = self.expr(node.value), node.axes
        return lambda bl: np.flip(value(bl), axes)

    def _tile_sort(self, node):
        f = tile_ops.sorting(node.op, node.value.dtype, node.descending)
        value, axis = self.expr(node.value), node.axis
        return lambda bl: f(value(bl), axis)

    def _tile_slice(self, node):
        value = self.expr(node.value)
        parts = tuple(slice(start, start + step * n, step)
                      for start, step, n in zip(node.starts, node.steps, node.shape))
        return lambda bl: value(bl)[parts]

    def _cat(self, node):
        parts, axis = [self.expr(p) for p in node.parts], node.axis
        return lambda bl: np.concatenate([part(bl) for part in parts], axis)

    def _reshape(self, node):
        value, shape = self.expr(node.value), node.shape
        return lambda bl: np.reshape(value(bl), shape)

    def _permute(self, node):
        value, perm = self.expr(node.value), node.perm
        return lambda bl: np.transpose(value(bl), perm)

    def _rand(self, node):
        seed, offsets = self.expr(node.seed), self.expr(node.offsets)
        return lambda bl: philox.uniform(seed(bl), offsets(bl))

    def _tile_dot(self, node):
        a, b = self.expr(node.a), self.expr(node.b)
        acc = None if node.acc is None else self.expr(node.acc)
        wide, rounding = node.dtype.np, tile_ops.DOT_ROUNDING[node.precision]

        def dot(bl):
            product = np.matmul(rounding(np.asarray(a(bl), wide)), rounding(np.asarray(b(bl), wide)))
            return product if acc is None else np.asarray(acc(bl), wide) + product
        return dot

    _EXPR = {ir.Const: _const, ir.Var: _var, t.TileVar: _var, ir.Special: _special, ir.Unary: _unary,
             ir.Binary: _binary, ir.Compare: _binary, ir.Logical: _logical,
             ir.Select: _select, ir.Cast: _cast, ir.MathCall: _math, ir.Load: _load,
             ir.Shape: _shape, ir.Atomic: _atomic, t.TileMap: _tile_map, t.Splat: _splat,
             t.Broadcast: _broadcast, t.Arange: _arange, t.TileLoad: _tile_load,
             t.Gather: _gather, t.TileReduce: _tile_reduce, t.TileScan: _tile_scan,
             t.TileSort: _tile_sort, t.Reshape: _reshape, t.Permute: _permute, t.Flip: _flip,
             t.TileSlice: _tile_slice, t.Cat: _cat,
             t.Rand: _rand,
             t.TileDot: _tile_dot}
