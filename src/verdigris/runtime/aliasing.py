"""The launch-time alias check: no array a kernel writes may share memory with another.

Takes: a kernel (`dispatch.KernelFunction`: its name and parameters), the specialization
being launched (which argument positions are arrays, which of them it writes, the line
that writes each) and the launch's array descriptions (`interop.ArrayInfo`, None for
scalars). Gives `check_aliasing(kernel, spec, infos)`.

Guarantees: before anything is enqueued, an array the kernel writes that shares an element
with another array argument on the same device, or a written view whose own elements
share memory (a zero or overlapping stride: several threads would write one address),
raises `AliasError` (VG201) naming the parameters, the line that writes and the call
site. Byte ranges are compared first, O(args²) integer compares; only where two ranges
overlap is it asked whether the views share an element (`interop.shares_elements`: the
two column halves of a matrix do not). The compiled kernels' `noalias` rests on this.
"""
from __future__ import annotations

from ..errors import AliasError, user_call_site
from .interop import byte_extent, overlaps_itself, shares_elements


def check_aliasing(kernel, spec, infos: list) -> None:
    """Refuse a launch where an array the kernel writes shares memory with another array
    argument, or with itself (a broadcast view)."""
    if not spec.written_slots:
        return
    extents = [byte_extent(infos[j]) for j in spec.array_slots]
    for k, w in enumerate(spec.array_slots):
        if w not in spec.written_slots:
            continue
        if overlaps_itself(infos[w].shape, infos[w].strides):
            _raise_self_overlap(kernel, spec, w)
        lo, hi = extents[k]
        for m, j in enumerate(spec.array_slots):
            if m != k and lo < extents[m][1] and extents[m][0] < hi \
                    and infos[j].device == infos[w].device \
                    and shares_elements(infos[w], infos[j]):
                _raise_alias(kernel, spec, w, j, infos)


def _raise_self_overlap(kernel, spec, w: int):
    name = kernel.params[w].name
    raise AliasError(f"{kernel.__name__} writes {name!r}, a view whose elements share "
                     "memory (a zero or overlapping stride): several threads would write "
                     "one address", spec.write_loc(name), code="VG201",
                     hint="pass a contiguous output, e.g. vg.empty(shape, dtype)")


def _raise_alias(kernel, spec, w: int, j: int, infos: list):
    names = [p.name for p in kernel.params]
    same = infos[w].ptr == infos[j].ptr and byte_extent(infos[w]) == byte_extent(infos[j])
    how = "is the same memory as" if same else "overlaps"
    site = user_call_site()
    raise AliasError(
        f"{kernel.__name__} writes {names[w]!r}, which {how} {names[j]!r}: the result would "
        f"depend on the order threads run in" + (f" (launched at {site})" if site else ""),
        spec.write_loc(names[w]), code="VG201",
        hint=f"pass a separate output array for {names[w]!r} (e.g. vg.empty_like), or, to update it in place, a kernel that takes it once")
