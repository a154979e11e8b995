"""`vg.assume(condition)`: a fact of the launch, stated in a kernel's body.

Takes: the translator and the translated condition of a `vg.assume(...)` call. Gives: an
`ir.Assumption` appended to the build's `Unit.assumptions` (the kernel carries them in
`Kernel.assumptions`, not in its body: they hold for the whole launch, whatever runs).
Guarantees: an assumption stands at the top level of a kernel's own body (not in a branch,
a loop or a `@vg.func`, where it would read as a run-time test), and its condition reads
only values fixed for the whole launch: integer and bool scalar parameters the kernel never
reassigns, extents of array parameters, constants (constexprs folded), grid and block
sizes; through comparisons, `and`/`or`/`not`, `+ - * // %`, unary `-`, `& | ^`, `min`/`max`/`abs` and
integer casts. Anything else (a thread id, a local variable, a load, a float, a shift, `~`) is a
`CompileError` at its column saying what an assumption may read: the launch evaluates the
condition on the host (`runtime.assumptions`), where only those values exist.
"""
from __future__ import annotations

import ast

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from .bindings import VarBinding
from .typing import Static, is_number, truth

# the operators a host evaluation reproduces exactly (`runtime.assumptions`)
ARITHMETIC = ("add", "sub", "mul", "floordiv", "mod", "and", "or", "xor")
LAUNCH_SIZES = ("block_dim", "grid_dim")
HINT = ("an assumption is checked on the host before the launch: it may read integer scalar "
        "arguments, array extents (x.shape[k]), constexprs and block/grid sizes")


def assume(tr, args, kwargs, loc: Loc):
    """The handler of `vg.assume(condition)` (`intrinsics.HANDLERS`)."""
    if len(args) != 1 or kwargs:
        raise CompileError("vg.assume() takes one condition", loc, hint=HINT)
    if tr.nesting or tr.return_label != "kernel":
        raise CompileError("vg.assume() states a fact of the whole launch: write it at the top "
                           "level of the kernel's body, not inside a branch, a loop or a "
                           "@vg.func", loc, hint="move it to the start of the kernel")
    value = args[0]
    if isinstance(value, Static):
        if not is_number(value):
            raise CompileError("vg.assume() takes a condition", loc, hint=HINT)
        cond = N.Const(loc, bool(value.value), T.bool_)
    else:
        cond = truth(value, loc)
    # scalar parameters the kernel never assigns are bound to their own names
    scalars = {p for p, binding in tr.scope.items()
               if isinstance(binding, VarBinding) and binding.key == p and not binding.sites
               and p not in tr.assigned}
    _check_launch_uniform(cond, scalars)
    tr.unit.assumptions.append(N.Assumption(loc, cond, _text(tr.src, loc)))
    return Static(None)


def _check_launch_uniform(e: N.Expr, scalars: set) -> None:
    """Refuse a node of `e` whose value the host cannot compute before the launch."""
    def refuse(what: str):
        raise CompileError(f"vg.assume() cannot read {what}", e.loc, hint=HINT)

    if e.dtype.is_float:
        refuse(f"a {e.dtype.name} value: assumptions are about integers")
    if isinstance(e, N.Const):
        return
    if isinstance(e, N.Var):
        if e.known is None and e.name not in scalars:
            refuse(f"{e.name.split('.')[0]!r}, a variable the kernel computes or reassigns")
        return
    if isinstance(e, N.Shape):
        if e.array.type.space != "global":
            refuse("the extent of a local or shared array")
        return
    if isinstance(e, N.Special):
        if e.kind not in LAUNCH_SIZES:
            refuse(f"{e.kind}(), which differs between threads")
        return
    if isinstance(e, N.Unary) and e.op == "invert":
        refuse("`~`")
    if isinstance(e, N.Binary) and e.op not in ARITHMETIC:
        refuse(f"the operator {e.op!r}")
    if isinstance(e, N.MathCall) and e.func not in ("min", "max", "abs"):
        refuse(f"{e.func}()")
    if isinstance(e, N.Unary):
        parts = [e.operand]
    elif isinstance(e, (N.Binary, N.Compare, N.Logical)):
        parts = [e.lhs, e.rhs]
    elif isinstance(e, N.Select):
        parts = [e.cond, e.a, e.b]
    elif isinstance(e, N.Cast):
        parts = [e.value]
    elif isinstance(e, N.MathCall):
        parts = list(e.args)
    else:
        refuse("memory or a value that differs between threads")
    for part in parts:
        _check_launch_uniform(part, scalars)


def _text(src, loc: Loc) -> str:
    """The condition as the user wrote it (the call's argument), for messages."""
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call) and node.args and src.loc(node) == loc:
            return ast.unparse(node.args[0])
    return "the assumed condition"
