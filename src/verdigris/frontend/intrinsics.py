"""What a call inside a kernel means: the table from callee to IR builder.

Takes: the callee (a Python object found by name resolution), the already-translated
arguments, and the call's location. Gives: the IR value of the call. Guarantees: a callee
that is not in the table, not a `@vg.func` and not a dtype is refused with a
`CompileError` that says how to make it callable. Tables, not if-chains: adding an
intrinsic is one entry in `HANDLERS`.
"""
from __future__ import annotations

import builtins
import functools
import math
from dataclasses import replace

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..simt import warp_size
from . import tile_memory  # noqa: F401 -- registers tile.load, tile.store, ... in tiles.HANDLERS
from . import tile_products  # noqa: F401 -- registers tile.mma and tile.dot in tiles.HANDLERS
from . import tile_sorts  # noqa: F401 -- registers tile.sort and tile.argsort in tiles.HANDLERS
from . import tile_pieces  # noqa: F401 -- registers tile.extract and tile.cat in tiles.HANDLERS
from . import rounding  # registers tile.truediv in tiles.HANDLERS
from . import tile_values  # noqa: F401 -- registers tile.arange, tile.sum, tile.reshape, ... in tiles.HANDLERS
from . import tiles
from .assume import assume
from .prints import kernel_print
from .typing import (Static, array_dtype_arg, check_atomic, cast, common_dtype, is_number, truth,
                     typed, weakened)


def _axis(args, loc: Loc, name: str) -> int:
    if len(args) != 1 or not isinstance(args[0], Static) or args[0].value not in (0, 1, 2):
        raise CompileError(f"{name}(axis) takes one constant axis: 0, 1 or 2", loc)
    return args[0].value


def _register(tr, kind: str, axis: int, loc: Loc) -> N.Expr:
    """A hardware index register; `block_dim` is a constant when the build knows the block."""
    if kind == "block_dim" and tr.unit.block is not None:
        return N.Const(loc, tr.unit.block[axis], T.int32)
    return N.Special(loc, kind, axis, T.int32)


def _special(kind, label: str | None = None):
    def handler(tr, args, kwargs, loc):
        return _register(tr, kind, _axis(args, loc, label or kind), loc)

    return handler


def _global_id(tr, args, kwargs, loc):
    axis = _axis(args, loc, "global_id")

    def reg(kind):
        return cast(_register(tr, kind, axis, loc), T.int64, loc)

    product = N.Binary(loc, "mul", reg("block_id"), reg("block_dim"), T.int64)
    return N.Binary(loc, "add", product, reg("thread_id"), T.int64)


def _static_shape(shape, what: str, loc: Loc) -> tuple:
    """A constant shape (an int or a tuple of ints, each a compile-time value:
    `tiles.compile_time`) as a tuple of positive ints."""
    if isinstance(shape, Static) and isinstance(shape.value, tuple):
        shape = shape.value
    shape = tuple(map(tiles.folded, shape)) if isinstance(shape, tuple) else tiles.folded(shape)
    constant = isinstance(shape, Static) or (
        isinstance(shape, tuple) and all(isinstance(s, Static) for s in shape))
    shape = shape.value if isinstance(shape, Static) else shape
    shape = (shape,) if not isinstance(shape, tuple) else shape
    shape = tuple(s.value if isinstance(s, Static) else s for s in shape)
    if not shape or not constant or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
        got = f", not {shape[0] if len(shape) == 1 else shape!r}" if constant else ""
        raise CompileError(f"{what} needs a constant shape of positive ints{got}", loc,
                           hint="give the size as a positive int (a literal, or a vg.constexpr "
                                "parameter launched with one)" if constant else
                                "make the size a vg.constexpr parameter")
    return shape


