"""libdevice, NVIDIA's math library in LLVM bitcode: the functions a kernel calls, linked in.

Takes: an `llvmlite.binding.ModuleRef` that declares some `__nv_*` functions, and the
target. Gives: `link(module, target)`, which links into it the definitions of exactly those
functions and what they use, as `linkonce_odr` (so they vanish once inlined);
`prefetch(parse)`, which starts LLVM's setup and (parse=True) the parse of the library on
a daemon thread; `functions()`, the names the library defines.

Guarantees: the library is read only when a kernel calls into it. The text for one set of
functions is made once per machine and then kept in the disk cache (`runtime.cache`, keyed
by the library file's path, size and mtime, the set and the compiler's version; ~0.1 ms to
read) and in memory. Making it costs one parse of the bitcode (~30 ms on the development
machine) and LLVM's global dead-code elimination with the set as the only roots (~10 ms);
nothing prints or splits the whole library. LLVM releases the GIL while it parses, so a
prefetched parse overlaps the safety check and the lowering; `link` waits for it and takes
its module (at most one waits), or parses then. Importing this module imports no LLVM.
"""
from __future__ import annotations

import functools
import threading

from ..errors import BackendError
from ..runtime import cache
from .toolkit import INSTALL_HINT, find_libdevice

_FORMAT = "libdevice functions, format 2"


def _path():
    path = find_libdevice()
    if path is None:
        raise BackendError("libdevice.10.bc (NVIDIA's math library) was not found", hint=INSTALL_HINT)
    return path


def _parse():
    """A fresh module of the whole library, every definition internal (so that dead-code
    elimination may drop it) and keyed by name."""
    import llvmlite.binding as llvm

    module = llvm.parse_bitcode(_path().read_bytes())
    definitions = {}
    for function in module.functions:
        if not function.is_declaration:
            function.linkage = "internal"
            definitions[function.name] = function
    return module, definitions


class _Ahead:
    """At most one parsed library waiting for `link`, and the thread making it."""

    lock = threading.Lock()
    thread: threading.Thread | None = None
    parsed: tuple | None = None


def prefetch(parse: bool) -> None:
    """Start, on a daemon thread, LLVM's setup (`nvptx`) and, with `parse`, the parse of the
    library; nothing when such a thread runs, or a parsed library waits."""
    with _Ahead.lock:
        if _Ahead.thread is not None or _Ahead.parsed is not None:
            return
        thread = _Ahead.thread = threading.Thread(target=_ahead, args=(parse,), daemon=True,
                                                  name="verdigris-prefetch")
    thread.start()


def _ahead(parse: bool) -> None:
    parsed = None
    try:
        from .nvptx import initialize

        initialize()
        if parse:
            parsed = _parse()
    except Exception:  # no LLVM or no library: the compile does it again and reports it
        pass
    with _Ahead.lock:
        _Ahead.parsed, _Ahead.thread = parsed, None


def _take() -> tuple:
    """The module prefetched (waiting for its thread), else a fresh parse."""
    thread = _Ahead.thread
    if thread is not None:
        thread.join()
    with _Ahead.lock:
        parsed, _Ahead.parsed = _Ahead.parsed, None
    return parsed or _parse()


_TEXTS: dict = {}  # names -> _text(names)


def _text(names: tuple, target: str) -> str:
    """Textual IR of the library holding `names` and everything they reference (`target`
    only picks the target machine the pass manager runs with: the text is the same)."""
    text = _TEXTS.get(names)
    if text is None:
        text = _TEXTS[names] = _make_text(names, target)
    return text


def _make_text(names: tuple, target: str) -> str:
    path = _path()
    stat = path.stat()
    key = cache.key(f"{path}:{stat.st_size}:{stat.st_mtime_ns}", (_FORMAT, names), "any target")
    stored = cache.get(key)
    if stored is not None:
        return stored.decode()
    module, definitions = _take()
    missing = [n for n in names if n not in definitions]
    if missing:
        raise BackendError(f"libdevice has no function {', '.join(missing)}")
    for name in names:
        definitions[name].linkage = "external"
    import llvmlite.binding as llvm

    from .nvptx import target_machine

    passes = llvm.create_new_module_pass_manager()
    passes.add_global_dead_code_eliminate_pass()
    passes.run(module, llvm.create_pass_builder(target_machine(target),
                                                llvm.create_pipeline_tuning_options(speed_level=0)))
    for function in module.functions:
        if not function.is_declaration:
            function.linkage = "linkonce_odr"
    text = str(module)
    cache.put(key, text.encode())
    return text


def link(module, target: str) -> None:
    """Link the libdevice functions `module` declares (if any) into it."""
    wanted = sorted(f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_"))
    if not wanted:
        return
    import llvmlite.binding as llvm

    lib = llvm.parse_assembly(_text(tuple(wanted), target))
    lib.triple, lib.data_layout = module.triple, module.data_layout
    module.link_in(lib)


@functools.cache
def functions() -> frozenset:
    """The names of the functions libdevice defines."""
    return frozenset(_parse()[1])
