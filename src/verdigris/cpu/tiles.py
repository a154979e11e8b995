"""The tile interpreter of the cpu backend: runs a tile-track `ir.Kernel` with NumPy.

Takes: a kernel whose body uses the nodes of `ir.tiles` and the scalar nodes of `ir.nodes`,
a grid of up to three ints, and the arguments: NumPy arrays (read and written in place,
through any view; bfloat16/fp8 as ml_dtypes arrays or raw bits) and scalars.
Gives: `run_tile`, which runs the kernel to completion or raises `BoundsError` (a scalar
index, or a scatter's element index, out of bounds) or `SafetyError` (a race between blocks
that shadow memory observed).

How: the IR is compiled once per kernel into Python closures (expressions by
`tile_expressions`, statements here); then the blocks run one at a
time, in order of their linear id (axis 0 fastest). A block is one "thread" of tile code, so
control flow is plain Python control flow. Tile values are NumPy arrays of the node's shape
in *register form* (`ops`: the dtype's own NumPy dtype; float32 for bfloat16 and fp8);
scalars are NumPy scalars in register form.

Semantics (those of `ir.tiles` and `ir.nodes`; elementwise ops through the `ops` tables,
so results equal the SIMT interpreter's bit for bit):
- `TileLoad`: element `index[k] * shape[k] + j` along axis k; elements outside the array
  take `padding` and are never read. Any tile index is allowed: a negative one, or one
  wholly past the array, gives a tile of padding.
- `TileStore`, `TileAtomic`: only elements inside the array are written (edge tiles are
  masked); a tile wholly outside the array writes nothing (no error). The atomic ops are
  `atomics`' (float max/min: IEEE maxNum/minNum, a NaN loses).
- `Atomic` (`tile.atomic_cas`, `tile.atomic_xchg`): once for the block, whose value is the
  element's old contents. `Locked` (`tile.lock`): blocks run one at a time, so the lock is
  free when a block takes it unless it was not 0 before the launch (`KernelError`: a GPU
  would wait forever); the body's accesses are not recorded in shadow memory (the lock
  orders them; the static checker proves them).
- `Gather`: element indices per axis; out-of-bounds elements take `padding`, unread.
- `Scatter`: every element index must be inside the array, else `BoundsError` (VG302)
  before memory is touched; with `skip_out_of_bounds`, the elements outside are dropped as
  masked-off ones are (neither written nor recorded in shadow memory). The atomic forms
  (add, max, min) combine element by element in the tile's row-major order (`atomics`,
  rounding after every add as the SIMT atomics do).
- `sigmoid(x)` is `1 / (1 + exp(-x))` computed in float32 (float64 for float64 tiles) and
  rounded once to the tile's dtype.
- Reductions and scans: `sum`, `prod`, `cumsum` and `cumprod` of float16, bfloat16 and fp8
  accumulate in float32 and round once at the end; float32 in float32 and float64 in
  float64 (NumPy's pairwise summation: a GPU adds in another order, so float sums differ in
  the last bits); integers wrap in the result's dtype. `max`/`min`/`cummax`/`cummin` of
  floats are IEEE maxNum/minNum (a NaN loses to a number, as `ir.nodes`' `max`/`min`). A
  reverse scan is NumPy's scan of the tile flipped along the axis, flipped back.
  `argmax`/`argmin` give the first position of the largest/smallest value as int32 (the
  row-major position over all axes when `axis` is None); NaN counts as the smallest value
  for argmax and the largest for argmin.
- `Flip`: `np.flip` along its axes.
- `TileSlice`: NumPy's slice `start:start + step * n:step` along each axis; `Cat`:
  `np.concatenate` along its axis.
- `TileSort`: each line along the axis in the order of `ir.tiles.TileSort`: NumPy's sort of
  the elements' unsigned keys (np.sort's order, -0.0 before +0.0, every NaN last as the
  canonical NaN; descending: reversed) or their stable argsort (np.argsort(kind="stable");
  descending: largest first, NaN first, equal elements in their original order).
- `Rand`: `philox.uniform` (Philox-4x32-10; the exact mapping is in that module).
- `TileDot`: the operands in the accumulator's precision (float32, or float64 for float64
  tiles; exact, as the operands are narrower or equal), rounded to tf32 first under
  precision "tf32" (to nearest, ties away from zero: `cvt.rna.tf32.f32`), multiplied by
  NumPy's matmul in that precision, then `acc` added once. The GPU sums over k in another
  order, so float results differ in the last bits.

Races (the dynamic cross-check of the static tile checker): every access inside the array
goes to shadow memory (`shadow.Shadow`, with one thread per block), which raises VG202 when
two blocks plainly write one element, VG203 when a block reads an element another block
writes (in either order), VG204 when one element is both updated atomically and accessed
plainly; a plain scatter writing one element twice within a block is VG202 too. Accesses
inside `with vg.unsafe():` are neither recorded nor checked. The message names the two
blocks and the element and points at the second access.
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from math import prod

import numpy as np

from .. import ir
from ..errors import BoundsError, CompileError, KernelError, SafetyError
from ..ir import printf
from ..ir import tiles as t
from ..ir.locks import Locked
from ..safety.codes import CODES
from . import atomics, tile_ops
from .shadow import Shadow
from .simt import Access, _dims, _Memory, launch_arguments
from .tile_expressions import Site, TileExpressions

BREAK, CONTINUE = "break", "continue"  # signals a statement gives to its enclosing loop


@dataclass(frozen=True)
class _Exit:
    """The signal of `Exit(label)`, passed up to the region of that label."""

    label: str


# ----------------------------------------------------------------------------- shadow


_HINTS = {
    "VG202": "give each block a tile of its own (a store index built from tile.bid), or add "
             "the values with tile.atomic_add or tile.scatter_add",
    "VG203": "write to a separate output array, or let each block read only elements that no "
             "other block writes",
    "VG204": "update this array only with tile.atomic_add or tile.scatter_add in this launch",
}
_HINT_TAIL = "; accesses meant to race go inside `with vg.unsafe():`"


class _BlockShadow(Shadow):
    """Shadow memory where each block is one thread, named as a block, with hints in the
    tile track's words."""

    def __init__(self, grid: tuple, shapes: dict):
        super().__init__(grid, (1, 1, 1), shapes)

    def __call__(self, access: Access) -> None:
        try:
            super().__call__(access)
        except SafetyError as err:
            raise SafetyError(err.message, err.loc, hint=_HINTS[err.code] + _HINT_TAIL,
                              code=err.code) from None

    def _thread(self, tid) -> str:
        return f"block {self._coords(int(tid), self.grid)}"

    def check_distinct(self, access: Access, tile_shape: tuple, elements: np.ndarray) -> None:
        """A plain scatter must not write one element from two of its tile's elements
        (`elements`: the position in the tile of each element written)."""
        if access.unsafe:
            return
        order = np.argsort(access.flat, kind="stable")
        ordered = access.flat[order]
        repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
        if not len(repeated):
            return
        first, second = (np.unravel_index(int(elements[order[k]]), tile_shape)
                         for k in (repeated[0], repeated[0] + 1))
        raise SafetyError(
            f"{CODES['VG202'].title}: {self._thread(access.block[0])} writes "
            f"{self._element(access.array, ordered[repeated[0]])} from tile elements "
            f"{tuple(map(int, first))} and {tuple(map(int, second))} of one scatter "
            "(observed while running on the cpu backend)", access.loc, code="VG202",
            hint="give each element of the tile an index of its own, or add the values with "
                 "tile.scatter_add" + _HINT_TAIL)