def _array(space: str):
    """`local.array(shape, dtype)` and `shared.array(shape, dtype)`."""
    what = f"{space}.array(shape, dtype)"

    def handler(tr, args, kwargs, loc):
        if len(args) + len(kwargs) != 2 or set(kwargs) - {"shape", "dtype"}:
            raise CompileError(f"{what} takes a shape and a dtype", loc)
        shape = _static_shape(kwargs.get("shape", args[0] if args else None), what, loc)
        dtype = array_dtype_arg(kwargs.get("dtype", args[1] if len(args) > 1 else None), what, loc)
        return tr.local_array(shape, dtype, loc, space)

    return handler


def _dynamic_shared(tr, args, kwargs, loc):
    what = "shared.dynamic(dtype)"
    if len(args) + len(kwargs) != 1 or set(kwargs) - {"dtype"}:
        raise CompileError(f"{what} takes one dtype", loc,
                           hint="its size comes from the launch: k[grid, block](..., shared_bytes=n)")
    dtype = array_dtype_arg(kwargs.get("dtype", args[0] if args else None), what, loc)
    return tr.dynamic_shared(dtype, loc)


def _arity(args, kwargs, usage: str, loc: Loc, count: int) -> None:
    if len(args) != count or kwargs:
        raise CompileError(f"{usage} takes " + (f"{count} positional argument{'s' * (count > 1)}"
                                                if count else "no arguments"), loc)


def _statement(label: str, make):
    """A call of no arguments that is a statement (`barrier()`, `threadfence()`, ...)."""
    def handler(tr, args, kwargs, loc):
        _arity(args, kwargs, f"{label}()", loc, 0)
        tr.emit(make(loc))
        return Static(None)

    return handler


def _lane_id(tr, args, kwargs, loc):
    _arity(args, kwargs, "lane_id()", loc, 0)
    return N.Special(loc, "lane_id", 0, T.int32)


def _lane_value(value, label: str, loc: Loc) -> N.Expr:
    """The scalar a warp operation takes from each lane."""
    if tiles.is_tile(value) or isinstance(value, N.ArrayRef):
        raise CompileError(f"{label}() takes one scalar per lane, not "
                           f"{'an array' if isinstance(value, N.ArrayRef) else 'a tile'}",
                           loc, hint="index the array, or use tile operations in a tile kernel")
    return typed(value, loc)


_WIDTHS = tuple(1 << k for k in range(warp_size.bit_length()))  # a shuffle's segment sizes
_SHUFFLE_ARGUMENTS = {"shfl_down": "delta", "shfl_up": "delta", "shfl_xor": "mask", "shfl_idx": "lane"}


def _shuffle(op: str):
    """`shfl_*(value, arg, width=32)`: any scalar, from another lane of its segment."""
    usage = f"{op}(value, {_SHUFFLE_ARGUMENTS[op]}, width=32)"

    def handler(tr, args, kwargs, loc):
        if not 2 <= len(args) + len(kwargs) <= 3 or len(args) < 2 or set(kwargs) - {"width"}:
            raise CompileError(f"{usage} takes a value, {'an' if op == 'shfl_xor' else 'a'} "
                               f"{_SHUFFLE_ARGUMENTS[op]} and, optionally, a width", loc)
        value, lane = _lane_value(args[0], op, loc), args[1]
        if is_number(lane) and isinstance(lane.value, int) and not isinstance(lane.value, bool):
            lane = typed(lane, loc, T.int32)
        elif isinstance(lane, N.Expr) and not tiles.is_tile(lane) and lane.dtype.is_int:
            lane = cast(lane, T.int32, loc)
        else:
            raise CompileError(f"the second argument of {usage} must be an integer", loc)
        width = kwargs.get("width", args[2] if len(args) > 2 else Static(warp_size))
        if not isinstance(width, Static) or width.value not in _WIDTHS or isinstance(width.value, bool):
            got = f", not {width.value!r}" if isinstance(width, Static) else ""
            raise CompileError(f"the width of {op}() must be a constant power of two from 1 to "
                               f"{warp_size}{got}", loc,
                               hint="give the lanes of one segment: 2, 4, 8, 16 or 32 (a literal, "
                                    "or a vg.constexpr parameter)")
        return N.WarpOp(loc, op, value, lane, value.dtype, width.value)

    return handler


