"""Python `ast` of a kernel (and of the helpers it calls) -> statements of typed IR.

Takes: a `FunctionSource`, the bindings of its parameters (array references, typed scalar
variables, static values) and the build's shared `Unit` (variable types, name counter,
assignments forced into one variable). Gives: a list of `ir` statements, with every helper
call (a `@vg.func`, or a plain function: `lang.plain_helper`) inlined as a `Region`.
Tile values (`ir.tiles`) flow through the same statements; their typing is in `tiles`, the
expressions are translated by `expressions.Expressions`, simple statements by
`statements.Statements` and control flow by `flow.ControlFlow`, this translator's base classes.
Guarantees: every node carries the user's `Loc` (with the chain of call sites for inlined
code); any construct outside the supported subset is a `CompileError` at its location that
says what to do instead. Names are values (`bindings`): a rebinding of another type is a
new variable; where bindings that meet must be joined, or a join widens a variable,
`Retry` is raised and the build runs again with what it learnt.
"""
from __future__ import annotations

import ast
import collections
import itertools
import math
import types as pytypes
from dataclasses import dataclass, field

from .. import lang
from .. import types as T
from ..errors import CompileError, Loc, SafetyError, UndefinedName, UnsupportedConstruct
from ..ir import nodes as N
from . import bindings, tiles
from .bindings import Conflict, Retry, VarBinding
from .expressions import Expressions
from .flow import ControlFlow
from .source import FunctionSource, function_source
from .statements import Statements, is_constexpr
from .typing import Static, is_number, is_string, static_value, typed


@dataclass
class Unit:
    """State shared by the translators of one kernel build."""

    types: dict  # variable name -> DType; survives retries
    block: tuple | None = None  # threads per block, when the build is specialized on it
    track: str = "simt"  # the kernel's track: intrinsics of the other track are refused
    counter: itertools.count = field(default_factory=itertools.count)
    unsafe: list = field(default_factory=list)
    assumptions: list = field(default_factory=list)  # `vg.assume` facts (`ir.Assumption`)
    call_stack: list = field(default_factory=list)
    shared_bytes: int = 0  # static shared memory allocated so far
    dynamic_shared: object = None  # the ArrayRef of `shared.dynamic`, once called
    unnamed: set = field(default_factory=set)  # ids of local/shared arrays not yet bound
    array_names: set = field(default_factory=set)  # names given to local/shared arrays
    known: dict = field(default_factory=dict)  # variable -> the compile-time int it holds
    selections: int = 0  # `if`s whose following statements were translated in each arm
    forced: dict = field(default_factory=dict)  # assignment site -> its variable; survives retries
    taken: set = field(default_factory=set)  # variables given to assignments in this attempt
    weak: set = field(default_factory=set)  # Python float parameters (`ir.nodes.Expr.weak`),
    # and the variables that hold only values made of them and literals
    strong: set = field(default_factory=set)  # variables a non-weak value is assigned to; survives retries


ALLOWED_GLOBALS = (bool, int, float, str, T.DType, pytypes.ModuleType, type(None))
MAX_STATIC_SHARED = 48 * 1024  # bytes of shared arrays a kernel may declare (CUDA's limit)

