"""Launch sites of `verdigris check`: where a file launches a kernel, read without running it.

Takes: a parsed module (`ast`) and the namespace `statics.load_definitions` built of its
inert top level. Gives: `launch_sites(tree, namespace, file) -> [LaunchSite]` (every
`k[grid, block](...)` at any depth, lambdas and helpers' parameters included, whose kernel
the namespace names), each with the literal configurations it launches (`configs`: block,
grid and constexprs where literal, else unknown), the element types its arguments state
(`element_types`), the 64-bit scalars it passes beyond int32's range (`wide_scalars`);
`default_configs(kernel, ...)` for kernels no site launches literally, `candidate_launches`
and `root_name` (the calls shaped like a launch, and the names they launch through), and
`autotuned(kernel)` (an autotuned kernel as the kernel it times, with its configs). Guarantees: nothing
of the file runs here; a value this module cannot read is unknown, never guessed.
"""
from __future__ import annotations

import ast
import inspect
import itertools
from dataclasses import dataclass

from ..errors import Loc
from ..ir import nodes as N
from .elements import element_dtype
from .statics import MAX_CONFIGS, possible_values, scope_bindings, scope_nodes, scope_values


@dataclass(frozen=True)
class LaunchSite:
    call: ast.Call
    kernel: object  # the KernelFunction (of a `@vg.autotune`d kernel: the one it times)
    tuned: tuple  # the autotune configs (dicts of constexpr values), or ()
    scope: dict  # name -> possible values, where the launch is written
    bindings: dict  # name -> the expression it is bound to once, where the launch is written
    file: str

    def loc(self, node) -> Loc:
        return Loc(self.file, node.lineno, node.col_offset)

    def arguments(self) -> dict:
        """Parameter name -> argument expression, for the arguments that can be placed."""
        names = [p.name for p in self.kernel.params]
        bound = {}
        for name, arg in zip(names, self.call.args):
            if isinstance(arg, ast.Starred):
                break
            bound[name] = arg
        bound.update({k.arg: k.value for k in self.call.keywords if k.arg in names})
        return bound

    def element_types(self) -> dict:
        """Parameter name -> element dtype, for the array arguments whose source states it."""
        found = {name: element_dtype(arg, self.bindings) for name, arg in self.arguments().items()}
        return {name: dtype for name, dtype in found.items() if dtype is not None}

    def configs(self) -> list:
        """((block, grid), constexpr values, element types, wide scalars) specializations
        this launch can have, block and grid where they are literal (a grid of one block is
        proven as one); [] if a constexpr has neither a literal value nor a default."""
        func = self.call.func
        if isinstance(func, ast.Call):  # `k.forall(n, block=b)(...)`: blocks of b (256)
            given = ([k.value for k in func.keywords if k.arg == "block"] + func.args[1:2])[:1]
            shapes = possible_values(given[0], self.scope) if given else (256,)
            blocks = [b for b in map(_launch_dims, shapes or ()) if b is not None]
            return self._with(blocks, [])
        config = func.slice
        blocks = []
        grid = config
        if self.kernel.track == "simt" and isinstance(config, ast.Tuple) and len(config.elts) == 2:
            shapes = possible_values(config.elts[1], self.scope) or ()
            blocks = [b for b in map(_launch_dims, shapes) if b is not None]
            grid = config.elts[0]
        grids = [g for g in map(_launch_dims, possible_values(grid, self.scope) or ())
                 if g is not None]
        return self._with(blocks, grids)

    def _with(self, blocks: list, grids: list) -> list:
        """`configs` of these literal blocks and grids (none: unknown)."""
        arguments = self.arguments()
        choices = []
        for p in self.kernel.params:
            if not p.constexpr:
                continue
            tuned = tuple(dict.fromkeys(c[p.name] for c in self.tuned if p.name in c))
            values = possible_values(arguments[p.name], self.scope) if p.name in arguments \
                else tuned or (None if p.default is inspect.Parameter.empty else (p.default,))
            if values is None:
                return []
            choices.append([(p.name, v) for v in values])
        elements, wide = self.element_types(), self.wide_scalars()
        return [((b, g), dict(c), elements, wide) for b, g, c in itertools.islice(
            itertools.product(blocks or [None], grids or [None], itertools.product(*choices)),
            MAX_CONFIGS)]

    def wide_scalars(self) -> frozenset:
        """The scalar parameters whose literal arguments include an integer beyond int32's
        range: a launch with it runs the kernel's wide variant (`ir.nodes.Param.narrow`
        False), which check then checks in place of the narrow one."""
        arguments = self.arguments()
        return frozenset(p.name for p in self.kernel.params if not p.constexpr
                         and p.name in arguments and any(
                             type(v) is int and not N.NARROW_RANGE[0] <= v <= N.NARROW_RANGE[1]
                             for v in possible_values(arguments[p.name], self.scope) or ()))


