"""Python source of a kernel or helper: its `ast`, its file coordinates, its names.

Takes: a Python function. Gives: `FunctionSource` with the `ast.FunctionDef` whose line and
column numbers are those of the user's file, the globals and closure values it can see,
and `loc(node)` for any node in it. Guarantees: the source is read and parsed once per
function (cached); a function whose source cannot be found gets a `CompileError` saying
why (defined in a REPL or with `exec`).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from functools import cache

from ..errors import CompileError, Loc


@dataclass(frozen=True, eq=False)
class FunctionSource:
    func: object
    name: str
    file: str
    tree: ast.FunctionDef
    text: str
    globals: dict
    closure: dict

    def loc(self, node: ast.AST, call_site: Loc | None = None) -> Loc:
        return Loc(self.file, getattr(node, "lineno", self.tree.lineno),
                   getattr(node, "col_offset", 0), self.name, call_site)

    def lookup(self, name: str):
        """(found, value) for a free name: closure, then globals, then builtins."""
        if name in self.closure:
            return True, self.closure[name]
        if name in self.globals:
            return True, self.globals[name]
        builtins = self.globals.get("__builtins__", __builtins__)
        builtins = builtins if isinstance(builtins, dict) else vars(builtins)
        if name in builtins:
            return True, builtins[name]
        return False, None


@cache
def function_source(func) -> FunctionSource:
    try:
        lines, first_line = inspect.getsourcelines(func)
        file = inspect.getsourcefile(func) or inspect.getfile(func)
    except (OSError, TypeError) as exc:
        raise CompileError(
            f"cannot read the source of {getattr(func, '__qualname__', func)!r}: {exc}",
            hint="kernels must be defined in a file (not in a REPL or through exec)") from None
    raw = "".join(lines)
    text = textwrap.dedent(raw)
    indent = len(lines[0]) - len(lines[0].lstrip())
    module = ast.parse(text)
    tree = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    if isinstance(tree, ast.AsyncFunctionDef):
        raise CompileError("kernels cannot be async functions",
                           Loc(file, first_line, indent, func.__name__))
    for node in ast.walk(module):
        if hasattr(node, "lineno"):
            node.lineno += first_line - 1
            node.col_offset += indent
    closure = {}
    if func.__closure__:
        for name, cell in zip(func.__code__.co_freevars, func.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:  # an unassigned cell
                pass
    return FunctionSource(func, func.__name__, file, tree, raw, func.__globals__, closure)
