"""The cuda backend's half of a launch: compile a specialization for a device, pack, enqueue.

Takes: a `KernelFunction`, its `Specialization`, grid, block, the bound argument values and
their `ArrayInfo`s, and `stream=`. Gives: `launch(...)`. Guarantees:
- Every array argument is device memory of one GPU; a host array or a mix of devices is a
  `LaunchError` that says how to fix it.
- A specialization is compiled once per device: PTX from the code generator, assembled to a
  cubin by the first of `assemblers()` (ptxas, else nvJitLink in process, else the
  driver's JIT; `VERDIGRIS_ASSEMBLER` picks one), kept in the disk cache under a key of the IR's text, the
  target and the compiler's fingerprint. `VERDIGRIS_LOG=compile` prints each compile's
  stages (frontend, safety, lower, libdevice, optimize, emit, assembly or disk cache, load)
  on stdout; the loaded kernel keeps them in `.timings`. After a compile the launch leaves
  the specialization's launch record (`records`) and, unless the image came from the disk
  cache, the warm-up's marker (`warmup.compiled`).
- The compiled kernel's facts say `noalias` because every launch passes the alias check
  first.
- Bounds: every kernel takes one hidden argument after its ABI parameters, the device's
  fault block (`faults`, `codegen.checks`). A fault an earlier kernel recorded is raised
  as `BoundsError` before this launch is enqueued (a read of host memory, no sync). When
  the launch breaks a precondition the bounds proofs assume (`spec.bounds_guard`, e.g.
  `x` shorter than `out` in axpy), the launch runs the fully checked variant of the
  kernel instead (compiled on first need, cached like the other).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..errors import BackendError, LaunchError
from .. import types as T
from ..ir import abi_params
from ..ir.abi import AbiParam
from ..ir.printer import format_kernel
from . import cache, driver, faults, limits, records, streams, warmup
from .module import CudaKernel, CudaModule, jit_cubin

# The PTX targets we emit, by compute capability; a newer GPU runs the newest PTX below it.
PTX_TARGETS = ((9, 0, "sm_90"), (8, 9, "sm_89"), (8, 0, "sm_80"))


def ptx_target(cc: tuple) -> str:
    if tuple(cc) == (9, 0):  # Hopper's own instructions (wgmma, setmaxnreg) need sm_90a,
        return "sm_90a"      # whose code runs on compute capability 9.0 alone
    for major, minor, target in PTX_TARGETS:
        if cc >= (major, minor):
            return target
    raise LaunchError(f"GPUs of compute capability {cc[0]}.{cc[1]} are older than verdigris "
                      "supports (8.0, Ampere, and newer)")


def targets(device: int) -> tuple:
    """(PTX target, cubin architecture) of `device`: ("sm_90a", "sm_90a") on an H100 or
    H200, ("sm_89", "sm_89") on an L4, ("sm_90", "sm_120") on a GPU newer than every target."""
    cc = driver.properties(device).cc
    target = ptx_target(cc)
    return target, target if target.endswith("a") else f"sm_{cc[0]}{cc[1]}"


# The hidden last parameter (not in `abi_params`): the device's fault block.
FAULT_PARAM = AbiParam("vg.faults", "ptr", -1, T.uint64)


@dataclass(frozen=True, eq=False)
class Plan:
    """What one launch did, for `fastpath` to repeat: the specialization, the device, the
    compiled variant (`checked`: the one with every access checked), the 3-D grid and
    block, whether a torch tensor chose the stream, and the arguments it was made for."""

    spec: object
    device: int
    compiled: CudaKernel
    checked: bool
    grid: tuple
    block: tuple
    torch_args: bool
    values: tuple
    infos: list

    @property
    def key(self) -> tuple:
        return self.spec.key


def launch(kernel_fn, spec, grid, block, values, infos, stream, shared_bytes: int = 0) -> Plan | None:
    """Compile (once per device) and enqueue; a grid with no blocks compiles and enqueues
    nothing, and gives None (no plan for `fastpath` to repeat)."""
    device = device_of(kernel_fn, spec.array_slots, infos)
    limits.check_device(kernel_fn.__name__, grid, block, device)
    faults.raise_pending(device)
    checked = spec.bounds_guard is not None and not spec.bounds_guard(values, infos, grid, block)
    variant = (device, "checked") if checked else device
    compiled = spec.compiled.get(variant)
    if compiled is None:  # compile it, or load it from a bundle (`runtime.bundle`)
        compiled = spec.compiled[variant] = (spec.load or _compile)(spec, device, checked=checked)
        if spec.load is None:
            if "disk cache" not in compiled.timings:
                warmup.compiled(kernel_fn)
            records.save(kernel_fn, spec, device, checked, compiled)
    if 0 in grid:
        return None
    binder = spec.binder
    if binder is None:
        binder = spec.binder = abi_binder(spec.abi_slots)
    abi_values = binder(values, infos, faults.block_address(device))
    torch_args = any(_is_torch(type(values[i])) for i in spec.array_slots)
    compiled.launch(grid, block, abi_values, streams.resolve(stream, device, torch_args),
                    int(shared_bytes))
    return Plan(spec, device, compiled, checked, grid, block, torch_args, tuple(values), infos)


_TORCH_TYPES: dict = {}  # argument type -> whether it is a torch tensor


def _is_torch(tp) -> bool:
    flag = _TORCH_TYPES.get(tp)
    if flag is None:
        flag = _TORCH_TYPES[tp] = tp.__module__.startswith("torch")
    return flag


def abi_binder(abi_slots: tuple):
    """A function `(values, infos, fault_block) -> tuple` giving the ABI-ordered argument
    values of one specialization, generated once so a launch makes no per-slot calls."""
    fields = {"ptr": "infos[{i}].ptr", "shape": "infos[{i}].shape[{a}]",
              "stride": "infos[{i}].strides[{a}]", "scalar": "values[{i}]"}
    items = [fields[role].format(i=index, a=axis) for index, role, axis in abi_slots]
    namespace: dict = {}
    exec(cache.code(f"def bind(values, infos, fault_block):\n"
                    f"    return ({', '.join(items + ['fault_block'])},)\n", "<verdigris binder>"),
         {}, namespace)
    return namespace["bind"]


def device_of(kernel_fn, array_slots, infos) -> int:
    """The GPU all the array arguments (at `array_slots`) are on; LaunchError for one in
    host memory or on another GPU."""
    device = None
    for i in array_slots:
        info = infos[i]
        if info.device < 0 or (device is not None and info.device != device):
            _raise_device(kernel_fn, info, i, device)
        device = info.device
    return 0 if device is None else device


def _raise_device(kernel_fn, info, i: int, device) -> None:
    name = kernel_fn.params[i].name
    if info.device < 0:
        raise LaunchError(
            f"{kernel_fn.__name__}: argument {name!r} is in host memory, but the kernel "
            "runs on the GPU", hint=f"move it first: {name} = vg.asarray({name})")
    raise LaunchError(f"{kernel_fn.__name__}: arguments are on different GPUs "
                      f"({name!r} on GPU {info.device}, others on GPU {device})",
                      hint="copy them to one device first")


def _compile(spec, device: int, checked: bool = False) -> CudaKernel:
    """`checked`: the variant with every access checked, for launches that break the
    preconditions of the bounds proofs."""
    from ..codegen import checks

    target, arch = targets(device)
    try:
        kernel, image, timings, image_key = build_image(spec, target, arch, checked, device)
    except Exception:
        spec.settle()  # a kernel the checker refuses reports that, not what the compiler said
        raise
    beside = spec.verdict is not None
    if beside:  # checked while it compiled (`proofs.start`): the verdict comes before the load
        start = time.perf_counter()
        spec.settle()
        timings["safety wait"] = time.perf_counter() - start
    faults.register(checks.kernel_id(kernel), kernel.name,
                    [(n.loc, n.array.name) for n in checks.sites(kernel)])
    from .tensormap import cuda_kernel  # tile matrix products: shared memory, TMA maps

    start = time.perf_counter()
    loaded = cuda_kernel(kernel, target, CudaModule(image, device), _entry_symbol(kernel.name),
                         abi_params(kernel) + [FAULT_PARAM],
                         lambda: _without_tma(spec, device, checked))
    timings["load"] = time.perf_counter() - start
    loaded.timings, loaded.image_key = timings, image_key
    if os.environ.get("VERDIGRIS_LOG", "") == "compile":
        name = spec.kernel.name + (" (checked)" if checked else "")
        how = f"{name} for {arch} from the disk cache" if "disk cache" in timings \
            else f"compiled {name} for {arch}"
        warmed = warmup.take_report()
        print(f"verdigris: {how} in {sum(timings.values()) * 1e3:.1f} ms ("
              + ", ".join(f"{stage} {seconds * 1e3:.1f}" for stage, seconds in timings.items())
              + (f"; safety {spec.timings['safety'] * 1e3:.1f} beside the compile" if beside else "")
              + " ms)" + (f"; {warmed}" if warmed else ""))
    return loaded


def _without_tma(spec, device: int, checked: bool) -> CudaKernel:
    """The variant of a kernel with matrix products that streams without the copy engine,
    compiled (or read from the disk cache) and loaded on first need (`tensormap`)."""
    from .tensormap import cuda_kernel

    target, arch = targets(device)
    kernel, image = build_image(spec, target, arch, checked, device, tma=False)[:2]
    return cuda_kernel(kernel, target, CudaModule(image, device), _entry_symbol(kernel.name),
                       abi_params(kernel) + [FAULT_PARAM])


def build_image(spec, target: str, arch: str, checked: bool, device: int | None = None,
                tma: bool = True):
    """(the kernel variant, its cubin for `arch` from PTX for `target`, stage timings, the
    image's disk-cache key), from
    the disk cache or the compiler. Without a `device` (ahead of time) the driver's JIT is
    not a route: with neither nvJitLink nor ptxas, or for `arch` "ptx", the image is the PTX
    text itself. `tma` False: the variant of a kernel with matrix products that streams
    without the copy engine (`tensormap`)."""
    from .. import codegen
    from ..codegen import checks

    kernel = checks.as_launched(spec.kernel, checked, tma)
    key = cache.key(format_kernel(kernel), ("noalias", "checked", *checks.checked_sites(kernel))
                    + (() if tma else ("without tma",))
                    + (f"lines of {kernel.loc.file}",),  # the line table names the file
                    f"{target}->{arch}")
    timings = dict(spec.timings)  # frontend and safety, from dispatch
    start = time.perf_counter()
    image = cache.get(key)
    if image is None:
        # a verdict still to be reached: its check runs beside LLVM and ptxas
        compiled = codegen.compile_to_ptx(kernel, target, spec.verdict and spec.verdict.start)
        timings.update(compiled.timings)
        start = time.perf_counter()
        assembler, image = assemble(compiled.ptx, arch, device)
        if assembler != "ptx":
            cache.put(key, image)
        timings[assembler] = time.perf_counter() - start
    else:
        timings["disk cache"] = time.perf_counter() - start
    return kernel, image, timings, key


def tile_block(spec) -> tuple:
    """The block a tile kernel launches with (`tile.warps.launch_block`), kept on the
    specialization and in the disk cache: a cached kernel's launch then does not import
    the tile lowering."""
    key = cache.key(format_kernel(spec.kernel), ("launch block", spec.key), "any target")
    stored = cache.get(key)
    if stored is not None and stored.count(b",") == 2:
        spec.launch_block = tuple(int(n) for n in stored.split(b","))
    else:
        from ..tile.warps import launch_block

        spec.launch_block = tuple(launch_block(spec.kernel))
        cache.put(key, ",".join(map(str, spec.launch_block)).encode())
    return spec.launch_block


def _entry_symbol(name: str) -> str:
    """`codegen.entry_symbol(name)`; a plain ASCII identifier is its own symbol, which spares
    a cached kernel's launch the import of the lowering."""
    if name.isascii() and name.isidentifier() and name != "_":
        return name
    from .. import codegen

    return codegen.entry_symbol(name)


def assemblers(device: int | None = 0):
    """The PTX -> cubin routes present, in the order to try them, lazily: a route is probed
    only when the ones before it are absent (`VERDIGRIS_ASSEMBLER` names the one route,
    present or not; without a `device`, the driver's JIT is not a route). Measured on the
    H200 (bench/RESULTS.md): for one kernel in a fresh process ptxas is quickest (12-16 ms
    for a vector add, most of it starting the program), nvJitLink's first use loads a 60 MB library (19-53 ms,
    then ~0.2 ms for a vector add; probing it loads it too) and the driver's JIT starts
    its compiler (~115 ms); on a large kernel all three take the same time (~50 ms for the
    softmax). ptxas, then nvJitLink, then the driver."""
    from .. import codegen
    from ..codegen import ptxas

    present = {"ptxas": codegen.ptxas_available, "nvjitlink": ptxas.nvjitlink_available,
               "driver": lambda: device is not None}
    chosen = os.environ.get("VERDIGRIS_ASSEMBLER", "")
    if chosen:
        if chosen not in present:
            raise BackendError(f"VERDIGRIS_ASSEMBLER={chosen!r}: choose one of "
                               f"{', '.join(present)}")
        present = {chosen: present[chosen] if chosen == "driver" else lambda: True}
    return (name for name, available in present.items() if available())


def assemble(ptx: str, arch: str, device: int | None) -> tuple:
    """(route, cubin) for `ptx`, by the first route of `assemblers(device)`; ("ptx", the
    PTX) when none is present or `arch` is "ptx"."""
    from .. import codegen
    from ..codegen import ptxas

    route = next(assemblers(device), "ptx") if arch != "ptx" else "ptx"
    if route == "ptx":
        return route, ptx.encode()
    if route == "nvjitlink":
        return route, ptxas.link(ptx, arch)
    if route == "ptxas":
        return route, codegen.assemble(ptx, arch)
    return route, jit_cubin(ptx, device)