def _vote(op: str):
    """`ballot(pred)`, `any_(pred)`, `all_(pred)`: a predicate from each lane."""
    label = N.warp_call(op)[:-2]

    def handler(tr, args, kwargs, loc):
        _arity(args, kwargs, f"{label}(predicate)", loc, 1)
        pred = truth(_lane_value(args[0], label, loc), loc)
        return N.WarpOp(loc, op, pred, None, T.uint32 if op == "ballot" else T.bool_)

    return handler


def _activemask(tr, args, kwargs, loc):
    _arity(args, kwargs, "activemask()", loc, 0)
    return N.WarpOp(loc, "activemask", None, None, T.uint32)


def _match(op: str):
    """`match_any(value)`, `match_all(value)`: masks of lanes holding equal values."""
    def handler(tr, args, kwargs, loc):
        _arity(args, kwargs, f"{op}(value)", loc, 1)
        return N.WarpOp(loc, op, _lane_value(args[0], op, loc), None, T.uint32)

    return handler


def _reduce(op: str):
    """`reduce_<combine>(value)`: the warp's values combined, on every lane."""
    combine = N.REDUCTIONS[op]
    floats = combine in ("add", "min", "max")

    def handler(tr, args, kwargs, loc):
        _arity(args, kwargs, f"{op}(value)", loc, 1)
        value = _lane_value(args[0], op, loc)
        if value.dtype.is_bool or (value.dtype.is_float and not floats):
            raise CompileError(
                f"{op}() takes {'a number' if floats else 'an integer'}, not {value.dtype.name}", loc,
                hint="count the lanes where a predicate holds with popc(ballot(pred)); any_() and "
                     "all_() are its or and and" if value.dtype.is_bool else
                     "reduce_add, reduce_min and reduce_max take floats too")
        return N.WarpOp(loc, op, value, None, value.dtype)

    return handler


def _math(name):
    arity = N.MATH_FUNCS[name]

    def scalar(*args, loc):
        if name in N.BIT_FUNCS:
            return _bits(name, args[0], loc)
        if all(is_number(a) for a in args) and name not in ("rsqrt", "fma"):
            return Static(_host_math(name)(*(a.value for a in args)))
        dtype = typed(args[0], loc).dtype if arity == 1 else _join(args, loc)
        integer_ok = name in ("abs", "min", "max")
        if not dtype.is_float and not (integer_ok and dtype.is_int):
            dtype = T.float32 if not integer_ok or dtype.is_bool else dtype
        operands = tuple(typed(a, loc, dtype) for a in args)
        result = T.bool_ if name in N.MATH_PREDICATES else dtype
        return weakened(N.MathCall(loc, name, operands, result), args)  # sqrt(alpha): weak

    keywords = rounding.KEYWORDS.get(name, ())

    def handler(tr, args, kwargs, loc):
        if len(args) != arity or set(kwargs) - set(keywords):
            raise CompileError(f"{name}() takes {arity} argument{'s' * (arity > 1)}"
                               + (f" and the keywords {', '.join(keywords)}" if keywords else ""),
                               loc)
        variant = rounding.variant(name, kwargs.get("rounding_mode"),
                                   kwargs.get("flush_to_zero", False), loc) if kwargs else None
        return tiles.elementwise(lambda *xs: rounding.renamed(scalar(*xs, loc=loc), variant, loc),
                                 args, loc)

    return handler


def _bits(name: str, value, loc: Loc):
    """`popc`/`clz`/`ffs`/`brev` of an integer (a literal is int32, or int64 past it)."""
    operand = typed(value, loc)
    if not operand.dtype.is_int:
        raise CompileError(f"{name}() takes an integer, not {operand.dtype.name}", loc,
                           hint="convert first, e.g. int(x), or view float bits with an int array")
    return N.MathCall(loc, name, (operand,), operand.dtype if name == "brev" else T.int32)


