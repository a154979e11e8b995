"""Launch records: a disk-cache hit without the frontend.

A specialization compiled by an earlier process needs, at its first launch here, its image
and what the launch path precomputes: the ABI, which arguments are arrays and which are
written, the bounds proofs' launch condition, the fault table, the line that writes each
array and a tile kernel's launch block. An ahead-of-time bundle holds exactly these
(`bundle.launch_entry`); this module keeps them in the disk cache for every compiled
specialization, with the cache keys of its images (and, for a kernel with matrix products,
what its launches add: `tensormap.MatmulLaunch`), so the launch skips the frontend, the
verdict's record and the printing of the IR (about half of a hit's time).

Takes: a `KernelFunction`, its specialization key and, after a compile, the `Specialization`
and its loaded kernel. Gives: `load(kernel_fn, key) -> Specialization | None` (no IR, like a
bundle's: its `load` reads the image from the disk cache, or compiles it through the
frontend when the record lacks it), `save(...)`, `dependencies(kernel_fn)` (the text
below, or None) and `code_text(code)` (a code object's text, also the warm-up's marker).

A record's key is the kernel's *dependency text* (`dependencies`): its code (bytecode,
names, constants, line table), its options and annotations, and for each name its code
reads a stamp of the value it finds (closure cell, global or builtin): numbers, strings and
tuples of them by value; modules of the standard library's `math`, numpy and verdigris by
name, and their functions, classes and objects by name and value; `vg.func` helpers and the
plain functions kernels inline (`lang.plain_helper`) by their own dependency text. A kernel reading any other value (a module of the user's, a list, an
object) has no dependency text and no records: it always goes through the frontend, as an
edited global could change its code. With the compiler's fingerprint in every cache key
(`cache.key`), a record is used only by the compiler that wrote it.

Guarantees: a launch through a record does what the compiled kernel's launch does (alias
check, bounds guard and checked variant, faults reported at their line, generated
launchers); only kernels that passed the safety check have records; a kernel with matrix
products whose arrays the copy engine cannot describe compiles its variant without it
through the frontend; the cpu backend and ahead-of-time compiles never use records.
"""
from __future__ import annotations

import json
import os
import time
import types

from . import cache

# Modules whose attributes a kernel may read without making its code depend on a value
# that can change between processes (verdigris's own changes change the compiler's
# fingerprint).
STABLE_MODULES = frozenset({"math", "cmath", "numpy", "verdigris"})
_NOT_FOUND = object()


def load(kernel_fn, key: tuple):
    """The specialization for `key` from its launch record, or None (no record, or a
    kernel without dependency text)."""
    record_key = _record_key(kernel_fn, key)
    if record_key is None:
        return None
    data = cache.get(record_key)
    if data is None:
        return None
    entry = _parsed(data)
    if entry is None:
        return None
    from .bundle import specialization_of

    return specialization_of(entry, key, _loader(kernel_fn, key, entry))


def save(kernel_fn, spec, device: int, checked: bool, loaded) -> None:
    """Record how to launch `spec` (compiled through the frontend) and where the image just
    loaded on `device` is (`loaded.image_key`), beside the images recorded before."""
    record_key = _record_key(kernel_fn, spec.key)
    if record_key is None or getattr(loaded, "image_key", None) is None:
        return
    from .bundle import launch_entry
    from .launch_cuda import targets

    entry = _parsed(cache.get(record_key)) or dict(launch_entry(kernel_fn, spec), images={})
    matmul = getattr(loaded, "matmul_launch", None)
    entry["images"].setdefault(targets(device)[1], {})[_variant(checked)] = \
        [loaded.image_key, None if matmul is None else matmul.to_json()]
    cache.put(record_key, json.dumps(entry).encode())


def _parsed(data: bytes | None) -> dict | None:
    """A stored record, or None (none stored, or not one this module wrote)."""
    try:
        entry = json.loads(data) if data else None
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("images"), dict) else None


def _variant(checked: bool) -> str:
    return "checked" if checked else "proven"


def _loader(kernel_fn, key: tuple, entry: dict):
    def load_image(spec, device: int, checked: bool = False):
        from .bundle import cuda_kernel_of
        from .launch_cuda import targets

        def through_frontend() -> tuple:
            """(specialization, loaded kernel) of this variant through the frontend and
            the compiler (its disk cache too)."""
            from . import launch_cuda

            full = kernel_fn.specialization(key, beside_compile=True)
            return full, launch_cuda._compile(full, device, checked)

        start = time.perf_counter()
        arch = targets(device)[1]
        image_key, matmul = entry["images"].get(arch, {}).get(_variant(checked), (None, None))
        image = None if image_key is None else cache.get(image_key)
        if image is None:  # not compiled for this GPU or variant yet: through the frontend
            full, loaded = through_frontend()
            save(kernel_fn, full, device, checked, loaded)
            return loaded
        if matmul is not None:
            from .tensormap import MatmulLaunch

            matmul = (MatmulLaunch.from_json(matmul), lambda: through_frontend()[1]._without_tma())
        loaded = cuda_kernel_of(entry, image, device, kernel_fn.__name__, matmul)
        loaded.timings = {"launch record": time.perf_counter() - start}
        if os.environ.get("VERDIGRIS_LOG", "") == "compile":
            print(f"verdigris: {kernel_fn.__name__} for {arch} from the disk cache in "
                  f"{loaded.timings['launch record'] * 1e3:.1f} ms (its launch record: "
                  "no frontend)")
        return loaded

    return load_image


