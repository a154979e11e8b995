"""Python source of a kernel or helper: its `ast`, its file coordinates, its names.

Takes: a Python function. Gives: `FunctionSource` with the `ast.FunctionDef` whose line and
column numbers are those of the user's file, the globals and closure values it can see
(read at each lookup: a rebound one is seen by the next build), and `loc(node)` for any node in it. Guarantees: the source is read and parsed once per
function (cached); a function whose source cannot be found gets a `CompileError` saying
why (defined in a REPL or with `exec`).
"""
from __future__ import annotations

import ast
import inspect
import linecache
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
    closure: dict  # free name -> its cell, read at each lookup (the value may change)

    def loc(self, node: ast.AST, call_site: Loc | None = None) -> Loc:
        return Loc(self.file, getattr(node, "lineno", self.tree.lineno),
                   getattr(node, "col_offset", 0), self.name, call_site)

    def lookup(self, name: str):
        """(found, value) for a free name: closure, then globals, then builtins."""
        cell = self.closure.get(name)
        if cell is not None:
            try:
                return True, cell.cell_contents
            except ValueError:  # an unassigned cell
                pass
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
        file = inspect.getsourcefile(func) or inspect.getfile(func)
        lines, first_line, module = _by_indentation(func, file) or _by_tokens(func)
    except (OSError, TypeError) as exc:
        raise CompileError(
            f"cannot read the source of {getattr(func, '__qualname__', func)!r}: {exc}",
            hint="kernels must be defined in a file (not in a REPL or through exec)") from None
    raw = "".join(lines)
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    if isinstance(tree, ast.AsyncFunctionDef):
        raise CompileError("kernels cannot be async functions",
                           Loc(file, first_line, indent, func.__name__))
    if indent:  # the text was dedented to parse: give nodes the file's columns back
        for node in ast.walk(module):
            if hasattr(node, "col_offset"):
                node.col_offset += indent
    closure = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
    return FunctionSource(func, func.__name__, file, tree, raw, func.__globals__, closure)


def _parse(lines: list, first_line: int):
    """The module of these lines (dedented), its line numbers those of the file."""
    return ast.parse("\n" * (first_line - 1) + textwrap.dedent("".join(lines)))


def _by_indentation(func, file: str):
    """(lines, first line, module) of `func`, found by indentation: from its first line
    (a decorator's, or the def's) and its def line through the lines indented deeper, blank
    or only a comment.
    ~10x faster than tokenizing (`inspect.getsourcelines`). None when that text does not
    parse as one function: a line not indented deeper inside a bracket, a string or after a
    backslash cut it short, so the tokenizer decides."""
    all_lines = linecache.getlines(file, func.__globals__)
    first = func.__code__.co_firstlineno
    if not 0 < first <= len(all_lines):
        return None
    head = all_lines[first - 1]
    depth = len(head) - len(head.lstrip())
    end, in_body = first - 1, False
    while end < len(all_lines):
        line = all_lines[end]
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and len(line) - len(line.lstrip()) <= depth:
            if in_body or not stripped.startswith(("@", "def ", "async def ")):
                break
            in_body = not stripped.startswith("@")  # decorators, then the def line
        end += 1
    lines = all_lines[first - 1:end]
    while lines and not lines[-1].strip():
        lines.pop()
    try:
        module = _parse(lines, first)
    except SyntaxError:
        return None
    if len(module.body) != 1 or not isinstance(module.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) \
            or module.body[0].name != func.__name__:
        return None
    return lines, first, module


def _by_tokens(func):
    lines, first_line = inspect.getsourcelines(func)
    return lines, first_line, _parse(lines, first_line)
