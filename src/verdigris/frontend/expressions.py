"""The expression half of the kernel translator: Python `ast` expressions -> typed IR values.

Takes (as `Translator`'s base class): expression nodes, with the translator's scope,
statements and unit. Gives `expr(node)`: a typed IR expression, a `Static` (a value known
while compiling: numbers, dtypes, modules, functions) or a tuple of them; names, constants,
tuples, attributes (array `.shape`/`.dtype`/..., `x.load4()`: `vector_loads`, module
members), subscripts (array elements and views), arithmetic, comparisons, `and`/`or`/`not`,
conditional expressions, and calls (intrinsics of the kernel's track, `vg.math`, casts,
helpers, `@vg.func` or plain functions of the user's code (`lang.plain_helper`), which
`Translator.inline` inlines). Guarantees: as `translate`'s: every value carries the user's
`Loc`, and anything outside the subset is a `CompileError` there that says what to do.
"""
from __future__ import annotations

import ast
from dataclasses import replace

import types as pytypes

from .. import lang
from .. import types as T
from ..errors import CompileError, Loc, SafetyError, UnsupportedConstruct
from ..ir import nodes as N
from . import intrinsics, tile_pieces, tile_values, tiles
from .tiles import binary, compare, unary
from .typing import Static, is_number, static_truth, truth, typed
from .vector_loads import ArrayMethod

BIN_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and",
           ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift"}
CMP_OPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq",
           ast.NotEq: "ne"}
UNARY_OPS = {ast.USub: "neg", ast.Not: "not", ast.Invert: "invert", ast.UAdd: "pos"}

TRACK_HINTS = {  # the intrinsics' track -> what to write in a kernel of the other track
    "simt": "tile kernels say what a block does to whole tiles: tile.bid(axis) for the block "
            "index, tile.load/tile.store for memory; for per-thread code write a @simt.kernel",
    "tile": "SIMT kernels say what one thread does: index elements with simt.global_id(axis); "
            "for tile operations write a @tile.kernel",
}



def _refuse_call(fn, loc: Loc):
    """A call of what kernels cannot call: a kernel, or a host function."""
    if getattr(fn, "__vg_kernel__", False):
        raise UnsupportedConstruct(f"kernel {fn.__name__!r} cannot be called from a kernel",
                                   loc, hint="move the shared code into a helper function")
    if isinstance(fn, pytypes.FunctionType) and fn.__name__ == "<lambda>":
        raise UnsupportedConstruct("cannot call a lambda inside a kernel", loc,
                                   hint="define the helper with `def` (at module level)")
    if isinstance(fn, type):
        raise UnsupportedConstruct(f"cannot call {fn.__qualname__!r} inside a kernel: it is a "
                                   "class, and kernels hold numbers, tiles and arrays", loc,
                                   hint=_call_hint(fn))
    raise UnsupportedConstruct(f"cannot call {getattr(fn, '__qualname__', fn)!r} inside a kernel",
                               loc, hint=_call_hint(fn))


def _call_hint(fn) -> str:
    """What to call instead of a host function: its `vg.math` namesake, where there is one."""
    from .. import math as kernel_math

    name = getattr(fn, "__name__", "")
    if fn is breakpoint:
        return ("to step through a kernel with the Python debugger, run one thread as Python: "
                "k.debug[grid, block](..., block_id=b, thread_id=t)")
    if name and not name.startswith("_") and callable(getattr(kernel_math, name, None)):
        module = getattr(fn, "__module__", None) or type(fn).__module__ or "the host"
        return (f"{module.partition('.')[0]} functions run on the host; in a kernel, call "
                f"vg.math.{name}(...)")
    if isinstance(fn, pytypes.FunctionType):  # a generator, or a host library's function
        return ("kernels inline the functions of your own code; a generator, or a function "
                "of the standard library or an installed package, runs on the host: write a "
                "helper with `def` (or @vg.func) instead")
    return "kernels call intrinsics, vg.math functions and helper functions written with `def`"

