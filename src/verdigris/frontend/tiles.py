"""Tile typing: shapes, NumPy broadcasting, and the intrinsics of `verdigris.tile`.

Takes: operands the translator computes (tile expressions of `ir.tiles`, scalar `ir.Expr`s,
`Static` values) and the calls of `tile.*` intrinsics. Gives:
- `elementwise(build, operands, loc)`: the scalar typing rules of `typing` (promotion, weak
  literals, casts, floor division, `**` by a constant) run on tiles: `build` makes the
  scalar expression over stand-ins of the operands, which is then lifted to `TileMap`s,
  with `Broadcast`/`Splat` bringing every operand to the result shape. `binary`, `compare`
  and `unary` are the operators built this way.
- `HANDLERS`: intrinsic name -> IR builder (`intrinsic` registers one, with the argument
  helpers below: `constant_shape`, `axis_of`, `tile_operand`, ...); the intrinsics that
  compute tile values (`tile.sum`, `tile.cumsum`, `tile.flip`, ...) and the attributes of
  tiles register from `tile_values`, those that touch arrays from `tile_memory`, the matrix
  products from `tile_products`; subscripts are `tile_pieces`'.
- `tile_var`/`assign_type`: reads of tile variables and the one-type rule for them.
Guarantees: every tile expression returned satisfies `ir.tiles`' contract; shape errors
are `CompileError`s at the user's line that name the shapes involved. A tfloat32 tile
reaches only `astype` and the intrinsics registered `moves_tfloat32` (the moves, products
and stores, which convert it); elementwise operations and other intrinsics refuse it. A read of a tile
variable is a plain `ir.Var` that carries the variable's `shape` as an attribute, so every
tile value the frontend handles has `dtype` and `shape`.
"""
from __future__ import annotations

import dataclasses
import operator
from math import prod

import numpy as np

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..ir import tiles as X
from ..ir.tiles import TileType, TileVar
from . import typing as typing_
from .typing import Static, cast, is_number, typed

# ----------------------------------------------------------------------------- shapes


def shape_of(v) -> tuple:
    """A value's tile shape; () for scalars, static values and arrays."""
    return tuple(getattr(v, "shape", ())) if isinstance(v, N.Expr) else ()


def is_tile(v) -> bool:
    return bool(shape_of(v))


def show(shape) -> str:
    return str(tuple(shape))


def tile_var(loc: Loc, key: str, ttype: TileType) -> TileVar:
    """A read of tile variable `key`."""
    return TileVar(loc, key, ttype.dtype, ttype.shape)


def broadcast_shape(shapes, loc: Loc) -> tuple:
    """NumPy's broadcast of `shapes`: trailing axes aligned, size-1 axes stretch."""
    result: tuple = ()
    for shape in shapes:
        rank = max(len(result), len(shape))
        a = (1,) * (rank - len(result)) + tuple(result)
        b = (1,) * (rank - len(shape)) + tuple(shape)
        if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
            raise CompileError(f"tiles of shapes {show(result)} and {show(shape)} do not broadcast "
                               "together", loc, hint="trailing axes must be equal or 1 (NumPy "
                               "rules); give one side a size-1 axis, e.g. t.reshape((n, 1))")
        result = tuple(max(x, y) for x, y in zip(a, b))
    return result


def broadcast_to(tile: N.Expr, shape: tuple, loc: Loc) -> N.Expr:
    if shape_of(tile) == shape:
        return tile
    if len(tile.shape) < len(shape):  # leading size-1 axes first: Broadcast keeps the rank
        tile = X.Reshape(loc, tile, tile.dtype, (1,) * (len(shape) - len(tile.shape)) + tile.shape)
        if tile.shape == shape:
            return tile
    return X.Broadcast(loc, tile, tile.dtype, shape)


# ----------------------------------------------------------------------------- elementwise

_STAND_IN = "\0operand"  # names no user variable can have

_AS_TILE_OP = {  # scalar node -> (elementwise op name, operands)
    N.Unary: lambda e: (e.op, (e.operand,)),
    N.Binary: lambda e: (e.op, (e.lhs, e.rhs)),
    N.Compare: lambda e: (e.op, (e.lhs, e.rhs)),
    N.MathCall: lambda e: (e.func, e.args),
    N.Cast: lambda e: ("cast", (e.value,)),
    N.Select: lambda e: ("where", (e.cond, e.a, e.b)),
}


def refuse_tfloat32(values, what: str, loc: Loc) -> None:
    """Refuse a tfloat32 tile among `values` (or in a tuple among them), operands of `what`."""
    for v in values:
        items = v.value if isinstance(v, Static) and isinstance(v.value, tuple) else (v,)
        if any(is_tile(item) and item.dtype is T.tfloat32 for item in items):
            raise CompileError(f"{what} does not take tfloat32 tiles: {typing_.TFLOAT32_USES}",
                               loc, hint="convert it back first, exactly: t.astype(vg.float32)")