def _record_key(kernel_fn, key: tuple) -> str | None:
    text = dependencies(kernel_fn)
    return None if text is None else cache.key(text, ("launch record", key), "any target")


def dependencies(kernel_fn) -> str | None:
    """The kernel's dependency text (see the module's docstring), made once per kernel
    function (the frontend, too, reads the globals once per specialization); None when
    it reads a value that has no stamp."""
    text = kernel_fn.__dict__.get("_vg_dependencies", _NOT_FOUND)
    if text is _NOT_FOUND:
        try:
            text = "\n".join((kernel_fn.track, repr(sorted(kernel_fn.options.items())),
                              _function(kernel_fn.fn, {})))
        except _NoStamp:
            text = None
        kernel_fn._vg_dependencies = text
    return text


class _NoStamp(Exception):
    """A value a kernel reads that this module cannot tell apart across processes."""


def _function(fn, seen: dict) -> str:
    code = fn.__code__
    if code in seen:  # recursion: the text so far names it
        return seen[code]
    seen[code] = f"<{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}>"
    cells = {}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            cells[name] = cell.cell_contents
        except ValueError:  # not assigned yet
            cells[name] = _NOT_FOUND
    builtins = fn.__globals__.get("__builtins__", __builtins__)
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)
    parts = [code_text(code), _linetables(code)]
    for name in sorted(_names(code) | set(code.co_freevars)):
        if name in cells:
            value = cells[name]
        elif name in fn.__globals__:
            value = fn.__globals__[name]
        else:
            value = builtins.get(name, _NOT_FOUND)
        parts.append(f"{name}={'-' if value is _NOT_FOUND else _stamp(value, seen)}")
    for name, annotation in sorted(getattr(fn, "__annotations__", {}).items()):
        parts.append(f"{name}: {_stamp(annotation, seen)}")
    text = "\n".join(parts)
    seen[code] = text
    return text


def code_text(code) -> str:
    """The text of a function's code: its place, bytecode, names and constants (those of
    nested functions too), alike in every process (marshal's output is not: it depends on
    reference counts)."""
    parts = [code.co_filename, code.co_name, str(code.co_firstlineno), code.co_code.hex(),
             repr(code.co_names)]
    for const in code.co_consts:
        if isinstance(const, type(code)):
            parts.append(code_text(const))
        elif isinstance(const, frozenset):  # its order follows the hash seed
            parts.append(repr(sorted(map(repr, const))))
        else:
            parts.append(repr(const))
    return "\n".join(parts)


def _names(code) -> set:
    """The names a code object and the functions nested in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _linetables(code) -> str:
    """Where each instruction is in the file (lines and columns): error locations."""
    tables = [code.co_linetable.hex()]
    tables += [_linetables(c) for c in code.co_consts if isinstance(c, types.CodeType)]
    return ",".join(tables)


def _stamp(value, seen: dict) -> str:
    import numpy as np

    from ..lang import func, plain_helper

    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, tuple):
        return "(" + ",".join(_stamp(v, seen) for v in value) + ")"
    if isinstance(value, np.generic):
        return f"numpy.{value.dtype}:{value.item()!r}"
    if isinstance(value, types.ModuleType):
        if value.__name__.partition(".")[0] in STABLE_MODULES:
            return f"module:{value.__name__}"
        raise _NoStamp(value.__name__)
    if isinstance(value, func):
        return "vg.func:" + _function(value.fn, seen)
    if plain_helper(value):  # inlined as a vg.func is
        return "helper:" + _function(value, seen)
    if getattr(value, "__vg_kernel__", False) and getattr(value, "fn", None) is not None:
        return "kernel:" + _function(value.fn, seen)
    owner = getattr(value, "__module__", None) if isinstance(value, (type, types.FunctionType,
                                                                      types.BuiltinFunctionType)) \
        else type(value).__module__
    if isinstance(owner, str) and owner.partition(".")[0] in STABLE_MODULES | {"builtins"}:
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            return f"{owner}.{value.__qualname__}"
        if owner.partition(".")[0] != "builtins":  # a library's object: a dtype, a constant
            return f"{owner}.{type(value).__qualname__}:{value!r}"
    raise _NoStamp(type(value).__qualname__)
