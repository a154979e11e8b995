"""Line tables: the user's Python file and line on every instruction of a kernel's PTX.

Takes: an `llvmlite.ir.Module`, the kernel's `ir.Function` and the kernel's `Loc`. Gives
`LineTable(module, function, kernel_loc)` with `location(loc)`: the `DILocation` metadata
for an IR node's `Loc`, to set as the builder's `debug_metadata` while that node is
lowered. NVPTX turns these into PTX `.file` and `.loc` directives, which ptxas (with
`-lineinfo`, as the assemblers here are run) keeps in the cubin's line table: Nsight
Compute's source view and compute-sanitizer's reports then name the Python file and line.

Guarantees:
- Line tables only (`emissionKind: DebugDirectivesOnly`): no variables, no types, no
  DWARF sections, so the code is the same as without them (LLVM's debug locations never
  change what it optimizes); only `.file`/`.loc` lines are added to the PTX.
- A location inside an inlined `@vg.func` names the helper's own file and line, inlined at
  its call site (`inlinedAt`), so a profiler attributes it to the helper's line and shows
  the call chain.
- Metadata nodes are made once per distinct file, function and location, in the order the
  lowering asks for them: identical kernels give identical IR.
"""
from __future__ import annotations

import os

from llvmlite import ir

from ..errors import Loc

I32 = ir.IntType(32)
# LLVM's module flag behaviours: "Warning" (2) for the debug info version, as clang emits it.
_FLAG_WARNING = 2
_DEBUG_INFO_VERSION = 3


class LineTable:
    def __init__(self, module: ir.Module, function: ir.Function, kernel_loc: Loc):
        self.module = module
        self._files: dict = {}
        self._subprograms: dict = {}
        self._locations: dict = {}
        module.add_named_metadata("llvm.module.flags", module.add_metadata(
            [ir.Constant(I32, _FLAG_WARNING), "Debug Info Version", ir.Constant(I32, _DEBUG_INFO_VERSION)]))
        self.unit = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_Python"),
            "file": self._file(kernel_loc.file),
            "producer": "verdigris",
            "isOptimized": True,
            "runtimeVersion": 0,
            "emissionKind": ir.DIToken("DebugDirectivesOnly"),
        }, is_distinct=True)
        module.add_named_metadata("llvm.dbg.cu", self.unit)
        self.kernel_subprogram = self._subprogram(kernel_loc.file, kernel_loc.function or function.name,
                                                  kernel_loc.line, function.name)
        function.set_metadata("dbg", self.kernel_subprogram)

    def location(self, loc: Loc | None):
        """The `DILocation` of `loc` (None: no location, for code of no statement)."""
        if loc is None or loc.line <= 0:
            return None
        key = (loc.file, loc.line, loc.col, loc.function, _chain(loc.call_site))
        found = self._locations.get(key)
        if found is None:
            found = self._locations[key] = self._make(loc)
        return found

    def _make(self, loc: Loc):
        if loc.call_site is None:
            scope, inlined_at = self.kernel_subprogram, None
        else:  # a helper's line, inlined at its call site (itself perhaps in a helper)
            scope = self._subprogram(loc.file, loc.function or "<vg.func>", loc.line)
            inlined_at = self.location(loc.call_site)
        operands = {"line": loc.line, "column": loc.col + 1, "scope": scope}
        if inlined_at is not None:
            operands["inlinedAt"] = inlined_at
        return self.module.add_debug_info("DILocation", operands)

    def _file(self, path: str):
        if path not in self._files:
            directory, name = os.path.split(path)
            self._files[path] = self.module.add_debug_info("DIFile", {"filename": name, "directory": directory})
        return self._files[path]

    def _subprogram(self, path: str, name: str, line: int, linkage: str | None = None):
        key = (path, name, linkage)
        if key not in self._subprograms:
            operands = {
                "name": name, "scope": self._file(path), "file": self._file(path), "line": line,
                "type": self.module.add_debug_info("DISubroutineType", {"types": self.module.add_metadata([])}),
                "scopeLine": line, "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
                "unit": self.unit,
            }
            if linkage is not None:
                operands["linkageName"] = linkage
            self._subprograms[key] = self.module.add_debug_info("DISubprogram", operands, is_distinct=True)
        return self._subprograms[key]


def _chain(call_site: Loc | None) -> tuple:
    """`call_site`'s chain as a hashable key (`Loc` leaves its call site out of equality)."""
    out = []
    while call_site is not None:
        out.append((call_site.file, call_site.line, call_site.col, call_site.function))
        call_site = call_site.call_site
    return tuple(out)
