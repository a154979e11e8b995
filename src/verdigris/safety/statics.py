"""What a source file's top level binds, found without running the file: for `verdigris
check` (`scan`).

Takes: `ast` nodes of a parsed file. Gives:
- `inert(node)`: whether evaluating an expression can run no user code (literals, names,
  attribute reads, tuples, arithmetic, calls of the standard `math` module's functions);
- `possible_values(node, scope)` and `scope_values(body, outer, ...)`: the short literal
  lists a name or expression can take (constants, arithmetic of them, loops over literal
  tuples), for the constexprs and block shapes of launch sites;
- `scope_bindings(body, outer, ...)`: the expression each name bound once is bound to, for
  the element types of launch arguments (`elements`);
- `load_definitions(tree, filename, extra_names)`: a fresh namespace with the file's
  kernels, helpers and constants: only the imports they use, the `@...kernel`/`@...func`
  definitions and undecorated functions (plain helpers, which kernels inline) whose
  decorators, defaults and annotations are inert, and assignments of
  inert values run, statement by statement; no function body runs (imported modules do,
  as any import does, with the file's directory first on `sys.path`, as when Python runs
  the file); a statement that fails is skipped; calls of `math` functions run only where
  `math` is the standard module.
Also `decorator_name`, `is_definition`, `MAX_CONFIGS`.
"""
from __future__ import annotations

import __future__
import ast
import builtins
import itertools
import math
import operator
import sys
from pathlib import Path

MAX_CONFIGS = 16  # specializations checked per launch site when names loop over literals

BIN_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.Div: operator.truediv, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
UNARY_OPS = {ast.USub: operator.neg, ast.UAdd: operator.pos}
INERT_NODES = (ast.Constant, ast.Name, ast.Attribute, ast.Tuple, ast.List, ast.Dict,
               ast.BinOp, ast.UnaryOp, ast.expr_context, ast.operator, ast.unaryop)
# The standard `math` module's functions: pure, so constants computed with them (e.g.
# `LOG2_E = math.log2(math.e)`) are kept, provided `math` is that module when they run.
PURE_MATH = frozenset(name for name in dir(math) if callable(getattr(math, name)))


def _math_call(node) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
        and f.value.id == "math" and f.attr in PURE_MATH and not node.keywords


def inert(node) -> bool:
    """True if evaluating `node` can run no user code worth speaking of: literals, names,
    attribute reads, tuples, arithmetic and calls of `math` functions."""
    return node is None or all(isinstance(n, INERT_NODES) or _math_call(n) for n in ast.walk(node))


def possible_values(node, scope: dict) -> tuple | None:
    """The values `node` can take at run time, if that is a short literal list: constants,
    names in `scope` (name -> tuple of values), tuples and arithmetic of those."""
    if isinstance(node, ast.Constant):
        return (node.value,)
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        parts = [possible_values(e, scope) for e in node.elts]
        if any(p is None for p in parts):
            return None
        return tuple(itertools.islice(itertools.product(*parts), MAX_CONFIGS))
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY_OPS:
        inner = possible_values(node.operand, scope)
        return None if inner is None else _apply(UNARY_OPS[type(node.op)], inner)
    if isinstance(node, ast.BinOp) and type(node.op) in BIN_OPS:
        left, right = possible_values(node.left, scope), possible_values(node.right, scope)
        if left is None or right is None:
            return None
        return _apply(BIN_OPS[type(node.op)], *zip(*itertools.product(left, right)))
    return None


def _apply(op, *columns) -> tuple | None:
    try:
        return tuple(dict.fromkeys(op(*args) for args in zip(*columns)))
    except Exception:  # a literal that does not compute (1 // 0, "a" - 1): no value
        return None


