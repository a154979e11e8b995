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
    def __init__(self, module: ir.Module, builder: ir.IRBuilder):
        self.module = module
        self.b = builder

    def call(self, name: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]), name)
        return self.b.call(fn, args)
