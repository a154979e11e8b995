"""The code generator: typed kernel IR -> LLVM IR -> O3 -> PTX (-> cubin with ptxas).

Takes: a specialized `ir.Kernel` and a target, one of `TARGETS` (sm_80, sm_89, sm_90,
sm_90a). Gives:
- `lower_to_llvm(kernel, target) -> str`: the LLVM IR before optimization (as LLVM prints
  it);
- `compile_to_ptx(kernel, target="sm_90") -> CompiledPTX`: PTX, its entry symbol (=
  `entry_symbol(kernel.name)`), the optimized LLVM IR, the ABI and seconds per stage
  (lower, libdevice, optimize, emit);
- `assemble(ptx, arch) -> bytes` (a cubin), `disassemble(cubin) -> str` (SASS),
  `ptxas_available() -> bool`, `ptxas_path()` and `libdevice_path()` (None when absent);
- `prefetch(kernel)`: starts LLVM's setup (`nvptx.prefetch`) and, when the kernel may call
  libdevice, the parse of libdevice, each on a daemon thread, to overlap the safety check
  and the lowering (the runtime calls it when a specialization is about to be compiled).

Guarantees: identical input gives identical PTX. LLVM state (targets, target machines,
libdevice) is set up once per process, on first use.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir.abi import AbiParam, abi_params
from ..ir.nodes import Kernel
from .nvptx import TARGETS
from .ptxas import assemble, disassemble, ptxas_available, ptxas_path
from .toolkit import find_libdevice as libdevice_path

# The lowering and LLVM load on first use: importing `codegen.checks` (the runtime does,
# at every launch) or a cached kernel's launch need neither.
_LAZY = {"entry_symbol": "lower", "lower": "lower", "libdevice": None, "nvptx": None}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module = importlib.import_module(f"{__name__}.{_LAZY[name] or name}")
    return module if _LAZY[name] is None else getattr(module, name)

__all__ = ["TARGETS", "CompiledPTX", "lower_to_llvm", "compile_to_ptx", "entry_symbol", "assemble",
           "disassemble", "ptxas_available", "ptxas_path", "libdevice_path", "prefetch"]


@dataclass(frozen=True)
class CompiledPTX:
    ptx: str
    entry: str  # the kernel's symbol in the PTX
    target: str
    llvm_ir: str  # after optimization
    abi: list[AbiParam]
    timings: dict[str, float] = field(compare=False)  # seconds per stage


def prefetch(kernel: Kernel) -> None:
    from . import nvptx

    nvptx.prefetch()  # first: the rest of this function is Python's work, beside it
    try:
        from . import libdevice, mathlib
    except ImportError:  # no llvmlite: the compile itself will say so, after the checks
        return
    if mathlib.may_call_libdevice(kernel):
        libdevice.prefetch()


def _lower(kernel: Kernel, target: str):
    """The track's lowering: tile kernels through `tile.lower`, SIMT kernels through `lower`."""
    if kernel.track == "tile":
        from ..tile.lower import lower as lower_tiles

        return lower_tiles(kernel, target)
    from .lower import lower

    return lower(kernel, target)


def lower_to_llvm(kernel: Kernel, target: str) -> str:
    from . import nvptx

    return str(nvptx.parse(str(_lower(kernel, target))))


def compile_to_ptx(kernel: Kernel, target: str = "sm_90", lowered=None) -> CompiledPTX:
    """`lowered`, if given, is called once the lowering (the Python part) is done: what
    follows runs in LLVM, outside the GIL (the runtime starts the safety check there)."""
    from . import libdevice, nvptx
    from .lower import entry_symbol

    timings = {}
    start = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal start
        now = time.perf_counter()
        timings[stage] = now - start
        start = now

    module = nvptx.parse(str(_lower(kernel, target)))
    lap("lower")
    if lowered is not None:
        lowered()
    libdevice.link(module, target)
    lap("libdevice")
    nvptx.optimize(module, target)
    lap("optimize")
    ptx = nvptx.emit_ptx(module, target)
    lap("emit")
    return CompiledPTX(ptx, entry_symbol(kernel.name), target, str(module), abi_params(kernel), timings)