@tiles.intrinsic("clamp", "x", "lo", "hi")
def _clamp(tr, loc, x, lo, hi):
    """min(max(x, lo), hi): one NaN rule (maxNum/minNum's) for clamp, maximum and minimum."""
    return _math("min")(tr, [_math("max")(tr, [x, lo], {}, loc), hi], {}, loc)


def _number_over_nan(pick):
    """min/max of two constants by the run time's rule (fminf/fmaxf): a NaN yields the other."""
    return lambda a, b: b if a != a else a if b != b else pick(a, b)


def _host_math(name):
    return {"abs": builtins.abs, "min": _number_over_nan(builtins.min),
            "max": _number_over_nan(builtins.max),
            "round": builtins.round, "exp2": lambda x: 2.0 ** x,
            "log2": math.log2, "fma": None}.get(name) or getattr(math, name)


def _join(args, loc: Loc) -> T.DType:
    """The common dtype of several operands; literals are weak."""
    strong = [a for a in args if not isinstance(a, Static)]
    if not strong:
        return typed(args[0], loc).dtype
    result = strong[0]
    for a in args:
        if a is not strong[0]:
            result = N.Const(loc, 0, common_dtype(result, a, loc))
    return result.dtype


def _min_max(name):
    two = _math(name)

    def handler(tr, args, kwargs, loc):
        if len(args) < 2:
            raise CompileError(f"{name}() in a kernel takes two or more numbers", loc)
        result = args[0]
        for a in args[1:]:
            result = two(tr, [result, a], {}, loc)
        return result

    return handler


def _conversion(dtype: T.DType, label: str):
    def handler(tr, args, kwargs, loc):
        if len(args) != 1 or kwargs:
            raise CompileError(f"{label}() takes one argument", loc)
        if is_number(args[0]):
            _check_constant_fits(args[0].value, dtype, label, loc)
            return typed(args[0], loc, dtype)
        return tiles.astype(args[0], dtype, loc)

    return handler


def _check_constant_fits(value, dtype: T.DType, label: str, loc) -> None:
    """Refuse a compile-time number an integer dtype cannot hold, as `vg.int8(300)` on the
    host does (a run-time value wraps around, docs/api.md)."""
    if not dtype.is_int or isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise CompileError(f"{label}({value!r}): integer dtypes have no NaN or infinity", loc)
    lo, hi = (-(1 << dtype.bits - 1), (1 << dtype.bits - 1) - 1) if dtype.is_signed \
        else (0, (1 << dtype.bits) - 1)
    if not lo <= int(value) <= hi:
        raise CompileError(f"{label}({value!r}): {value!r} does not fit {dtype.name}, whose "
                           f"values go from {lo} to {hi}", loc,
                           hint="give a constant in that range; a value computed at run time "
                                "wraps around instead (keeps its low bits)")


_to_float32 = _conversion(T.float32, "float")


def _float(tr, args, kwargs, loc):
    """`float(x)`: a float32 conversion; of a string (`float("-inf")`, Triton's spelling), the
    Python float it names, a literal as `math.inf` is."""
    if len(args) == 1 and isinstance(args[0], Static) and isinstance(args[0].value, str):
        try:
            return Static(float(args[0].value))
        except ValueError:
            raise CompileError(f"float({args[0].value!r}) is not a number", loc,
                               hint='float() of a string takes a number: float("inf"), '
                                    'float("-inf"), float("nan")') from None
    return _to_float32(tr, args, kwargs, loc)


