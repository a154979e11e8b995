"""The state the lowering tables share: the module being built and the instruction builder.

Takes: an `llvmlite.ir.Module` and an `IRBuilder` positioned in one of its functions.
Gives: `Emitter.call(name, ret, *args)`, which declares an intrinsic or libdevice function
on first use (its type taken from the arguments) and calls it. Guarantees: each function is
declared once per module, so `codegen.libdevice` finds every `__nv_*` the kernel calls
among the module's declarations.
"""
from __future__ import annotations

from llvmlite import ir


class Emitter:
    def __init__(self, module: ir.Module, builder: ir.IRBuilder, fuse: bool = False):
        self.module = module
        self.b = builder
        # float multiplies, adds and subtracts may contract into fused multiply-adds (the
        # kernel's `fma` option; LLVM's `contract` flag)
        self.float_flags = ("contract",) if fuse else ()

    def flagged(self, instruction: ir.Instruction) -> ir.Instruction:
        instruction.flags.extend(self.float_flags)
        return instruction

    def call(self, name: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]), name)
        return self.b.call(fn, args)
