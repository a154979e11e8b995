"""What a kernel's names are bound to: Python's rebinding read as SSA, and control-flow merges.

Takes: the translator's scope (name -> `VarBinding`, `ArrayRef`, `Static` or `Conflict`), the
build's `Unit` (variable types, the assignments forced into one variable), the value a name
is bound to and where. Gives: `key_for` (the variable an assignment writes), `merge` (the
scope where control flow meets), `join` (a read of a name whose bindings met) and
`check_carried` (a loop's back edges against the bindings its body read at its head).

Guarantees (docs/api.md, "Names are values"): a name rebound in straight-line code to a
value of another dtype, shape or kind gets a new variable; one rebound to a value of the
same type writes the variable it held. Where control flow merges, a name bound to different
variables becomes a `Conflict`, which is an error only when read: scalar variables join by
the promotion rules (every assignment that reaches the read is forced into one variable of
the joined dtype, and the build retries); tiles of one dtype and shape join too; anything
else (tiles that differ, a tile and a scalar, two arrays, two constants) is refused with an
error naming both assignments. A loop-carried name (one its body reads before rebinding it)
must come back from every back edge bound to a value that joins, in the same way, with the
binding it entered with. Reads always see the variable that the last assignment on every
path to them wrote: a merge that would mix two variables is a `Conflict`, never a silent
choice of one.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..ir.tiles import TileType
from .typing import Static


class Retry(Exception):
    """A variable's type widened, or assignments were joined: translate again from the start."""


@dataclass(eq=False)
class VarBinding:
    """A name bound to variable `key`, holding the value of one of the assignments `sites`."""

    key: str
    sites: frozenset  # assignment sites (see `site`) whose value may be the one held here
    loc: Loc  # an assignment of it, for messages


@dataclass(eq=False)
class Conflict:
    """A name whose bindings from the paths that meet here differ: (binding, loc) pairs."""

    options: tuple


def site(loc: Loc) -> tuple:
    """An assignment's identity across retries: its position, with the chain of call sites
    of the helpers it is inlined through (each call of a helper assigns its own variables)."""
    chain = []
    while loc is not None:
        chain.append((loc.file, loc.line, loc.col))
        loc = loc.call_site
    return tuple(chain)


def same(a, b) -> bool:
    """Whether two bindings of a name are the same value."""
    if a is b:
        return True
    if isinstance(a, VarBinding) and isinstance(b, VarBinding):
        return a.key == b.key
    return isinstance(a, Static) and isinstance(b, Static) and _identical(a.value, b.value)


