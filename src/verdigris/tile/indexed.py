"""`Gather` and `Scatter` on the GPU: one access per element, at indices computed in the
kernel.

Takes: the `TileLowering` and the node (and for a gather, the layout wanted). Gives:
`gather(low, node, want) -> TileValue`, `scatter(low, node)`.

Guarantees (`ir.tiles`, the cpu backend):
- gather: an element whose index is outside the array (negative included: indices are
  compared unsigned) is not read and takes `padding`.
- scatter: only the elements of the tile's logical shape are written (not its padding),
  each by one thread (the first of those holding it); the plain form stores, the atomic
  forms (`scatter_add/max/min`) one `atomicrmw` per element (`codegen.atomics`). An index
  outside the array is a bounds fault, as a SIMT store's: the element is skipped, the
  first fault of the launch is recorded (`CheckingBuilder.checked`), and the host raises
  `BoundsError` (VG302) at the next synchronization; scatters the bounds proofs cover
  carry no check. With `skip_out_of_bounds`, such an element is skipped and nothing is
  recorded: the gather's test (`within`) joins the element's other guards.
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen import atomics
from ..codegen.dtypes import I1, I32, mem_type, to_mem, to_reg
from ..codegen.lower import within
from .values import TileValue


def gather(low, node, want):
    b, dtype = low.b, node.array.dtype
    layout = want or low.default(node.shape)
    indices = [low.tile(i, layout) for i in node.indices]
    view = low._view(node.array, node)
    padding = low.expr(node.padding)
    low.order.access(node, node.array.name, "read")  # its elements come from no known thread
    regs = []
    for r in range(layout.num_regs):
        index = [i.regs[r] for i in indices]
        regs.append(b.around(within(b, index, view.shape), lambda index=index: to_reg(b, dtype, b.load(
            low._element(view, index), typ=mem_type(dtype), align=dtype.itemsize)), "gather", padding))
    return TileValue(layout, regs, dtype)


def scatter(low, node) -> None:
    low._writable(node)
    b, dtype = low.b, node.array.dtype
    layout = low.scatter_layout(node.value)
    value = low.tile(node.value, layout)
    indices = [low.tile(i, layout) for i in node.indices]
    keep = None if node.mask is None else low.tile(node.mask, layout)
    view = low._view(node.array, node)
    low.order.access(node, node.array.name, "atomic" if node.atomic else "write")
    owner = low.is_owner(layout)
    padded = [k for k, (n, p) in enumerate(zip(node.value.shape, layout.shape)) if n != p]
    skip = node.skip_out_of_bounds
    checked = id(node) not in low.proven and not skip

    def write(reg: ir.Value, ptr: ir.Value) -> None:
        if node.atomic:
            atomics.atomic(low.em, node.atomic, dtype, ptr, reg, None)
        else:
            b.store(to_mem(b, dtype, reg), ptr, align=dtype.itemsize)

    def element(r: int) -> None:
        index = [i.regs[r] for i in indices]
        if not checked:
            return write(value.regs[r], low._element(view, index))
        low.checked_access(node, view, index, lambda ptr: write(value.regs[r], ptr))

    for r in range(layout.num_regs):
        mine = ir.Constant(I1, True) if owner is None else owner
        coords = low.coords(layout, r) if padded else []
        for k in padded:  # the padding of a shape that is not a power of two
            mine = b.and_(mine, b.icmp_unsigned("<", coords[k], ir.Constant(I32, node.value.shape[k])))
        if keep is not None:
            mine = b.and_(mine, keep.regs[r])
        if skip:
            mine = b.and_(mine, within(b, [i.regs[r] for i in indices], view.shape))
        if owner is None and not padded and keep is None and not skip:
            element(r)
        else:
            b.around(mine, lambda r=r: element(r), "scatter.mine")
