"""Launching tile kernels with matrix products: dynamic shared memory and TMA descriptors.

Takes: a compiled tile kernel, its target and ABI. Gives: `cuda_kernel(kernel, target,
module, entry, abi)`, the `CudaKernel` to launch it with: a plain one for kernels without
products, else a `MatmulKernel`, whose launches
- ask for the dynamic shared memory `tile.matmul.plan` says the kernel uses (opting in past
  48 KiB once), and
- append one CUtensorMap per streamed operand (`tile.pipeline.TensorMap`) after the ABI
  parameters, passed by value (`__grid_constant__`): each is encoded with
  `cuTensorMapEncodeTiled` from the array's pointer, shape and strides in this launch's
  values, and kept for the next launch with the same array.
Guarantees: an array the copy engine cannot describe (base not 16-byte aligned, a row
stride that is not a multiple of 16 bytes, not unit inner stride) raises LaunchError naming
the parameter, before anything is enqueued.
"""
from __future__ import annotations

import ctypes

from ..errors import LaunchError
from . import driver
from .module import CudaKernel

_MAX_CACHED_MAPS = 64


def cuda_kernel(kernel, target: str, module, entry: str, abi: list) -> CudaKernel:
    if kernel.track != "tile" or not _has_dots(kernel):
        return CudaKernel(module, entry, abi)
    from ..tile import matmul

    return MatmulKernel(module, entry, abi, matmul.plan(kernel, target))


def _has_dots(kernel) -> bool:
    """`tile.matmul.has_dots`, without importing the tile lowering (a cached kernel's load
    must not)."""
    from ..frontend import walk
    from ..ir import tiles as X

    return any(isinstance(n, X.TileDot) for n in walk(kernel.body))


_DTYPES = {"float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
           "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "float8_e4m3fn": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
           "float8_e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
_SWIZZLES = {128: "CU_TENSOR_MAP_SWIZZLE_128B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
             32: "CU_TENSOR_MAP_SWIZZLE_32B", 16: "CU_TENSOR_MAP_SWIZZLE_NONE"}


class MatmulKernel(CudaKernel):
    def __init__(self, module, name: str, abi: list, plan):
        super().__init__(module, name, abi)
        self.shared = plan.dynamic_shared
        self.maps = plan.tensor_maps
        # per map: the ABI positions of its array's pointer, shapes and strides
        self.slots = [self._slots(abi, m.param) for m in self.maps]
        self._cache: dict = {}
        if self.shared and self.shared + self.attribute("SHARED_SIZE_BYTES") > 48 * 1024:
            self._opt_in_shared(self.shared)  # static + dynamic past 48 KiB needs the opt-in

    @staticmethod
    def _slots(abi: list, param: str) -> tuple:
        ptr = next(i for i, p in enumerate(abi) if p.param == param and p.role == "ptr")
        shapes = [i for i, p in enumerate(abi) if p.param == param and p.role == "shape"]
        strides = [i for i, p in enumerate(abi) if p.param == param and p.role == "stride"]
        return ptr, shapes, strides

    def launch(self, grid, block, values, stream=0, shared_bytes: int = 0) -> None:
        shared_bytes = max(shared_bytes, self.shared)
        if not self.maps:
            return super().launch(grid, block, values, stream, shared_bytes)
        if shared_bytes > self._shared_opt_in:
            self._opt_in_shared(shared_bytes)
        maps = [self._tensor_map(m, slots, values) for m, slots in zip(self.maps, self.slots)]
        base = self.packer.pack(values)
        n = len(self.packer.abi)
        pointers = (ctypes.c_void_p * (n + len(maps)))()
        pointers[:n] = ctypes.cast(base, ctypes.POINTER(ctypes.c_void_p))[:n]
        pointers[n:] = [m.getPtr() for m in maps]
        address = ctypes.addressof(pointers)
        driver.activate(self.device)
        result = driver.api().cuLaunchKernel(self.function, grid[0], grid[1], grid[2], block[0],
                                             block[1], block[2], shared_bytes, stream, address, 0)
        driver.check(result, f"cuLaunchKernel({self.name})")

    def _tensor_map(self, spec, slots, values):
        ptr, shapes, strides = slots
        key = (spec, values[ptr], *(values[i] for i in shapes), *(values[i] for i in strides))
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _MAX_CACHED_MAPS:
                self._cache.clear()
            found = self._cache[key] = encode(spec, values[ptr], [values[i] for i in shapes],
                                              [values[i] for i in strides])
        return found


def encode(spec, pointer: int, shape: list, strides: list):
    """The CUtensorMap of a 2-d row-major array (strides in elements, the inner one 1 and
    left out) for boxes of `spec.box` (rows, cols) swizzled as `spec.swizzle` bytes."""
    drv = driver.api()
    size = spec.itemsize
    rows, cols = shape
    pitch = strides[0] * size
    if pointer % 16 or pitch % 16 or len(strides) != 1:
        raise LaunchError(f"{spec.param!r}: the copy engine that streams matrix operands on this "
                          "GPU needs a 16-byte aligned array whose rows start at multiples of 16 "
                          f"bytes (pointer {pointer:#x}, row pitch {pitch} bytes)",
                          hint="pass a contiguous array whose row length is a multiple of "
                               f"{16 // size} elements, or pad the rows")
    cu = drv.cuuint64_t
    err, tensor_map = drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, _DTYPES[spec.dtype]), 2, pointer,
        [cu(cols), cu(rows)], [cu(pitch)], [drv.cuuint32_t(spec.box[1]), drv.cuuint32_t(spec.box[0])],
        [drv.cuuint32_t(1), drv.cuuint32_t(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, _SWIZZLES[spec.swizzle]),
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    driver.check((err,), f"cuTensorMapEncodeTiled({spec.param!r})")
    return tensor_map