def _atomic(op: str, name: str = ""):
    """`simt.atomic_<op>`, or (`name` its spelling) `tile.atomic_cas`/`tile.atomic_xchg`: one
    element's read-modify-write, whose old value is the call's (in a tile kernel, once for
    the block: `ir.locks` and the tile lowering)."""
    name = name or f"atomic_{op}"

    def handler(tr, args, kwargs, loc):
        arity = 4 if op == "cas" else 3
        if len(args) != arity or kwargs:
            shape = "array, index, compare, value" if op == "cas" else "array, index, value"
            raise CompileError(f"{name}({shape}) takes {arity} arguments", loc)
        array = args[0]
        if not isinstance(array, N.ArrayRef) or array.type.space == "local":
            raise CompileError(f"{name} needs a global or shared array", loc)
        dtype = array.dtype
        check_atomic(op, dtype, name, loc)
        index = args[1].value if isinstance(args[1], Static) and isinstance(args[1].value, tuple) \
            else (args[1],)
        indices = tr.indices_for(array, [(i, loc) for i in index], loc)
        values = [typed(a, loc, dtype) if is_number(a) else cast(typed(a, loc), dtype, loc)
                  for a in args[2:]]
        compare, value = (values[0], values[1]) if op == "cas" else (None, values[0])
        return tr.hoist(N.Atomic(loc, op, array, indices, value, compare, dtype), loc)

    return handler


TICKET_DTYPES = {"int32": T.uint32, "uint32": T.uint32, "int64": T.uint64, "uint64": T.uint64}


def _block_ticket(tr, args, kwargs, loc):
    """`simt.block_ticket(counter)`: the order in which blocks arrive here, as one atomic add
    on `counter[0]` by the block's first thread, handed to the others through a shared slot:
    barrier (earlier readers of the slot are done), the add, barrier, the read. Every block
    sees counter's value before its add, so tickets are distinct across blocks (the frontend
    checks that nothing else writes the counter but adds of 1), and a
    block that waits only on lower tickets waits on blocks that are already running. The
    ticket is the counter's value as an unsigned integer of its width, so that indices built
    from it are provably not negative (and need no bounds check below zero)."""
    usage = "block_ticket(counter)"
    if len(args) != 1 or kwargs:
        raise CompileError(f"{usage} takes one argument, a one-element global integer array", loc)
    counter = args[0]
    if not isinstance(counter, N.ArrayRef) or counter.type.space != "global" \
            or counter.dtype.name not in TICKET_DTYPES:
        raise CompileError(f"{usage} needs a global array of int32, uint32, int64 or uint64 "
                           "(a counter, zero before the launch)", loc,
                           hint="pass e.g. vg.zeros(1, vg.int32) as a kernel argument")
    dtype, ticket = counter.dtype, TICKET_DTYPES[counter.dtype.name]
    slot = tr.local_array((1,), ticket, loc, "shared")
    slot.type = replace(slot.type, ticket_of=counter.name)
    tr.name_array(slot, "block_ticket")
    at_zero = [N.Compare(loc, "eq", _register(tr, "thread_id", axis, loc), N.Const(loc, 0, T.int32),
                         T.bool_) for axis in range(3) if tr.unit.block is None or tr.unit.block[axis] > 1]
    first = functools.reduce(lambda a, b: N.Logical(loc, "and", a, b, T.bool_), at_zero) \
        if at_zero else N.Const(loc, True, T.bool_)  # else a block of one thread
    zero = (N.Const(loc, 0, T.int64),)
    called = "block_ticket() (it waits for the whole block, as barrier() does)"
    tr.emit(N.Barrier(loc, "block", called))
    taken = tr.nested(lambda: tr.emit(N.Store(loc, slot, zero, cast(tr.hoist(
        N.Atomic(loc, "add", counter, zero, N.Const(loc, 1, dtype), None, dtype), loc), ticket, loc))))
    tr.emit(N.If(loc, first, taken, []))
    tr.emit(N.Barrier(loc, "block", called))
    return N.Load(loc, slot, zero, ticket)


def conversion(dtype: T.DType):
    """`vg.float32(x)` and friends: an explicit cast."""
    return _conversion(dtype, dtype.name)