# Python that kernels do not have -> (how the error names it, what to do instead)
UNSUPPORTED = {
    ast.ListComp: ("a list comprehension", "comprehensions build Python lists; write a for loop over range()"),
    ast.DictComp: ("a dict comprehension", "comprehensions build Python dicts, which kernels cannot hold"),
    ast.SetComp: ("a set comprehension", "comprehensions build Python sets, which kernels cannot hold"),
    ast.GeneratorExp: ("a generator expression", "write a for loop over range()"),
    ast.Lambda: ("a lambda", "define a @vg.func helper instead"),
    ast.Try: ("try/except", "kernels cannot catch exceptions; check the condition with `if` instead"),
    ast.Raise: ("raise", "kernels cannot raise; return early instead"),
    ast.ClassDef: ("a class definition", "define classes outside the kernel"),
    ast.FunctionDef: ("a function definition", "define helpers outside the kernel, decorated with @vg.func"),
    ast.Global: ("global", "kernels cannot assign globals; pass an array and write into it"),
    ast.Nonlocal: ("nonlocal", "kernels cannot assign enclosing variables"),
    ast.List: ("a list", "kernels cannot build lists; use simt.local.array(shape, dtype)"),
    ast.Dict: ("a dict", "kernels cannot build dicts"),
    ast.Set: ("a set", "kernels cannot build sets"),
    ast.Delete: ("del", "kernels cannot delete names"),
    ast.JoinedStr: ("an f-string", "kernels cannot format strings"),
    ast.Assert: ("assert", "kernels cannot assert; check the condition with `if` and return early"),
    ast.Yield: ("yield", "kernels write their results into arrays"),
    ast.Await: ("await", "kernels run synchronously on the device"),
    ast.YieldFrom: ("yield from", "kernels write their results into arrays"),
    ast.NamedExpr: ("an assignment expression (:=)", "assign the value on a line of its own first"),
    ast.Match: ("a match statement", "use if/elif/else"),
    ast.Starred: ("unpacking with *", "pass or assign the values one by one"),
    ast.AsyncFor: ("async for", "kernels run synchronously on the device"),
    ast.AsyncWith: ("async with", "kernels run synchronously on the device"),
    ast.AsyncFunctionDef: ("an async function definition", "define helpers outside the kernel, "
                           "decorated with @vg.func"),
}


def _construct(node) -> str:
    """How an unsupported construct is named to the user: its table entry, else its source
    (never the name of an `ast` class)."""
    named = UNSUPPORTED.get(type(node))
    if named is not None:
        return named[0]
    text = ast.unparse(node).splitlines()[0] if hasattr(node, "_fields") else ""
    return f"`{text[:60]}`" if text else "this construct"


