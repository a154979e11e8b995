"""The kernel's calling convention: how parameters become the flat argument list.

Takes: a specialized `ir.Kernel`. Gives: `abi_params(kernel)`, the ordered list of
`AbiParam`s that the LLVM lowering declares and the runtime packs. Guarantees: both sides
use this one function, so they cannot disagree.

For each parameter in the user's order:
- array: `ptr` (u64 device address of element [0, 0, ...]), then `shape` k for each axis
  (int64), then `stride` k for each axis in *elements* (int64), leaving out the innermost
  stride when the specialization says it is 1;
- scalar: one value of its dtype (bool as u8);
- constexpr: nothing (folded into the body).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import types as T
from .nodes import Kernel


@dataclass(frozen=True)
class AbiParam:
    param: str  # the user's parameter name
    role: str  # "ptr" | "shape" | "stride" | "scalar"
    axis: int  # for shape/stride, else -1
    dtype: T.DType  # uint64 for ptr, int64 for shape/stride, the scalar's dtype

    @property
    def symbol(self) -> str:
        return self.param if self.role in ("ptr", "scalar") else f"{self.param}.{self.role}{self.axis}"


def abi_params(kernel: Kernel) -> list[AbiParam]:
    out = []
    for p in kernel.params:
        if p.kind == "array":
            ndim = p.type.ndim
            out.append(AbiParam(p.name, "ptr", -1, T.uint64))
            out.extend(AbiParam(p.name, "shape", k, T.int64) for k in range(ndim))
            n_strides = ndim - 1 if p.type.unit_inner_stride else ndim
            out.extend(AbiParam(p.name, "stride", k, T.int64) for k in range(n_strides))
        elif p.kind == "scalar":
            out.append(AbiParam(p.name, "scalar", -1, p.dtype))
    return out


# The module-global arrival counter of `grid_barrier()` (`codegen.gridsync`): a module that
# has it holds a kernel the runtime must launch cooperatively (`runtime.cooperative`).
GRID_COUNTER = "vg_grid_arrivals"
