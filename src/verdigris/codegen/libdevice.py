"""libdevice, NVIDIA's math library in LLVM bitcode: loaded once, linked per kernel.

Takes: an `llvmlite.binding.ModuleRef` that declares some `__nv_*` functions. Gives:
`link(module)`, which links into it the definitions of exactly those functions and what
they use, as `linkonce_odr` (so they vanish once inlined); `functions()`, the names it
defines.

Guarantees: libdevice is loaded at most once per process, and only when a kernel calls
into it. Parsing the bitcode costs ~50 ms and cloning the module about as much, so the
parsed module is printed once and split into its top-level entities (globals, definitions,
declarations); a kernel then parses only the few kilobytes it needs. The split (~100 ms to
make) is kept in the on-disk cache (`runtime.cache`, keyed by the library file's path,
size and mtime and the compiler's version), so a later process loads it in ~5 ms.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass

import llvmlite.binding as llvm

from ..errors import BackendError
from ..runtime import cache
from .toolkit import INSTALL_HINT, find_libdevice

_NAME = re.compile(r"@([-\w.$]+)")
_DEFINE = re.compile(r"define (?:internal )?")


@dataclass(frozen=True)
class _Library:
    types: str  # the struct type definitions
    entities: dict  # name -> text of a global variable or a function definition
    declarations: dict  # name -> `declare` line (intrinsics, __nvvm_reflect)
    references: dict  # name -> the names an entity's text refers to
    trailer: str  # attribute groups and numbered metadata, which entities refer to

    def to_json(self) -> bytes:
        fields = asdict(self)
        fields["references"] = {name: sorted(refs) for name, refs in self.references.items()}
        return json.dumps(fields).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "_Library":
        fields = json.loads(data)
        fields["references"] = {name: frozenset(refs) for name, refs in fields["references"].items()}
        return cls(**fields)


@functools.cache
def _library() -> _Library:
    path = find_libdevice()
    if path is None:
        raise BackendError("libdevice.10.bc (NVIDIA's math library) was not found", hint=INSTALL_HINT)
    stat = path.stat()
    key = cache.key(f"{path}:{stat.st_size}:{stat.st_mtime_ns}", "libdevice split, format 1", "")
    stored = cache.get(key)
    if stored is not None:
        try:
            return _Library.from_json(stored)
        except (ValueError, KeyError, TypeError):  # a damaged entry: make it again
            pass
    library = _split(str(llvm.parse_bitcode(path.read_bytes())))
    cache.put(key, library.to_json())
    return library


def _split(text: str) -> _Library:
    """The top-level entities of a module's textual IR."""
    types, trailer, entities, declarations = [], [], {}, {}
    lines = iter(text.splitlines())
    for line in lines:
        if line.startswith("define "):
            body = [line]
            while body[-1] != "}":
                body.append(next(lines))
            entities[_NAME.search(line).group(1)] = "\n".join(body)
        elif line.startswith("declare "):
            declarations[_NAME.search(line).group(1)] = line
        elif line.startswith("@"):
            entities[_NAME.match(line).group(1)] = line
        elif line.startswith("%"):
            types.append(line)
        elif line.startswith("attributes #") or re.match(r"!\d+ = ", line):
            trailer.append(line)
    references = {name: frozenset(_NAME.findall(body)) - {name} for name, body in entities.items()}
    return _Library("\n".join(types), entities, declarations, references, "\n".join(trailer))


def functions() -> frozenset:
    """The names of the functions libdevice defines."""
    lib = _library()
    return frozenset(n for n, body in lib.entities.items() if body.startswith("define "))


@functools.lru_cache(maxsize=256)
def _extract(names: tuple) -> str:
    """Textual IR holding `names` and everything they reference, definitions linkonce_odr."""
    lib = _library()
    needed, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(lib.references.get(name, ()))
    missing = [n for n in names if n not in lib.entities]
    if missing:
        raise BackendError(f"libdevice has no function {', '.join(missing)}")
    parts = [lib.types]
    for name in sorted(needed):
        if name in lib.entities:
            parts.append(_DEFINE.sub("define linkonce_odr ", lib.entities[name], count=1)
                         if lib.entities[name].startswith("define ") else lib.entities[name])
        else:
            parts.append(lib.declarations[name])
    parts.append(lib.trailer)
    return "\n".join(parts) + "\n"


def link(module: llvm.ModuleRef) -> None:
    """Link the libdevice functions `module` declares (if any) into it."""
    wanted = sorted(f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_"))
    if not wanted:
        return
    lib = llvm.parse_assembly(_extract(tuple(wanted)))
    lib.triple, lib.data_layout = module.triple, module.data_layout
    module.link_in(lib)
