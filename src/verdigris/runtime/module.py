"""Loading compiled kernels into the driver, and launching them with pre-packed arguments.

Takes: a PTX text or cubin image, an entry name, the kernel's ABI (`ir.abi.abi_params`).
Gives: `CudaModule(image, device)`, `CudaKernel(module, name, abi)` with
`launch(grid, block, values, stream=0, shared_bytes=0)`, `ArgPacker(abi)`,
`dynamic_shared(image)`, and
`jit_cubin(ptx, device)` (the driver's JIT compiler, as a cubin).

Guarantees:
- The module is loaded in the device's primary context; a PTX error from the driver's JIT
  comes back as BackendError carrying the JIT's log.
- Per specialization, the argument layout is computed once: one 8-byte slot per ABI param,
  written by a single `struct.pack_into` into a per-thread buffer, plus a constant array of
  `void*` pointing at the slots. A launch is: pack, then `cuLaunchKernel` with that array's
  address (the cheapest of cuda-bindings' calling conventions: no per-launch allocation);
  `cuLaunchCooperativeKernel` for a kernel that calls `grid_barrier()` (`cooperative`:
  its grid checked against the occupancy first).
- `values` are in ABI order: device addresses (int) for `ptr`, ints for shape/stride, and
  the scalar's Python/NumPy value for scalars (bfloat16 and fp8 scalars are rounded to
  nearest even from a float). A value that does not fit its slot raises LaunchError naming
  the parameter.
- A module whose tile kernel keeps its shared buffers in dynamic shared memory names the
  bytes in a symbol (`dynamic_shared(image)`); every launch of its kernel asks for at
  least that much (`CudaKernel.shared`, opted in past 48 KiB when loaded), the fast
  launchers' too.
- A launch the driver refuses raises LaunchError naming grid, block and the limits; a
  fault that a previous kernel left behind raises KernelError. A launch from a thread whose
  current context belongs to another device (or that has none) is retried once in the
  kernel's device context, and the thread's current context is left as it was.
"""
from __future__ import annotations

import ctypes
import re
import struct
import threading

import numpy as np

from .. import types as T
from ..errors import BackendError, LaunchError
from . import cooperative, driver

_SLOT = 8  # bytes per argument slot: every ABI value is at most 8 bytes
_JIT_LOG_BYTES = 1 << 16
_STATIC_SHARED_LIMIT = 48 * 1024  # above this, a kernel must opt in to dynamic shared memory

_FORMAT = {  # DType name -> struct code (native byte order, standard size, no alignment)
    "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
    "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f",
    "float64": "d", "bfloat16": "H", "float8_e4m3fn": "B", "float8_e5m2": "B",
}


