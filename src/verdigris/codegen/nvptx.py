"""LLVM's NVPTX back end through llvmlite: targets, O3 optimization and PTX emission.

Takes: textual LLVM IR and a target name (`TARGETS`). Gives: `initialize()`, `prefetch()`
(`initialize` on a daemon thread: loading LLVM's 178 MB library and setting up its targets
release the GIL, so they overlap the caller's safety check), `data_layout(target)`,
`parse(text)` (a verified `ModuleRef`), `optimize(module, target)` (the O3 pipeline of the
new pass manager, in place), `emit_ptx(module, target)`, and the address spaces of global
and shared memory (`GLOBAL`, `SHARED`).

Guarantees: LLVM is initialized and the global options set once per process (also when
threads race to it: `libdevice.prefetch` does it on its own thread), each target machine
created once. Every target emits PTX ISA 8.0: ptxas 13.0 accepts it for all four
targets, it is the first ISA with sm_90a (wgmma, setmaxnreg), and drivers since CUDA 12.0
can JIT it. libdevice's `__nvvm_reflect` queries resolve to the non-FTZ, IEEE-sqrt paths
(the `nvvm-reflect-ftz` module flag, which `lower` sets, and `__CUDA_PREC_SQRT=1` here).
"""
from __future__ import annotations

import functools
import threading

from ..errors import CompileError

TRIPLE = "nvptx64-nvidia-cuda"
TARGETS = {"sm_80": "+ptx80", "sm_89": "+ptx80", "sm_90": "+ptx80", "sm_90a": "+ptx80"}
GLOBAL, SHARED = 1, 3  # NVPTX's address spaces of global and shared memory


_SETUP = threading.Lock()
_TARGET: list = []  # the NVPTX llvmlite Target, once LLVM is set up


def initialize():
    """Set LLVM up (targets, printers, options) once per process; the NVPTX Target."""
    with _SETUP:
        if not _TARGET:
            import llvmlite.binding as llvm

            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            llvm.set_option("verdigris", "-nvvm-reflect-add=__CUDA_PREC_SQRT=1")
            _TARGET.append(llvm.Target.from_triple(TRIPLE))
        return _TARGET[0]


def prefetch() -> None:
    """Start `initialize` on a daemon thread, unless LLVM is set up already."""
    if not _TARGET:
        threading.Thread(target=_initialize_quietly, daemon=True, name="verdigris-llvm").start()


def _initialize_quietly() -> None:
    try:
        initialize()
    except Exception:  # no usable llvmlite: the compile itself reports it, after the checks
        pass


@functools.cache
def target_machine(target: str):
    if target not in TARGETS:
        raise CompileError(f"unknown target {target!r}; the targets are {', '.join(TARGETS)}")
    return initialize().create_target_machine(cpu=target, features=TARGETS[target], opt=3)


def data_layout(target: str) -> str:
    return str(target_machine(target).target_data)


def parse(text: str):
    """A verified llvmlite `ModuleRef` of `text`."""
    initialize()
    import llvmlite.binding as llvm

    module = llvm.parse_assembly(text)
    module.verify()
    return module


def optimize(module, target: str) -> None:
    import llvmlite.binding as llvm

    # A fresh pass builder per module: its analysis caches are keyed by IR addresses.
    builder = llvm.create_pass_builder(target_machine(target), llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)


def emit_ptx(module, target: str) -> str:
    return target_machine(target).emit_assembly(module)
