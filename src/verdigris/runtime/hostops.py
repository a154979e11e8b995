"""Fills and copies of device memory that the host asks for: what `vg.Array.fill`,
`a[key] = value`, `a.copy()`, `a.astype(dtype)` and the cuda backend's `vg.full`,
`vg.zeros` and `vg.ones` run.

Takes: device views (`ArrayInfo`s, any strides) and values already in the view's dtype
(`arrays` checks what the user gave). Gives: `fill(view, bits)`, `copy(dst, src)` (device
to device, converting to `dst`'s dtype where the two differ), `upload(view, host)` (host
data into a view), `to_device` and `copy_bytes` (one contiguous run), and
`coalesce(views)`.

How: the views are coalesced first (`coalesce`: `a.T`, `a[::-1]` and a contiguous 3-d
array are each one run), then the first of these that fits does the work:
1. one contiguous run: one driver call, cuMemsetD8/D16/D32 for a value whose bytes repeat
   every 1, 2 or 4 bytes (any value of a 1-, 2- or 4-byte dtype; 8-byte ones such as 0.0
   or -1), cuMemcpyDtoD for a copy of one dtype;
2. rows of contiguous elements a fixed pitch apart (a 2-d view such as `a[:, :k]`): one
   cuMemsetD2D8/D16/D32 or cuMemcpy2D;
3. the rest (8-byte values whose halves differ, dtype conversions, views that step inside
   their rows): a verdigris kernel (`elementwise`), compiled once per machine, so the
   first such call with a fresh disk cache pays a compile of a few hundred milliseconds.
Host data is laid out on the host (by NumPy) in the order the view walks memory and
crosses in one cuMemcpyHtoD: straight into a view that is one run, else into a temporary
array that goes on by 2 or 3 (no transfer moves narrow rows).

Guarantees: everything is ordered on the legacy default stream, with verdigris's other
copies and kernels. A copy whose source shares elements with its destination
(`a[1:] = a[:-1]`) reads the source as it was before the copy (through a copy of it), as
NumPy does; a source on another GPU is copied through the host.
"""
from __future__ import annotations

import numpy as np

from .. import types as T
from . import driver
from .interop import ArrayInfo, byte_extent, shares_elements

_UNSIGNED = {1: T.uint8, 2: T.uint16, 4: T.uint32, 8: T.uint64}  # itemsize -> its bits
# pattern bytes -> (contiguous, 2-d) driver calls
_MEMSET = {1: ("cuMemsetD8", "cuMemsetD2D8"), 2: ("cuMemsetD16", "cuMemsetD2D16"),
           4: ("cuMemsetD32", "cuMemsetD2D32")}


