"""The static race checker (global memory; SIMT and tile tracks).

Takes: a specialized `ir.Kernel`. Gives:
- `analyze(kernel) -> Analysis`: every finding as a `SafetyError` (`.code`, `.loc` at the
  user's line of one of the two accesses, a concrete counterexample in the message), the
  facts proven, the proof time (wall and CPU; `budgets` limits the CPU time) and the number
  of solver queries. Never raises for a user
  kernel: what it cannot model is a VG205 finding.
- `check(kernel) -> Analysis`: `analyze`, then raise the first finding, else store the facts
  in `kernel.facts`. The dispatcher calls it once per specialization (cached with it).

The rule (GPUVerify's two-thread reduction): two distinct threads that nothing orders race
iff they may touch the same element of one global array with at least one plain write
(VG202 write/write, VG203 read/write). Threads of different blocks are ordered only by
grid_barrier(); threads of one block also by barrier(), lanes of one warp also by syncwarp()
(`order`, `barriers`). Atomics never race with atomics; an atomic and a plain access that
may meet is VG204. A pair the checker cannot decide is VG205, never a pass: a solver
timeout, or a collision that needs values the checker cannot see (indices computed from
loaded data, or carried by a loop). Accesses inside `with vg.unsafe():` are neither proven
nor reported. Each pair of accesses goes to `fastpath` first, then to `witness` (two
threads of a small launch, or of one whose run-time values make a product wrap around,
that meet: the refusal's counterexample, found by evaluation), then to `solver`. Threads
of one block that cooperate are checked by `diverge` (every barrier and warp operation
reached by all of them together, and no warp operation by a warp short of 32 lanes:
VG210, VG214) and `shared` (races in shared memory between barriers: VG211,
VG212, VG204; reads of what nothing wrote: VG213).
Tile kernels follow the same rule with a block as the thread (`tilerace`, on
the accesses `tiles` maps to elements; block orders such as grouped and persistent ones
through `blockorder`); other tracks get `race_free: None`.

Facts (in `kernel.facts` after `check`): `race_free`, and the launch conditions the proof
assumes and the launcher must enforce: `unit_grid_axes` (grid axes that must have one
block: the kernel never reads `block_id` there, so two blocks along them would do the same
work), `unit_block_axes` (likewise for an unspecialized block), `whole_warps` (an
unspecialized block's thread count is a multiple of 32, where the kernel has shuffles
that read other lanes: a launch's own specialization checks its block) and `max_axis_threads`
(grid_dim(a) * block_dim(a) along each axis, so 32-bit id arithmetic cannot wrap). Then the
bounds proofs (`bounds`): `in_bounds` (ids of accesses the GPU code need not check),
`narrow_extents` (the array axes whose checked 32-bit indices are tested in 32 bits) and
`bounds_preconditions` (what a launch must satisfy to use them; the launcher checks).

A kernel's first check imports only what its track and constructs need (`solver` when the
fast path leaves a pair, `diverge` and `shared` for threads that work together, `tilerace`
for tile kernels): a SIMT kernel without barriers loads neither them nor z3.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import SafetyError
from ..ir import nodes as N
from . import bounds, budgets, diagnose, fastpath
from .codes import CODES
from .algebra import MAX_AXIS_THREADS
from .symbolic import execute


CODE_OF_KINDS = {  # the kinds of the two accesses -> the code if they may meet
    ("write", "write"): "VG202",
    ("read", "write"): "VG203",
    ("atomic", "read"): "VG204",
    ("atomic", "write"): "VG204",
}


@dataclass
class Analysis:
    errors: list = field(default_factory=list)  # of SafetyError, most serious first
    facts: dict = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of the proving thread, as the time limit (`budgets`) counts it
    solver_queries: int = 0


def analyze(kernel: N.Kernel, budget: int = budgets.RACE) -> Analysis:
    start, cpu = time.perf_counter(), time.thread_time()
    check_pairs = _PAIR_CHECKS.get(kernel.track)
    if check_pairs is None:
        return Analysis(facts={"race_free": None})
    analysis, proof = Analysis(), budgets.Proof()
    try:
        with budgets.proving() as proof:
            check_pairs(kernel, analysis, budget)
    except Exception as exc:  # a construct the model lacks: refuse rather than pass
        analysis.errors.append(SafetyError(
            f"{CODES['VG205'].title}: the race checker could not model this kernel "
            f"({type(exc).__name__}: {exc})", kernel.loc, diagnose.HINTS["VG205"], "VG205"))
    analysis.errors.sort(key=lambda e: (e.code, e.loc.line, e.loc.col))
    analysis.facts["race_free"] = not analysis.errors
    analysis.seconds = time.perf_counter() - start
    analysis.cpu_seconds = time.thread_time() - cpu - proof.excluded  # (as the limit counts it)
    return analysis


def check(kernel: N.Kernel) -> Analysis:
    analysis = check_races(kernel)
    prove_bounds(kernel)
    return analysis


def check_races(kernel: N.Kernel) -> Analysis:
    """The race checks (`analyze`): raises the first error, else records the facts."""
    analysis = analyze(kernel)
    if analysis.errors:
        raise analysis.errors[0]
    kernel.facts.update(analysis.facts)
    return analysis


def order_block(kernel: N.Kernel) -> None:
    """Which statements of one tile block may meet (`blockorder`), for the lowering to order
    before the race checks run (their refusals come with those)."""
    from . import blockorder

    kernel.facts["block_meets"] = blockorder.of(kernel, budgets.RACE).pairs


def prove_bounds(kernel: N.Kernel) -> None:
    """Which accesses need no check (or mask) on the GPU, and on what launch condition."""
    proof = bounds.prove(kernel)
    kernel.facts.update(in_bounds=proof.in_bounds, bounds_preconditions=proof.preconditions,
                        narrow_extents=proof.narrow, bounds_seconds=proof.seconds,
                        launch_conditions=tuple(tuple(sorted(p.terms.items())) for p, _ in proof.preconditions))


def _check_pairs(kernel: N.Kernel, analysis: Analysis, budget: int) -> None:
    trace = execute(kernel)
    space = trace.space
    shuffles = any(p.source is not None for p in trace.checkpoints)
    analysis.facts.update(unit_grid_axes=space.unit_grid_axes, unit_block_axes=space.unit_block_axes,
                          whole_warps=space.block is None and shuffles,
                          max_axis_threads=MAX_AXIS_THREADS,
                          unsafe_accesses=sum(a.unsafe for a in trace.accesses))
    by_array: dict = {}
    for access in trace.accesses:
        if not access.unsafe and access.memory == "global":
            by_array.setdefault(access.array, []).append(access)
    fast = witnesses = 0
    for accesses in by_array.values():
        for i, a in enumerate(accesses):
            for b in accesses[i:]:
                code = CODE_OF_KINDS.get(tuple(sorted((a.kind, b.kind))))
                if code is None:
                    continue
                if fastpath.disjoint(a, b, space):
                    fast += 1
                    continue
                with budgets.unclocked():  # (first imports)
                    from . import solver, witness

                outcome = witness.search(a, b, space)
                if outcome is None:
                    analysis.solver_queries += 1
                    outcome = solver.collide(a, b, space, budget)
                else:
                    witnesses += 1
                if outcome.status == "sat" and outcome.unknowns:
                    analysis.errors.append(diagnose.data_error(a, b, outcome))
                elif outcome.status == "sat":
                    analysis.errors.append(diagnose.race_error(code, a, b, outcome))
                elif outcome.status == "unknown":
                    analysis.errors.append(diagnose.unproven_error(a, b, outcome.reason))
    if trace.checkpoints or space.static_shapes:  # threads of a block work together
        with budgets.unclocked():  # (first imports)
            from . import diverge, shared

        errors, queries = diverge.check(trace, budget)
        analysis.errors += errors
        analysis.solver_queries += queries
        reads = shared.check_reads(trace, budget)
        for tally in (shared.check_pairs(trace, budget), reads):
            analysis.errors += tally.errors
            analysis.solver_queries += tally.queries
            fast += tally.fast
        # (array, line, column) of each read neither proven written nor refused (VG213):
        # only the cpu backend checks them; `verdigris check` notes them
        analysis.facts["unproven_shared_reads"] = tuple(
            dict.fromkeys((r.array, r.loc.line, r.loc.col) for r in reads.unproven))
    analysis.facts.update(fast_proofs=fast, solver_queries=analysis.solver_queries, witnesses=witnesses)


def _check_tile_pairs(kernel: N.Kernel, analysis: Analysis, budget: int) -> None:
    with budgets.unclocked():  # (first imports)
        from . import tilerace

    tilerace.check_pairs(kernel, analysis, budget)


_PAIR_CHECKS = {"simt": _check_pairs, "tile": _check_tile_pairs}  # track -> its race rules
