"""The constants a kernel reads from its module and its closure, checked at every launch.

A kernel's body folds the numbers, strings, dtypes (verdigris's and NumPy's) and tuples of
them that it names from its module (`SCALE = 2.0`, `DT = vg.float32`, `DT = np.float16`)
or from the function it is defined in (a closure variable) into its code. So that a launch
always computes with the values they hold *now* (as a launch after `SCALE = 3.0` reads
3.0, whatever the block size or arguments), each
kernel keeps a snapshot of those names and values and compares it at every launch: by
identity, and where that fails by type and value; a change drops the kernel's
specializations, launch records and generated launchers, which are built again with the
new values (the disk cache keeps the old ones: switching back is a cache hit).

Takes: a kernel's Python function. Gives: `snapshot(fn)`, a tuple of (holder, name, value)
for every such name its code, or the code of a `@vg.func` helper it names, reads (holder:
the module's globals, or the closure cell); `current(holder, name)`, the value now;
`identical(snapshot)`, whether each holds the same object now, and `changed(snapshot)`,
whether any holds another value (of another type, or unequal). Guarantees: attributes of a
module (`cfg.SCALE`) and values of any other type are not constants here (they are read
when a specialization is built: docs/api.md); a name the code reads as an attribute of
something else that is also a module-level constant is kept too (a spurious entry costs a
launch one test).
"""
from __future__ import annotations

from .. import types as T
from ..lang import func

_MISSING = object()


def _is_constant(value) -> bool:
    if isinstance(value, tuple):
        return all(map(_is_constant, value))
    return value is None or isinstance(value, (bool, int, float, str, T.DType)) \
        or T.named_by_numpy(value) is not None  # kernels read np.float32 as vg.float32


def current(holder, name: str):
    """The value `name` has now in `holder` (a module's globals or a closure cell)."""
    if isinstance(holder, dict):
        return holder.get(name, _MISSING)
    try:
        return holder.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def snapshot(fn) -> tuple:
    entries, seen = [], set()

    def visit(function):
        code = function.__code__
        if code in seen:
            return
        seen.add(code)
        module = function.__globals__
        cells = zip(code.co_freevars, function.__closure__ or ())
        for holder, name in [(cell, name) for name, cell in cells] + \
                [(module, name) for name in code.co_names if name in module]:
            value = current(holder, name)
            if isinstance(value, func):
                visit(value.fn)
            elif value is not _MISSING and _is_constant(value):
                entries.append((holder, name, value))

    if fn is not None:
        visit(fn)
    return tuple(entries)


def _type_tag(value):
    return tuple(map(_type_tag, value)) if isinstance(value, tuple) else type(value)


def identical(entries: tuple) -> bool:
    return all(current(holder, name) is value for holder, name, value in entries)


def changed(entries: tuple) -> bool:
    for holder, name, value in entries:
        now = current(holder, name)
        if now is not value and (_type_tag(now) != _type_tag(value) or now != value):
            return True
    return False
