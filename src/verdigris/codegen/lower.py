"""Typed kernel IR -> LLVM IR (llvmlite.ir) for the NVPTX back end.

Takes: a specialized `ir.Kernel` and a target (`nvptx.TARGETS`). Gives: `lower(kernel,
target)`, an `llvmlite.ir.Module` holding one `ptx_kernel` function named
`entry_symbol(kernel.name)`: the name itself when it is a valid PTX identifier (ASCII),
else a deterministic spelling that is.

Guarantees:
- The function's parameters are `abi_params(kernel)`, in order: arrays as
  `ptr addrspace(1)` (element [0, ...]), shapes and strides as i64, scalars as their
  in-memory type (bool as i8).
- The function's parameters are `abi_params(kernel)` and then one hidden pointer,
  `checks.FAULT_PARAM` (the device's fault block; see `checks`).
- Element address = ptr + sum(index_k * stride_k) * itemsize, in int64; the innermost
  stride is the constant 1 when the array is specialized `unit_inner_stride`.
- Every Load, Store and Atomic not in `kernel.facts["in_bounds"]` is checked: when some
  index is outside [0, extent) the access is not performed (a load or atomic yields 0),
  the first fault of the launch is recorded (`checks`, `faultpath`) and the thread goes on. The record
  is written at the end of the stretch of straight-line code holding the access (before
  the next branch), so the accesses of a stretch stay one predicated instruction each;
  in a loop that is not unrolled, at the loop's exit, the first fault carried there in
  variables (`builder`).
- In the variant that uses the bounds proofs, their launch conditions are `llvm.assume`d
  at entry (`assumptions`).
- Atomics (`atomics`) are relaxed at device scope, as CUDA's.
- Array parameters' pointer attributes (`noalias`, `readonly`, `align`): `addressing`.
- Operators, casts and math calls have the semantics of ir.nodes (see `arith`, `casts`,
  `mathlib`). `Logical` and `Select` evaluate only the operand they need: when that
  operand reads memory or calls a math function it runs behind a branch, otherwise
  (cheap and load-free) both are computed and a `select` picks.
- Locals and local arrays are allocas in the entry block (mem2reg/SROA remove them).
  Shared arrays are `addrspace(3)` globals, one per block (`addressing`). Barriers,
  shuffles and votes: `warp`.
- `For` follows Python's `range`, and loops whose counter must be a constant (warp
  operations, local arrays indexed by it) are unrolled here: `loops`.
- Each statement's instructions carry its source location (`debuginfo`: the PTX's
  `.file`/`.loc` line table; a location changes no instruction). A `Print` is a `vprintf`
  call by each thread that runs it (`printf`).
- Identical kernels give identical IR: names come from the kernel and a fixed scheme.
"""
from __future__ import annotations

import re
from functools import partial
from math import prod

import numpy as np
from llvmlite import ir

from .. import errors
from ..ir import nodes as N
from ..ir.abi import abi_params
from ..types import DType
from . import arith, assumptions, atomics, casts, checks, loops, mathlib, nvptx, printf, warp
from .dtypes import I32, I64, mem_type, reg_type, to_mem, to_reg
from .dtypes import const as make_const
from .addressing import ArrayAddress, declare_shared, mark_pointer, static_array
from .attributes import launch_bounds
from .builder import CheckingBuilder
from .debuginfo import LineTable
from .emitter import Emitter
from .faultpath import fault_description, record_fault, within
from .nvptx import GLOBAL

_SREG = {"thread_id": "tid", "block_id": "ctaid", "block_dim": "ntid", "grid_dim": "nctaid"}


def entry_symbol(name: str) -> str:
    """The kernel's PTX symbol: PTX identifiers are ASCII, and `_` alone is not one."""
    symbol = "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"_u{ord(c):04x}" for c in name)
    return symbol if re.fullmatch(r"[A-Za-z]\w*|_\w+", symbol) else f"k{symbol}"


