"""`print(...)` in a kernel: the handler of Python's `print`.

Takes: the translator and a `print` call's translated arguments (string literals arrive as
`Static` strings). Gives: an `ir.Print` statement emitted where the call stands. Its
parts are, in order, literal text (string literals and constants, as Python's `str` writes
them), scalar expressions and tiles; `sep=` and `end=` take string literals, as Python's do.
Tiles print one line per element (in a tile kernel), so the tiles of one print must have
one shape. Guarantees: an array, tiles of different shapes, `file=` or `flush=` is a
`CompileError` at the call saying what to print instead; the values are what `print` would have seen (they are evaluated
where the call stands, in order).
"""
from __future__ import annotations

from ..errors import CompileError, Loc
from ..ir import nodes as N
from .tiles import is_tile, refuse_tfloat32, shape_of, show
from .typing import Static

HINT = "print takes text, scalar values and tiles, e.g. print(\"x[i] =\", x[i])"


def kernel_print(tr, args, kwargs, loc: Loc):
    """The handler of `print(...)` (`intrinsics.HANDLERS`)."""
    unknown = sorted(set(kwargs) - {"sep", "end"})
    if unknown:
        raise CompileError(f"print() in a kernel takes sep= and end=, not {', '.join(unknown)}=",
                           loc, hint="a kernel's print writes to the process's standard output")
    sep, end = (_text(kwargs.get(name, Static(default)), f"print's {name}=", loc)
                for name, default in (("sep", " "), ("end", "\n")))
    parts = tuple(_part(a, loc) for a in args)
    refuse_tfloat32(parts, "print()", loc)
    shapes = {shape_of(p) for p in parts if is_tile(p)}
    if len(shapes) > 1:
        raise CompileError(f"print() of tiles of different shapes ({', '.join(map(show, sorted(shapes)))}): "
                           "it prints one line per element of one shape", loc,
                           hint="print them in separate calls")
    tr.emit(N.Print(loc, parts, sep, end))
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
    if isinstance(value, N.ArrayRef):
        raise CompileError(f"print() of the array {value.name!r}: print its elements instead",
                           loc, hint=HINT)
    if isinstance(value, N.Expr):
        return value
    raise CompileError("print() cannot show this value in a kernel", loc, hint=HINT)
