"""Launching tile kernels with matrix products: shared memory, TMA descriptors, the grid.

Takes: a compiled tile kernel, its target and ABI. Gives: `cuda_kernel(kernel, target,
module, entry, abi)`, the `CudaKernel` to launch it with: a plain one for kernels without
products, else a `MatmulKernel`, made from a `MatmulLaunch` (what `tile.matmul.plan` says
its launches add; JSON in launch records, which make one without the IR), whose launches
- ask for the dynamic shared memory `tile.matmul.plan` says the kernel uses (opting in past
  48 KiB once);
- add the producer warp group of a warp-specialized kernel to the block
  (`plan.block_threads`), and launch a persistent one (`plan.persistent`) on one block per
  multiprocessor (at most one per tile), passing the grid the launch asked for as three
  int32 parameters after the ABI's (`tile.specialize`);
- append one CUtensorMap per streamed operand and per epilogue store
  (`tile.pipeline.TensorMap`), passed by value (`__grid_constant__`): each is encoded with
  `cuTensorMapEncodeTiled` from the array's pointer, shape and strides in this launch's
  values (2-d to 5-d), and kept for the next launch with the same array.
A launch with the grid, block and values of an earlier one reuses its prepared parameters
(tensor maps, persistent grid, packed values): a dictionary lookup and the driver call.
Guarantees: an array the copy engine cannot describe (base not 16-byte aligned, a stride
that is not a multiple of 16 bytes) makes the launch run a variant of the kernel compiled
without the copy engine (once, on first need), with the same results.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools

from ..ir.tiles import has_dots
from . import driver
from .module import CudaKernel

_MAX_CACHED = 64  # tensor maps, and prepared launches, a kernel keeps (then starts afresh)


def cuda_kernel(kernel, target: str, module, entry: str, abi: list, without_tma=None) -> CudaKernel:
    """`without_tma()`: the same kernel compiled to stream without the copy engine, loaded
    (for a kernel with products that streams through it; the launch calls it for arrays
    the engine cannot describe)."""
    if kernel.track != "tile" or not has_dots(kernel):
        return CudaKernel(module, entry, abi)
    return MatmulKernel(module, entry, abi, MatmulLaunch.of(kernel, target), without_tma or _no_variant)


def _no_variant():
    raise AssertionError("a kernel that streams without the copy engine has no variant without it")


_DTYPES = {"float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
           "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "float8_e4m3fn": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
           "float8_e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
_SWIZZLES = {128: "CU_TENSOR_MAP_SWIZZLE_128B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
             32: "CU_TENSOR_MAP_SWIZZLE_32B", 16: "CU_TENSOR_MAP_SWIZZLE_NONE"}


@dataclasses.dataclass(frozen=True)
class MapSpec:
    """One TMA descriptor as a launch encodes it (`tile.pipeline.TensorMap`'s fields)."""

    param: str
    dtype: str
    itemsize: int
    box: tuple
    swizzle: int


@dataclasses.dataclass(frozen=True)
class MatmulLaunch:
    """What a launch of a kernel with matrix products adds to a plain one, from its
    `tile.matmul.plan`: dynamic shared memory, tensor maps, the block of a warp-specialized
    kernel (None: the lowering's) and whether it is persistent. As JSON in launch records."""

    shared: int
    maps: tuple
    threads: int | None
    persistent: bool

    @classmethod
    def of(cls, kernel, target: str) -> "MatmulLaunch":
        """The launch of tile kernel `kernel` (with matrix products) compiled for `target`."""
        from ..tile import matmul

        plan = matmul.plan(kernel, target)
        maps = tuple(MapSpec(m.param, m.dtype, m.itemsize, tuple(m.box), m.swizzle)
                     for m in plan.tensor_maps)
        return cls(plan.dynamic_shared, maps, plan.block_threads, plan.persistent)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "MatmulLaunch":
        maps = tuple(MapSpec(**dict(m, box=tuple(m["box"]))) for m in data["maps"])
        return cls(data["shared"], maps, data["threads"], data["persistent"])


class MatmulKernel(CudaKernel):
    """`without_tma()`: the kernel compiled without the copy engine, for arrays it cannot
    describe (called once, on first need)."""

    def __init__(self, module, name: str, abi: list, launch: MatmulLaunch, without_tma):
        super().__init__(module, name, abi)
        self.shared = max(launch.shared, self.shared)  # the module's: with tile buffers there
        self.maps = launch.maps
        self.threads = launch.threads
        self.persistent = launch.persistent
        self.matmul_launch = launch
        self._build_without_tma = without_tma
        self._plain = None
        # per map: the ABI positions of its array's pointer, shapes and strides
        self.slots = [self._slots(abi, m.param) for m in self.maps]
        self._cache: dict = {}  # tensor maps by array
        self._prepared: dict = {}  # launches by (grid, block, values): `_prepare`
        self.opt_in_own_shared()

    @staticmethod
    def _slots(abi: list, param: str) -> tuple:
        ptr = next(i for i, p in enumerate(abi) if p.param == param and p.role == "ptr")
        shapes = [i for i, p in enumerate(abi) if p.param == param and p.role == "shape"]
        strides = [i for i, p in enumerate(abi) if p.param == param and p.role == "stride"]
        return ptr, shapes, strides

    def launch(self, grid, block, values, stream=0, shared_bytes: int = 0) -> None:
        shared_bytes = max(shared_bytes, self.shared)
        if not self.maps and not self.persistent and self.threads is None:
            return super().launch(grid, block, values, stream, shared_bytes)
        if shared_bytes > self._shared_opt_in:
            self._opt_in_shared(shared_bytes)
        key = (*grid, *block, *values)
        prepared = self._prepared.get(key)
        if prepared is None:
            try:
                prepared = self._prepare(grid, block, values)
            except _NotDescribable:
                return self._without_tma().launch(grid, block, values, stream, shared_bytes)
            if len(self._prepared) >= _MAX_CACHED:
                self._prepared.clear()
            self._prepared[key] = prepared
        # no context made current first: a launch from another context fails, and
        # `launch_failed` retries it in the device's (as every other launch path does)
        self.enqueue(*prepared[:3], stream, shared_bytes)

    def _prepare(self, grid, block, values) -> tuple:
        """(grid, block, kernelParams address, the memory behind it) of a launch with these
        values: its tensor maps encoded, the persistent grid chosen, every parameter in
        memory of its own (the driver copies parameters at each launch, so repeated launches
        with the same values reuse it)."""
        maps = [self._tensor_map(m, slots, values) for m, slots in zip(self.maps, self.slots)]
        extra = []
        if self.persistent:
            extra = [ctypes.c_int32(n) for n in grid]
            tiles = grid[0] * grid[1] * grid[2]
            grid = (min(tiles, driver.properties(self.device).multiprocessors), 1, 1)
        if self.threads is not None:
            block = (self.threads, 1, 1)
        buffer, base = self.packer.packed(values)
        n = len(self.packer.abi)
        pointers = (ctypes.c_void_p * (n + len(extra) + len(maps)))()
        pointers[:n] = ctypes.cast(base, ctypes.POINTER(ctypes.c_void_p))[:n]
        pointers[n:] = [ctypes.addressof(v) for v in extra] + [m.getPtr() for m in maps]
        return tuple(grid), tuple(block), ctypes.addressof(pointers), (pointers, buffer, extra, maps)

    def _tensor_map(self, spec, slots, values):
        ptr, shapes, strides = slots
        key = (spec, values[ptr], *(values[i] for i in shapes), *(values[i] for i in strides))
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            found = self._cache[key] = encode(spec, values[ptr], [values[i] for i in shapes],
                                              [values[i] for i in strides])
        return found

    def _without_tma(self) -> CudaKernel:
        """The kernel compiled without the copy engine (`plan.tma` False), loaded once."""
        if self._plain is None:
            self._plain = self._build_without_tma()
        return self._plain


class _NotDescribable(Exception):
    """An array the copy engine cannot read: not 16-byte aligned, or a stride that is not a
    multiple of 16 bytes."""


def _describable(spec, pointer: int, strides: list, rank: int) -> None:
    if pointer % 16 or any(s * spec.itemsize % 16 for s in strides) or len(strides) != rank - 1:
        raise _NotDescribable(spec.param)


def encode(spec, pointer: int, shape: list, strides: list):
    """The CUtensorMap of a row-major array (strides in elements, the inner one 1 and left
    out) for boxes of `spec.box` (one extent per axis, outermost first) swizzled as
    `spec.swizzle` bytes."""
    _describable(spec, pointer, strides, len(shape))
    drv = driver.api()
    cu = drv.cuuint64_t
    data_type, rank, box, unit, interleave, swizzle, promotion, fill = _constant_arguments(spec)
    err, tensor_map = drv.cuTensorMapEncodeTiled(
        data_type, rank, pointer, [cu(n) for n in reversed(shape)],
        [cu(s * spec.itemsize) for s in reversed(strides)], box, unit, interleave, swizzle,
        promotion, fill)
    driver.check((err,), f"cuTensorMapEncodeTiled({spec.param!r})")
    return tensor_map


@functools.lru_cache(maxsize=None)
def _constant_arguments(spec) -> tuple:
    """The arguments of `cuTensorMapEncodeTiled` that a map's spec fixes, made once (the
    driver's enums and integer wrappers cost microseconds each, per launch)."""
    drv = driver.api()
    u32, rank = drv.cuuint32_t, len(spec.box)
    return (getattr(drv.CUtensorMapDataType, _DTYPES[spec.dtype]), rank,
            [u32(n) for n in reversed(spec.box)], [u32(1)] * rank,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(drv.CUtensorMapSwizzle, _SWIZZLES[spec.swizzle]),
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
