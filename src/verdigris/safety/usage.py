"""What a kernel's body says about its parameters, for `verdigris check` (`scan`), which
specializes kernels without running their launches.

Takes: a kernel's or helper's Python function. Gives: `param_usage(fn) ->
{name: Usage}`: whether each parameter is an array (subscripted, `.shape`, the first
argument of `len`, an atomic or a tile operation) and of what rank, whether its elements
serve as indices (read directly, through names, or as a loaded or gathered tile that
indexes), whether a scalar is used as an integer (an index, a range, an integer-only
operator, a comparison with an integer); helpers it calls (`@vg.func`s and the plain
functions kernels inline, `lang.plain_helper`) are followed. `Usage.spec` turns that
into the type to specialize on: int64 where integers are used, else float32.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from .. import lang
from .. import types as T
from ..errors import Error
from ..frontend.source import function_source
from ..ir import nodes as N
from ..ir.tiles import TILE_ATOMIC_OPS
from .statics import decorator_name

INT_CALLS = {"global_id", "thread_id", "block_id", "block_dim", "grid_dim", "lane_id", "len",
             "int", "bid", "num_blocks"}
INT_ONLY_OPS = (ast.FloorDiv, ast.Mod, ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr,
                ast.BitXor, ast.Invert)
ARRAY_ATTRS = {"shape", "strides", "ndim", "dtype", "size"}
# tile operations whose first argument is an array -> the keyword (or position) of the
# tuple whose length is the array's rank ("indices": a tuple whose elements index it)
TILE_ARRAY_CALLS = {"load": ("index", 1), "store": ("index", 1), "gather": ("indices", 1),
                    "scatter": ("indices", 1),
                    **{f"atomic_{op}": ("index", 1) for op in TILE_ATOMIC_OPS},
                    **{f"scatter_{op}": ("indices", 1) for op in TILE_ATOMIC_OPS}}


@dataclass
class Usage:
    """What a kernel or helper body shows about one parameter."""

    array: bool = False
    rank: int = 1
    int_elements: bool = False  # its elements are used as indices
    int_scalar: bool = False  # used as an index, a bound or an integer operand
    int32_elements: bool = False  # a `block_ticket` counter or `tile.lock`'s locks: int32

    def merge(self, other: "Usage") -> None:
        self.array |= other.array
        self.rank = max(self.rank, other.rank)
        self.int_elements |= other.int_elements
        self.int_scalar |= other.int_scalar
        self.int32_elements |= other.int32_elements

    def spec(self, element: T.DType | None = None):
        """The type to specialize on; `element`: the array's element type where its launch
        states it."""
        if self.array:
            default = T.int32 if self.int32_elements else T.int64 if self.int_elements else T.float32
            return N.ArrayType(element or default, self.rank, "global", True, True)
        return T.int64 if self.int_scalar else T.float32


def _callee(node: ast.Call) -> str | None:
    return decorator_name(node.func)


def _int_names(tree) -> set:
    names: set = set()
    while True:
        before = len(names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _is_int(node.value, names):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                    and isinstance(node.iter, ast.Call) and _callee(node.iter) == "range":
                names.add(node.target.id)
        if len(names) == before:
            return names


def _is_int(node, names: set) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Call):
        return _callee(node) in INT_CALLS
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
    if isinstance(node, ast.Attribute):
        return node.attr == "warp_size"
    if isinstance(node, ast.BinOp):
        return not isinstance(node.op, ast.Div) and _is_int(node.left, names) \
            and _is_int(node.right, names)
    if isinstance(node, ast.UnaryOp):
        return _is_int(node.operand, names)
    if isinstance(node, ast.IfExp):
        return _is_int(node.body, names) and _is_int(node.orelse, names)
    return False


def _index_positions(tree):
    """Expressions whose value is used as an index or a loop bound."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            yield node.slice
        elif isinstance(node, ast.Call) and _callee(node) == "range":
            yield from node.args
        elif isinstance(node, ast.Call) and (_callee(node) or "").startswith("atomic_"):
            yield from node.args[1:2]
        elif isinstance(node, ast.Call) and _callee(node) == "lock":
            yield from node.args[1:2]  # the lock element's index
        elif isinstance(node, ast.Call) and _callee(node) == "rand":
            yield from node.args[:1]  # the seed
        elif isinstance(node, ast.Call) and _callee(node) in TILE_ARRAY_CALLS:
            # a tile's index or a gather's indices: `tile.load(x, index=(r, label), shape=())`
            keyword, position = TILE_ARRAY_CALLS[_callee(node)]
            yield from [k.value for k in node.keywords if k.arg == keyword] or node.args[position:position + 1]


