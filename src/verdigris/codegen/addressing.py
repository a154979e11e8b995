"""Where the SIMT lowering finds a kernel's arrays: parameters' pointers and shared globals.

Takes: the kernel being lowered (`ir.Kernel`), its LLVM module, and a builder in its entry
block. Gives
- `ArrayAddress`: how the lowering addresses an array: base pointer, shape and strides;
- `static_array(dtype, storage, shape)`: a row-major array of static shape at `storage`
  (local and static shared arrays);
- `mark_pointer(arg, param, kernel)`: the attributes of an array parameter's pointer;
- `declare_shared(module, kernel, entry)`: every shared array of the body, declared in
  `module`, as its name -> `ArrayAddress`.

Guarantees:
- Arrays the kernel never writes are `noalias readonly captures(none)` (so their loads
  become `ld.global.nc`); written arrays are `noalias` only when `kernel.facts["noalias"]`
  (the launch-time alias check) says so; `aligned16` arrays are `align 16`.
- Shared arrays are `addrspace(3)` globals, one per `LocalAlloc` (so one per block, the
  same memory wherever in the body it is declared), 16-byte aligned, named after the
  array in a PTX identifier; the dynamic one is the module's `extern` shared array, whose
  extent is `%dynamic_smem_size` (the launch's `shared_bytes`) divided by the element
  size, read in the entry block.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

from llvmlite import ir

from ..ir import nodes as N
from ..types import DType
from .attributes import pointer_attributes
from .dtypes import I32, I64, mem_type
from .nvptx import SHARED


@dataclass
class ArrayAddress:
    """How to address an array: base pointer, shape and strides (None: the constant 1)."""

    dtype: DType
    ptr: ir.Value
    shape: list
    strides: list


def static_array(dt: DType, storage: ir.Value, shape: tuple) -> ArrayAddress:
    """A row-major array of static `shape` at `storage`."""
    strides = [ir.Constant(I64, prod(shape[k + 1:])) for k in range(len(shape))]
    return ArrayAddress(dt, storage, [ir.Constant(I64, n) for n in shape], strides)


def mark_pointer(arg: ir.Argument, param: N.Param, kernel: N.Kernel) -> None:
    """Give the pointer `arg` of array parameter `param` its attributes (module docstring)."""
    arg.attributes = pointer_attributes()
    if param.name not in kernel.writes:
        for attr in ("noalias", "readonly", "captures(none)"):
            arg.add_attribute(attr)
    elif kernel.facts.get("noalias"):
        arg.add_attribute("noalias")
    if param.type.aligned16:
        arg.attributes.align = 16


def declare_shared(module: ir.Module, kernel: N.Kernel, entry: ir.IRBuilder) -> dict:
    """Every shared array of the body, as a module global (see the module docstring)."""
    from ..frontend import walk

    allocs = [n for n in walk(kernel.body) if isinstance(n, N.LocalAlloc) and n.array.type.space == "shared"]
    arrays = {}
    for k, node in enumerate(allocs):
        ref, ty = node.array, mem_type(node.array.dtype)
        shape = ref.type.shape
        symbol = f"vg_shared{k}_{re.sub(r'[^A-Za-z0-9_]', '_', ref.name)}"  # a PTX identifier
        storage = ir.GlobalVariable(module, ir.ArrayType(ty, prod(shape) if shape else 0), symbol, addrspace=SHARED)
        storage.type = ir.PointerType(addrspace=SHARED)  # opaque, as LLVM 22's pointers
        storage.align = 16
        if shape is None:
            storage.linkage = "external"
            arrays[ref.name] = ArrayAddress(ref.dtype, storage, [_dynamic_extent(entry, ref.dtype)],
                                            [ir.Constant(I64, 1)])
        else:
            storage.linkage = "internal"
            arrays[ref.name] = static_array(ref.dtype, storage, shape)
    return arrays


def _dynamic_extent(entry: ir.IRBuilder, dt: DType) -> ir.Value:
    """Elements of `dt` in the launch's dynamic shared memory."""
    read = ir.InlineAsm(ir.FunctionType(I32, []), "mov.u32 $0, %dynamic_smem_size;", "=r")
    nbytes = entry.zext(entry.call(read, []), I64)
    return entry.udiv(nbytes, ir.Constant(I64, dt.itemsize))
