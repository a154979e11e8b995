"""Text form of the typed IR, for `verdigris compile --emit ir` and for cache keys.

Takes: an `ir.Kernel`. Gives: `format_kernel(kernel)`, a deterministic, readable listing
(types on every expression, the user's line after each statement). Guarantees: two
kernels print the same iff they have the same parameters, locals and body.
"""
from __future__ import annotations

from . import nodes as N
from . import tiles as X
from .locks import Locked
from ..simt import warp_size

_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
            "pow": "**", "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_UNARY = {"neg": "-", "not": "not ", "invert": "~"}


def _tile(e) -> str:
    """`op:dtype[shape]`, the head of a tile expression."""
    return f"{e.dtype.short}[{', '.join(map(str, e.shape))}]"


def _list(exprs) -> str:
    return ", ".join(map(format_expr, exprs))


_TILE_EXPRS = {
    X.TileVar: lambda e: e.name,
    X.TileMap: lambda e: f"{e.op}:{_tile(e)}({_list(e.args)})",
    X.Splat: lambda e: f"splat:{_tile(e)}({format_expr(e.value)})",
    X.Broadcast: lambda e: f"broadcast:{_tile(e)}({format_expr(e.value)})",
    X.Arange: lambda e: f"arange:{_tile(e)}",
    X.TileLoad: lambda e: f"load:{_tile(e)}({e.array.name}@[{_list(e.index)}], "
                          f"padding={format_expr(e.padding)})",
    X.Gather: lambda e: f"gather:{_tile(e)}({e.array.name}[{_list(e.indices)}], "
                        f"padding={format_expr(e.padding)})",
    X.TileReduce: lambda e: f"{e.op}:{_tile(e)}({format_expr(e.value)}, axis={e.axis})",
    X.TileScan: lambda e: f"{e.op}:{_tile(e)}({format_expr(e.value)}, axis={e.axis}"
                          + (", reverse)" if e.reverse else ")"),
    X.Flip: lambda e: f"flip{e.axes}:{_tile(e)}({format_expr(e.value)})",
    X.TileSort: lambda e: f"{e.op}{'.descending' * e.descending}:{_tile(e)}({format_expr(e.value)}, "
                          f"axis={e.axis})",
    X.Reshape: lambda e: f"reshape:{_tile(e)}({format_expr(e.value)})",
    X.Permute: lambda e: f"permute{e.perm}:{_tile(e)}({format_expr(e.value)})",
    X.TileSlice: lambda e: f"slice{e.starts}{e.steps}:{_tile(e)}({format_expr(e.value)})",
    X.Cat: lambda e: f"cat.{e.axis}:{_tile(e)}({_list(e.parts)})",
    X.Rand: lambda e: f"rand:{_tile(e)}({format_expr(e.seed)}, {format_expr(e.offsets)})",
    X.TileDot: lambda e: f"dot.{e.precision}:{_tile(e)}({format_expr(e.a)}, {format_expr(e.b)}"
                         + (f", acc={format_expr(e.acc)})" if e.acc is not None else ")"),
}

_TILE_STMTS = {  # `@[...]` is a tile index, `[...]` element index tiles
    X.TileStore: lambda s: f"{s.array.name}@[{_list(s.index)}] = {format_expr(s.value)}",
    X.TileAtomic: lambda s: f"{s.array.name}@[{_list(s.index)}] atomic.{s.op}= {format_expr(s.value)}",
    X.Scatter: lambda s: f"{s.array.name}[{_list(s.indices)}] "
                         f"{f'atomic.{s.atomic}' if s.atomic else ''}= "
                         f"{format_expr(s.value)}"
                         + (f" where {format_expr(s.mask)}" if s.mask is not None else "")
                         + (" skipping out of bounds" if s.skip_out_of_bounds else ""),
}


def format_expr(e: N.Expr) -> str:
    tile = _TILE_EXPRS.get(type(e))
    if tile is not None:
        return tile(e)
    match e:
        case N.Const():
            return f"{e.value!r}:{e.dtype.short}"
        case N.Var():
            return e.name
        case N.ArrayRef():
            return e.name
        case N.Special():
            return f"{e.kind}.{'xyz'[e.axis]}"
        case N.Unary():
            return f"{_UNARY[e.op]}{format_expr(e.operand)}"
        case N.Binary() | N.Compare():
            return f"({format_expr(e.lhs)} {_SYMBOLS[e.op]} {format_expr(e.rhs)})"
        case N.Logical():
            return f"({format_expr(e.lhs)} {e.op} {format_expr(e.rhs)})"
        case N.Select():
            return f"({format_expr(e.a)} if {format_expr(e.cond)} else {format_expr(e.b)})"
        case N.Cast():
            return f"{e.dtype.name}({format_expr(e.value)})"
        case N.Load():
            return f"{e.array.name}[{', '.join(map(format_expr, e.indices))}]"
        case N.Shape():
            return f"{e.array.name}.shape[{e.axis}]"
        case N.Atomic():
            operands = ([e.compare] if e.compare is not None else []) + [e.value]
            index = ", ".join(map(format_expr, e.indices))
            return f"atomic_{e.op}({e.array.name}[{index}], {', '.join(map(format_expr, operands))})"
        case N.MathCall():
            return f"{e.func}:{e.dtype.short}({', '.join(map(format_expr, e.args))})"
        case N.WarpOp():
            operands = [format_expr(x) for x in (e.value, e.lane) if x is not None]
            width = [f"width={e.width}"] if e.width != warp_size else []
            return f"{e.op}:{e.dtype.short}({', '.join(operands + width)})"
    raise TypeError(f"cannot print {type(e).__name__}")


