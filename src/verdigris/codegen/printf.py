"""`print(...)` on the GPU: a call of CUDA's `vprintf` per thread that runs it.

Takes: the lowering (`codegen.lower._KernelLowering` or the tile track's), a `Print` node and
the track. Gives `emit_print(lowering, node, track)`: the format of `ir.printf` as a
constant global string, and `vprintf(format, arguments)` where `arguments` points at a
buffer (a struct in local memory) holding the block and thread ids (u32) and then each
value at its natural alignment: integers widened to 64 bits (signed or not, as their
dtype), floats promoted to double, as C's varargs are, bools as a pointer to the text
"True" or "False". A tile kernel's line is printed by the block's first thread; a print of
tiles, one line per element, by the first thread holding that element (the ids then
end with the element's position). vprintf is the device runtime's (`i32 @vprintf(ptr, ptr)`), resolved
by ptxas or the driver as CUDA C's printf is.

Guarantees: the same text as the cpu backend for the same values (`ir.printf`). Lines
reach the host's standard output when the launch's work is synchronized (the end of a
stream's work, `cuCtxSynchronize`); lines of different threads may come in any order, and
the device's printf buffer (1 MB by default) drops lines that do not fit.
"""
from __future__ import annotations

import hashlib

from llvmlite import ir

from ..ir import nodes as N
from ..ir import printf
from ..types import float64
from .casts import cast
from .dtypes import I32, I64

I8 = ir.IntType(8)
GENERIC = ir.PointerType()
CONSTANT = 4  # NVPTX address space of constant memory


def emit_print(lowering, node: N.Print, track: str) -> None:
    b, em = lowering.b, lowering.em
    fmt, _, parts = printf.line_format(node, track)
    blocks = _sregs(em, "ctaid")
    if track == "simt":
        _call(lowering, fmt, blocks + _sregs(em, "tid") + [_widened(lowering, p.dtype, lowering.expr(p)) for p in parts])
        return
    # A tile kernel's line is the block's: every thread computes the values (a reduction
    # needs them all), then one thread prints each line.
    shape = printf.tile_shape(node)
    if shape is None:
        words = blocks + [_widened(lowering, p.dtype, lowering.expr(p)) for p in parts]
        first = b.icmp_unsigned("==", em.call("llvm.nvvm.read.ptx.sreg.tid.x", I32), ir.Constant(I32, 0))
        b.around(first, lambda: _call(lowering, fmt, words), "print")
        return
    layout = lowering.default(shape)
    values = [lowering.tile(p, layout).regs if getattr(p, "shape", ()) else
              _widened(lowering, p.dtype, lowering.expr(p)) for p in parts]
    owner = lowering.is_owner(layout)
    for r in range(layout.num_regs):  # the element each register holds, by its first holder
        coords = lowering.coords(layout, r)
        words = blocks + coords + [_widened(lowering, p.dtype, v[r]) if isinstance(v, list) else v
                                   for p, v in zip(parts, values)]
        holds = owner if owner is not None else ir.Constant(ir.IntType(1), True)
        for c, extent in zip(coords, shape):  # not the padding of a padded shape
            holds = b.and_(holds, b.icmp_unsigned("<", c, ir.Constant(I32, extent)))
        b.around(holds, lambda words=words: _call(lowering, fmt, words), "print")


def _sregs(em, register: str) -> list:
    return [em.call(f"llvm.nvvm.read.ptx.sreg.{register}.{axis}", I32) for axis in "xyz"]


def _call(lowering, fmt: str, words: list) -> None:
    """vprintf(fmt, buffer) with `words` in a buffer at their natural alignments."""
    b = lowering.b
    buffer_type = ir.LiteralStructType([w.type for w in words])
    buffer = lowering._alloca(buffer_type, "print.args")
    for k, word in enumerate(words):
        b.store(word, b.gep(buffer, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True,
                            source_etype=buffer_type))
    b.call(_vprintf(lowering.module), [_string(lowering, fmt), buffer])


def _widened(lowering, dt, reg: ir.Value) -> ir.Value:
    """Register `reg` of dtype `dt` as its vararg: i64, double, or a pointer to "True"/"False"."""
    b = lowering.b
    if dt.name == "bool":
        return b.select(reg, _string(lowering, "True"), _string(lowering, "False"))
    if dt.is_int:
        return (b.sext if dt.is_signed else b.zext)(reg, I64) if reg.type != I64 else reg
    return cast(lowering.em, reg, dt, float64) if dt != float64 else reg


def _vprintf(module: ir.Module) -> ir.Function:
    found = module.globals.get("vprintf")
    if found is None:
        found = ir.Function(module, ir.FunctionType(I32, [GENERIC, GENERIC]), "vprintf")
    return found


def _string(lowering, text: str) -> ir.Value:
    """A generic pointer to `text`, NUL-terminated, in constant memory (one global per text,
    named by its digest: identical kernels give identical IR)."""
    data = text.encode() + b"\0"
    module = lowering.module
    name = f"vg_str_{hashlib.sha256(data).hexdigest()[:16]}"
    found = module.globals.get(name)
    if found is None:
        ty = ir.ArrayType(I8, len(data))
        found = ir.GlobalVariable(module, ty, name, addrspace=CONSTANT)
        found.type = ir.PointerType(addrspace=CONSTANT)  # opaque, as LLVM 22's pointers
        found.global_constant = True
        found.linkage = "private"
        found.initializer = ir.Constant(ty, bytearray(data))
    return lowering.b.addrspacecast(found, GENERIC)
