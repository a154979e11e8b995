"""Which arguments of a launch site may share memory, judged from their source text.

Takes: the `ast` of launch arguments. Gives: `as_view(node) -> View | None` (an argument as
a view of a named array: the name, its subscript per axis, or "opaque" when it reshapes or
transposes) and `overlap(a, b) -> str | None` (why two views may overlap, or None when they
are provably disjoint). Guarantees: different names are different arrays; views of one name
are disjoint only when literal or shared bounds prove it (`x[:n]` and `x[n:]`, `x[::2]` and
`x[1::2]`, `x[0]` and `x[1]`); anything else may overlap.
"""
from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    """An argument as a view of a named array: `base`, and its index (one ast node per
    axis) when it is a subscript; `opaque` when the view reshapes or transposes."""

    base: str
    axes: tuple | None = None
    opaque: bool = False
    text: str = ""


VIEW_ATTRS = {"T", "mT", "H", "real", "imag"}
VIEW_METHODS = {"view", "reshape", "transpose", "permute", "ravel", "squeeze", "unsqueeze",
                "swapaxes", "expand", "as_strided", "narrow", "flatten"}


def as_view(node) -> View | None:
    """`x`, `self.x`, `x[1:]`, `x.T`, `x.reshape(...)`, ... as a View; None for anything
    else (a call's result is a different array as far as this check can tell)."""
    text = ast.unparse(node)
    if isinstance(node, ast.Name):
        return View(node.id, text=text)
    if isinstance(node, ast.Attribute):
        if node.attr in VIEW_ATTRS:
            inner = as_view(node.value)
            return None if inner is None else View(inner.base, None, True, text)
        path = _attribute_path(node)
        return None if path is None else View(path, text=text)
    if isinstance(node, ast.Subscript):
        inner = as_view(node.value)
        if inner is None:
            return None
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if inner.axes is not None or inner.opaque or any(
                isinstance(a, ast.Constant) and a.value is Ellipsis for a in index):
            return View(inner.base, None, True, text)
        return View(inner.base, tuple(index), text=text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in VIEW_METHODS:
        inner = as_view(node.func.value)
        return None if inner is None else View(inner.base, None, True, text)
    return None


def _attribute_path(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _attribute_path(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def overlap(a: View, b: View) -> str | None:
    """None if `a` and `b` are provably disjoint; else how they meet, in words."""
    if a.base != b.base:
        return None
    if a.axes is None and b.axes is None and not (a.opaque or b.opaque):
        return "is the same memory as"
    if a.opaque or b.opaque or a.axes is None or b.axes is None:
        return "overlaps"
    if ast.dump(ast.Tuple(list(a.axes))) == ast.dump(ast.Tuple(list(b.axes))):
        return "is the same memory as"
    full = ast.Slice()
    axes = itertools.zip_longest(a.axes, b.axes, fillvalue=full)
    if any(_disjoint_axis(x, y) for x, y in axes):
        return None
    literal = all(isinstance(n, ast.Constant) or isinstance(n, ast.UnaryOp)
                  for v in (a, b) for axis in v.axes for n in _bounds(axis) if n is not None)
    return "overlaps" if literal else "may overlap"


def _bounds(axis) -> tuple:
    if isinstance(axis, ast.Slice):
        return axis.lower, axis.upper, axis.step
    return (axis,)


# A bound is ("abs", k) (k from the start), ("end", k) (k <= 0, from the end) or
# ("sym", text) (an expression: equal only to itself).


def _bound(node, default):
    if node is None:
        return default
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ("sym", ast.dump(node))
    if type(value) is not int:
        return ("sym", ast.dump(node))
    return ("abs", value) if value >= 0 else ("end", value)


def _at_most(p, q) -> bool:
    """p <= q for every array length (that makes both bounds valid)."""
    if p[0] == q[0] == "sym":
        return p[1] == q[1]
    return p[0] == q[0] and p[1] <= q[1]


def _interval(axis):
    """(lo, hi, step) of the positions an index touches on one axis, or None if unknown."""
    if isinstance(axis, ast.Slice):
        step = _bound(axis.step, ("abs", 1))
        if step[0] != "abs" or step[1] <= 0:
            return None
        return _bound(axis.lower, ("abs", 0)), _bound(axis.upper, ("end", 0)), step[1]
    lo = _bound(axis, None)
    if lo[0] == "sym":
        return None
    return lo, (lo[0], lo[1] + 1), 1


def _disjoint_axis(x, y) -> bool:
    a, b = _interval(x), _interval(y)
    if a is None or b is None:
        return False
    if _at_most(a[1], b[0]) or _at_most(b[1], a[0]):
        return True
    (a_lo, _, a_step), (b_lo, _, b_step) = a, b
    return a_step == b_step > 1 and a_lo[0] == b_lo[0] != "sym" \
        and (a_lo[1] - b_lo[1]) % a_step != 0