class Expressions:
    """Mixed into `translate.Translator`, whose state and statement methods it uses."""

    def expr(self, node):
        handler = getattr(self, f"expr_{type(node).__name__}", None)
        if handler is None:
            self.unsupported(node)
        return handler(node)

    def expr_Constant(self, node):
        if isinstance(node.value, (bool, int, float)) or node.value is None:
            return Static(node.value)
        if isinstance(node.value, str):
            raise UnsupportedConstruct(
                "a string is not supported in kernels", self.loc(node),
                hint="kernels have numbers, arrays and tiles; strings go only to keyword "
                     "arguments that take one (tile.dot(..., input_precision=\"tf32\")) "
                     "and to float() (float(\"inf\"))")
        self.unsupported(node, f"a {type(node.value).__name__} constant")

    def expr_Name(self, node):
        return self.read_name(node)

    def expr_Tuple(self, node):
        return Static(tuple(self.expr(e) for e in node.elts))

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        loc = self.loc(node)
        if isinstance(base, N.ArrayRef):
            return self.array_attribute(base, node.attr, loc)
        if tiles.is_tile(base):
            return tile_values.attribute(base, node.attr, loc)
        if isinstance(base, Static):
            if isinstance(base.value, pytypes.ModuleType) and base.value.__name__ == "math" \
                    and node.attr in intrinsics.MATH_CONSTANTS:
                return Static(intrinsics.MATH_CONSTANTS[node.attr])
            if not hasattr(base.value, node.attr):
                raise _no_attribute(base.value, node.attr, loc)
            return self.static_global(node.attr, getattr(base.value, node.attr), loc)
        raise CompileError(f"numbers have no attribute {node.attr!r} in kernels", loc)

    def array_attribute(self, array: N.ArrayRef, attr: str, loc: Loc):
        ndim = array.type.ndim
        if attr == "shape":
            return Static(tuple(self.shape_of(array, k, loc) for k in range(ndim)))
        if attr == "ndim":
            return Static(ndim)
        if attr == "dtype":
            return Static(array.dtype)
        if attr == "load4":
            return Static(ArrayMethod(array))
        if attr == "size":
            size = Static(1)
            for k in range(ndim):
                size = binary("mul", size, self.shape_of(array, k, loc), loc)
            return size
        raise CompileError(f"arrays have no attribute {attr!r} in kernels", loc,
                           hint="available: shape, ndim, dtype, size, and load4() in SIMT "
                                "kernels")

    def shape_of(self, array: N.ArrayRef, axis: int, loc: Loc):
        if array.type.shape is not None:
            return Static(array.type.shape[axis])
        return N.Shape(loc, array, axis, T.int64)

    def expr_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, Static) and isinstance(base.value, tuple):
            index = self.expr(node.slice)
            if not (is_number(index) and isinstance(index.value, int)):
                return self.table_entry(base.value, index, node)
            try:
                item = base.value[index.value]
            except IndexError:
                raise CompileError(f"index {index.value} out of range for a tuple of "
                                   f"{len(base.value)}", self.loc(node)) from None
            # a module-level tuple holds plain values; one built in the kernel, typed ones
            return item if isinstance(item, (Static, N.Expr)) else Static(item)
        if tiles.is_tile(base):
            return tile_pieces.subscript(base, [self.tile_index_item(p) for p in _subscript_items(node)],
                                         self.loc(node))
        array, indices = self.subscript_parts(node, base)
        return N.Load(self.loc(node), array, indices, array.dtype)

    def table_entry(self, values: tuple, index, node: ast.Subscript):
        """`TABLE[i]`, a tuple of numbers (a constant such as a convolution's weights)
        indexed by a run-time int: an element of a per-thread copy of the table, checked
        against its length as any array access (with `i` a constant loop's variable, the
        bounds are proven and LLVM folds the copy away)."""
        loc = self.loc(node)
        if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                 for v in values):
            raise CompileError("only tuples of numbers can be indexed by a run-time value", loc,
                               hint="index with a constant, or keep the values in an array")
        if not isinstance(index, N.Expr) or index.dtype is None or not index.dtype.is_int:
            raise CompileError("a tuple's index must be an int", self.loc(node.slice))
        dtype = T.float32 if any(isinstance(v, float) for v in values) else \
            max((T.literal_dtype(v) for v in values), key=lambda d: d.itemsize)
        table = self.local_array((len(values),), dtype, loc, label=getattr(node.value, "id", "table"))
        table.type = replace(table.type, values=tuple(values))
        for k, v in enumerate(values):
            self.emit(N.Store(loc, table, self.indices_for(table, [(Static(k), loc)], loc),
                              typed(Static(v), loc, dtype)))
        return N.Load(loc, table, self.indices_for(table, [(index, self.loc(node.slice))], loc), dtype)

    def tile_index_item(self, part):
        """One item of a tile's subscript: a slice of the translated bounds (None where left
        out: `:` is `slice(None)`), None for `None` (or `np.newaxis`), Ellipsis for `...`;
        anything else is refused at the item."""
        if isinstance(part, ast.Slice):
            return slice(*(None if b is None else self.expr(b) for b in (part.lower, part.upper, part.step)))
        elif isinstance(part, ast.Constant) and part.value is Ellipsis:
            return Ellipsis
        else:
            value = self.expr(part)
            if isinstance(value, Static) and value.value is None:
                return None
        raise tile_pieces.unsupported_subscript(self.loc(part))

    def subscript_parts(self, node: ast.Subscript, base=None):
        loc = self.loc(node)
        array = self.expr(node.value) if base is None else base
        if tiles.is_tile(array):
            raise CompileError("a tile cannot be assigned element by element", loc,
                               hint="tiles are values: make the new tile, e.g. "
                                    "t = tile.where(mask, value, t)")
        if not isinstance(array, N.ArrayRef):
            what = getattr(getattr(array, "dtype", None), "name", None)
            named = f"{node.value.id!r} is a {what} scalar, and " if what and \
                isinstance(node.value, ast.Name) else ""
            raise CompileError(f"{named}only arrays, tuples and tiles can be indexed", loc,
                               hint="pass an array for it at the launch" if named else "")
        parts = _subscript_items(node)
        if any(isinstance(p, ast.Slice) for p in parts):
            raise UnsupportedConstruct("slices are not supported inside kernels", loc,
                               hint="index one element at a time, or pass a sliced view")
        values = [(self.expr(part), self.loc(part)) for part in parts]
        return array, self.indices_for(array, values, loc)

    def indices_for(self, array: N.ArrayRef, values: list, loc: Loc) -> tuple:
        """Checked int64 indices of `array` from (translated value, its loc) pairs."""
        if len(values) != array.type.ndim:
            raise CompileError(f"{array.name!r} has {array.type.ndim} dimension"
                               f"{'s' * (array.type.ndim != 1)} but is indexed with {len(values)}",
                               loc, hint=f"give one index per dimension, or pass an array of "
                               f"{len(values)} dimension{'s' * (len(values) != 1)}")
        indices = []
        for axis, (value, ploc) in enumerate(values):
            if is_number(value):
                if not isinstance(value.value, int) or isinstance(value.value, bool):
                    raise CompileError("array indices must be integers", ploc)
                if value.value < 0:
                    raise SafetyError(f"index {value.value} of {array.name!r} is out of bounds: "
                                      "verdigris never wraps negative indices", ploc,
                                      hint=f"write {array.name}.shape[{axis}] - {-value.value}",
                                      code="VG301")
                extent = array.type.shape[axis] if array.type.shape else None
                if extent is not None and value.value >= extent:
                    raise SafetyError(f"index {value.value} of {array.name!r} is out of bounds "
                                      f"for axis {axis} of size {extent}", ploc, code="VG301")
            elif not (isinstance(value, N.Expr) and value.dtype.is_int):
                raise CompileError("array indices must be integers", ploc,
                                   hint="convert with int(...)")
            indices.append(typed(value, ploc, T.int64))
        return tuple(indices)

    def expr_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):  # `a @ b` of tiles: tile.dot(a, b)
            self.check_track("tile.dot", self.loc(node))
            return intrinsics.HANDLERS["tile.dot"](
                self, [self.expr(node.left), self.expr(node.right)], {}, self.loc(node))
        op = BIN_OPS.get(type(node.op))
        if op is None:
            self.unsupported(node, "this operator")
        return binary(op, self.expr(node.left), self.expr(node.right), self.loc(node))

    def expr_UnaryOp(self, node):
        return unary(UNARY_OPS[type(node.op)], self.expr(node.operand), self.loc(node))

    def expr_Compare(self, node):
        loc = self.loc(node)
        # A string literal is a value in a comparison: `if ACTIVATION == "relu":` folds.
        left, result = self.argument(node.left, strings=True), None
        for op, comparator in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                right, part = self.membership(left, comparator, isinstance(op, ast.NotIn), loc)
            elif type(op) not in CMP_OPS:
                spelled = {ast.Is: "is", ast.IsNot: "is not"}
                self.unsupported(node, f"the comparison `{spelled.get(type(op), 'this')}`")
            else:
                right = self.argument(comparator, strings=True)
                part = compare(CMP_OPS[type(op)], left, right, loc)
            if result is not None:
                tiles.one_truth_value("a chained comparison (`a < t < b` is `(a < t) and (t < b)`)",
                                      (result, part), loc)
                result = self.logical("and", result, lambda p=part: p, loc)
            else:
                result = part
            left = right
        return result

    def membership(self, value, node, negated: bool, loc: Loc):
        """`value in (a, b, ...)`: `value == a or value == b or ...`, as Python tests a tuple
        (folded where all are compile-time values: `if ACTIVATION in ("relu", "gelu"):`);
        gives the tuple (a chained comparison's next left side) and the truth value."""
        items = None
        if isinstance(node, ast.Tuple):
            items = [self.argument(e, strings=True) for e in node.elts]
        else:
            seq = self.expr(node)
            if isinstance(seq, Static) and isinstance(seq.value, tuple):  # a module constant's
                items = [v if isinstance(v, (Static, N.Expr)) else Static(v) for v in seq.value]
        if items is None:
            raise UnsupportedConstruct("the comparison `in` tests a tuple in kernels, not this "
                                       "value", loc, hint="write the values out: `k in (1, 2, "
                                       "4)`, `MODE in (\"relu\", \"gelu\")`")
        found = Static(False)
        for item in items:
            found = self.logical("or", found, lambda i=item: compare("eq", value, i, loc), loc)
        return Static(tuple(items)), unary("not", found, loc) if negated else found

    def expr_BoolOp(self, node):
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.expr(node.values[0])
        for value in node.values[1:]:
            result = self.logical(op, result, lambda v=value: self.expr(v), self.loc(node))
        return result

    def logical(self, op: str, lhs, rhs_thunk, loc: Loc):
        """Python's short-circuit `and`/`or`: the right side runs only where it decides the
        result, and the result is an operand's value (`x or 7.0` is x where x is nonzero),
        as one dtype both operands meet at; two conditions give a condition."""
        if isinstance(lhs, Static):
            decided = static_truth(lhs, loc) == (op == "or")
            return lhs if decided else rhs_thunk()
        tiles.one_truth_value(f"Python's `{op}`", (lhs,), loc)
        truth(lhs, loc)  # a value without one (an array) is refused here
        out: list = []
        setup = self.nested(lambda: out.append(rhs_thunk()))
        rhs = out[0]
        tiles.one_truth_value(f"Python's `{op}`", (rhs,), loc)
        if lhs.dtype.is_bool and (rhs.dtype.is_bool if not isinstance(rhs, Static)
                                  else isinstance(rhs.value, bool)):
            return self._conditions(op, lhs, rhs, setup, loc)
        from .typing import common_dtype

        dtype = common_dtype(lhs, rhs, loc)
        key = self.fresh(op)
        self.unit.types.setdefault(key, dtype)
        self.emit(N.Assign(loc, key, typed(lhs, loc, dtype)))
        test = truth(N.Var(loc, key, dtype), loc)  # widened: as true as the operand was
        run_rhs = setup + [N.Assign(loc, key, typed(rhs, loc, dtype))]
        self.emit(N.If(loc, test, run_rhs, []) if op == "and" else N.If(loc, test, [], run_rhs))
        return N.Var(loc, key, dtype)

    def _conditions(self, op: str, lhs: N.Expr, rhs, setup: list, loc: Loc):
        if isinstance(rhs, Static):
            return lhs if bool(rhs.value) == (op == "and") else Static(op == "or")
        if not setup:
            return N.Logical(loc, op, lhs, rhs, T.bool_)
        # The right side needs statements (an inlined call): spell the short circuit out.
        key = self.fresh("logical")
        self.set_var(key, lhs, loc)
        cond = N.Var(loc, key, T.bool_)
        run_rhs = setup + [N.Assign(loc, key, rhs)]
        self.emit(N.If(loc, cond, run_rhs, []) if op == "and" else N.If(loc, cond, [], run_rhs))
        return N.Var(loc, key, T.bool_)

    def as_bool(self, value, loc: Loc):
        return Static(bool(value.value)) if isinstance(value, Static) else truth(value, loc)

    def expr_IfExp(self, node):
        loc = self.loc(node)
        cond = self.expr(node.test)
        cond = tiles.folded(cond)  # `x if EVEN else y` of a known name too
        if isinstance(cond, Static):
            return self.expr(node.body if static_truth(cond, self.loc(node.test)) else node.orelse)
        cond = truth(cond, self.loc(node.test))
        arms: list = []
        setups = [self.nested(lambda n=n: arms.append(self.expr(n))) for n in (node.body, node.orelse)]
        a, b = arms
        if is_number(a) and is_number(b):
            dtype = T.literal_dtype(a.value if isinstance(a.value, float) else b.value)
        else:
            from .typing import common_dtype

            dtype = common_dtype(a, b, loc)
        a, b = typed(a, loc, dtype), typed(b, loc, dtype)
        if not any(setups):
            return N.Select(loc, cond, a, b, dtype)
        key = self.fresh("select")
        self.unit.types.setdefault(key, dtype)
        self.emit(N.If(loc, cond, setups[0] + [N.Assign(loc, key, a)],
                       setups[1] + [N.Assign(loc, key, b)]))
        return N.Var(loc, key, dtype)

    def expr_Call(self, node):
        loc = self.loc(node)
        callee = self.expr(node.func)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            self.unsupported(node, "*args and **kwargs in calls")
        fn = callee.value if isinstance(callee, Static) else None
        if fn is None:
            raise CompileError("this value cannot be called", loc)
        name = intrinsics.intrinsic_name(fn)
        if name is None and not isinstance(fn, (T.DType, tile_values.TileMethod, ArrayMethod, lang.func)) \
                and not lang.plain_helper(fn):
            _refuse_call(fn, loc)  # before its arguments: `print("x =", x)` is about print
        # A string literal is a value only as a keyword argument (input_precision="tf32"),
        # as float()'s argument (float("inf"), Triton's spelling of infinity), print's and
        # a helper's (inlined: its comparisons of the string fold).
        helper = isinstance(fn, lang.func) or (name is None and lang.plain_helper(fn))
        args = [self.argument(a, strings=fn is float or fn is print or helper) for a in node.args]
        kwargs = {k.arg: self.argument(k.value, strings=True) for k in node.keywords}
        if isinstance(fn, T.DType):
            return intrinsics.conversion(fn)(self, args, kwargs, loc)
        if isinstance(fn, (tile_values.TileMethod, ArrayMethod)):
            return fn.call(self, args, kwargs, loc)
        if name is not None:
            self.check_track(name, loc)
            handler = intrinsics.HANDLERS.get(name)
            if handler is None:
                raise CompileError(f"{name}() is not available in this kind of kernel", loc)
            return handler(self, args, kwargs, loc)
        return self.inline(fn, args, kwargs, loc)

    def argument(self, node, strings: bool):
        if strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            return Static(node.value)
        return self.expr(node)

    def check_track(self, name: str, loc: Loc) -> None:
        track = name.partition(".")[0]
        if track in TRACK_HINTS and track != self.unit.track:
            raise CompileError(f"{name}() belongs to the {track} track; this is a "
                               f"{self.unit.track} kernel", loc, hint=TRACK_HINTS[track])


def _subscript_items(node: ast.Subscript) -> list:
    """The items of `x[a, b]` (one for `x[a]`)."""
    return node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]


def _no_attribute(value, attr: str, loc: Loc) -> CompileError:
    """`value.attr` does not exist: the error names a module by its name (not its repr and
    file) and suggests the public names (`__all__` where it has one) closest to `attr`."""
    import difflib  # only on this error: not at every compile's import of the frontend

    what = f"module {value.__name__!r}" if isinstance(value, pytypes.ModuleType) else repr(value)
    names = getattr(value, "__all__", None) or [n for n in dir(value) if not n.startswith("_")]
    close = difflib.get_close_matches(attr, names, n=3)
    return CompileError(f"{what} has no attribute {attr!r}", loc,
                        hint=f"did you mean {' or '.join(close)}?" if close else "")