# ----------------------------------------------------------------------------- blocks


@dataclass(eq=False)
class _Launch:
    kernel: ir.Kernel
    grid: tuple
    memory: dict  # array name -> simt._Memory
    scalars: dict  # scalar parameter -> register-form value
    shadow: _BlockShadow

    def __post_init__(self):
        self.grid_dim = tuple(np.int32(n) for n in self.grid)


class _Block:
    """The state of one running block."""

    def __init__(self, launch: _Launch, linear: int):
        gx, gy, _ = launch.grid
        self.launch, self.linear = launch, linear
        self.block_id = (np.int32(linear % gx), np.int32(linear // gx % gy),
                         np.int32(linear // (gx * gy)))
        self.grid_dim = launch.grid_dim
        self.env = dict(launch.scalars)

    def observe(self, mem: _Memory, flat: np.ndarray, site: Site) -> None:
        """Tell shadow memory about an access of elements `flat` (row-major, int64)."""
        if len(flat):
            self.launch.shadow(self.access(mem, flat, site))

    def access(self, mem: _Memory, flat: np.ndarray, site: Site) -> Access:
        lanes = len(flat)
        return Access(mem.name, "global", flat, np.full(lanes, self.linear, np.int64),
                      np.zeros(lanes, np.int64), site.is_write, site.loc, site.atomic,
                      site.unsafe)

    def out_of_bounds(self, mem: _Memory, at, loc, element=None) -> BoundsError:
        """VG302 of a scalar access, or of a scatter's tile `element` (whose lanes outside
        the array may be skipped instead)."""
        where = "" if element is None else f" (tile element {tuple(map(int, element))})"
        advice = "" if element is None else ("; where the lanes outside the array are padding "
                                             "meant to write nothing, pass skip_out_of_bounds=True")
        return BoundsError.of(mem.name, at, mem.shape, f"kernel {self.launch.kernel.name}, "
                              f"block {tuple(map(int, self.block_id))}{where}", loc, advice)


# ----------------------------------------------------------------------------- compiler


class _Compiler(TileExpressions):
    """IR -> closures: an expression becomes f(block) -> value; a statement becomes
    f(block) -> None (fall through) or a signal: BREAK, CONTINUE or an `_Exit`."""

    def __init__(self, kernel: ir.Kernel):
        self.kernel = kernel
        self.loops = 0  # loops enclosing the statement being compiled
        self.regions: list = []  # labels of enclosing regions
        self.unsafe = False  # compiling the body of a `with vg.unsafe():`

    # ------------------------------------------------------------------ statements

    def stmt(self, node):
        compile_stmt = self._STMT.get(type(node))
        if compile_stmt is None:
            self._missing(type(node).__name__, node)
        return compile_stmt(self, node)

    def block(self, stmts):
        steps = tuple(self.stmt(s) for s in stmts)

        def run(bl):
            for step in steps:
                signal = step(bl)
                if signal is not None:
                    return signal
            return None
        return run

    def _assign(self, node):
        name, value = node.name, self.expr(node.value)

        def assign(bl):
            bl.env[name] = value(bl)
        return assign

    def _store(self, node):
        value, element = self.expr(node.value), self._element(node, node.indices)
        site = self._site(node, is_write=True)

        def store(bl):
            stored = value(bl)  # Python order: the value, then the target
            mem, at = element(bl)
            bl.observe(mem, np.array([np.ravel_multi_index(at, mem.shape)]), site)
            mem.data[tuple(at)] = mem.encode(stored)
        return store

    def _tile_store(self, node):
        name, index = node.array.name, [self.expr(i) for i in node.index]
        value, shape = self.expr(node.value), node.value.shape
        site = self._site(node, is_write=True)

        def tile_store(bl):
            mem = bl.launch.memory[name]
            at = [i(bl) for i in index]
            tile = value(bl)
            window = tile_ops.window(at, shape, mem.shape)
            if window is not None:  # a tile wholly outside the array writes nothing
                inside, within = window
                bl.observe(mem, tile_ops.flat_indices(inside, mem.shape), site)
                mem.data[inside] = mem.encode(tile[within])
        return tile_store

    def _atomic_scan(self, node, op: str):
        """How atomic `op` combines into `node`'s array (`atomics.scan_for`)."""
        scan = atomics.scan_for(op, node.array.dtype)
        if scan is None:
            self._missing(f"atomic {op} on {node.array.dtype.name}", node)
        return scan

    def _tile_atomic(self, node):
        name, index = node.array.name, [self.expr(i) for i in node.index]
        value, shape = self.expr(node.value), node.value.shape
        scan = self._atomic_scan(node, node.op)
        site = self._site(node, is_write=True, atomic=True)

        def tile_atomic(bl):
            mem = bl.launch.memory[name]
            at = [i(bl) for i in index]
            tile = value(bl)
            window = tile_ops.window(at, shape, mem.shape)
            if window is not None:
                inside, within = window
                flat = tile_ops.flat_indices(inside, mem.shape)
                bl.observe(mem, flat, site)
                atomics.perform(scan, mem.data, np.unravel_index(flat, mem.shape),
                                np.ascontiguousarray(tile[within]).reshape(-1), None,
                                mem.decode, mem.encode)
        return tile_atomic

    def _scatter(self, node):
        name, indices = node.array.name, [self.expr(i) for i in node.indices]
        value, shape, loc = self.expr(node.value), node.value.shape, node.loc
        mask = None if node.mask is None else self.expr(node.mask)
        skip = node.skip_out_of_bounds
        site = self._site(node, is_write=True, atomic=bool(node.atomic))
        scan = self._atomic_scan(node, node.atomic) if node.atomic else None

        def scatter(bl):
            mem = bl.launch.memory[name]
            at = [np.broadcast_to(np.asarray(i(bl), np.int64), shape).reshape(-1)
                  for i in indices]
            tile = np.broadcast_to(value(bl), shape).reshape(-1)
            elements = np.arange(len(tile))  # positions in the tile, for the messages
            if mask is not None:
                keep = np.broadcast_to(mask(bl), shape).reshape(-1)
                at, tile, elements = [i[keep] for i in at], tile[keep], elements[keep]
            outside = np.zeros(len(tile), bool)
            for i, extent in zip(at, mem.shape):
                outside |= (i < 0) | (i >= extent)
            if skip and outside.any():
                at, tile, elements = [i[~outside] for i in at], tile[~outside], elements[~outside]
            elif outside.any():
                first = int(outside.argmax())
                raise bl.out_of_bounds(mem, [i[first] for i in at], loc,
                                       np.unravel_index(elements[first], shape))
            access = bl.access(mem, np.ravel_multi_index(at, mem.shape), site)
            if not node.atomic:
                bl.launch.shadow.check_distinct(access, shape, elements)
            bl.launch.shadow(access)
            if node.atomic:
                atomics.perform(scan, mem.data, tuple(at), np.ascontiguousarray(tile), None,
                                mem.decode, mem.encode)
            else:
                mem.data[tuple(at)] = mem.encode(tile)
        return scatter

    def _if(self, node):
        cond, then, orelse = self.expr(node.cond), self.block(node.then), self.block(node.orelse)
        return lambda bl: then(bl) if cond(bl) else orelse(bl)

    def _loop_body(self, body):
        self.loops += 1
        try:
            return self.block(body)
        finally:
            self.loops -= 1

    def _while(self, node):
        cond, body = self.expr(node.cond), self._loop_body(node.body)

        def run_while(bl):
            while cond(bl):
                signal = body(bl)
                if signal == BREAK:
                    break
                if isinstance(signal, _Exit):
                    return signal
            return None
        return run_while

    def _for(self, node):
        name, dtype = node.var, node.start.dtype.np
        start, stop, step = (self.expr(e) for e in (node.start, node.stop, node.step))
        body = self._loop_body(node.body)
        info = np.iinfo(dtype)

        def run_for(bl):
            counter, end, by = int(start(bl)), int(stop(bl)), int(step(bl))
            # Stepping past the dtype's range ends the range, as in Python (and run_simt).
            while (counter < end if by > 0 else by < 0 and counter > end):
                bl.env[name] = dtype.type(counter)
                signal = body(bl)
                if signal == BREAK:
                    break
                if isinstance(signal, _Exit):
                    return signal
                counter += by
                if not info.min <= counter <= info.max:
                    break
            return None
        return run_for

    def _break(self, node):
        if not self.loops:
            raise CompileError("break or continue outside a loop", node.loc)
        return lambda bl: BREAK

    def _continue(self, node):
        if not self.loops:
            raise CompileError("break or continue outside a loop", node.loc)
        return lambda bl: CONTINUE

    def _region(self, node):
        self.regions.append(node.label)
        try:
            body = self.block(node.body)
        finally:
            self.regions.pop()
        mine = _Exit(node.label)

        def run_region(bl):
            signal = body(bl)
            return None if signal == mine else signal
        return run_region

    def _exit(self, node):
        if node.label not in self.regions:
            raise CompileError(f"exit from region {node.label!r}, which does not enclose it",
                               node.loc)
        signal = _Exit(node.label)
        return lambda bl: signal

    def _unsafe(self, node):
        enclosing, self.unsafe = self.unsafe, True
        try:
            return self.block(node.body)
        finally:
            self.unsafe = enclosing

    def _locked(self, node):
        """`with tile.lock(...)`: blocks run one at a time here, so the lock is free unless it
        was taken before the launch (a GPU would wait forever: a `KernelError` instead). The
        body's accesses are ordered by the lock, so shadow memory does not record them."""
        acquire, release = self.expr(node.acquire), self.expr(node.release)
        enclosing, self.unsafe = self.unsafe, True
        try:
            body = self.block(node.body)
        finally:
            self.unsafe = enclosing
        name, loc, element = node.locks.name, node.loc, self._element(node.acquire, node.indices)

        def locked(bl):
            held = acquire(bl)
            if held != 0:
                at = ", ".join(map(str, element(bl)[1]))
                raise KernelError(f"lock {name}[{at}] holds {held} when block "
                                  f"{tuple(map(int, bl.block_id))} takes it (kernel "
                                  f"{bl.launch.kernel.name}): on a GPU this block would wait "
                                  "forever", loc, hint=f"pass {name} with every element 0 "
                                  "(free), e.g. np.zeros(n, np.int32)")
            signal = body(bl)
            release(bl)
            return signal
        return locked

    def _print(self, node):
        """One line for the block, or one per element of its tiles in row-major order. Its
        loads are bounds checked but not race checked."""
        _, text, parts = printf.line_format(node, "tile")
        shape = printf.tile_shape(node)
        is_tile = [bool(getattr(p, "shape", ())) for p in parts]
        enclosing, self.unsafe = self.unsafe, True
        try:
            values = [self.expr(v) for v in parts]
        finally:
            self.unsafe = enclosing

        def run_print(bl):
            block, now = tuple(map(int, bl.block_id)), [v(bl) for v in values]
            if shape is None:
                sys.stdout.write(text % (*block, *map(printf.shown, now)))
                return
            sys.stdout.write("".join(
                text % (*block, *at, *(printf.shown(v[at] if tiled else v) for v, tiled in zip(now, is_tile)))
                for at in np.ndindex(*shape)))
        return run_print

    _STMT = {ir.Assign: _assign, ir.Store: _store, ir.If: _if, ir.While: _while,
             ir.For: _for, ir.Break: _break, ir.Continue: _continue, ir.Region: _region,
             ir.Exit: _exit, ir.Unsafe: _unsafe, ir.Print: _print, t.TileStore: _tile_store,
             t.TileAtomic: _tile_atomic, t.Scatter: _scatter, Locked: _locked}


_PROGRAMS: "weakref.WeakKeyDictionary[ir.Kernel, object]" = weakref.WeakKeyDictionary()


def _program(kernel: ir.Kernel):
    program = _PROGRAMS.get(kernel)
    if program is None:
        program = _PROGRAMS[kernel] = _Compiler(kernel).block(kernel.body)
    return program


def run_tile(kernel: ir.Kernel, grid, args: dict) -> None:
    """Run tile kernel `kernel` over `grid` blocks (an int or up to three), one block at a
    time; arrays in `args` (every non-constexpr parameter by name) are written in place."""
    body = _program(kernel)
    memory, scalars = launch_arguments(kernel, args)
    grid = _dims(grid)
    shadow = _BlockShadow(grid, {name: mem.shape for name, mem in memory.items()})
    launch = _Launch(kernel, grid, memory, scalars, shadow)
    with np.errstate(all="ignore"):  # integer wrap and IEEE specials are the semantics
        for linear in range(prod(grid)):
            body(_Block(launch, linear))
