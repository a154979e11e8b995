"""Tile typing: shapes, NumPy broadcasting, and the intrinsics of `verdigris.tile`.

Takes: operands the translator computes (tile expressions of `ir.tiles`, scalar `ir.Expr`s,
`Static` values) and the calls of `tile.*` intrinsics. Gives:
- `elementwise(build, operands, loc)`: the scalar typing rules of `typing` (promotion, weak
  literals, casts, floor division, `**` by a constant) run on tiles: `build` makes the
  scalar expression over stand-ins of the operands, which is then lifted to `TileMap`s,
  with `Broadcast`/`Splat` bringing every operand to the result shape. `binary`, `compare`
  and `unary` are the operators built this way.
- `HANDLERS`: intrinsic name -> IR builder for `tile.sum`, `tile.cumsum`, `tile.flip`, ...
  (`intrinsic` registers one; the intrinsics that touch arrays register from
  `tile_memory`, the matrix products from `tile_products`);
  `attribute(tile, name, loc)` for `t.shape`, `t.dtype`, `t.T` and the methods
  (`t.astype`, `t.reshape`, `t.sum`, ...; a method is a `TileMethod`); subscripts are
  `tile_pieces`'.
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
from .typing import Static, cast, common_dtype, dtype_arg, is_number, truth, typed

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


# ----------------------------------------------------------------------------- intrinsics


@intrinsic("arange", "n", ("dtype", Static(T.int32)))
def _arange(tr, loc, n, dtype):
    """0, 1, ..., n-1 as int32, converted to `dtype` (as np.arange(n, dtype=...) rounds the
    integers a float dtype cannot hold); an integer dtype must hold n - 1, and bools are
    refused (NumPy too has no bool arange beyond two elements)."""
    shape = constant_shape(n, loc)
    if len(shape) != 1:
        raise CompileError("tile.arange(n) takes one constant size", loc)
    dtype = dtype_arg(dtype, "tile.arange()", loc)
    if dtype.is_bool or dtype.is_int and shape[0] - 1 > (1 << dtype.bits - dtype.is_signed) - 1:
        raise CompileError(f"tile.arange({shape[0]}, dtype={dtype.name}): {dtype.name} cannot "
                           f"hold {shape[0] - 1}", loc,
                           hint="use a wider integer dtype (the default, int32, holds every "
                                "tile size), or a float dtype")
    return astype(X.Arange(loc, T.int32, shape), dtype, loc)


@intrinsic("zeros", "shape", ("dtype", Static(T.float32)))
def _zeros(tr, loc, shape, dtype):
    return _full(tr, loc, shape, Static(0), Static(dtype_arg(dtype, "tile.zeros()", loc)))


@intrinsic("full", "shape", "value", ("dtype", Static(None)))
def _full(tr, loc, shape, value, dtype):
    """A tile of `value`; a tfloat32 one is the float32 one converted (the value rounded)."""
    dtype = typed(value, loc).dtype if isinstance(dtype, Static) and dtype.value is None \
        else dtype_arg(dtype, "tile.full()", loc)
    held = T.float32 if dtype is T.tfloat32 else dtype
    return astype(X.Splat(loc, scalar_operand(value, held, "the fill value", loc), held,
                          constant_shape(shape, loc)), dtype, loc)


def _select(c, a, b, loc: Loc):
    if is_number(a) and is_number(b):
        dtype = T.literal_dtype(a.value if isinstance(a.value, float) else b.value)
    else:
        dtype = common_dtype(a, b, loc)
    return N.Select(loc, truth(c, loc), typed(a, loc, dtype), typed(b, loc, dtype), dtype)


@intrinsic("where", "cond", "x", "y")
def _where(tr, loc, cond, x, y):
    return elementwise(lambda c, a, b: _select(c, a, b, loc), [cond, x, y], loc)


@intrinsic("sigmoid", "x")
def _sigmoid(tr, loc, x):
    dtype = typed(x, loc).dtype if not is_tile(x) else x.dtype
    dtype = dtype if dtype.is_float else T.float32
    if is_tile(x):
        return X.TileMap(loc, "sigmoid", (astype(x, dtype, loc),), dtype, x.shape)
    v, one = scalar_operand(x, dtype, "sigmoid's argument", loc), typing_.const(1, dtype, loc)
    exp = N.MathCall(loc, "exp", (N.Unary(loc, "neg", v, dtype),), dtype)
    return N.Binary(loc, "truediv", one, N.Binary(loc, "add", one, exp, dtype), dtype)


_ACCUMULATING = ("sum", "prod")  # reductions whose bools and narrow integers widen


def _accumulated(value, op: str, loc: Loc):
    """`value` in the dtype reduction `op` runs in: sums and products of bools and narrow
    integers accumulate in int32 (as Triton's)."""
    dtype = value.dtype
    if op in _ACCUMULATING and (dtype.is_bool or (dtype.is_int and dtype.bits < 32)):
        return astype(value, T.int32, loc)
    return value


def reduce(op: str, value, axis, keepdims, loc: Loc) -> N.Expr:
    """`tile.<op>(value, axis, keepdims)` for `op` in `ir.tiles.REDUCE_OPS`."""
    value = tile_operand(value, f"tile.{op}()", loc)
    shape = value.shape
    axis = axis_of(axis, shape, loc, allow_none=True)
    if len(shape) == 1:
        axis = None  # over every axis: a scalar
    value = _accumulated(value, op, loc)
    dtype = T.int32 if op in ("argmax", "argmin") else value.dtype
    kept = tuple(1 if axis in (None, k) else n for k, n in enumerate(shape))
    out_shape = () if axis is None else shape[:axis] + shape[axis + 1:]
    result = X.TileReduce(loc, op, value, axis, dtype, out_shape)
    if not constant_flag(keepdims, "keepdims", loc):
        return result
    return X.Splat(loc, result, dtype, kept) if axis is None else \
        X.Reshape(loc, result, dtype, kept)


_REDUCTION_PARAMS = ("tile", ("axis", Static(None)), ("keepdims", Static(False)))
for _op in X.REDUCE_OPS:
    intrinsic(_op, *_REDUCTION_PARAMS)(
        lambda tr, loc, value, axis, keepdims, op=_op: reduce(op, value, axis, keepdims, loc))


@intrinsic("mean", *_REDUCTION_PARAMS)
def _mean(tr, loc, value, axis, keepdims):
    """The sum over the count, in the tile's float dtype (float32 for integers and bools,
    the float an integer meets by default); narrower floats are summed in float32, as NumPy
    sums float16."""
    value = tile_operand(value, "tile.mean()", loc)
    dtype = value.dtype if value.dtype.is_float else T.float32
    over = axis_of(axis, value.shape, loc, allow_none=True)
    count = prod(value.shape) if over is None else value.shape[over]
    total = reduce("sum", astype(value, T.promote(dtype, T.float32), loc), axis, keepdims, loc)
    return astype(binary("truediv", total, Static(count), loc), dtype, loc)


def constant_flag(v, what: str, loc: Loc) -> bool:
    if not (isinstance(v, Static) and v.value in (True, False)):
        raise CompileError(f"{what} must be a constant True or False", loc)
    return bool(v.value)


def scan(op: str, value, axis, reverse, loc: Loc) -> N.Expr:
    """`tile.<op>(value, axis, reverse)` for `op` in `ir.tiles.SCAN_OPS`."""
    value = tile_operand(value, f"tile.{op}()", loc)
    axis = axis_of(axis, value.shape, loc)
    reverse = constant_flag(reverse, f"tile.{op}()'s reverse", loc)
    value = _accumulated(value, X.SCAN_OPS[op], loc)
    return X.TileScan(loc, op, value, axis, value.dtype, value.shape, reverse)


for _op in X.SCAN_OPS:
    intrinsic(_op, "tile", ("axis", Static(0)), ("reverse", Static(False)))(
        lambda tr, loc, value, axis, reverse, op=_op: scan(op, value, axis, reverse, loc))


@intrinsic("flip", "tile", ("axis", Static(None)))
def _flip(tr, loc, value, axis):
    """NumPy's flip: along `axis`, an int or a tuple of ints, or every axis (None)."""
    value = tile_operand(value, "tile.flip()", loc)
    rank = len(value.shape)
    if isinstance(axis, Static) and axis.value is None:
        axes = tuple(range(rank))
    else:
        items = axis.value if isinstance(axis, Static) and isinstance(axis.value, tuple) else (axis,)
        axes = tuple(axis_of(a, value.shape, loc) for a in items)
        if len(set(axes)) != len(axes):
            raise CompileError(f"tile.flip() names an axis twice: {show(_ints(axis, 'axes', loc))}",
                               loc, hint="name each axis to reverse once")
    axes = tuple(sorted(k for k in axes if value.shape[k] > 1))  # reversing one element: no-op
    return X.Flip(loc, value, axes, value.dtype, value.shape) if axes else value


@intrinsic("astype", "tile", "dtype", moves_tfloat32=True)
def _astype(tr, loc, value, dtype):
    return astype(tile_operand(value, "astype()", loc), dtype_arg(dtype, "astype()", loc), loc)


@intrinsic("reshape", "tile", "shape", moves_tfloat32=True)
def _reshape(tr, loc, value, shape):
    value = tile_operand(value, "reshape()", loc)
    shape = constant_shape(shape, loc)
    if prod(shape) != prod(value.shape):
        raise CompileError(f"cannot reshape a tile of shape {show(value.shape)} "
                           f"({prod(value.shape)} elements) to {show(shape)} ({prod(shape)} "
                           "elements)", loc)
    return value if shape == value.shape else X.Reshape(loc, value, value.dtype, shape)


@intrinsic("broadcast_to", "tile", "shape", moves_tfloat32=True)
def _broadcast_to(tr, loc, value, shape):
    value = tile_operand(value, "tile.broadcast_to()", loc)
    shape = constant_shape(shape, loc)
    if broadcast_shape([value.shape, shape], loc) != shape:
        raise CompileError(f"a tile of shape {show(value.shape)} does not broadcast to "
                           f"{show(shape)}: broadcasting adds leading axes and stretches "
                           "size-1 ones, and drops none", loc,
                           hint="reduce the tile first (tile.sum, ...), or reshape it")
    return broadcast_to(value, shape, loc)


@intrinsic("permute", "tile", "axes", moves_tfloat32=True)
def _permute(tr, loc, value, axes):
    value = tile_operand(value, "permute()", loc)
    rank = len(value.shape)
    axes = _ints(axes, "permute axes", loc)
    perm = tuple(a % rank for a in axes if -rank <= a < rank)
    if sorted(perm) != list(range(rank)):
        raise CompileError(f"axes {show(axes)} are not a permutation of the {rank} axes of a tile "
                           f"of shape {show(value.shape)}", loc)
    return permuted(value, perm, loc)


@intrinsic("transpose", "tile", ("axis0", Static(None)), ("axis1", Static(None)),
           moves_tfloat32=True)
def _transpose(tr, loc, value, axis0, axis1):
    """cuTile's transpose: axes `axis0` and `axis1` swapped; a 2-d tile's two axes when
    neither is given (its `t.T`, the same `Permute`)."""
    value = tile_operand(value, "tile.transpose()", loc)
    rank = len(value.shape)
    unnamed = [isinstance(a, Static) and a.value is None for a in (axis0, axis1)]
    if all(unnamed) and rank == 2:
        return permuted(value, (1, 0), loc)
    if any(unnamed):
        raise CompileError(f"tile.transpose() of a tile of shape {show(value.shape)} needs the "
                           "two axes to swap (only a 2-d tile's are implied)" if rank != 2 else
                           "tile.transpose() takes both axes to swap or neither", loc,
                           hint="tile.transpose(t, axis0, axis1) swaps two axes; t.permute(axes) "
                                "reorders any, and t.T reverses them all")
    first, second = axis_of(axis0, value.shape, loc), axis_of(axis1, value.shape, loc)
    perm = list(range(rank))
    perm[first], perm[second] = second, first
    return permuted(value, tuple(perm), loc)


def permuted(value, perm: tuple, loc: Loc):
    if perm == tuple(range(len(perm))):
        return value
    return X.Permute(loc, value, perm, value.dtype, tuple(value.shape[p] for p in perm))


@intrinsic("rand", "seed", "offsets")
def _rand(tr, loc, seed, offsets):
    offsets = tile_operand(offsets, "tile.rand()", loc)
    if not offsets.dtype.is_int:
        raise CompileError(f"tile.rand() offsets must be integers, not {offsets.dtype.name}", loc)
    if is_tile(seed) or not (is_number(seed) and isinstance(seed.value, int) or
                             isinstance(seed, N.Expr) and seed.dtype.is_int):
        raise CompileError("tile.rand() seed must be an integer scalar", loc)
    return X.Rand(loc, scalar_operand(seed, T.int64, "the seed", loc), offsets, T.float32, offsets.shape)


# ----------------------------------------------------------------------------- attributes


@dataclasses.dataclass(frozen=True, eq=False)
class TileMethod:
    """`t.<name>` before the call: the tile intrinsic `name` with `t` as first argument."""

    name: str
    tile: N.Expr

    def call(self, tr, args, kwargs, loc: Loc):
        if self.name in ("reshape", "permute") and len(args) > 1:  # t.reshape(4, 8)
            args = [Static(tuple(args))]
        return HANDLERS[f"tile.{self.name}"](tr, [self.tile, *args], kwargs, loc)


# Tile methods -> the intrinsic each calls with the tile first; `to` is Triton's astype.
METHODS = {"to": "astype", **{name: name for name in ("astype", "reshape", "permute", "transpose",
                                                      "extract", "flip", "mean", *X.REDUCE_OPS,
                                                      *X.SCAN_OPS)}}


def attribute(tile: N.Expr, name: str, loc: Loc):
    if name == "shape":
        return Static(tuple(Static(n) for n in tile.shape))
    if name == "dtype":
        return Static(tile.dtype)
    if name == "ndim":
        return Static(len(tile.shape))
    if name == "T":
        return permuted(tile, tuple(reversed(range(len(tile.shape)))), loc)
    if name in METHODS:
        return Static(TileMethod(METHODS[name], tile))
    raise CompileError(f"tiles have no attribute {name!r}", loc,
                       hint="available: shape, dtype, ndim, T, " + ", ".join(METHODS))