def _len(tr, args, kwargs, loc):
    if len(args) != 1 or not isinstance(args[0], N.ArrayRef):
        raise CompileError("len() in a kernel takes one array", loc)
    return tr.shape_of(args[0], 0, loc)


def _range(tr, args, kwargs, loc):
    raise CompileError("range() can only be used as the iterable of a for loop", loc)


FENCES = {"_block": "block", "": "gpu", "_system": "system"}  # simt.threadfence<suffix>: scope

HANDLERS = {
    "simt.thread_id": _special("thread_id"),
    "simt.block_id": _special("block_id"),
    "simt.block_dim": _special("block_dim"),
    "simt.grid_dim": _special("grid_dim"),
    "simt.global_id": _global_id,
    "simt.lane_id": _lane_id,
    "simt.local.array": _array("local"),
    "simt.shared.array": _array("shared"),
    "simt.shared.dynamic": _dynamic_shared,
    "simt.barrier": _statement("barrier", lambda loc: N.Barrier(loc, "block")),
    "simt.syncwarp": _statement("syncwarp", lambda loc: N.Barrier(loc, "warp")),
    "simt.grid_barrier": _statement("grid_barrier", lambda loc: N.Barrier(loc, "grid")),
    "simt.block_ticket": _block_ticket,
    **{f"simt.{op}": _shuffle(op) for op in N.SHUFFLES},
    **{f"simt.{op}": _vote(op) for op in N.VOTES},
    "simt.activemask": _activemask,
    **{f"simt.{op}": _match(op) for op in N.MATCHES},
    **{f"simt.{op}": _reduce(op) for op in N.REDUCTIONS},
    **{f"simt.threadfence{suffix}": _statement(f"threadfence{suffix}",
                                               lambda loc, scope=scope: N.Fence(loc, scope))
       for suffix, scope in FENCES.items()},
    **{f"simt.atomic_{op}": _atomic(op) for op in N.ATOMIC_OPS},
    "tile.atomic_cas": _atomic("cas", "tile.atomic_cas"),
    "tile.atomic_xchg": _atomic("exch", "tile.atomic_xchg"),
    "builtin.int": _conversion(T.int64, "int"),
    "builtin.float": _float,
    "builtin.bool": lambda tr, args, kwargs, loc: _bool(args, loc),
    "builtin.len": _len,
    "builtin.range": _range,
    "builtin.print": kernel_print,
    "builtin.min": _min_max("min"),
    "builtin.max": _min_max("max"),
    **{f"math.{name}": _math(name) for name in N.MATH_FUNCS},
    "vg.assume": assume,
    "tile.bid": _special("block_id", "bid"),
    "tile.num_blocks": _special("grid_dim", "num_blocks"),
    **tiles.HANDLERS,
}
HANDLERS["math.min"] = HANDLERS["builtin.min"]
HANDLERS["math.max"] = HANDLERS["builtin.max"]


def _bool(args, loc):
    if len(args) != 1:
        raise CompileError("bool() takes one argument", loc)
    return truth(args[0], loc)


# Python's own callables that mean an intrinsic inside a kernel.
PYTHON_CALLABLES = {
    builtins.abs: "math.abs", builtins.min: "builtin.min", builtins.max: "builtin.max",
    builtins.int: "builtin.int", builtins.float: "builtin.float", builtins.bool: "builtin.bool",
    builtins.len: "builtin.len", builtins.range: "builtin.range", builtins.round: "math.round",
    builtins.print: "builtin.print",
    math.fabs: "math.abs",
    **{getattr(math, name): f"math.{name}" for name in N.MATH_FUNCS
       if hasattr(math, name) and name not in ("min", "max", "abs")},
}
MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan, "tau": math.tau}


def intrinsic_name(obj) -> str | None:
    name = getattr(obj, "__vg_intrinsic__", None)
    if name is not None:
        return name
    try:
        return PYTHON_CALLABLES.get(obj)
    except TypeError:  # unhashable
        return None