def needs_branch(e: N.Expr) -> bool:
    """Whether evaluating `e` where its result is unused could fault or cost much: an access
    (a tile load too: one proven inside its array under the condition that chooses it has
    no mask) or a math call."""
    return isinstance(e, (*checks.ACCESS_NODES, N.MathCall)) or any(needs_branch(c) for c in N.operands(e))


def _error(message: str, node) -> errors.CompileError:
    return errors.CompileError(message, node.loc)


class _KernelLowering:
    def __init__(self, kernel: N.Kernel, target: str):
        self.kernel = kernel
        self.module = ir.Module(name=kernel.name)
        self.module.triple = nvptx.TRIPLE
        self.module.data_layout = nvptx.data_layout(target)
        self.module.add_named_metadata(
            "llvm.module.flags", self.module.add_metadata([ir.Constant(I32, 4), "nvvm-reflect-ftz", ir.Constant(I32, 0)]))
        abi = abi_params(kernel)
        fault_block = ir.PointerType(addrspace=GLOBAL)
        fnty = ir.FunctionType(ir.VoidType(), [self._abi_type(p) for p in abi] + [fault_block]
                               + self.extra_params())
        self.fn = ir.Function(self.module, fnty, entry_symbol(kernel.name))
        self.fn.calling_convention = "ptx_kernel"
        self.lines = LineTable(self.module, self.fn, kernel.loc)
        self.allocas = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.body = self.fn.append_basic_block("body")
        self.em = Emitter(self.module, CheckingBuilder(self.body, partial(record_fault, self), self.likely, self._alloca), kernel.fma)
        self.b = self.em.b
        self.arrays: dict[str, ArrayAddress] = {}
        self.params: dict[str, ir.Value] = {}  # scalar parameters never assigned to
        self.slots: dict[str, ir.Value] = {}  # local variables: their allocas
        self.loops: list[tuple] = []  # (continue target, break target), innermost last
        self.regions: dict[str, ir.Block] = {}  # region label -> its end block
        self.proven = kernel.facts.get("in_bounds", frozenset())
        self.narrow_extents = frozenset(kernel.facts.get("narrow_extents", ()))
        self.site_of = {id(n): i for i, n in enumerate(checks.sites(kernel))}
        self.kernel_id = checks.kernel_id(kernel)
        self.faults = self.fn.args[len(abi)]
        self.faults.name = checks.FAULT_PARAM
        self.entry = Emitter(self.module, self.allocas, kernel.fma)  # code that dominates the whole body
        self._warp_mask = None  # this thread's warp's existing lanes, made on first use
        self.unrolled: dict[str, int] = {}  # counters of loops being unrolled -> their value
        self._bind_params(abi)
        self.arrays.update(declare_shared(self.module, self.kernel, self.entry.b))
        assumptions.assume_launch_conditions(self)

    # ------------------------------------------------------------------ parameters

    def extra_params(self) -> list:
        """Types of the parameters after the fault block: none, unless a track adds its own
        (the tile track's TMA descriptors)."""
        return []

    @staticmethod
    def _abi_type(p) -> ir.Type:
        return ir.PointerType(addrspace=GLOBAL) if p.role == "ptr" else mem_type(p.dtype)

    def _bind_params(self, abi: list) -> None:
        kernel = self.kernel
        for p, arg in zip(abi, self.fn.args):
            arg.name = p.symbol
            if p.role == "ptr":
                param = kernel.param(p.param)
                mark_pointer(arg, param, self.kernel)
                self.arrays[p.param] = ArrayAddress(param.type.dtype, arg, [], [])
            elif p.role == "shape":
                self.arrays[p.param].shape.append(arg)
            elif p.role == "stride":
                self.arrays[p.param].strides.append(arg)
            else:
                self.params[p.param] = to_reg(self.b, p.dtype, arg)
        for param in kernel.array_params:
            if param.type.unit_inner_stride:
                self.arrays[param.name].strides.append(None)
        for name, dtype in kernel.locals.items():
            self.slots[name] = self._alloca(reg_type(dtype), name)
            if name in self.params:  # a scalar parameter the body assigns to
                self.b.store(self.params.pop(name), self.slots[name])

    def launch_dim(self, kind: str, axis: int) -> ir.Value:
        """The grid or block size along `axis` (i32) as the kernel's code sees it
        (`grid_dim`, `block_dim`), read in the entry block: the launch's own (a track that
        launches on another grid than the kernel's code sees gives that one)."""
        return self.entry.call(f"llvm.nvvm.read.ptx.sreg.{_SREG[kind]}.{'xyz'[axis]}", I32)

    # ------------------------------------------------------------------ helpers

    def _alloca(self, ty: ir.Type, name: str, initial: ir.Value | None = None) -> ir.AllocaInstr:
        """A variable of type `ty`, set to `initial` on entry unless that is None."""
        slot = self.allocas.alloca(ty, name=name)
        slot.type = ir.PointerType()  # llvmlite types allocas as typed pointers; LLVM 22 has none
        if initial is not None:
            self.allocas.store(initial, slot)
        return slot

    def _block(self, name: str) -> ir.Block:
        return self.fn.append_basic_block(name)

    def _branch_if_open(self, target: ir.Block) -> None:
        if not self.b.block.is_terminated:
            self.b.branch(target)

    def _view(self, array: N.ArrayRef, node) -> ArrayAddress:
        view = self.arrays.get(array.name)
        if view is None:
            raise _error(f"unknown array {array.name!r}", node)
        return view

    def _element(self, view: ArrayAddress, index: list) -> ir.Value:
        offset = None
        for term, stride in zip(index, view.strides):
            term = term if stride is None else self.b.mul(term, stride)
            offset = term if offset is None else self.b.add(offset, term)
        if offset is None:  # a 0-d array
            offset = ir.Constant(I64, 0)
        return self.b.gep(view.ptr, [offset], inbounds=True, source_etype=mem_type(view.dtype))

    def _access(self, node, array: N.ArrayRef, indices: tuple, perform, dtype: DType | None = None):
        """`perform(element pointer)` when every index is inside its extent; else the access is
        skipped and its fault recorded at the end of the stretch (`builder`). Returns what
        `perform` returns, or for a skipped value access `0` of `dtype`."""
        index = [self.expr(i) for i in indices]
        self._accessing(node, array)
        return self.access_at(node, array, index, perform, dtype)

    def access_at(self, node, array: N.ArrayRef, index: list, perform, dtype: DType | None = None):
        """`_access` at indices already computed, for a caller that has ordered the access
        (`_accessing`) itself."""
        view = self._view(array, node)
        if id(node) in self.proven:
            return perform(self._element(view, index))
        return self.checked_access(node, view, index, perform, None if dtype is None else make_const(dtype, 0))

    def _accessing(self, node, array: N.ArrayRef) -> None:
        """Called before each access is emitted, its indices computed (the tile lowering
        orders them, `tile.ordering`)."""

    def checked_access(self, node, view: ArrayAddress, index: list, perform, zero: ir.Value | None = None):
        """`perform(element pointer)` under the bounds check of access `node` at `index`
        (`CheckingBuilder.checked`): its value, or `zero` where the access is skipped."""
        narrow = frozenset(k for k in range(len(index)) if f"{node.array.name}:{k}" in self.narrow_extents)
        return self.b.checked(self.likely(within(self.b, index, view.shape, narrow)),
                              fault_description(self.b, self.site_of[id(node)], index, view.shape),
                              lambda: perform(self._element(view, index)), zero)

    def _checked(self, node) -> bool:
        """Whether `node` is an access that keeps a bounds check."""
        return id(node) in self.site_of and id(node) not in self.proven

    def likely(self, condition: ir.Value) -> ir.Value:
        """`condition`, marked as likely true (`llvm.expect`)."""
        return self.em.call("llvm.expect.i1", ir.IntType(1), condition, ir.Constant(ir.IntType(1), True))

    def _lazy(self, cond: ir.Value, then, orelse, branch: bool, name: str) -> ir.Value:
        """`then() if cond else orelse()`, computing only the taken arm when `branch`."""
        if not branch:
            return self.b.select(cond, then(), orelse())
        then_bb, else_bb, end_bb = self._block(f"{name}.then"), self._block(f"{name}.else"), self._block(f"{name}.end")
        self.b.cbranch(cond, then_bb, else_bb)
        arms = []
        for bb, arm in ((then_bb, then), (else_bb, orelse)):
            self.b.position_at_end(bb)
            value = arm()
            self.b.branch(end_bb)
            arms.append((value, self.b.block))
        self.b.position_at_end(end_bb)
        phi = self.b.phi(arms[0][0].type)
        for value, bb in arms:
            phi.add_incoming(value, bb)
        return phi

    # ------------------------------------------------------------------ expressions

    def expr(self, e: N.Expr) -> ir.Value:
        lowering = self._EXPR.get(type(e))
        if lowering is None:
            raise _error(f"a {type(e).__name__} cannot be used as a value here", e)
        return lowering(self, e)

    def _const(self, e: N.Const) -> ir.Value:
        return make_const(e.dtype, e.value)

    def _var(self, e: N.Var) -> ir.Value:
        if e.name in self.unrolled:
            return make_const(e.dtype, self.unrolled[e.name])
        if e.name in self.slots:
            return self.b.load(self.slots[e.name], typ=reg_type(e.dtype), name=e.name)
        if e.name in self.params:
            return self.params[e.name]
        raise _error(f"unknown variable {e.name!r}", e)

    def _special(self, e: N.Special) -> ir.Value:
        if e.kind == "lane_id":
            return warp.lane_id(self.em)
        return self.em.call(f"llvm.nvvm.read.ptx.sreg.{_SREG[e.kind]}.{'xyz'[e.axis]}", I32)

    def _member_mask(self) -> ir.Value:
        if self._warp_mask is None:
            self._warp_mask = warp.member_mask(self.entry, self.kernel.block)
        return self._warp_mask

    def _warp_op(self, e: N.WarpOp) -> ir.Value:
        value, arg = None if e.value is None else self.expr(e.value), None
        if e.lane is not None:
            folded = self._fold(e.lane)
            arg = self.expr(e.lane) if folded is None else make_const(e.lane.dtype, folded)
        return warp.OPERATIONS[e.op](self.em, e, value, arg, self._member_mask())

    def _fold(self, e: N.Expr) -> int | None:
        """The value of an integer expression of constants and unrolled loop counters
        (computed with the cpu backend's operators, so with the IR's semantics), or None."""
        if isinstance(e, N.Const):
            return e.value if e.dtype.is_int else None
        if isinstance(e, N.Var):
            return self.unrolled.get(e.name)
        if not isinstance(e, (N.Binary, N.Unary, N.Cast)) or not e.dtype.is_int:
            return None
        operands = [self._fold(c) for c in N.operands(e)]
        if None in operands:
            return None
        from ..cpu import ops  # on first need: most kernels fold nothing

        source = e.value.dtype if isinstance(e, N.Cast) else e.dtype
        f = {N.Binary: lambda: ops.binary(e.op, e.dtype), N.Unary: lambda: ops.unary(e.op, e.dtype),
             N.Cast: lambda: ops.cast(source, e.dtype)}[type(e)]()
        if f is None:
            return None
        with np.errstate(all="ignore"):
            return int(f(*(ops.constant(v, source) for v in operands)))

    def _unary(self, e: N.Unary) -> ir.Value:
        if not arith.supports_unary(e.op, e.dtype):
            raise _error(f"operator {e.op!r} is not defined on {e.dtype.name}", e)
        return arith.unary(self.em, e.op, e.dtype, self.expr(e.operand))

    def _binary(self, e: N.Binary) -> ir.Value:
        if not arith.supports_binary(e.op, e.dtype):
            raise _error(f"operator {e.op!r} is not defined on {e.dtype.name}", e)
        return arith.binary(self.em, e.op, e.dtype, self.expr(e.lhs), self.expr(e.rhs))

    def _compare(self, e: N.Compare) -> ir.Value:
        return arith.compare(self.em, e.op, e.lhs.dtype, self.expr(e.lhs), self.expr(e.rhs))

    def _logical(self, e: N.Logical) -> ir.Value:
        lhs = self.expr(e.lhs)
        rhs = lambda: self.expr(e.rhs)  # noqa: E731
        if e.op == "and":
            return self._lazy(lhs, rhs, lambda: lhs, needs_branch(e.rhs), "and")
        return self._lazy(lhs, lambda: lhs, rhs, needs_branch(e.rhs), "or")

    def _select(self, e: N.Select) -> ir.Value:
        branch = needs_branch(e.a) or needs_branch(e.b)
        return self._lazy(self.expr(e.cond), lambda: self.expr(e.a), lambda: self.expr(e.b), branch, "select")

    def _cast(self, e: N.Cast) -> ir.Value:
        return casts.cast(self.em, self.expr(e.value), e.value.dtype, e.dtype)

    def _load(self, e: N.Load) -> ir.Value:
        def perform(ptr):
            return to_reg(self.b, e.dtype, self.b.load(ptr, typ=mem_type(e.dtype), align=e.dtype.itemsize))
        return self._access(e, e.array, e.indices, perform, e.dtype)

    def _atomic(self, e: N.Atomic) -> ir.Value:
        if e.array.type.space == "global" and e.array.name not in self.kernel.writes:
            raise _error(f"atomic on {e.array.name!r}, which the kernel's `writes` leaves out", e)
        if not atomics.supports(e.op, e.dtype):
            raise _error(f"atomic_{e.op} is not available for {e.dtype.name} arrays", e)
        value = self.expr(e.value)
        compare = None if e.compare is None else self.expr(e.compare)
        return self._access(e, e.array, e.indices,
                            lambda ptr: atomics.atomic(self.em, e.op, e.dtype, ptr, value, compare), e.dtype)

    def _shape(self, e: N.Shape) -> ir.Value:
        return self.arrays[e.array.name].shape[e.axis]

    def _math(self, e: N.MathCall) -> ir.Value:
        dt = e.args[0].dtype
        if not mathlib.supports(e.func, dt):
            raise _error(f"{e.func}() is not defined on {dt.name}", e)
        return mathlib.call(self.em, e.func, dt, tuple(self.expr(a) for a in e.args))

    _EXPR = {
        N.Const: _const, N.Var: _var, N.Special: _special, N.Unary: _unary, N.Binary: _binary,
        N.Compare: _compare, N.Logical: _logical, N.Select: _select, N.Cast: _cast,
        N.Load: _load, N.Shape: _shape, N.MathCall: _math, N.Atomic: _atomic,
        N.WarpOp: _warp_op,
    }

    # ------------------------------------------------------------------ statements

    def stmts(self, body: list) -> None:
        for s in body:
            if self.b.block.is_terminated:  # code after break/continue/exit: unreachable
                self.b.position_at_end(self._block("dead"))
            lowering = self._STMT.get(type(s))
            if lowering is None:
                raise _error(f"{type(s).__name__} statements cannot be compiled yet", s)
            enclosing = self.b.debug_metadata  # a loop's latch after its body is the loop's line
            self.b.debug_metadata = self.lines.location(s.loc)
            try:
                lowering(self, s)
            finally:
                self.b.debug_metadata = enclosing

    def _assign(self, s: N.Assign) -> None:
        self.b.store(self.expr(s.value), self.slots[s.name])

    def _store(self, s: N.Store) -> None:
        if s.array.type.space == "global" and s.array.name not in self.kernel.writes:
            raise _error(f"store to {s.array.name!r}, which the kernel's `writes` leaves out", s)
        dt = s.array.dtype
        value = to_mem(self.b, dt, self.expr(s.value))
        self._access(s, s.array, s.indices, lambda ptr: self.b.store(value, ptr, align=dt.itemsize))

    def _if(self, s: N.If) -> None:
        cond = self.expr(s.cond)
        then_bb = self._block("if.then")
        else_bb = self._block("if.else") if s.orelse else None
        end_bb = self._block("if.end")
        self.b.cbranch(cond, then_bb, else_bb or end_bb)
        for bb, body in ((then_bb, s.then), (else_bb, s.orelse)):
            if bb is not None:
                self.b.position_at_end(bb)
                self._arm(body)
                self._branch_if_open(end_bb)
        self.b.position_at_end(end_bb)

    def _arm(self, body: list) -> None:
        """One arm of an `if` (the tile lowering orders each arm's accesses, `tile.ordering`)."""
        self.stmts(body)

    def _loop_target(self, s: N.Stmt, which: int) -> ir.Block:
        if not self.loops:
            raise _error(f"'{type(s).__name__.lower()}' outside a loop", s)
        return self.loops[-1][which]

    def _region(self, s: N.Region) -> None:
        end = self._block(f"{s.label}.end")
        outer = self.regions.get(s.label)
        self.regions[s.label] = end
        self.stmts(s.body)
        self._branch_if_open(end)
        self.regions[s.label] = outer
        self.b.position_at_end(end)

    def _exit(self, s: N.Exit) -> None:
        end = self.regions.get(s.label)
        if end is None:
            raise _error(f"exit from {s.label!r} outside that region", s)
        self.b.branch(end)

    def _local_alloc(self, s: N.LocalAlloc) -> None:
        ref = s.array
        if ref.type.space == "shared":  # declared up front (`declare_shared`)
            return
        shape = ref.type.shape
        storage = self._alloca(ir.ArrayType(mem_type(ref.dtype), prod(shape)), ref.name)
        storage.align = 16
        self.arrays[ref.name] = static_array(ref.dtype, storage, shape)

    _for, _while = loops.lower_for, loops.lower_while

    _STMT = {
        N.Assign: _assign, N.Store: _store, N.If: _if, N.For: _for, N.While: _while,
        N.Break: lambda self, s: self.b.branch(self._loop_target(s, 1)),
        N.Continue: lambda self, s: self.b.branch(self._loop_target(s, 0)),
        N.Region: _region, N.Exit: _exit, N.LocalAlloc: _local_alloc,
        N.Unsafe: lambda self, s: self.stmts(s.body),
        N.Barrier: lambda self, s: warp.barrier(self.em, s.scope, self._member_mask()),
        N.Fence: lambda self, s: warp.fence(self.em, s.scope),
        N.Print: lambda self, s: printf.emit_print(self, s, "simt"),
    }

    # ------------------------------------------------------------------ kernel

    def threads_per_block(self) -> int | None:
        """Threads of the block the kernel is launched with, where it is specialized on it."""
        return None if self.kernel.block is None else prod(self.kernel.block)

    def bounds(self) -> tuple | None:
        """(threads per block, blocks that must fit on a multiprocessor, or None) for the
        entry's launch bounds, where the block is known (the blocks: the kernel option
        `min_blocks_per_sm`); None where it is not. With `.maxntid`, ptxas keeps to the
        registers a block of that size may have (64 at 1024 threads), where without it a
        kernel that took more would fail to launch."""
        threads = self.threads_per_block()
        return (threads, self.kernel.min_blocks_per_sm) if threads else None

    def run(self) -> ir.Module:
        bounds = self.bounds()
        if bounds is not None:
            self.fn.attributes = launch_bounds(*bounds)
        self.stmts(self.kernel.body)
        if not self.b.block.is_terminated:
            self.b.ret_void()
        self.allocas.branch(self.body)
        return self.module


def lower(kernel: N.Kernel, target: str) -> ir.Module:
    return _KernelLowering(kernel, target).run()
