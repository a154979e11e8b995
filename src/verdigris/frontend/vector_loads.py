"""`x.load4(...)`: the four consecutive elements of an array that CUDA reads as one `float4`
(`reinterpret_cast<float4*>(x)[i]`), in SIMT kernels.

Takes: the array (a `N.ArrayRef`) and, at the call, one index per axis, the last counting
groups of four. Gives: a tuple of four values, `x[..., 4 * i]` to `x[..., 4 * i + 3]`, each
read into a variable at the call (an `ir.Load` assigned in order).
Guarantees: each element is an ordinary element read, checked (bounds, races) as `x[...]`
is, so the method adds no rule to the checker and means the same on every backend; where
the launch specializes the array as 16-byte aligned with a unit inner stride and the reads
need no run-time check, LLVM's NVPTX back end merges the four into one vector load
(`ld.global.v4` for 4-byte elements). A tile kernel, keywords, or a wrong count of indices
is a `CompileError` at the call.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from .typing import Static, binary, typed

LANES = 4


@dataclass(frozen=True)
class ArrayMethod:
    """`x.load4` before the call (the only method arrays have in kernels)."""

    array: N.ArrayRef

    def call(self, tr, args, kwargs, loc: Loc):
        name = self.array.name
        if tr.unit.track != "simt":
            raise CompileError(f"{name}.load4() reads elements one thread uses: it belongs to "
                               "the SIMT track", loc, hint="a tile kernel reads whole tiles "
                               "with tile.load(array, index=..., shape=...)")
        ndim = self.array.type.ndim
        if kwargs or len(args) != ndim:
            raise CompileError(f"{name}.load4() takes {ndim} ind{'ex' if ndim == 1 else 'ices'}, "
                               "one per axis, the last counting groups of four elements", loc,
                               hint=f"{name}.load4(i) reads {name}[4*i] to {name}[4*i + 3]")
        *outer, group = args
        if not (isinstance(group, N.Expr) and group.dtype.is_int or
                isinstance(group, Static) and type(group.value) is int):
            raise CompileError(f"{name}.load4(): indices must be integers", loc)
        # the group index in int64 first: 4 * i of an int32 i must not wrap
        first = binary("mul", group if isinstance(group, Static) else typed(group, loc, T.int64),
                       Static(LANES), loc)
        loads = []
        for lane in range(LANES):
            last = binary("add", first, Static(lane), loc)
            indices = tr.indices_for(self.array, [(v, loc) for v in (*outer, last)], loc)
            # read here, as a call reads: a later write to the array changes no element
            loads.append(tr.temporary(N.Load(loc, self.array, indices, self.array.dtype), loc))
        return Static(tuple(loads))