def param_usage(fn, seen=frozenset()) -> dict:
    """Parameter name -> Usage, from the body of `fn` and of the helpers it calls."""
    src = function_source(fn)
    args = src.tree.args
    usage = {a.arg: Usage() for a in args.posonlyargs + args.args + args.kwonlyargs}
    ints = _int_names(src.tree)

    def param(node) -> Usage | None:
        return usage.get(node.id) if isinstance(node, ast.Name) else None

    flows = _element_flows(src.tree, set(usage))
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Subscript) and param(node.value):
            u = param(node.value)
            u.array = True
            u.rank = max(u.rank, len(node.slice.elts) if isinstance(node.slice, ast.Tuple) else 1)
        elif isinstance(node, ast.Attribute) and node.attr in ARRAY_ATTRS and param(node.value):
            param(node.value).array = True
        elif isinstance(node, ast.BinOp) and isinstance(node.op, INT_ONLY_OPS):
            for side in (node.left, node.right):
                if param(side):
                    param(side).int_scalar = True
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_int(s, ints) for s in sides):
                for side in sides:
                    if param(side):
                        param(side).int_scalar = True
        elif isinstance(node, ast.Call):
            _call_usage(node, src, usage, flows, seen | {fn})
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "shape" and param(node.value.value) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            param(node.value.value).rank = max(param(node.value.value).rank, node.slice.value + 1)
    for position in _index_positions(src.tree):
        for node in ast.walk(position):
            if param(node):
                param(node).int_scalar = True
            for name in _elements_read(node, set(usage)) | flows.get(getattr(node, "id", None), set()):
                usage[name].int_elements = True
    return usage


def _elements_read(node, params: set) -> set:
    """The parameters whose elements `node` itself reads: `idx[i]`, `atomic_add(count, 0, 1)`,
    `tile.load(idx, ...)`, `tile.gather(idx, ...)`."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
            and node.value.id in params:
        return {node.value.id}
    callee = _callee(node) if isinstance(node, ast.Call) else None
    if callee and (callee.startswith("atomic_") or callee in ("load", "gather")) and node.args \
            and isinstance(node.args[0], ast.Name) and node.args[0].id in params:
        return {node.args[0].id}
    return set()


def _element_flows(tree, params: set) -> dict:
    """Local name -> the parameters whose elements its value is computed from (`j = idx[i]`,
    `k = int(idx[i]) + 1`, `slot = atomic_add(count, 0, 1)`, and names made of those)."""
    flows: dict = {}
    while True:
        before = sum(map(len, flows.values()))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found = set()
                for part in ast.walk(node.value):
                    found |= _elements_read(part, params) | flows.get(getattr(part, "id", None), set())
                for target in targets:
                    if isinstance(target, ast.Name) and found:
                        flows.setdefault(target.id, set()).update(found)
        if sum(map(len, flows.values())) == before:
            return flows


def _call_usage(node: ast.Call, src, usage: dict, flows: dict, seen: frozenset) -> None:
    name = _callee(node)
    first = node.args[0] if node.args else None
    if (name == "len" or (name or "").startswith("atomic_") or name in TILE_ARRAY_CALLS) \
            and isinstance(first, ast.Name) and first.id in usage:
        usage[first.id].array = True
        if name in TILE_ARRAY_CALLS:
            keyword, position = TILE_ARRAY_CALLS[name]
            index = next((k.value for k in node.keywords if k.arg == keyword),
                         node.args[position] if len(node.args) > position else None)
            if isinstance(index, ast.Tuple):
                usage[first.id].rank = max(usage[first.id].rank, len(index.elts))
    if name in ("block_ticket", "lock") and isinstance(first, ast.Name) and first.id in usage:
        usage[first.id].array = usage[first.id].int_elements = True  # tickets' counter, or locks
        usage[first.id].int32_elements = True
    if not isinstance(node.func, ast.Name):
        return
    found, helper = src.lookup(node.func.id)
    # the helpers kernels inline: `@vg.func`s and plain functions (`lang.plain_helper`)
    helper = helper.fn if found and isinstance(helper, lang.func) else \
        helper if found and lang.plain_helper(helper) else None
    if helper is None or helper in seen:
        return
    try:
        inner = param_usage(helper, seen)
    except Error:  # a helper without readable source: the frontend will say so
        return
    for arg, helper_param in zip(node.args, inner):
        if isinstance(arg, ast.Name) and arg.id in usage:
            usage[arg.id].merge(inner[helper_param])
        elif isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) \
                and arg.value.id in usage and inner[helper_param].int_scalar:
            usage[arg.value.id].int_elements = True  # an element the helper indexes with
        elif isinstance(arg, ast.Name) and inner[helper_param].int_scalar:
            for name in flows.get(arg.id, ()):  # a name made of elements the helper indexes with
                usage[name].int_elements = True