def fill(view: ArrayInfo, bits: bytes) -> None:
    """Set every element of `view` to the element whose bytes are `bits`."""
    if not view.size:
        return
    (run,) = coalesce([_as_bits(view)])
    period = next((p for p in _MEMSET if bits == bits[:p] * (len(bits) // p)), None)
    rows = _rows([run]) if period else None
    if rows is None:
        _elementwise("fill", run, np.frombuffer(bits, run.dtype.np)[0])
        return
    width, height, (pitch,) = rows
    word = int.from_bytes(bits[:period], "little")
    one, two = _MEMSET[period]
    driver.activate(view.device)
    drv = driver.api()
    if height == 1:
        driver.check(getattr(drv, one)(run.ptr, word, width // period), one)
    else:
        driver.check(getattr(drv, two)(run.ptr, pitch, word, width // period, height), two)


def copy(dst: ArrayInfo, src: ArrayInfo) -> None:
    """Set `dst` to `src`, two device views of one shape, converting each element to
    `dst`'s dtype (as NumPy's `astype`) where the dtypes differ."""
    if not dst.size:
        return
    if src.device != dst.device:
        src = _moved(src, dst.device)
    elif _share(dst, src):
        src = _fresh(src)
    same = dst.dtype is src.dtype
    out, operand = coalesce([_as_bits(dst), _as_bits(src)] if same else [dst, src])
    rows = _rows([out, operand]) if same else None
    if rows is None:
        _elementwise("convert", out, operand)
        return
    width, height, (dst_pitch, src_pitch) = rows
    if height == 1:
        copy_bytes(out.ptr, operand.ptr, width, dst.device)
        return
    drv = driver.api()
    params = drv.CUDA_MEMCPY2D()
    params.srcMemoryType = params.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    params.srcDevice, params.srcPitch = operand.ptr, src_pitch
    params.dstDevice, params.dstPitch = out.ptr, dst_pitch
    params.WidthInBytes, params.Height = width, height
    driver.activate(dst.device)
    driver.check(drv.cuMemcpy2D(params), "cuMemcpy2D")


def upload(view: ArrayInfo, host: np.ndarray) -> None:
    """Set `view` to `host`, a NumPy array of its shape and dtype."""
    if not view.size:
        return
    flips, order = _walk(view)
    staged = np.ascontiguousarray(host[_reversing(flips, host.ndim)].transpose(order))
    (run,) = coalesce([view])
    rows = _rows([run])
    if rows is not None and rows[1] == 1:
        to_device(run.ptr, staged, view.device)
        return
    from .constructors import asarray

    temp = asarray(staged, device=view.device)  # the view's walk, contiguous
    back = tuple(int(a) for a in np.argsort(order))
    copy(view, temp.transpose(back)[_reversing(flips, host.ndim)])


def to_device(dst: int, host: np.ndarray, device: int) -> None:
    """Copy C-contiguous `host` to `dst` on `device`."""
    if host.nbytes:
        driver.activate(device)
        driver.check(driver.api().cuMemcpyHtoD(dst, host.ctypes.data, host.nbytes),
                     "cuMemcpyHtoD")


def copy_bytes(dst: int, src: int, nbytes: int, device: int) -> None:
    """Copy `nbytes` from `src` to `dst`, both on `device`, on the legacy default stream."""
    if nbytes:
        driver.activate(device)
        driver.check(driver.api().cuMemcpyDtoD(dst, src, nbytes), "cuMemcpyDtoD")


def coalesce(views: list) -> list:
    """The same elements, paired the same way, in the fewest axes: axes the first view
    walks backwards are turned round in every view, axes of one element go, the rest are
    ordered by the first view's strides (largest first), and neighbours merge where every
    view steps over the inner one exactly. Elements that pair up across the views (one
    index in each) still pair up across the results."""
    shape = views[0].shape
    ptrs = [v.ptr for v in views]
    strides = [list(v.strides) for v in views]
    flips, order = _walk(views[0])
    for axis in flips:
        for j, view in enumerate(views):
            ptrs[j] += (shape[axis] - 1) * strides[j][axis] * view.dtype.itemsize
            strides[j][axis] = -strides[j][axis]
    merged_shape, merged = [], [[] for _ in views]
    for a in order:
        if shape[a] == 1:
            continue
        if merged_shape and all(m[-1] == s[a] * shape[a] for m, s in zip(merged, strides)):
            merged_shape[-1] *= shape[a]
            for m, s in zip(merged, strides):
                m[-1] = s[a]
        else:
            merged_shape.append(shape[a])
            for m, s in zip(merged, strides):
                m.append(s[a])
    return [ArrayInfo(p, tuple(merged_shape), tuple(m), v.dtype, v.device, v.readonly,
                      v.keepalive) for p, m, v in zip(ptrs, merged, views)]


def _walk(view: ArrayInfo) -> tuple:
    """How `coalesce` walks a view: the axes it turns round (negative strides) and the
    order it takes all axes in (largest stride first)."""
    flips = tuple(a for a, s in enumerate(view.strides) if s < 0)
    return flips, sorted(range(len(view.shape)), key=lambda a: -abs(view.strides[a]))


def _reversing(axes: tuple, ndim: int) -> tuple:
    """The index that reverses `axes` of an array of `ndim` axes."""
    return tuple(slice(None, None, -1) if a in axes else slice(None) for a in range(ndim))


def _rows(views: list) -> tuple | None:
    """Coalesced views as (width, height, pitches): `height` rows of `width` contiguous
    bytes, each view's rows its pitch apart (one row: a contiguous run); None when they
    are not rows a driver call takes (more axes, a step inside a row, a pitch the driver
    refuses)."""
    first = views[0]
    size = first.dtype.itemsize
    if not first.shape:  # one element
        return (size, 1, (size,) * len(views))
    if any(v.strides[-1] != 1 for v in views) or len(first.shape) > 2:
        return None
    width = first.shape[-1] * size
    if len(first.shape) == 1:
        return (width, 1, (width,) * len(views))
    pitches = tuple(v.strides[0] * size for v in views)
    limit = driver.properties(first.device).max_pitch
    return (width, first.shape[0], pitches) if all(width <= p <= limit for p in pitches) \
        else None


def _elementwise(kernel: str, out: ArrayInfo, operand) -> None:
    """`elementwise.<kernel>(out, operand)` over a coalesced `out` (and `operand`, a view
    of its shape, or a value), in slices along its first axis where it has more than 3."""
    if len(out.shape) > 3:
        for i in range(out.shape[0]):
            _elementwise(kernel, _slice(out, i),
                         _slice(operand, i) if isinstance(operand, ArrayInfo) else operand)
        return
    from . import elementwise

    elementwise.run(getattr(elementwise, kernel), _padded(out),
                    _padded(operand) if isinstance(operand, ArrayInfo) else operand)


def _slice(view: ArrayInfo, i: int) -> ArrayInfo:
    return ArrayInfo(view.ptr + i * view.strides[0] * view.dtype.itemsize, view.shape[1:],
                     view.strides[1:], view.dtype, view.device, view.readonly, view.keepalive)


def _padded(view: ArrayInfo) -> ArrayInfo:
    """`view` with leading axes of one element, to three axes."""
    extra = 3 - len(view.shape)
    return ArrayInfo(view.ptr, (1,) * extra + tuple(view.shape), (0,) * extra +
                     tuple(view.strides), view.dtype, view.device, view.readonly, view.keepalive)


def _as_bits(view: ArrayInfo) -> ArrayInfo:
    """`view` as the unsigned integers of its item size (fills and same-dtype copies move
    bits: one kernel specialization per item size, not per dtype)."""
    return ArrayInfo(view.ptr, view.shape, view.strides, _UNSIGNED[view.dtype.itemsize],
                     view.device, view.readonly, view.keepalive)


def _share(a: ArrayInfo, b: ArrayInfo) -> bool:
    (a_lo, a_hi), (b_lo, b_hi) = byte_extent(a), byte_extent(b)
    return a_lo < b_hi and b_lo < a_hi and shares_elements(a, b)


def _fresh(view: ArrayInfo):
    """A copy of `view` in new memory on its device."""
    from .constructors import empty

    out = empty(tuple(view.shape), view.dtype, device=view.device)
    copy(out, view)
    return out


def _moved(view: ArrayInfo, device: int):
    """A copy of `view` on `device`, through the host."""
    from .arrays import _as_array
    from .constructors import asarray

    return asarray(_as_array(view).numpy(), device=device)
