"""The text `print(...)` in a kernel writes: one printf format, for every backend.

Takes: a `Print` node and the kernel's track. Gives `line_format(node, track) -> (format,
python_format, values)`: a C printf format string, the same for Python's `%` operator
(which has no length modifiers), and the `Expr`s it converts after the ids (each an
unsigned 32-bit `%u`: block x, y, z, then for SIMT thread x, y, z, and for a tile print
the element's position along each axis); and `tile_shape(node)`.

The line: `[block (bx, by, bz) thread (tx, ty, tz)] ` (tile kernels: `[block (bx, by,
bz)] `), then the parts joined by `sep`, then `end`. A tile kernel's print of tiles (all of
one shape, `tile_shape`) writes one such line per element, in row-major order on the cpu
backend, prefixed `[block (bx, by, bz) element (i, j)] `, each tile part showing that
element (scalar parts the same on every line). Each value is converted by its dtype:
signed integers `%lld` (widened to 64 bits), unsigned `%llu`, bool `True`/`False` (`%s`),
float64 `%.17g` and narrower floats `%.9g` (promoted to double, as C's varargs are): the
shortest printf forms that give every value back exactly, so the GPU (vprintf) and the
cpu backend print the same text for the same values.
"""
from __future__ import annotations

from ..types import DType
from . import nodes as N

_PREFIX = {"simt": "[block (%u, %u, %u) thread (%u, %u, %u)] ", "tile": "[block (%u, %u, %u)] "}


def tile_shape(node: N.Print) -> tuple | None:
    """The shape of the print's tile parts (the frontend makes them one shape), or None."""
    shapes = [part.shape for part in node.parts if getattr(part, "shape", ())]
    return shapes[0] if shapes else None


def _prefix(node: N.Print, track: str) -> str:
    shape = tile_shape(node)
    if shape is None:
        return _PREFIX[track]
    return "[block (%u, %u, %u) element (" + ", ".join(["%u"] * len(shape)) + ")] "


def conversion(dtype: DType) -> str:
    if dtype.name == "bool":
        return "%s"
    if dtype.is_int:
        return "%lld" if dtype.is_signed else "%llu"
    return "%.17g" if dtype.itemsize == 8 else "%.9g"


def line_format(node: N.Print, track: str) -> tuple:
    c_pieces, python_pieces, values = [], [], []
    for part in node.parts:
        if isinstance(part, str):
            c_pieces.append(_literal(part))
            python_pieces.append(_literal(part))
        else:
            c_pieces.append(conversion(part.dtype))
            python_pieces.append(conversion(part.dtype).replace("ll", ""))
            values.append(part)
    sep, end = _literal(node.sep), _literal(node.end)
    prefix = _prefix(node, track)
    return prefix + sep.join(c_pieces) + end, prefix + sep.join(python_pieces) + end, values


def shown(value):
    """A register-form value (NumPy scalar) as the Python format converts it: bools as
    True/False, integers as Python ints, floats as Python floats (float64: exact)."""
    value = value.item() if hasattr(value, "item") else value
    return str(value) if isinstance(value, bool) else value


def _literal(text: str) -> str:
    return text.replace("%", "%%")