def _identical(a, b) -> bool:
    """Whether two constants are the same value: equal numbers of one type, bit for bit
    (0.0 is not -0.0), tuples of such, else the same object."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(map(_identical, a, b))
    if isinstance(a, float):
        return a.hex() == b.hex()
    return a == b if isinstance(a, (bool, int, str)) else a is b


def key_for(unit, scope: dict, name: str, where: Loc, vtype, base: str, weak=()) -> str:
    """The variable that assigning a value of type `vtype` (a DType or TileType) to `name`
    at `where` writes: the one a merge forced this assignment into, else the one `name`
    holds if its type is `vtype` (and it is weak where `weak` is given, the weak variables,
    `translate.Unit.weak`, as the value is), else a new one."""
    forced = unit.forced.get(site(where))
    if forced is not None:
        return forced
    current = scope.get(name)
    if isinstance(current, VarBinding) and unit.types.get(current.key) == vtype \
            and (current.key in unit.weak) == bool(weak):
        return current.key
    taken = set(unit.forced.values())
    key, n = base, 0
    while key in unit.taken or key in taken:
        n += 1
        key = f"{base}#{n}"
    unit.taken.add(key)
    unit.types.pop(key, None)  # a type left by an earlier attempt does not apply
    return key


def display(key: str) -> str:
    """The user's name of variable `key` (less a helper's prefix and a version suffix)."""
    return key.rpartition(".")[2].partition("#")[0]


def merge(scopes: list, where) -> dict:
    """The scope where the paths ending in `scopes` meet; `where(name, binding)` is the
    assignment of a binding, for messages."""
    merged = {}
    for name in dict.fromkeys(n for s in scopes for n in s):
        options = []  # distinct bindings, VarBindings of one key joined
        for scope in scopes:
            if name not in scope:
                continue  # unassigned on that path: `assigned` refuses a read it reaches
            value = scope[name]
            for binding, loc in (value.options if isinstance(value, Conflict)
                                 else ((value, where(name, value)),)):
                _add_option(options, binding, loc)
        merged[name] = options[0][0] if len(options) == 1 else Conflict(tuple(options))
    return merged


def _add_option(options: list, binding, loc: Loc) -> None:
    for i, (other, other_loc) in enumerate(options):
        if same(other, binding):
            if isinstance(other, VarBinding) and other is not binding:
                options[i] = (VarBinding(other.key, other.sites | binding.sites, other.loc),
                              other_loc)
            return
    options.append((binding, loc))


def join(unit, name: str, options, loc: Loc, carried: bool = False) -> None:
    """Make the variables of `options` ((binding, loc) pairs of `name`) one, if they join:
    force every assignment reaching them into one variable and retry; else refuse, naming
    two assignments that disagree. `loc`: where they meet (a read, or a loop's back edge)."""
    bindings = [b for b, _ in options]
    if all(isinstance(b, VarBinding) for b in bindings):
        kinds = [unit.types[b.key] for b in bindings]
        joined = _joined(kinds)
        if joined is not None:
            target = min(b.key for b in bindings)
            unit.types[target] = joined
            for b in bindings:
                for s in b.sites:
                    unit.forced[s] = target
            raise Retry
    raise _disagree(unit, name, options, loc, carried)


def _joined(kinds: list):
    """The type that values of `kinds` join into, or None."""
    if all(isinstance(k, TileType) for k in kinds):
        return kinds[0] if all(k == kinds[0] for k in kinds) else None
    if any(isinstance(k, TileType) for k in kinds):
        return None
    joined = kinds[0]
    try:
        for k in kinds[1:]:
            joined = T.promote(joined, k)
    except TypeError:
        return None
    return joined


def _disagree(unit, name: str, options, loc: Loc, carried: bool = False) -> CompileError:
    pair = sorted(_differing(unit, options), key=lambda option: (option[1].line, option[1].col))
    first, second = (describe(unit, binding) for binding, _ in pair)
    assignments = "".join(f"\n  {describe(unit, binding)} is assigned at {at}:\n{at.excerpt()}"
                          for binding, at in pair)
    selecting = not any(isinstance(binding, VarBinding) for binding, _ in pair)
    if carried:
        return CompileError(
            f"{name!r} is carried around this loop (its body reads the value it had when the "
            f"iteration began), but it may be {first} or {second} there: a loop-carried "
            "variable keeps its kind, dtype and shape", loc,
            hint=("arrays swapped around a loop (ping-pong buffers): write two steps per "
                  "iteration, each naming its arrays, or call a helper with them in each order"
                  if selecting else "convert the new value back (.astype(...), a reshape) "
                  "before the iteration ends, or give it another name") + assignments)
    return CompileError(
        f"{name!r} may be {first} or {second} here, where control flow merges: bindings that "
        "meet must agree in kind, dtype and shape", loc,
        hint=("a name selects one of two arrays (or constants) only where statements of the "
              "block that holds the `if` read it, in at most 8 such `if`s a kernel; here, "
              "call a helper with the array in each arm" if selecting else
              "use another name for one of them, or convert it to the other's type before the "
              "paths meet") + assignments)


def _differing(unit, options):
    """Two options whose types do not join (the first two, if every pair joins)."""
    for i, a in enumerate(options):
        for b in options[i + 1:]:
            if not (isinstance(a[0], VarBinding) and isinstance(b[0], VarBinding)
                    and _joined([unit.types[a[0].key], unit.types[b[0].key]]) is not None):
                return a, b
    return options[0], options[1]


def describe(unit, binding) -> str:
    if isinstance(binding, VarBinding):
        kind = unit.types[binding.key]
        if isinstance(kind, TileType):
            return f"a {kind.dtype.name} tile of shape {tuple(kind.shape)}"
        return f"a {kind.name} scalar"
    if isinstance(binding, N.ArrayRef):
        return f"the array {binding.name!r}"
    value = binding.value if isinstance(binding, Static) else binding
    return f"the constant {getattr(value, '__name__', None) or repr(value)}"


def check_carried(unit, name: str, entry, back, where, loc: Loc) -> None:
    """`name` entered a loop bound to `entry`, which the body read; `back`, its binding at
    a back edge, must be the same variable, or one that joins with it."""
    if back is None or same(back, entry):
        return
    options = [(entry, where(name, entry))]
    for binding, at in (back.options if isinstance(back, Conflict) else ((back, where(name, back)),)):
        _add_option(options, binding, at)
    if len(options) == 1:
        return
    join(unit, name, options, loc, carried=True)
