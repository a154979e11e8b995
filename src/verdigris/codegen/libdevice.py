"""libdevice, NVIDIA's math library in LLVM bitcode: the functions a kernel calls, linked in.

Takes: an `llvmlite.binding.ModuleRef` that declares some `__nv_*` functions, and the
target. Gives: `link(module, target)`, which links into it the definitions of exactly those
functions and what they use, as `linkonce_odr` (so they vanish once inlined);
`prefetch()`, which starts parsing the library on a daemon thread; `functions()`, the
names the library defines.

Guarantees: the library is read only when a kernel calls into it. The text for one set of
functions is made once per machine and then kept in the disk cache (`runtime.cache`, keyed
by the library file's path, size and mtime, the set and the compiler's version; ~0.1 ms to
read) and in memory. Making it costs one parse of the bitcode (~30 ms on the development
machine) and, in LLVM, internalizing everything but the set (held by `llvm.compiler.used`)
and global dead-code elimination (~6 ms); nothing prints or splits the whole library. A
prefetched parse is one call into LLVM, which releases the GIL: it overlaps the safety
check and the lowering; `link` waits for it and takes its module (at most one waits), or
parses then.
"""
from __future__ import annotations

import functools
import re
import threading

from ..errors import BackendError
from ..runtime import cache
from .toolkit import INSTALL_HINT, find_libdevice

_FORMAT = "libdevice functions, format 2"
_USED = re.compile(r"^@llvm\.compiler\.used = .*\n", re.M)
_DEFINE = re.compile(r"^define (?:internal )?", re.M)


def _path():
    path = find_libdevice()
    if path is None:
        raise BackendError("libdevice.10.bc (NVIDIA's math library) was not found", hint=INSTALL_HINT)
    return path


def _parse():
    """A fresh module of the whole library."""
    import llvmlite.binding as llvm

    return llvm.parse_bitcode(_path().read_bytes())


class _Ahead:
    """At most one parsed library waiting for `link`, and the thread making it."""

    lock = threading.Lock()
    thread: threading.Thread | None = None
    parsed = None


def prefetch() -> None:
    """Start parsing the library on a daemon thread; nothing when such a parse runs or
    waits. The thread imports llvmlite itself: on the caller's thread the import would
    wait for `nvptx.prefetch`'s thread, which loads it."""
    with _Ahead.lock:
        if _Ahead.thread is not None or _Ahead.parsed is not None:
            return
        thread = _Ahead.thread = threading.Thread(target=_parse_ahead, daemon=True,
                                                  name="verdigris-libdevice")
    thread.start()


def _parse_ahead() -> None:
    try:
        parsed = _parse()
    except Exception:  # no library, or a damaged one: `link` parses again and reports it
        parsed = None
    with _Ahead.lock:
        _Ahead.parsed, _Ahead.thread = parsed, None


def _take():
    """The module prefetched (waiting for its thread), else a fresh parse."""
    thread = _Ahead.thread
    if thread is not None:
        thread.join()
    with _Ahead.lock:
        parsed, _Ahead.parsed = _Ahead.parsed, None
    return parsed or _parse()


_TEXTS: dict = {}  # names -> _text(names, ...)


def _text(names: tuple, target: str) -> str:
    """Textual IR of the library holding the functions `names` (sorted) and everything
    they reference; `target` picks the target machine the passes run with (the text is the
    same for every target)."""
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
    import llvmlite.binding as llvm

    from .nvptx import target_machine

    module = _take()
    missing = [n for n in names if not _defines(module, n)]
    if missing:
        raise BackendError(f"libdevice has no function {', '.join(missing)}")
    # The roots, by name (the linker takes the library's own types for them).
    roots = llvm.parse_assembly("".join(f"declare void @{n}()\n" for n in names) + (
        f"@llvm.compiler.used = appending global [{len(names)} x ptr] "
        f"[{', '.join(f'ptr @{n}' for n in names)}], section \"llvm.metadata\"\n"))
    roots.triple, roots.data_layout = module.triple, module.data_layout
    module.link_in(roots)
    passes = llvm.create_new_module_pass_manager()
    passes.add_internalize_pass()  # all but llvm.compiler.used, which keeps the set alive
    passes.add_global_dead_code_eliminate_pass()
    passes.run(module, llvm.create_pass_builder(target_machine(target),
                                                llvm.create_pipeline_tuning_options(speed_level=0)))
    text = _DEFINE.sub("define linkonce_odr ", _USED.sub("", str(module)))
    cache.put(key, text.encode())
    return text


def _defines(module, name: str) -> bool:
    try:
        return not module.get_function(name).is_declaration
    except NameError:
        return False


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
    return frozenset(f.name for f in _parse().functions if not f.is_declaration)
