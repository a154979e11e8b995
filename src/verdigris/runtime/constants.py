"""Module-level constants a kernel reads, checked at every launch.

A kernel's body folds the module-level numbers, strings, dtypes and tuples it names
(`SCALE = 2.0`, `DT = vg.float32`) into its code. So that a launch always computes with the
values the module holds *now* (as a launch after `SCALE = 3.0` reads 3.0, whatever the block
size or arguments), each kernel keeps a snapshot of those names and values and compares it
at every launch: by identity, and where that fails by type and value; a change drops the
kernel's specializations, launch records and generated launchers, which are built again
with the new values (the disk cache keeps the old ones: switching back is a cache hit).

Takes: a kernel's Python function. Gives: `snapshot(fn)`, a tuple of (module globals,
name, value) for every name its code, or the code of a `@vg.func` helper it names, reads
from its module as such a constant; `identical(snapshot)`, whether each holds the same
object now, and `changed(snapshot)`, whether any holds another value (of another type, or
unequal). Guarantees: names of a closure, attributes of a module (`cfg.SCALE`) and values
of any other type are not constants here (a closure is fixed when the kernel is defined;
see docs/api.md); a name the code reads as an attribute of something else that also has a
module-level constant of that name is kept too (a spurious entry costs a launch a test).
"""
from __future__ import annotations

from .. import types as T
from ..lang import func

_MISSING = object()


def _is_constant(value) -> bool:
    if isinstance(value, tuple):
        return all(map(_is_constant, value))
    return value is None or isinstance(value, (bool, int, float, str, T.DType))


def snapshot(fn) -> tuple:
    entries, seen = [], set()

    def visit(function):
        code = function.__code__
        if code in seen:
            return
        seen.add(code)
        module = function.__globals__
        for name in code.co_names:
            value = module.get(name, _MISSING)
            if isinstance(value, func):
                visit(value.fn)
            elif value is not _MISSING and _is_constant(value):
                entries.append((module, name, value))

    if fn is not None:
        visit(fn)
    return tuple(entries)


def _type_tag(value):
    return tuple(map(_type_tag, value)) if isinstance(value, tuple) else type(value)


def identical(entries: tuple) -> bool:
    """Whether each name still holds the very object the snapshot holds."""
    return all(module.get(name, _MISSING) is value for module, name, value in entries)


def changed(entries: tuple) -> bool:
    for module, name, value in entries:
        now = module.get(name, _MISSING)
        if now is not value and (_type_tag(now) != _type_tag(value) or now != value):
            return True
    return False