def _stmt_lines(s: N.Stmt, indent: str) -> list[str]:
    at = f"    # line {s.loc.line}"
    inner = indent + "  "
    tile = _TILE_STMTS.get(type(s))
    if tile is not None:
        return [f"{indent}{tile(s)}{at}"]
    match s:
        case N.Assign():
            return [f"{indent}{s.name} = {format_expr(s.value)}{at}"]
        case N.Store():
            idx = ", ".join(map(format_expr, s.indices))
            return [f"{indent}{s.array.name}[{idx}] = {format_expr(s.value)}{at}"]
        case N.If():
            out = [f"{indent}if {format_expr(s.cond)}:{at}"] + _block(s.then, inner)
            return out + ([f"{indent}else:"] + _block(s.orelse, inner) if s.orelse else [])
        case N.For():
            bounds = ", ".join(format_expr(b) for b in (s.start, s.stop, s.step))
            return [f"{indent}for {s.var} in range({bounds}):{at}"] + _block(s.body, inner)
        case N.While():
            return [f"{indent}while {format_expr(s.cond)}:{at}"] + _block(s.body, inner)
        case N.Break() | N.Continue():
            return [f"{indent}{type(s).__name__.lower()}{at}"]
        case N.Region():
            return [f"{indent}region {s.label}:{at}"] + _block(s.body, inner)
        case N.Exit():
            return [f"{indent}exit {s.label}{at}"]
        case N.LocalAlloc():
            kind = s.array.type if s.array.type.shape is not None \
                else f"{s.array.type.space} {s.array.dtype.name}[dynamic]"
            return [f"{indent}{s.array.name} = alloc {kind}{at}"]
        case N.Barrier():
            return [f"{indent}{N.BARRIER_NAMES[s.scope]}(){at}"]
        case N.Fence():
            return [f"{indent}fence.{s.scope}(){at}"]
        case N.Print():
            parts = ", ".join(repr(p) if isinstance(p, str) else format_expr(p) for p in s.parts)
            return [f"{indent}print({parts}, sep={s.sep!r}, end={s.end!r}){at}"]
        case N.Unsafe():
            return [f"{indent}unsafe:{at}"] + _block(s.body, inner)
        case Locked():
            index = ", ".join(format_expr(i) for i in s.indices)
            return [f"{indent}lock {s.locks.name}[{index}]:{at}"] + _block(s.body, inner)
    raise TypeError(f"cannot print {type(s).__name__}")


def _block(stmts, indent: str) -> list[str]:
    return [line for s in stmts for line in _stmt_lines(s, indent)] or [f"{indent}pass"]


def _type_name(t) -> str:
    return str(t) if isinstance(t, X.TileType) else t.name


def format_kernel(k: N.Kernel) -> str:
    params = []
    for p in k.params:
        kind = str(p.type) if p.kind == "array" else p.dtype.name if p.kind == "scalar" \
            else f"constexpr={p.value!r}"
        if p.multiple_of > 1:
            kind += f" multiple_of={p.multiple_of}"
        if p.narrow:
            kind += " narrow"
        params.append(f"{p.name}: {kind}")
    block = f" block={k.block}" if k.block is not None else ""
    if k.unit_grid_axes is not None:
        block += f" unit_grid_axes={k.unit_grid_axes}"
    if k.fma:
        block += " fma=True"
    if k.min_blocks_per_sm:
        block += f" min_blocks_per_sm={k.min_blocks_per_sm}"
    lines = [f"{k.track} kernel {k.name}({', '.join(params)}){block}",
             f"  reads {sorted(k.reads)} writes {sorted(k.writes)}",
             "  locals " + ", ".join(f"{n}: {_type_name(t)}" for n, t in sorted(k.locals.items()))]
    lines += [f"  assume {format_expr(a.cond)}" for a in k.assumptions]
    return "\n".join(lines + _block(k.body, "  ")) + "\n"