def default_configs(kernel, elements: dict | None = None, tuned: tuple = ()) -> list:
    """The specializations without launch information: no block or grid, the constexprs'
    defaults (over which each autotune config of `tuned` sets its own), and `elements`
    (parameter -> element dtype) or else the default element types; none where a
    constexpr has neither a default nor a config's value."""
    defaults = {p.name: p.default for p in kernel.params if p.constexpr}
    choices = [{**defaults, **c} for c in tuned or ({},)]
    return [((None, None), values, elements or {}, frozenset()) for values in choices
            if inspect.Parameter.empty not in values.values()]


def _launch_dims(value) -> tuple | None:
    """A block or grid shape as a launch takes it (an int or 1 to 3 positive ints), padded
    to three; None for anything else."""
    dims = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(dims) <= 3 or not all(type(d) is int and d > 0 for d in dims):
        return None
    return dims + (1,) * (3 - len(dims))


def _resolve(node, namespace: dict):
    """The object a name or a module attribute path denotes in `namespace`, or None."""
    import types

    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, namespace)
        return getattr(owner, node.attr, None) if isinstance(owner, types.ModuleType) else None
    return None


def root_name(node) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def candidate_launches(tree):
    """Calls written `something[...](...)` or `something.forall(...)(...)`, the shapes of
    every launch."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and launched_kernel(n) is not None
            and root_name(launched_kernel(n))]


def launched_kernel(call: ast.Call):
    """The expression of the kernel a call launches (`k` of `k[grid, block](...)` or of
    `k.forall(n)(...)`), or None where the call is no launch's shape."""
    if isinstance(call.func, ast.Subscript):
        return call.func.value
    if isinstance(call.func, ast.Call) and isinstance(call.func.func, ast.Attribute) \
            and call.func.func.attr == "forall":
        return call.func.func.value
    return None


def autotuned(kernel) -> tuple:
    """(the kernel, its autotune configs): a `@vg.autotune`d kernel is checked as the kernel
    it times, with each config's constexprs."""
    return getattr(kernel, "tuned_kernel", kernel), tuple(getattr(kernel, "configs", ()))


def _default_values(args: ast.arguments, scope: dict) -> dict:
    """Parameter name -> (its literal default,): the value a launch inside the function
    sees when the caller leaves the parameter out (callers are not followed)."""
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    found = {a.arg: possible_values(d, scope) for a, d in pairs}
    return {name: value for name, value in found.items() if value is not None}


def launch_sites(tree: ast.Module, namespace: dict, file: str) -> list:
    """Every launch of a kernel in the file: written with the kernel's name (at any depth,
    lambdas included), or with a parameter of a function that the file calls with a kernel
    there (`def launch(k, x): k[grid, block](x)` and `launch(pairs, x)`)."""
    sites = []
    through: list = []  # (function name, parameter, its position, the launch, values, bindings)

    def visit(body, outer: dict, function=None, positional=(), params=(), defaults=None):
        values = scope_values(body, outer[0], params, defaults or {})
        bindings = scope_bindings(body, outer[1], params)
        for node in scope_nodes(body):
            launched = launched_kernel(node) if isinstance(node, ast.Call) else None
            if launched is not None:
                kernel = _resolve(launched, namespace)
                if getattr(kernel, "__vg_kernel__", False):
                    sites.append(LaunchSite(node, *autotuned(kernel), values, bindings, file))
                elif isinstance(launched, ast.Name) and launched.id in params:
                    name = launched.id
                    at = positional.index(name) if name in positional else None
                    through.append((function, name, at, node, values, bindings))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                positional = [x.arg for x in a.posonlyargs + a.args]
                visit(node.body if isinstance(node.body, list) else [node.body], (values, bindings),
                      getattr(node, "name", None), positional,
                      set(positional) | {x.arg for x in a.kwonlyargs}
                      | {x.arg for x in (a.vararg, a.kwarg) if x}, _default_values(a, values))
            elif isinstance(node, ast.ClassDef):
                visit(node.body, (values, bindings))

    visit(tree.body, ({}, {}))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    for function, name, at, launch, values, bindings in through:
        for call in (c for c in calls if c.func.id == function):
            given = [k.value for k in call.keywords if k.arg == name] \
                or (call.args[at:at + 1] if at is not None else [])
            kernel = _resolve(given[0], namespace) if given else None
            if getattr(kernel, "__vg_kernel__", False):
                sites.append(LaunchSite(launch, *autotuned(kernel), values, bindings, file))
    return sorted(sites, key=lambda s: (s.call.lineno, s.call.col_offset))
