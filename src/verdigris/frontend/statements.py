"""Simple statements of the kernel translator: expression statements, assignments (plain,
annotated, augmented, unpacking), element stores, `return` and `with`.

Takes (as `translate.Translator`'s base class, beside `flow.ControlFlow` and
`expressions.Expressions`): the statements' `ast`, with the translator's scope, statement
list and unit. Gives `ir` `Store`, `Exit` and `Unsafe` statements and the bindings of names
(`Translator.bind`). Guarantees: a statement outside the supported subset is a
`CompileError` at its location; a store converts its value to the array's dtype and refuses
one that would drop a fraction or is a tile; an unpacking assignment evaluates its whole
right side first, as Python does.
"""
from __future__ import annotations

import ast

from .. import lang
from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from . import bindings, locks, tiles
from .expressions import BIN_OPS
from .tiles import binary
from .typing import Static, cast, is_number, typed


def is_constexpr(annotation) -> bool:
    return isinstance(annotation, Static) and (annotation.value is lang.constexpr
                                               or isinstance(annotation.value, lang.constexpr))


class Statements:
    """Mixed into `translate.Translator`, whose state and expression methods it uses."""

    def body(self, stmts) -> None:
        stmts = list(stmts)
        for k, s in enumerate(stmts):
            if not isinstance(s, ast.If):
                self.stmt(s)
            elif self.stmt_If(s, stmts[k + 1:]):
                return  # the rest of the block was translated in each arm

    def stmt(self, node) -> None:
        handler = getattr(self, f"stmt_{type(node).__name__}", None)
        if handler is None:
            self.unsupported(node)
        handler(node)

    def stmt_Pass(self, node) -> None:
        pass

    def stmt_Expr(self, node) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        if not isinstance(node.value, ast.Call):
            raise CompileError("this expression statement has no effect", self.loc(node))
        self.expr(node.value)

    def stmt_Assign(self, node) -> None:
        # A name may hold a string constant (`mode = "relu"`); an element may not.
        value = self.argument(node.value, strings=all(isinstance(t, ast.Name) for t in node.targets))
        for target in node.targets:
            self.assign_to(target, value)

    def stmt_AnnAssign(self, node) -> None:
        if node.value is None:
            self.unsupported(node, "a declaration without a value")
        value = self.argument(node.value, strings=True)
        annotation = self.expr(node.annotation)
        if is_constexpr(annotation) and isinstance(node.target, ast.Name):
            self.bind_constant(node.target.id, value, node.target)
            return
        if isinstance(annotation, Static) and isinstance(annotation.value, T.DType):
            value = typed(value, self.loc(node), annotation.value) if is_number(value) \
                else cast(typed(value, self.loc(node)), annotation.value, self.loc(node))
        self.assign_to(node.target, value)

    def assign_to(self, target, value) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value, target)
        elif isinstance(target, ast.Subscript):
            array, indices = self.subscript_parts(target)
            self.store(array, indices, value, self.loc(target))
        elif isinstance(target, ast.Tuple):
            items = value.value if isinstance(value, Static) and isinstance(value.value, tuple) else None
            if items is None or len(items) != len(target.elts):
                raise CompileError(f"cannot unpack this value into {len(target.elts)} names",
                                   self.loc(target))
            # Python evaluates the whole right side first: `x, y = y, x` swaps.
            items = [self.temporary(v, self.loc(target)) for v in items] if len(items) > 1 else items
            for t, v in zip(target.elts, items):
                self.assign_to(t, v)
        else:
            self.unsupported(target, "this assignment target")

    def stmt_AugAssign(self, node) -> None:
        op = BIN_OPS.get(type(node.op))
        loc = self.loc(node)
        if isinstance(node.target, ast.Name):
            current = self.read_name(ast.Name(node.target.id, ast.Load(), lineno=node.lineno,
                                              col_offset=node.col_offset))
            self.bind(node.target.id, binary(op, current, self.expr(node.value), loc), node.target)
        elif isinstance(node.target, ast.Subscript):
            array, indices = self.subscript_parts(node.target)
            current = N.Load(loc, array, indices, array.dtype)
            self.store(array, indices, binary(op, current, self.expr(node.value), loc), loc)
        else:
            self.unsupported(node.target, "this assignment target")

    def store(self, array: N.ArrayRef, indices, value, loc: Loc) -> None:
        dtype = array.dtype
        if tiles.is_tile(value):
            raise CompileError(f"a tile of shape {tiles.show(value.shape)} cannot be stored into "
                               "one element", loc, hint="write tiles with tile.store(array, "
                               "index=..., tile=t)")
        if not is_number(value):
            value = typed(value, loc)
            if value.dtype.is_float and not dtype.is_float:
                raise CompileError(f"storing {value.dtype.name} into {array.name!r}, an array of "
                                   f"{dtype.name}, would drop the fraction", loc,
                                   hint=f"convert explicitly: vg.{dtype.name}(value)")
        self.emit(N.Store(loc, array, indices, typed(value, loc, dtype) if is_number(value)
                          else cast(value, dtype, loc)))

    def stmt_Return(self, node) -> None:
        loc = self.loc(node)
        value = self.expr(node.value) if node.value is not None else Static(None)
        if self.return_label == "kernel":
            if not (isinstance(value, Static) and value.value is None):
                raise CompileError("kernels return nothing; write results into an output array", loc)
        elif not (isinstance(value, Static) and value.value is None):
            items = value.value if isinstance(value, Static) and isinstance(value.value, tuple) \
                else (value,)
            if any(isinstance(item, N.ArrayRef) for item in items):
                raise CompileError(f"{self.src.name}() returns an array: helpers return numbers",
                                   loc, hint="allocate the array in the kernel (or the caller) "
                                   "and pass it to the helper, which writes into it")
            self.returns.append(len(items))
            for k, item in enumerate(items):
                self.set_var(f"{self.prefix}return{k}", item, loc)
        else:
            self.returns.append(0)
        self.emit(N.Exit(loc, self.return_label))
        self.leave([])

    def stmt_With(self, node) -> None:
        loc = self.loc(node)
        if len(node.items) != 1 or node.items[0].optional_vars is not None:
            self.unsupported(node, "this `with` statement")
        ctx = node.items[0].context_expr
        callee = self.expr(ctx.func) if isinstance(ctx, ast.Call) else None
        if isinstance(callee, Static) and getattr(callee.value, "__vg_intrinsic__", None) == "tile.lock":
            return locks.translate(self, ctx, node.body, loc)
        if not (isinstance(callee, Static) and callee.value is lang.unsafe) or ctx.args:
            raise CompileError("the only `with` statements in kernels are `with vg.unsafe():` and "
                               "`with tile.lock(locks, index):`", loc)
        if bindings.site(loc) not in map(bindings.site, self.unit.unsafe):  # once, though
            self.unit.unsafe.append(loc)  # translated in both arms of a selecting `if`
        self.emit(N.Unsafe(loc, self.nested(node.body)))