def elementwise(build, operands, loc: Loc):
    """`build(*operands)` (scalar typing), applied element by element when any is a tile."""
    refuse_tfloat32(operands, "an elementwise operation (arithmetic, comparison, math, "
                              "tile.where)", loc)
    shapes = [shape_of(v) for v in operands if is_tile(v)]
    if not shapes:
        return build(*operands)
    shape = broadcast_shape(shapes, loc)
    leaves: dict = {}
    stand_ins = []
    for v in operands:
        if isinstance(v, N.Expr) and not isinstance(v, N.ArrayRef):
            name = f"{_STAND_IN}{len(leaves)}"
            leaves[name] = v
            stand_in = N.Var(loc, name, v.dtype)
            stand_in.weak = v.weak  # a Python float meets a tile as a literal does
            v = stand_in
        stand_ins.append(v)
    return broadcast_to(_lift(build(*stand_ins), leaves, loc), shape, loc)


def _lift(e: N.Expr, leaves: dict, loc: Loc) -> N.Expr:
    """The scalar expression `e` over stand-ins, on the operands: each op at the smallest
    shape its tile operands give (casts before stretching); scalar parts stay scalar."""
    if isinstance(e, N.Var) and e.name in leaves:
        return leaves[e.name]
    if not _has_tile(e, leaves):
        return _substitute(e, leaves)
    op, args = _AS_TILE_OP[type(e)](e)
    args = [_lift(a, leaves, loc) for a in args]
    shape = broadcast_shape([shape_of(a) for a in args if is_tile(a)], loc)
    args = tuple(broadcast_to(a, shape, loc) if is_tile(a) else X.Splat(a.loc, a, a.dtype, shape)
                 for a in args)
    return X.TileMap(e.loc, op, args, e.dtype, shape)


def _has_tile(e: N.Expr, leaves: dict) -> bool:
    if isinstance(e, N.Var) and e.name in leaves:
        return is_tile(leaves[e.name])
    return any(_has_tile(c, leaves) for c in N.operands(e))


def _substitute(e: N.Expr, leaves: dict) -> N.Expr:
    """`e` with the stand-ins of scalar operands replaced by the operands."""
    if isinstance(e, N.Var) and e.name in leaves:
        return leaves[e.name]
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, N.Expr):
            changes[f.name] = _substitute(value, leaves)
        elif isinstance(value, tuple) and any(isinstance(v, N.Expr) for v in value):
            changes[f.name] = tuple(_substitute(v, leaves) if isinstance(v, N.Expr) else v
                                    for v in value)
    return dataclasses.replace(e, **changes) if changes else e


def binary(op: str, a, b, loc: Loc):
    return elementwise(lambda x, y: typing_.binary(op, x, y, loc), [a, b], loc)


def compare(op: str, a, b, loc: Loc):
    return elementwise(lambda x, y: typing_.compare(op, x, y, loc), [a, b], loc)


def unary(op: str, v, loc: Loc):
    if op == "invert" and is_tile(v) and v.dtype.is_bool:
        op = "not"  # `~mask` negates a bool tile, as in NumPy
    return elementwise(lambda x: typing_.unary(op, x, loc), [v], loc)


def one_truth_value(what: str, values, loc: Loc) -> None:
    """Refuse a tile among `values`, operands of `what` (`and`, `or`, a chained comparison),
    which takes one truth value per operand and decides on it (as NumPy refuses them too)."""
    tile = next((v for v in values if is_tile(v)), None)
    if tile is not None:
        raise CompileError(f"{what} cannot work elementwise: it takes one truth value, and a "
                           f"tile of shape {show(tile.shape)} has one per element", loc,
                           hint="combine bool tiles elementwise with & (and), | (or), ~ (not), "
                                "each comparison in parentheses (& binds tighter than <): "
                                "(t > 0) & (t < 1)")


def astype(v, dtype: T.DType, loc: Loc):
    """`v` converted to `dtype`. tfloat32 converts through float32, the one dtype the IR
    converts it from (rounding) and to (exactly)."""
    if is_tile(v) and v.dtype is dtype:
        return v
    if is_tile(v) and v.dtype is T.tfloat32:
        return astype(X.TileMap(loc, "cast", (v,), T.float32, v.shape), dtype, loc)
    if dtype is T.tfloat32 and is_tile(v):
        v = astype(v, T.float32, loc)
        return X.TileMap(loc, "cast", (v,), dtype, v.shape)
    return elementwise(lambda x: cast(typed(x, loc), dtype, loc), [v], loc)


