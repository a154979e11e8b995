"""A specialization: one compiled form of a kernel, with what its launches need precomputed.

Takes: what `dispatch.KernelFunction.specialization` builds (the typed IR, its argument
positions and ABI slots, the safety verdict still pending or settled) or what a launch
record or bundle holds in place of the IR (`records`, `bundle`). Gives `Specialization`.

Guarantees: `settle()` waits for a pending safety verdict once and keeps its bounds guard;
a refused kernel raises its `SafetyError` at every call. `write_loc(name)` is the line
that writes array `name` (from the IR, or from a bundle's table where there is no IR), for
the alias check's message.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Loc
from ..ir import nodes as N


@dataclass(eq=False)
class Specialization:
    """One compiled form of a kernel, with what its launches need precomputed."""

    kernel: N.Kernel
    array_slots: tuple  # positions of array arguments
    written_slots: tuple  # positions of arrays the kernel writes
    abi_slots: tuple  # per ABI parameter: (argument position, role, axis)
    compiled: dict = field(default_factory=dict)  # device ordinal -> runtime module.CudaKernel
    # (values, infos, grid, block) -> whether the bounds proofs' preconditions hold; None:
    # they have none. A launch where they fail runs the fully checked kernel.
    bounds_guard: object = None
    binder: object = None  # (values, infos, fault block) -> ABI-ordered values (launch_cuda)
    key: tuple = ()  # the specialization key it was built for (`KernelFunction.spec_key`)
    dynamic_shared: int = 0  # element size of the kernel's `shared.dynamic` array; 0: none
    timings: dict = field(default_factory=dict)  # stage -> seconds (frontend, safety)
    # What a bundle's specialization (runtime.bundle) has in place of its IR: the loader of
    # its images, (spec, device, checked=) -> CudaKernel; the launch block of a tile kernel;
    # the line that writes each array.
    load: object = None
    launch_block: tuple | None = None
    write_locs: dict | None = None
    verdict: object = None  # the safety verdict (`proofs.Verdict`) until `settle` takes it
    # the launch test of the kernel's `vg.assume` facts (`assumptions.LaunchFacts`); None: none
    assumptions: object = None

    def settle(self) -> None:
        """Wait for the safety verdict if it is still being reached; raises the checker's
        `SafetyError` (again at every call) for a refused kernel."""
        if self.verdict is not None:
            self.bounds_guard = self.verdict.settle()
            self.timings["safety"] = self.verdict.seconds
            self.verdict = None

    def write_loc(self, name: str) -> Loc:
        if self.write_locs is not None:
            return self.write_locs.get(name)
        from ..frontend import WRITE_NODES, walk

        return next((n.loc for n in walk(self.kernel.body)
                     if isinstance(n, WRITE_NODES) and n.array.name == name), self.kernel.loc)