def _bfloat16_bits(value) -> int:
    bits = int(np.array(value, np.float32).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it a quiet NaN
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def _fp8_bits(dtype: T.DType):
    if dtype.np.kind != "V":  # ml_dtypes provides real fp8 NumPy dtypes; raw uint8 does not
        raise LaunchError(f"{dtype.name} scalar arguments need the ml_dtypes package")
    return lambda value: int(np.array(value, dtype.np).view(np.uint8))


_TO_BITS = {  # scalars stored as raw bits: DType name -> (dtype -> (value -> int))
    "bfloat16": lambda dtype: _bfloat16_bits,
    "float8_e4m3fn": _fp8_bits,
    "float8_e5m2": _fp8_bits,
}


def scalar_converter(dtype: T.DType):
    """value -> the int whose bits a scalar of `dtype` is passed as, or None when the packer
    takes the value itself."""
    to_bits = _TO_BITS.get(dtype.name)
    return None if to_bits is None else to_bits(dtype)


# what packing a value its slot cannot hold raises (a float beyond float32 overflows)
PACK_ERRORS = (struct.error, OverflowError)


class ArgPacker:
    """The argument layout of one specialization; `pack(values)` returns a `void**` address.

    `new_buffers()` makes one thread's memory: a buffer whose first 8*n bytes are the slots
    (`pack_into(buffer, 0, *values)` fills them) and whose rest is the `void*` array
    pointing at them, and that array's address. The buffer keeps both alive."""

    def __init__(self, abi: list):
        self.abi = list(abi)
        self.pack_into = struct.Struct("=" + "".join(
            f"{_FORMAT[p.dtype.name]}{_SLOT - p.dtype.itemsize}x" if p.dtype.itemsize < _SLOT
            else _FORMAT[p.dtype.name] for p in self.abi)).pack_into
        self._converters = [(i, scalar_converter(p.dtype)) for i, p in enumerate(self.abi)
                            if p.dtype.name in _TO_BITS]
        self._local = threading.local()  # a launch on another thread must not see our bytes
        self.pack = self._pack_converted if self._converters else self._pack

    def new_buffers(self) -> tuple:
        n = max(len(self.abi), 1)
        buffer = (ctypes.c_char * (2 * n * _SLOT))()
        base = ctypes.addressof(buffer)
        pointers = (ctypes.c_void_p * n).from_buffer(buffer, n * _SLOT)
        pointers[:] = [base + i * _SLOT for i in range(n)]
        return buffer, ctypes.addressof(pointers)

    def _pack(self, values, buffers=None) -> int:
        if buffers is None:
            try:
                buffers = self._local.buffers
            except AttributeError:
                buffers = self._local.buffers = self.new_buffers()
        slots, address = buffers
        try:
            self.pack_into(slots, 0, *values)
        except PACK_ERRORS:
            raise self._explain(values) from None
        return address

    def _pack_converted(self, values, buffers=None) -> int:
        values = list(values)
        for i, to_bits in self._converters:
            values[i] = to_bits(values[i])
        return self._pack(values, buffers)

    def packed(self, values) -> tuple:
        """(buffer, `void**` address) of fresh memory holding `values`, for a caller that
        keeps it (`pack` reuses this thread's memory at every call)."""
        buffers = self.new_buffers()
        return buffers[0], self.pack(values, buffers)

    def _explain(self, values) -> LaunchError:
        if len(values) != len(self.abi):
            return LaunchError(f"{len(values)} argument values for {len(self.abi)} parameters")
        for p, value in zip(self.abi, values):
            try:
                struct.pack("=" + _FORMAT[p.dtype.name], value)
            except PACK_ERRORS:
                return LaunchError(f"argument {p.symbol} = {value!r} does not fit "
                                   f"{p.dtype.name}")
        return LaunchError("the arguments could not be packed")


def jit_cubin(ptx: str, device: int = 0) -> bytes:
    """The cubin the driver's JIT compiler makes of `ptx` for `device` (cuLink*): what
    ptxas would give, without a toolkit. Raises BackendError with the JIT's log."""
    drv = driver.api()
    data = ptx.encode() + b"\0"
    error_log = bytearray(_JIT_LOG_BYTES)
    option = drv.CUjit_option
    with driver.on_device(device):
        state = driver.check(drv.cuLinkCreate(
            3, [option.CU_JIT_ERROR_LOG_BUFFER, option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                option.CU_JIT_GENERATE_LINE_INFO],
            [error_log, _JIT_LOG_BYTES, 1]), "cuLinkCreate")  # keeps the PTX's line table
        try:
            (err,) = drv.cuLinkAddData(state, drv.CUjitInputType.CU_JIT_INPUT_PTX, data,
                                       len(data), b"kernel.ptx", 0, None, None)
            if not err:
                err, address, size = drv.cuLinkComplete(state)
            if err:
                log = error_log.split(b"\0", 1)[0].decode(errors="replace").strip()
                raise BackendError(f"the driver could not compile the PTX: "
                                   f"{driver.error_name(err)}" + (f"\n{log}" if log else ""))
            return ctypes.string_at(int(address), size)
        finally:
            drv.cuLinkDestroy(state)


_DYNAMIC_SHARED = re.compile(rb"vg_dynamic_shared_(\d+)")  # `tile.sharedmem.DYNAMIC_SHARED_SYMBOL`


def dynamic_shared(image: bytes) -> int:
    """The dynamic shared memory every launch of a module's kernel must give: a tile
    kernel whose shared buffers are there names it in a symbol (in the PTX text and the
    cubin alike; `tile.lower.TileLowering.run`); 0 for other modules."""
    found = _DYNAMIC_SHARED.search(image)
    return int(found.group(1)) if found else 0


class CudaModule:
    """A PTX or cubin image loaded into `device`'s primary context."""

    def __init__(self, image, device: int = 0):
        if isinstance(image, str):
            image = image.encode()
        if not image.startswith(b"\x7fELF") and not image.endswith(b"\0"):
            image += b"\0"  # PTX text must be NUL-terminated
        self.device = device
        self.dynamic_shared = dynamic_shared(image)
        # the launches of its kernels that call grid_barrier(), in order (else None)
        self.cooperative = cooperative.Ordering(device) if cooperative.is_cooperative(image) else None
        drv = driver.api()
        error_log = bytearray(_JIT_LOG_BYTES)
        option = drv.CUjit_option
        with driver.on_device(device):
            err, handle = drv.cuModuleLoadDataEx(
                image, 3, [option.CU_JIT_ERROR_LOG_BUFFER, option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           option.CU_JIT_GENERATE_LINE_INFO], [error_log, _JIT_LOG_BYTES, 1])
        if err:
            log = error_log.split(b"\0", 1)[0].decode(errors="replace").strip()
            raise BackendError(f"the driver could not load the module: "
                               f"{driver.error_name(err)}" + (f"\n{log}" if log else ""))
        self.handle = handle

    def function(self, name: str):
        return driver.check(driver.api().cuModuleGetFunction(self.handle, name.encode()),
                            f"cuModuleGetFunction({name!r})")


class CudaKernel:
    """One entry point of a loaded module, with the argument packer of its specialization."""

    def __init__(self, module: CudaModule, name: str, abi: list):
        self.module = module  # keeps the module loaded
        self.name = name
        self.device = module.device
        self.function = module.function(name)
        self.packer = ArgPacker(abi)
        # a kernel that calls grid_barrier() launches cooperatively, its grid checked
        self.raw_launch = cooperative.CooperativeLaunch(self, module.cooperative) \
            if module.cooperative else driver.api().cuLaunchKernel
        self._shared_opt_in = _STATIC_SHARED_LIMIT  # dynamic shared bytes allowed so far
        self.shared = module.dynamic_shared  # the least dynamic shared memory a launch gives
        self.opt_in_own_shared()

    def opt_in_own_shared(self) -> None:
        """Opt in to `self.shared` bytes of dynamic shared memory where it and the static
        part are past 48 KiB, once, when the kernel is loaded."""
        if self.shared and self.shared + self.attribute("SHARED_SIZE_BYTES") > _STATIC_SHARED_LIMIT:
            self._opt_in_shared(self.shared)

    def launch(self, grid, block, values, stream=0, shared_bytes: int = 0) -> None:
        """Enqueue one launch. `grid`, `block`: 3-tuples; `values`: ABI-ordered argument
        values; `stream`: a raw CUstream handle (int)."""
        shared_bytes = max(shared_bytes, self.shared)
        if shared_bytes > self._shared_opt_in:
            self._opt_in_shared(shared_bytes)
        self.enqueue(grid, block, self.packer.pack(values), stream, shared_bytes)

    def enqueue(self, grid, block, params: int, stream, shared_bytes: int) -> None:
        """One driver launch of packed `params` (the address of the kernelParams array);
        a refusal goes to `launch_failed`."""
        (err,) = self.raw_launch(self.function, *grid, *block, shared_bytes, stream, params, 0)
        if err:
            self.launch_failed(err, grid, block, params, stream, shared_bytes)

    def attribute(self, name: str) -> int:
        """A CU_FUNC_ATTRIBUTE_ value, e.g. attribute('NUM_REGS')."""
        drv = driver.api()
        attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return driver.check(drv.cuFuncGetAttribute(attr, self.function), "cuFuncGetAttribute")

    def _opt_in_shared(self, shared_bytes: int) -> None:
        limit = driver.properties(self.device).max_shared_per_block_optin
        static = self.attribute("SHARED_SIZE_BYTES")
        if shared_bytes + static > limit:
            raise LaunchError(f"{self.name}: {shared_bytes} bytes of dynamic shared memory "
                              f"(+{static} static) exceed the device's {limit} per block")
        drv = driver.api()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.check(drv.cuFuncSetAttribute(self.function, attr, shared_bytes),
                     "cuFuncSetAttribute")
        self._shared_opt_in = shared_bytes

    def launch_failed(self, err, grid, block, params: int, stream, shared_bytes) -> None:
        """After cuLaunchKernel returned `err` for packed `params`: a launch from a thread
        whose current context is another device's (or none) is retried in this kernel's
        device context; any other refusal raises LaunchError or BackendError."""
        name = driver.error_name(err)
        if not driver.is_current(self.device):  # the driver's answer to that varies
            with driver.on_device(self.device):
                (err,) = self.raw_launch(self.function, *grid, *block, shared_bytes, stream,
                                         params, 0)
            if not err:
                return
            name = driver.error_name(err)
        if name in ("CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
            threads = block[0] * block[1] * block[2]
            raise LaunchError(
                f"{self.name}: the driver refused grid={tuple(grid)} block={tuple(block)} "
                f"({threads} threads, {shared_bytes} bytes of dynamic shared memory): {name}; "
                f"this kernel allows {self.attribute('MAX_THREADS_PER_BLOCK')} threads per "
                f"block and uses {self.attribute('NUM_REGS')} registers per thread")
        driver.check((err,), f"cuLaunchKernel({self.name})")

