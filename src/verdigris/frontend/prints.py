"""`print(...)` in a kernel: the handler of Python's `print`.

Takes: the translator and a `print` call's translated arguments (string literals arrive as
`Static` strings). Gives: an `ir.Print` statement emitted where the call stands. Its
parts are, in order, literal text (string literals and constants, as Python's `str` writes
them) and scalar expressions; `sep=` and `end=` take string literals, as Python's do.
Guarantees: an array, a tile, `file=` or `flush=` is a `CompileError` at the call saying
what to print instead; the values are what `print` would have seen (they are evaluated
where the call stands, in order).
"""
from __future__ import annotations

from ..errors import CompileError, Loc
from ..ir import nodes as N
from .tiles import is_tile
from .typing import Static

HINT = ("print takes text and scalar values, e.g. print(\"x[i] =\", x[i]); "
        "for a tile, print a reduction of it (tile.sum(t)), or store it and look at it on the host")


def kernel_print(tr, args, kwargs, loc: Loc):
    """The handler of `print(...)` (`intrinsics.HANDLERS`)."""
    unknown = sorted(set(kwargs) - {"sep", "end"})
    if unknown:
        raise CompileError(f"print() in a kernel takes sep= and end=, not {', '.join(unknown)}=",
                           loc, hint="a kernel's print writes to the process's standard output")
    sep, end = (_text(kwargs.get(name, Static(default)), f"print's {name}=", loc)
                for name, default in (("sep", " "), ("end", "\n")))
    tr.emit(N.Print(loc, tuple(_part(a, loc) for a in args), sep, end))
    return Static(None)


def _text(value, what: str, loc: Loc) -> str:
    if isinstance(value, Static) and isinstance(value.value, str):
        return value.value
    raise CompileError(f"{what} must be a string literal", loc)


def _part(value, loc: Loc):
    if isinstance(value, Static):
        if isinstance(value.value, (str, bool, int, float)) or value.value is None:
            return str(value.value)
        raise CompileError(f"print() cannot show {value.value!r} in a kernel", loc, hint=HINT)
    if is_tile(value):
        raise CompileError("print() of a whole tile is not supported", loc, hint=HINT)
    if isinstance(value, N.ArrayRef):
        raise CompileError(f"print() of the array {value.name!r}: print its elements instead",
                           loc, hint=HINT)
    if isinstance(value, N.Expr):
        return value
    raise CompileError("print() cannot show this value in a kernel", loc, hint=HINT)