def scope_nodes(body):
    """The nodes of one scope: everything in `body` except nested functions, classes and
    lambdas (their names are stores of this scope; their bodies are not)."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(reversed(getattr(node, "decorator_list", [])))
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def scope_values(body, outer: dict, params=(), defaults=None) -> dict:
    """Name -> possible values, for names of this scope bound exactly once, to something
    `possible_values` understands (an assignment, or a for loop over a literal tuple), and
    for parameters never rebound, their `defaults` (name -> values)."""
    stores = store_counts(body)
    definitions = []
    for node in scope_nodes(body):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            definitions.append((node.targets[0].id, node.value, False))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple) \
                and len(node.targets[0].elts) == len(node.value.elts):  # BX, BY = 16, 16
            definitions.extend((t.id, v, False) for t, v in zip(node.targets[0].elts, node.value.elts)
                               if isinstance(t, ast.Name))
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List)):
            definitions.append((node.target.id, node.iter, True))
    values = {k: v for k, v in outer.items() if k not in stores and k not in params}
    values.update((k, v) for k, v in (defaults or {}).items() if k not in stores)
    for name, value, loops in definitions:
        if stores.get(name) != 1:
            continue
        found = possible_values(value, values)
        if found is not None and loops:  # each element of the tuple, in turn
            found = tuple(dict.fromkeys(itertools.chain.from_iterable(found)))
        if found is not None:
            values[name] = found
    return values


def scope_bindings(body, outer: dict, params=()) -> dict:
    """Name -> the expression it is bound to, for names of this scope bound exactly once,
    by a plain assignment (`data = rng.random(n).astype(np.float16)`), and for the names of
    enclosing scopes (`outer`, the same mapping there) this scope leaves alone."""
    stores = store_counts(body)
    bindings = {k: v for k, v in outer.items() if k not in stores and k not in params}
    for node in scope_nodes(body):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and stores[node.targets[0].id] == 1:
            bindings[node.targets[0].id] = node.value
    return bindings


def store_counts(body) -> dict:
    """Name -> how many times this scope binds it (definitions and imports count twice, so
    that a name they bind is never taken as bound once to a value)."""
    stores: dict = {}
    for node in scope_nodes(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores[node.name] = stores.get(node.name, 0) + 2
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = (alias.asname or alias.name).partition(".")[0]
                stores[name] = stores.get(name, 0) + 2
    return stores


def decorator_name(node) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else \
        target.id if isinstance(target, ast.Name) else None


def is_definition(node, kind: str) -> bool:
    """A function decorated with `@...kernel` (kind "kernel") or `@...func` ("func")."""
    return isinstance(node, ast.FunctionDef) and any(
        decorator_name(d) == kind for d in node.decorator_list)


def _loadable_definition(node) -> bool:
    args = node.args
    annotations = [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs]
    return all(inert(d.func if isinstance(d, ast.Call) else d)
               and all(inert(a) for a in getattr(d, "args", []))
               and all(inert(k.value) for k in getattr(d, "keywords", []))
               for d in node.decorator_list) \
        and all(inert(e) for e in args.defaults + args.kw_defaults + annotations + [node.returns])


def _kept(node) -> bool:
    if is_definition(node, "kernel") or is_definition(node, "func"):
        return _loadable_definition(node)
    if isinstance(node, ast.FunctionDef) and not node.decorator_list:  # a plain helper
        return _loadable_definition(node)
    if isinstance(node, ast.Assign):  # `B = 256`, `BX, BY = 16, 16`
        return all(isinstance(n, ast.Name) for t in node.targets
                   for n in (t.elts if isinstance(t, ast.Tuple) else [t])) and inert(node.value)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.value is not None \
            and inert(node.value) and inert(node.annotation)
    return False


def _names_used(nodes) -> set:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _wanted_import(node, needed: set) -> bool:
    """An import that binds a name the kept statements or launch sites use (or `*`)."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "module", "") \
            == "__future__":  # applied as compiler flags instead
        return False
    return bool({(a.asname or a.name).partition(".")[0] for a in node.names} & (needed | {"*"}))


def load_definitions(tree: ast.Module, filename: str, extra_names: set,
                     failures: dict | None = None) -> dict:
    """A fresh namespace holding the file's kernels, helpers and constants (see the module
    docstring for what runs); `extra_names` are imports to keep besides those they use.
    `failures` (if given) gets each statement that raised -> its exception."""
    kept = [n for n in tree.body if _kept(n)]
    needed = _names_used(kept) | extra_names
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    chosen = [n for n in tree.body if n in kept or _wanted_import(n, needed)]
    namespace = {"__name__": "__verdigris_check__", "__file__": filename,
                 "__builtins__": builtins}
    sys.path.insert(0, str(Path(filename).resolve().parent))  # its sibling modules, as Python run on it
    try:
        for node in chosen:
            if namespace.get("math", math) is not math and any(map(_math_call, ast.walk(node))):
                continue  # `math` is something else in this file: its calls could run anything
            code = compile(ast.Module(body=[node], type_ignores=[]), filename, "exec",
                           flags=flags, dont_inherit=True)
            try:
                exec(code, namespace)
            except (Exception, SystemExit) as exc:  # an import that fails, a missing name
                if failures is not None:
                    failures[node] = exc
    finally:
        sys.path.pop(0)
    return namespace
