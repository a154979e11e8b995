"""LLVM attributes that llvmlite's attribute sets refuse, for kernel entries and their
parameters: `readonly` on a pointer parameter, a tensor map passed by value
(`byval([128 x i8])` + `"nvvm.grid_constant"`), and launch bounds (`"nvvm.maxntid"`,
`"nvvm.minctasm"`, which NVPTX emits as `.maxntid` and `.minnctapersm`).

Takes: nothing but the numbers of the launch bounds. Gives: `pointer_attributes()`,
`grid_constant_attributes()` (fresh attribute sets for `arg.attributes`, to add to) and
`launch_bounds(threads, min_blocks)` (a filled set for `fn.attributes`). Guarantees:
llvmlite's own attributes stay accepted; nothing is patched into llvmlite.
"""
from __future__ import annotations

from types import MappingProxyType

from llvmlite import ir

GRID_CONSTANT = ("byval([128 x i8])", '"nvvm.grid_constant"')


def _accepting(base: type, names) -> type:
    """`base` (an llvmlite attribute set) that also accepts `names`."""
    known = base._known
    extra = dict.fromkeys(names, None if isinstance(known, frozenset) else False)
    merged = {**(dict.fromkeys(known, None) if isinstance(known, frozenset) else known), **extra}
    return type(base.__name__, (base,), {"_known": MappingProxyType(merged)})


_Pointer = _accepting(ir.values.ArgumentAttributes, ("readonly",))
_GridConstant = _accepting(ir.values.ArgumentAttributes, GRID_CONSTANT)


def pointer_attributes() -> ir.values.ArgumentAttributes:
    return _Pointer()


def grid_constant_attributes() -> ir.values.ArgumentAttributes:
    """A 128-byte tensor map passed by value and kept in the parameter space."""
    attributes = _GridConstant()
    for name in GRID_CONSTANT:
        attributes.add(name)
    return attributes


def launch_bounds(threads: int, min_blocks: int | None = None) -> ir.values.FunctionAttributes:
    """`.maxntid threads` and, where given, `.minnctapersm min_blocks` (CUDA's
    `__launch_bounds__`): ptxas then keeps to the registers that let a block of `threads`
    (`min_blocks` blocks) share a multiprocessor."""
    names = (f'"nvvm.maxntid"="{threads}"',) + ((f'"nvvm.minctasm"="{min_blocks}"',) if min_blocks else ())
    attributes = _accepting(ir.values.FunctionAttributes, names)()
    for name in names:
        attributes.add(name)
    return attributes