def to_shape(v, dtype: T.DType, shape: tuple, loc: Loc) -> N.Expr:
    """`v` (a tile, scalar or number) as a tile of `dtype` and `shape`."""
    if is_tile(v):
        return broadcast_to(astype(v, dtype, loc), shape, loc)
    return X.Splat(loc, typed(v, loc, dtype), dtype, shape)


# ----------------------------------------------------------------------------- variables


def assign_type(types: dict, key: str, value, loc: Loc):
    """Record (first assignment) or check the type of variable `key` receiving `value`, of
    which one side is a tile; gives the value to assign (cast up to the variable's dtype)."""
    name = key.rpartition(".")[2].partition("#")[0]
    old = types.get(key)
    new = TileType(value.dtype, shape_of(value)) if is_tile(value) else typed(value, loc).dtype
    if old is None:
        types[key] = new
        return value
    if not (isinstance(old, TileType) and isinstance(new, TileType)):
        raise CompileError(f"variable {name!r} holds {_kind(old)} elsewhere but {_kind(new)} "
                           "here", loc, hint="a variable keeps one kind of value; use another "
                                             "name, or tile.full(shape, value, dtype)")
    if old.shape != new.shape:
        raise CompileError(f"variable {name!r} holds a tile of shape {show(old.shape)} elsewhere "
                           f"but of shape {show(new.shape)} here: a tile variable keeps one shape",
                           loc, hint="use another variable name, or reshape the tile")
    if old.dtype is not new.dtype:
        try:
            joined = T.promote(old.dtype, new.dtype)
        except TypeError:
            joined = None
        if joined is not old.dtype:
            raise CompileError(f"variable {name!r} holds {_kind(old)} elsewhere but {_kind(new)} "
                               "here: a tile variable keeps one dtype", loc,
                               hint=f"convert explicitly: (...).astype(vg.{old.dtype.name}), or "
                                    f"start it as vg.{new.dtype.name}")
        value = astype(value, old.dtype, loc)
    return value


def _kind(t) -> str:
    if isinstance(t, TileType):
        return f"a {t.dtype.name} tile of shape {show(t.shape)}"
    return f"a {t.name} scalar"


# ----------------------------------------------------------------------------- arguments

HANDLERS: dict = {}


def intrinsic(name: str, *params, moves_tfloat32: bool = False):
    """Register `fn(tr, loc, *arguments)` as `tile.<name>`; `params` are names, or
    (name, default) pairs, matched against the call's positional and keyword arguments.
    Only the intrinsics that multiply or move tiles (`moves_tfloat32`) take tfloat32 ones."""
    params = tuple((p, _REQUIRED) if isinstance(p, str) else p for p in params)

    def register(fn):
        def handler(tr, args, kwargs, loc):
            arguments = _arguments(name, params, args, kwargs, loc)
            if not moves_tfloat32:
                refuse_tfloat32(arguments, f"tile.{name}()", loc)
            return fn(tr, loc, *arguments)

        HANDLERS[f"tile.{name}"] = handler
        return fn

    return register


_REQUIRED = object()


def _arguments(name: str, params: tuple, args, kwargs, loc: Loc) -> list:
    names = [p for p, _ in params]
    usage = f"tile.{name}({', '.join(names)})"
    if len(args) > len(params):
        raise CompileError(f"{usage} takes {len(params)} arguments, {len(args)} given", loc)
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise CompileError(f"{usage} got an unexpected or repeated argument {key!r}", loc)
        bound[key] = value
    missing = [p for p, default in params if p not in bound and default is _REQUIRED]
    if missing:
        raise CompileError(f"{usage} is missing its argument {missing[0]!r}", loc)
    return [bound.get(p, default) for p, default in params]


_KNOWN_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
              "floordiv": operator.floordiv, "mod": operator.mod, "lshift": operator.lshift,
              "rshift": operator.rshift}


def known_int(e):
    """The int an integer expression of compile-time ints computes (`h * 2` where `h = B //
    2` was bound once), or None; None too where a step leaves its dtype's range (the IR
    wraps there, so Python's exact value would not be what the kernel computes) or shifts
    by a negative count."""
    if isinstance(e, N.Var):
        value = e.known
    elif isinstance(e, N.Const):
        value = e.value if type(e.value) is int else None
    elif isinstance(e, N.Cast) and e.dtype.is_int:
        value = known_int(e.value)
    elif isinstance(e, N.Binary) and e.op in _KNOWN_OPS and e.dtype.is_int:
        lhs, rhs = known_int(e.lhs), known_int(e.rhs)
        if lhs is None or rhs is None or rhs == 0 and e.op in ("floordiv", "mod") \
                or rhs < 0 and e.op in ("lshift", "rshift"):
            return None
        value = _KNOWN_OPS[e.op](lhs, rhs)
    else:
        return None
    if value is None or not e.dtype.is_int:
        return None
    held = np.iinfo(e.dtype.np)
    return value if held.min <= value <= held.max else None


