"""Control flow of the kernel translator: `if`, `for`, `while`, `break`, `continue`, and the
bindings of names where paths meet.

Takes (as `translate.Translator`'s base class): the statements' `ast`, with the translator's
scope, statement list and unit. Gives `ir` `If`, `For` and `While` statements, and the scope
after each: `bindings.merge` of the scopes of the paths that reach it (an arm, a loop's
end, its `continue`s and `break`s, and its entry where it may run no times). Guarantees: a
loop's body is checked against the bindings it reads at the head (`bindings.check_carried`);
a path that breaks, continues or returns does not reach what follows it; where the arms of
an `if` bind a name that later statements read to different arrays (or constants), those
statements are translated in each arm, so every access names the array of its path.
"""
from __future__ import annotations

import ast

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from . import assigned, bindings, tiles
from .bindings import Conflict, Retry, VarBinding
from .typing import Static, is_number, static_truth, truth, typed

MAX_ARRAY_SELECTIONS = 8  # `if`s whose arms bind a name to different arrays: each copies code


class ControlFlow:
    """Mixed into `translate.Translator`, whose state and statement methods it uses."""

    def stmt_If(self, node, rest=()) -> bool:
        """An `if`, followed in its block by the statements `rest`; gives whether it
        translated `rest` too: where a name that `rest` reads is bound to one array (or
        constant) in one arm and to another in the other, `rest` is translated in each arm
        with that arm's binding (no variable can hold an array)."""
        cond = self.expr(node.test)
        cond = tiles.folded(cond)  # `if EVEN:` of `EVEN = N % B == 0` too
        if isinstance(cond, Static):  # decided while compiling
            self.body(node.body if static_truth(cond, self.loc(node.test)) else node.orelse)
            return False
        cond = truth(cond, self.loc(node.test))
        entry = self.scope
        then, then_end = self.branch(node.body, entry)
        orelse, else_end = self.branch(node.orelse, entry)
        ends = [then_end, else_end]
        selects = self.selects_arrays(ends, rest)
        if selects:
            self.unit.selections += 1
            tails = [self.branch(rest, end) if end is not None else ([], None) for end in ends]
            then, orelse = then + tails[0][0], orelse + tails[1][0]
            ends = [end for _, end in tails]
        self.emit(N.If(self.loc(node), cond, then, orelse))
        self.meet(ends)
        return selects

    def selects_arrays(self, ends: list, rest) -> bool:
        """Whether the arms ending with scopes `ends` bind a name that `rest` mentions to
        different arrays or constants (and the kernel has not done so too often already)."""
        if None in ends or not rest or self.unit.selections >= MAX_ARRAY_SELECTIONS:
            return False
        mentioned = {n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name)}
        return any(isinstance(b, Conflict) and not any(isinstance(o, VarBinding) for o, _ in b.options)
                   for name, b in bindings.merge(ends, self.assignment).items() if name in mentioned)

    def branch(self, body, scope: dict, loop: bool = False) -> tuple:
        """Translate `body` (as `nested`) from a copy of `scope`: its statements, and the
        scope at its end (None where it cannot fall through: it breaks, continues or returns)."""
        outer_scope, outer_live = self.scope, self.live
        self.scope, self.live = dict(scope), True
        try:
            stmts = self.nested(body, loop)
            return stmts, self.scope if self.live else None
        finally:
            self.scope, self.live = outer_scope, outer_live

    def meet(self, ends: list) -> None:
        """Continue where the paths ending with scopes `ends` (None: a path that left) meet."""
        reached = [e for e in ends if e is not None]
        if reached:
            self.scope = bindings.merge(reached, self.assignment)
        else:
            self.live = False

    def loop(self, body, head: dict, loc: Loc, exclude: str | None = None,
             mark: int | None = None) -> tuple:
        """Translate a loop's body from the bindings at its head; check that what the body
        (and the reads since `mark`: a while's condition) reads of them comes back around
        the loop. Gives the body and the scopes that leave the loop (at its end, `continue`s
        and `break`s)."""
        mark = len(self.reads) if mark is None else mark
        self.loops.append(([], []))
        try:
            stmts, end = self.branch(body, head, loop=True)
        finally:
            continues, breaks = self.loops.pop()
        read = {(name, id(binding)) for name, binding in self.reads[mark:]}
        for name, entry in head.items():
            if name != exclude and (name, id(entry)) in read:
                for back in [end] + continues:
                    bindings.check_carried(self.unit, name, entry, back and back.get(name),
                                           self.assignment, loc)
        return stmts, [end] + continues + breaks

    def stmt_For(self, node) -> None:
        loc = self.loc(node)
        if node.orelse:
            self.unsupported(node, "`for ... else`")
        call = node.iter
        callee = self.expr(call.func) if isinstance(call, ast.Call) else None
        if not (isinstance(callee, Static) and callee.value is range):
            raise CompileError("kernels loop only over range(start, stop, step)", self.loc(node.iter))
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise CompileError("range() takes 1 to 3 positional arguments", self.loc(call))
        if not isinstance(node.target, ast.Name):
            self.unsupported(node.target, "this loop variable")
        args = [self.expr(a) for a in call.args]
        start, stop, step = ([Static(0)] + args + [Static(1)])[:3] if len(args) == 1 else \
            (args + [Static(1)])[:3]
        if is_number(step) and step.value == 0:
            raise CompileError("range() step must not be zero", self.loc(call.args[2]))
        for a in (start, stop, step):
            if not is_number(a) and not (isinstance(a, N.Expr) and a.dtype.is_int):
                raise CompileError("range() bounds must be integers", self.loc(call))
        strong = [a for a in (start, stop, step) if not isinstance(a, Static)]
        if strong:
            dtype = strong[0].dtype
            for a in strong[1:]:
                dtype = T.promote(dtype, a.dtype)
        else:
            dtype = T.literal_dtype(max((a.value for a in (start, stop)), key=abs))
        name, target = node.target.id, self.loc(node.target)
        key = bindings.key_for(self.unit, self.scope, name, target, dtype, self.prefix + name)
        if key in self.unit.types and self.unit.types[key] is not dtype:
            dtype = T.promote(self.unit.types[key], dtype)  # a merge joined it with wider ones
            if not dtype.is_int:
                raise CompileError(f"{name!r} is a loop variable here, but where it is read "
                                   f"after the loop it may hold a {dtype.name} (the body "
                                   "rebinds it)", target, hint="give the value the body "
                                   "computes another name")
            if dtype is not self.unit.types[key]:
                self.unit.types[key] = dtype
                raise Retry
        self.unit.types[key] = dtype
        bounds = [typed(a, loc, dtype) for a in (start, stop, step)]
        entry = self.scope
        head = {**entry, name: VarBinding(key, frozenset({bindings.site(target)}), target)}
        body, exits = self.loop(node.body, head, loc, exclude=name)
        loop = N.For(loc, key, *bounds, body)
        self.emit(loop)
        # a loop that surely runs (constant bounds, no break or continue) leaves from its end
        self.meet(exits if assigned.runs(loop) and not N.leaves_loop(body) else [entry] + exits)

    def stmt_While(self, node) -> None:
        loc = self.loc(node)
        if node.orelse:
            self.unsupported(node, "`while ... else`")
        test: list = []

        def condition():
            test.append(truth(self.expr(node.test), self.loc(node.test)))

        entry = self.scope
        mark = len(self.reads)
        setup = self.nested(condition)
        body, exits = self.loop(node.body, entry, loc, mark=mark)  # the condition reads too
        if setup:  # the condition itself needs statements: test at the top of the body
            stop = N.If(loc, N.Unary(loc, "not", test[0], T.bool_), [N.Break(loc)], [])
            self.emit(N.While(loc, N.Const(loc, True, T.bool_), setup + [stop] + body))
        else:
            self.emit(N.While(loc, test[0], body))
        self.meet([entry] + exits)

    def stmt_Break(self, node) -> None:
        if not self.loop_depth:
            raise CompileError("`break` outside a loop", self.loc(node))
        self.emit(N.Break(self.loc(node)))
        self.leave(self.loops[-1][1])

    def stmt_Continue(self, node) -> None:
        if not self.loop_depth:
            raise CompileError("`continue` outside a loop", self.loc(node))
        self.emit(N.Continue(self.loc(node)))
        self.leave(self.loops[-1][0])

    def leave(self, exits: list) -> None:
        """The path ends here (break, continue, return); its scope goes to `exits`."""
        if self.live:
            exits.append(dict(self.scope))
        self.live = False
