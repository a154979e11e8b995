"""Frontend: a Python kernel function + a specialization -> a typed `ir.Kernel`.

Takes: the user's function, its track ("simt" or "tile"), one spec per parameter (an
`ir.ArrayType` for arrays, a `DType` for scalars, `Static(value)` for constexprs; see
`signature`), and optionally the block shape, which folds `block_dim` to constants, and
the grid axes launched with one block (facts for the race checker), and the kernel options
`fma` and `min_blocks_per_sm`. Gives: `build_kernel(...)`, the typed IR, with
`reads`/`writes` inferred from the body. Guarantees: deterministic output for identical input (names come from a
counter that restarts with every build); unsupported Python is a `CompileError` at the
user's line, and so is a read of a variable that some path leaves unassigned (`assigned`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from .. import lang
from .. import types as T
from ..errors import CompileError
from ..ir import nodes as N
from ..ir import tiles as X
from . import assigned, locks
from .source import function_source
from . import bindings
from .bindings import Retry, VarBinding
from .translate import Translator, Unit
from .typing import Static, cast, static_value

MAX_RETRIES = 32


@dataclass(frozen=True)
class ParamInfo:
    name: str
    constexpr: bool
    default: object = inspect.Parameter.empty


def signature(fn) -> tuple[ParamInfo, ...]:
    """The kernel's parameters, and which are `vg.constexpr` (by annotation). Reads the
    source only to place an error or to resolve an annotation written as a string."""
    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            src = function_source(fn)
            raise CompileError("kernels cannot take *args or **kwargs", src.loc(src.tree))
        annotation = fn.__annotations__.get(p.name)
        if isinstance(annotation, str):  # under `from __future__ import annotations`
            annotation = _resolve_annotation(annotation, function_source(fn))
        params.append(ParamInfo(p.name, annotation is lang.constexpr
                                or isinstance(annotation, lang.constexpr), p.default))
    return tuple(params)


def _resolve_annotation(text: str, src):
    value = None
    for i, part in enumerate(text.split(".")):
        found, value = src.lookup(part) if i == 0 else (hasattr(value, part), getattr(value, part, None))
        if not found:
            return None
    return value


def build_kernel(fn, track: str, specs: dict, block: tuple | None = None,
                 unit_grid_axes: tuple | None = None, fma: bool = False,
                 multiples: dict | None = None,
                 min_blocks_per_sm: int | None = None, weak: frozenset = frozenset(),
                 narrow: frozenset = frozenset()) -> N.Kernel:
    """The typed IR of `fn` for `specs` (parameter -> ArrayType, DType or constexpr value);
    `multiples`: integer scalar parameter -> what its launch values are multiples of;
    `narrow`: the int64/uint64 scalar parameters whose launch values lie in int32's range;
    `weak`: the float64 parameters given Python floats (`ir.nodes.Expr.weak`)."""
    src = function_source(fn)
    types, forced, strong = {}, {}, set()
    for _ in range(MAX_RETRIES):
        unit = Unit(dict(types), block, track, forced=dict(forced), weak=set(weak), strong=set(strong))
        try:
            kernel = _translate(src, track, specs, unit)
        except Retry:
            types, forced, strong = unit.types, unit.forced, unit.strong
            continue
        kernel.unit_grid_axes = unit_grid_axes
        kernel.fma = fma
        kernel.min_blocks_per_sm = min_blocks_per_sm
        for p in kernel.params:
            p.multiple_of = (multiples or {}).get(p.name, 1)
            p.narrow = p.name in narrow
        return kernel
    raise CompileError("variable types did not settle", src.loc(src.tree))


def _translate(src, track: str, specs: dict, unit: Unit) -> N.Kernel:
    scope, params, entry = {}, [], []
    tr = Translator(unit, src, scope)
    unit.taken.update(specs)  # a parameter's name is its own; a rebinding takes another
    for arg in src.tree.args.posonlyargs + src.tree.args.args + src.tree.args.kwonlyargs:
        name, spec, loc = arg.arg, specs[arg.arg], src.loc(arg)
        if isinstance(spec, N.ArrayType):
            scope[name] = N.ArrayRef(loc, name, spec)
            params.append(N.Param(name, "array", loc, type=spec))
        elif isinstance(spec, T.DType):
            params.append(N.Param(name, "scalar", loc, dtype=spec))
            if name in tr.assigned:  # reassigned: a local copy, of the parameter's type
                site = bindings.site(loc)  # unless a merge joined it with a wider value
                key = unit.forced.get(site)
                if key is None:
                    key = f"{name}.local"
                    unit.types[key] = spec
                entry.append(N.Assign(loc, key, cast(N.Var(loc, name, spec), unit.types[key], loc)))
                scope[name] = VarBinding(key, frozenset({site}), loc)
            else:
                unit.types[name] = spec
                scope[name] = VarBinding(name, frozenset(), loc)
        else:
            scope[name] = static_value(spec.value if isinstance(spec, Static) else spec)
            params.append(N.Param(name, "constexpr", loc, value=scope[name].value))
            tr.bound_at[name, id(scope[name])] = loc  # where messages say it was bound
    tr.stmts.extend(entry)
    tr.body(src.tree.body)
    scalars = {p.name for p in params if p.kind == "scalar"}
    body = [N.Region(src.loc(src.tree), "kernel", tr.stmts)]
    assigned.check(body, {p.name for p in params if p.kind == "scalar"})
    reads, writes = accesses(body)
    _check_ticket_counters(body)
    locks.check_lock_arrays(body)
    # the variables this attempt assigned (an earlier attempt's may be gone)
    variables = {n.name if isinstance(n, N.Assign) else n.var for n in walk(body)
                 if isinstance(n, (N.Assign, N.For))}
    return N.Kernel(src.name, track, params,
                    {k: v for k, v in unit.types.items() if k in variables and k not in scalars},
                    body, src.loc(src.tree), frozenset(writes), frozenset(reads),
                    list(unit.unsafe), block=unit.block, assumptions=list(unit.assumptions),
                    cooperative=any(isinstance(n, N.Barrier) and n.scope == "grid"
                                    for n in walk(body)))


READ_NODES = (N.Load, X.TileLoad, X.Gather)
WRITE_NODES = (N.Store, N.Atomic, X.TileStore, X.Scatter, X.TileAtomic)


def accesses(stmts) -> tuple[set, set]:
    """Names of global arrays loaded from, and stored to (or updated atomically), in `stmts`."""
    reads, writes = set(), set()
    for node in walk(stmts):
        if isinstance(node, READ_NODES + WRITE_NODES) and node.array.type.space == "global":
            (reads if isinstance(node, READ_NODES) else writes).add(node.array.name)
    return reads, writes


def _check_ticket_counters(body) -> None:
    """Tickets are distinct only while the counter does not wrap around: every write of it
    must be an atomic add of 1, as the ticket's own is (each returns a value no other add
    returns, and fewer than 2**32 of them, which the proofs assume, cannot wrap a 32-bit
    counter; 5 adds of 2**30 would)."""
    nodes = list(walk(body))
    counters = {n.array.type.ticket_of for n in nodes if isinstance(n, N.LocalAlloc)} - {None}
    if not counters:
        return
    for node in nodes:
        if isinstance(node, WRITE_NODES) and node.array.name in counters and not (
                isinstance(node, N.Atomic) and node.op == "add" and isinstance(node.value, N.Const)
                and node.value.value == 1):
            raise CompileError(f"'{node.array.name}' is the counter of a simt.block_ticket(), so it "
                               "may change only by atomic_add of 1: this write "
                               "could make two blocks' tickets equal", node.loc,
                               hint="keep the counter for tickets alone; use another array for this")


def walk(stmts):
    """Every statement and expression node under `stmts`, depth first."""
    stack = list(reversed(stmts))
    while stack:
        node = stack.pop()
        yield node
        for value in vars(node).values():
            if isinstance(value, (N.Expr, N.Stmt)):
                stack.append(value)
            elif isinstance(value, (list, tuple)):
                stack.extend(v for v in reversed(value) if isinstance(v, (N.Expr, N.Stmt)))