def compile_time(v) -> Static | None:
    """`v` as the compile-time value it is, or None: a `Static` itself, a name bound once
    to a compile-time int or bool (`Var.known`), or a scalar integer expression of
    compile-time ints (`known_int`: exact in every step's dtype). A value computed only
    from constexprs and literals is itself a compile-time constant (`HALF = B // 2`,
    `EVEN = N % B == 0`)."""
    if isinstance(v, Static):
        return v
    if not isinstance(v, N.Expr) or is_tile(v):
        return None
    if isinstance(v, N.Var) and v.known is not None:
        return Static(v.known)
    if isinstance(v, N.Compare):  # `HALF > 4`: exact operands compare as the IR does
        lhs, rhs = known_int(v.lhs), known_int(v.rhs)
        return None if lhs is None or rhs is None else Static(getattr(operator, v.op)(lhs, rhs))
    value = known_int(v)
    return None if value is None else Static(value)


def folded(v):
    """`v` as its compile-time value where it has one (`compile_time`), else `v` itself."""
    return compile_time(v) or v


def _ints(v, what: str, loc: Loc) -> tuple:
    """A constant int or tuple of ints (literal, constexpr, or a tuple of them)."""
    raw = v.value if isinstance(v, Static) else v
    items = raw if isinstance(raw, tuple) else (raw,)
    values = tuple(i.value if isinstance(i, Static) else known_int(i) if isinstance(i, N.Expr)
                   else i for i in items)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in values):
        raise CompileError(f"{what} must be a constant int or tuple of ints", loc,
                           hint="tile shapes are compile-time constants: use literals, "
                                "vg.constexpr parameters, tile shapes (t.shape) and names "
                                "bound once, outside any if or loop, to such ints")
    return tuple(int(i) for i in values)


# Elements one tile may hold (Triton's limit too): a block keeps its tiles in registers and
# shared memory, and past this the compiler would take minutes to lay out what no SM holds.
MAX_TILE_ELEMENTS = 1 << 20


def constant_shape(v, loc: Loc) -> tuple:
    shape = _ints(v, "a tile shape", loc)
    if not shape or any(n <= 0 for n in shape):
        raise CompileError(f"tile shape {show(shape)} must have one or more positive sizes", loc)
    if prod(shape) > MAX_TILE_ELEMENTS:
        raise CompileError(f"tile shape {show(shape)} has {prod(shape):,} elements, more than "
                           f"the {MAX_TILE_ELEMENTS:,} a tile may hold", loc,
                           hint="use smaller tiles and more blocks (or a loop over tiles "
                                "inside the kernel)")
    return shape


def axis_of(v, shape: tuple, loc: Loc, allow_none: bool = False):
    if allow_none and isinstance(v, Static) and v.value is None:
        return None
    axis = _ints(v, "an axis", loc)
    if len(axis) != 1:
        raise CompileError("an axis must be one constant int", loc)
    if not -len(shape) <= axis[0] < len(shape):
        raise CompileError(f"axis {axis[0]} is out of range for a tile of shape {show(shape)}", loc)
    return axis[0] % len(shape)


def tile_operand(v, what: str, loc: Loc) -> N.Expr:
    if not is_tile(v):
        raise CompileError(f"{what} needs a tile, not a scalar", loc,
                           hint="make one with tile.load, tile.full or tile.arange")
    return v


def scalar_operand(v, dtype: T.DType, what: str, loc: Loc) -> N.Expr:
    if is_tile(v):
        raise CompileError(f"{what} must be a scalar, not a tile of shape {show(v.shape)}", loc)
    if is_number(v) and isinstance(v.value, float) and not dtype.is_float \
            and not float(v.value).is_integer():
        raise CompileError(f"{what} {v.value!r} is not a {dtype.name}", loc)
    return typed(v, loc, dtype) if is_number(v) else cast(typed(v, loc), dtype, loc)


def constant_flag(v, what: str, loc: Loc) -> bool:
    if not (isinstance(v, Static) and v.value in (True, False)):
        raise CompileError(f"{what} must be a constant True or False", loc)
    return bool(v.value)


def permuted(value, perm: tuple, loc: Loc):
    if perm == tuple(range(len(perm))):
        return value
    return X.Permute(loc, value, perm, value.dtype, tuple(value.shape[p] for p in perm))
