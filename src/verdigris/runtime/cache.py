"""The on-disk cache of compiled artifacts (PTX, cubin), shared across processes.

Takes: the kernel's source text, its specialization key, the target, and the bytes to keep.
Gives: `key(source, spec_key, target) -> str`, `get(key) -> bytes | None`,
`put(key, data)`, `cache_dir() -> str`, `usage() -> (entries, bytes)`, `clear() -> (entries,
bytes)` (which removes only the cache's own files), and `code(source, filename)`: `compile(source,
filename, "exec")` kept here, marshalled, under the source and this Python's bytecode tag
(the runtime's generated launchers and binders: reading one back takes ~0.05 ms,
compiling it ~0.1-0.4 ms).

Where: `$VERDIGRIS_CACHE_DIR` if set, else `$XDG_CACHE_HOME/verdigris`, else
`~/.cache/verdigris`; one file per key.

Guarantees:
- The key is the SHA-256 of source, `repr(spec_key)`, target, and a fingerprint of the
  compiler (verdigris's source files and llvmlite's library: path, size, mtime), so a new
  or edited compiler never reads an older one's output.
- Writes are atomic (a private temporary file, then `os.replace`): a reader sees a whole
  entry or none, also with several processes writing the same key.
- The cache never breaks compilation: an unreadable or unwritable directory reads as a
  miss and drops the write. A hit is one `open` + `read`.
"""
from __future__ import annotations

import functools
import hashlib
import marshal
import os
import re
import sys
import threading


def cache_dir() -> str:
    explicit = os.environ.get("VERDIGRIS_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "verdigris")


@functools.cache
def _compiler_versions() -> str:
    """verdigris's source files and llvmlite's library, by name, size and mtime: a changed
    compiler (an edited checkout too) never reads an older one's output. Imports nothing;
    ~0.5 ms, once per process (a directory walk without its `__pycache__` folders)."""
    import importlib.util

    entries: list = []
    _stamps(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".py", entries)
    spec = importlib.util.find_spec("llvmlite")
    if spec is not None and spec.submodule_search_locations:
        _stamps(os.path.join(next(iter(spec.submodule_search_locations)), "binding"),
                "llvmlite", entries, recurse=False)
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()


def _stamps(folder: str, part: str, out: list, recurse: bool = True) -> None:
    """Append "path size mtime" of each file under `folder` whose name has `part`."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if part in entry.name and entry.is_file():
                stat = entry.stat()
                out.append(f"{entry.path} {stat.st_size} {stat.st_mtime_ns}")
            elif recurse and entry.name != "__pycache__" and entry.is_dir():
                _stamps(entry.path, part, out)


def key(source: str, spec_key, target: str) -> str:
    """The cache key (64 hex digits) of one compiled specialization."""
    digest = hashlib.sha256()
    for part in (source, repr(spec_key), target, _compiler_versions()):
        digest.update(part.encode())
        digest.update(b"\0")  # a separator, so parts cannot run into each other
    return digest.hexdigest()


def _path(key: str) -> str:
    return os.path.join(cache_dir(), key)


def get(key: str) -> bytes | None:
    """The bytes stored under `key`, or None."""
    try:
        with open(_path(key), "rb") as f:
            return f.read()
    except OSError:
        return None


def put(key: str, data: bytes) -> None:
    """Store `data` under `key` (atomically; failures are ignored)."""
    directory = cache_dir()
    tmp = os.path.join(directory, f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, _path(key))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


_KEY = re.compile(r"[0-9a-f]{64}")  # an entry's name (a temporary file's: with a prefix and suffix)


def _own_files() -> list:
    """The cache's entries (and temporary files a write left), by name: 64 hex digits."""
    try:
        with os.scandir(cache_dir()) as found:
            return [e for e in found if e.is_file() and _KEY.fullmatch(e.name.lstrip(".").split(".")[0])]
    except OSError:
        return []


def usage() -> tuple:
    """(entries, bytes) the cache holds."""
    files = _own_files()
    return len(files), sum(e.stat().st_size for e in files)


def clear() -> tuple:
    """Remove the cache's entries; other files in its folder stay. (entries, bytes) removed."""
    count = size = 0
    for entry in _own_files():
        try:
            bytes_ = entry.stat().st_size
            os.unlink(entry.path)
        except OSError:  # another process removed or replaced it: nothing to do
            continue
        count, size = count + 1, size + bytes_
    return count, size


def code(source: str, filename: str):
    """`compile(source, filename, "exec")`, from the cache when compiled before."""
    entry = key(source, ("code", sys.implementation.cache_tag), filename)
    stored = get(entry)
    if stored is not None:
        try:
            return marshal.loads(stored)
        except (ValueError, EOFError, TypeError):  # a damaged entry: compile it again
            pass
    compiled = compile(source, filename, "exec")
    put(entry, marshal.dumps(compiled))
    return compiled