class Translator(Statements, ControlFlow, Expressions):
    def __init__(self, unit: Unit, src: FunctionSource, scope: dict, prefix: str = "",
                 call_site: Loc | None = None, return_label: str = "kernel"):
        self.unit = unit
        self.src = src
        self.scope = scope  # name -> VarBinding | N.ArrayRef | Static | Conflict (bindings)
        self.prefix = prefix
        self.call_site = call_site
        self.return_label = return_label
        self.stmts: list = []
        self.loop_depth = 0
        self.nesting = 0
        self.returns: list = []  # per `return`: None or a tuple of typed values' arity
        self.live = True  # whether the statement being translated can be reached
        self.loops: list = []  # per enclosing loop: the scopes at its `continue`s and `break`s
        self.reads: list = []  # (name, its binding) per read, in order (loops check them)
        self.bound_at: dict = {}  # (name, id of an array or constant) -> where it was bound
        self.stores = collections.Counter(n.id for n in ast.walk(src.tree)
                                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        self.assigned = set(self.stores)

    # ------------------------------------------------------------------ helpers

    def loc(self, node) -> Loc:
        return self.src.loc(node, self.call_site)

    def emit(self, stmt) -> None:
        self.stmts.append(stmt)

    def nested(self, body, loop: bool = False) -> list:
        """Translate `body` (statements, or a callable that translates) into a fresh list."""
        outer, self.stmts = self.stmts, []
        self.nesting += 1
        self.loop_depth += loop
        try:
            if callable(body):
                body()
            else:
                self.body(body)
            return self.stmts
        finally:
            self.stmts = outer
            self.nesting -= 1
            self.loop_depth -= loop

    def unsupported(self, node, what: str | None = None):
        hint = UNSUPPORTED.get(type(node), ("", ""))[1]
        raise UnsupportedConstruct(f"{what or _construct(node)} is not supported in kernels", self.loc(node),
                                   hint=hint)

    def fresh(self, stem: str) -> str:
        """A new name (of a temporary, a hoisted value or an array), unique in this build; a
        temporary's type from an earlier attempt does not apply to it."""
        key = f"{self.prefix}{stem}.{next(self.unit.counter)}"
        self.unit.types.pop(key, None)
        return key

    # ------------------------------------------------------------------ variables

    def set_var(self, key: str, value, loc: Loc) -> N.Expr:
        """Assign `value` to variable `key`, joining its type; returns the cast value."""
        types = self.unit.types
        if tiles.is_tile(value) or isinstance(types.get(key), tiles.TileType):
            value = tiles.assign_type(types, key, value, loc)
            self.emit(N.Assign(loc, key, value))
            return value
        if key not in types:
            types[key] = typed(value, loc).dtype
        elif not is_number(value) and value.dtype is not types[key]:
            old = types[key]
            try:
                joined = T.promote(old, value.dtype)
            except TypeError as exc:
                raise CompileError(f"variable {bindings.display(key)!r} holds {old.name} "
                                   f"elsewhere but {value.dtype.name} here: {exc}", loc) from None
            if joined is not old:
                types[key] = joined
                raise Retry
        value = typed(value, loc, types[key])
        self.emit(N.Assign(loc, key, value))
        return value

    def temporary(self, value, loc: Loc):
        """`value` held in a fresh variable, so later assignments cannot change it."""
        if isinstance(value, (Static, N.ArrayRef, N.Const)):
            return value
        key = self.fresh("tmp")
        self.set_var(key, value, loc)
        return self.variable(key, loc)

    def hoist(self, value: N.Expr, loc: Loc) -> N.Var:
        """Evaluate `value` (an expression with an effect) once, here, into a variable."""
        key = self.fresh("t")
        self.unit.types.setdefault(key, value.dtype)
        self.emit(N.Assign(loc, key, value))
        return N.Var(loc, key, value.dtype)

    def bind(self, name: str, value, node, parameter: bool = False) -> None:
        """Bind `name` to `value` (Python's rebinding: a value of another type is a new
        variable; `bindings` says where bindings must agree); `parameter`: a helper's
        parameter bound to its argument (before the body runs)."""
        loc = self.loc(node)
        if isinstance(value, N.ArrayRef) and id(value) in self.unit.unnamed:
            self.name_array(value, name)
        if isinstance(value, N.ArrayRef) or (isinstance(value, Static) and not is_number(value)):
            self.scope[name] = value
            self.bound_at[name, id(value)] = loc
            return
        vtype = tiles.TileType(value.dtype, tiles.shape_of(value)) if tiles.is_tile(value) \
            else self.weak_type(name, value) or typed(value, loc).dtype
        weak = not tiles.is_tile(value) and bool(getattr(value, "weak", False))
        key = bindings.key_for(self.unit, self.scope, name, loc, vtype, self.prefix + name,
                               weak and self.unit.weak)
        self.weakness(key, weak)
        self.set_var(key, value, loc)
        self.scope[name] = VarBinding(key, frozenset({bindings.site(loc)}), loc)
        # Bound once, at the top level, to a compile-time int or bool: the name is that value
        # wherever it is read (a shape, a constexpr argument, a condition decided while
        # compiling), as `tiles.compile_time` reads it. (A float is not: the variable holds
        # it rounded to its dtype, a constant would not be.)
        known = tiles.compile_time(value)
        if known is not None and type(known.value) in (int, bool) and not self.nesting \
                and self.stores[name] == (0 if parameter else 1):
            self.unit.known[key] = known.value

    def weakness(self, key: str, weak: bool) -> None:
        """A variable assigned only weak values (a Python float argument, or a value made of
        them and literals: `scale2 = scale * 1.44`) is weak where it is read, as they are;
        one also assigned another value is not, in any attempt (translated again)."""
        if weak and key not in self.unit.strong:
            self.unit.weak.add(key)
        elif not weak and key in self.unit.weak:
            self.unit.weak.discard(key)
            self.unit.strong.add(key)
            raise bindings.Retry

    def weak_type(self, name: str, value):
        """A Python number is weak, as in expressions: assigned to a name holding a scalar
        whose dtype holds it, it takes that dtype (`v = float("inf")` keeps v float16)."""
        current = self.scope.get(name)
        if not is_number(value) or not isinstance(current, VarBinding):
            return None
        old = self.unit.types.get(current.key)
        try:
            return old if isinstance(old, T.DType) and T.promote_weak(old, value.value) is old \
                else None
        except (TypeError, ValueError, OverflowError):
            return None

    def assignment(self, name: str, binding) -> Loc:
        """Where `name` was bound to `binding` (for messages)."""
        if isinstance(binding, VarBinding):
            return binding.loc
        return self.bound_at.get((name, id(binding))) or getattr(binding, "loc", None) \
            or self.loc(self.src.tree)

    def read_name(self, node: ast.Name):
        name, loc = node.id, self.loc(node)
        binding = self.scope.get(name)
        if isinstance(binding, Conflict):
            bindings.join(self.unit, name, binding.options, loc)  # retries, or refuses
        if binding is not None:
            self.reads.append((name, binding))
        if isinstance(binding, VarBinding):
            return self.variable(binding.key, loc)
        if binding is not None:
            return binding
        if name in self.assigned:
            raise SafetyError(f"variable {name!r} is used before it is assigned", loc, code="VG303")
        found, value = self.src.lookup(name)
        if not found:
            raise UndefinedName(name, loc)
        return self.static_global(name, value, loc)

    def variable(self, key: str, loc: Loc) -> N.Var:
        """A read of variable `key` (of a tile variable: carrying its shape)."""
        kind = self.unit.types[key]
        if isinstance(kind, tiles.TileType):
            return tiles.tile_var(loc, key, kind)
        var = N.Var(loc, key, kind, self.unit.known.get(key))
        if key in self.unit.weak:
            var.weak = True  # a Python float argument (`ir.nodes.Expr.weak`)
        return var

    def static_global(self, name: str, value, loc: Loc) -> Static:
        ok = isinstance(value, ALLOWED_GLOBALS) or callable(value) or (
            isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value)) \
            or T.named_by_numpy(value) is not None
        if not ok:
            raise CompileError(
                f"kernel reads {name!r}, a {type(value).__name__}: kernels can only read "
                "numbers, strings, dtypes, modules and functions from the enclosing scope", loc,
                hint="pass it as an argument (arrays) or as a vg.constexpr parameter")
        return static_value(value)

    # ------------------------------------------------------------------ local arrays, calls

    def local_array(self, shape: tuple, dtype: T.DType, loc: Loc, space: str = "local",
                    label: str | None = None) -> N.ArrayRef:
        """A `local.array` (per thread) or a static `shared.array` (one per block); `label`
        names it in messages (else its space does)."""
        if space == "shared":
            size = dtype.itemsize * math.prod(shape)
            self.unit.shared_bytes += -self.unit.shared_bytes % 16 + size  # 16-byte aligned
            if self.unit.shared_bytes > MAX_STATIC_SHARED:
                raise CompileError(f"this kernel's shared arrays need {self.unit.shared_bytes} "
                                   f"bytes, more than the {MAX_STATIC_SHARED} a block may "
                                   "declare statically", loc, hint="use simt.shared.dynamic("
                                   "dtype) with shared_bytes= at the launch for more")
        ref = N.ArrayRef(loc, self.fresh(label or space), N.ArrayType(dtype, len(shape), space,
                                                             shape=shape))
        self.unit.unnamed.add(id(ref))
        self.emit(N.LocalAlloc(loc, ref))
        return ref

    def bind_constant(self, name: str, value, node) -> None:
        """`NAME: vg.constexpr = value` (and a helper parameter so annotated): the name is
        the compile-time number itself, as if the value were written in its place, so it
        can size arrays and unroll loops."""
        loc = self.loc(node)
        value = tiles.folded(value)
        if not (is_number(value) or is_string(value)):
            raise CompileError(f"{name!r} is declared vg.constexpr, but its value is not known "
                               "while compiling", loc, hint="compute it from literals, "
                               "vg.constexpr parameters and the shapes of local and shared arrays")
        if isinstance(self.scope.get(name), (VarBinding, Conflict)):
            raise CompileError(f"{name!r} is a variable; a vg.constexpr name cannot be one too",
                               loc, hint="use another name")
        self.scope[name] = value

    def name_array(self, ref: N.ArrayRef, name: str) -> None:
        """A local or shared array takes the name of the variable it is first bound to (for
        messages), made unique: `tile`, or `helper.3.tile` inside an inlined helper."""
        self.unit.unnamed.discard(id(ref))
        taken = self.unit.array_names | {v.name for v in self.scope.values()
                                         if isinstance(v, N.ArrayRef)}
        unique = self.prefix + name
        while unique in taken:
            unique = f"{self.prefix}{name}.{next(self.unit.counter)}"
        ref.name = unique
        self.unit.array_names.add(unique)

    def dynamic_shared(self, dtype: T.DType, loc: Loc) -> N.ArrayRef:
        """The block's dynamic shared memory as a 1-d array (one per kernel: every call of
        `shared.dynamic` means the same memory, so they must agree on the dtype)."""
        ref = self.unit.dynamic_shared
        if ref is None:
            ref = self.unit.dynamic_shared = N.ArrayRef(
                loc, "shared.dynamic", N.ArrayType(dtype, 1, "shared"))
            self.unit.unnamed.add(id(ref))
            self.emit(N.LocalAlloc(loc, ref))
        elif ref.dtype is not dtype:
            raise CompileError(f"shared.dynamic({dtype.name}) after shared.dynamic("
                               f"{ref.dtype.name}): a kernel has one dynamic shared array",
                               loc, hint="use one dtype, and carve parts of it by offset")
        return ref

    def inline(self, helper, args, kwargs, loc: Loc):
        """A call of a helper (a `@vg.func`, or a plain function: `lang.plain_helper`), inlined
        as a `Region`; gives its result."""
        fn = helper.fn if isinstance(helper, lang.func) else helper
        src = function_source(fn)
        if fn in self.unit.call_stack:
            raise UnsupportedConstruct(f"{src.name}() calls itself: recursion is not supported", loc,
                               hint="rewrite it as a loop")
        spec = src.tree.args
        if spec.vararg or spec.kwarg or spec.kwonlyargs:
            raise CompileError(f"{src.name}() uses *args, **kwargs or keyword-only parameters, "
                               "which kernel helpers do not support", loc)
        names = [a.arg for a in spec.posonlyargs + spec.args]
        defaults = dict(zip(names[len(names) - len(fn.__defaults__ or ()):],
                            (static_value(d) for d in fn.__defaults__ or ())))
        if len(args) > len(names):
            raise CompileError(f"{src.name}() takes {len(names)} arguments, {len(args)} given", loc)
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names or key in bound:
                raise CompileError(f"{src.name}() got an unexpected or repeated argument {key!r}", loc)
            bound[key] = value
        prefix = f"{src.name}.{next(self.unit.counter)}."
        inner = Translator(self.unit, src, {}, prefix, loc, prefix + "exit")
        for name in names:
            value = bound.get(name, defaults.get(name))
            if value is None:
                raise CompileError(f"{src.name}() is missing argument {name!r}", loc)
            arg = next(a for a in spec.posonlyargs + spec.args if a.arg == name)
            if arg.annotation is not None and is_constexpr(inner.expr(arg.annotation)):
                inner.bind_constant(name, value, arg)
            else:
                inner.bind(name, value, arg, parameter=True)
        self.unit.call_stack.append(fn)
        try:
            inner.body(src.tree.body)
        finally:
            self.unit.call_stack.pop()
        self.emit(N.Region(loc, inner.return_label, inner.stmts))
        arities = set(inner.returns)
        if len(arities) > 1:
            raise CompileError(f"{src.name}() returns values of different shapes on different "
                               "paths", loc)
        arity = arities.pop() if arities else 0
        results = tuple(self.variable(f"{prefix}return{k}", loc) for k in range(arity))
        return Static(None) if arity == 0 else results[0] if arity == 1 else Static(results)
