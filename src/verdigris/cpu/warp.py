"""Warps and barriers in the SIMT interpreter: shuffles, votes, matches, reductions,
`activemask()`, `barrier()`, `syncwarp()`.

Takes: a frame of the interpreter (whole blocks in lock step, one lane per thread, its
`Warps`), the mask of lanes executing the operation, and register values of every lane.
Gives: `Warps` (the warp structure of a chunk: which lanes form each warp), `shuffle`,
`vote`, `activemask`, `match`, `reduce`, `barrier`, and `evaluated_by_all` (which lazily
evaluated operands the compiled code computes on every lane, so the interpreter must too).

Guarantees: the semantics of `ir.nodes.WarpOp` and `ir.nodes.Barrier`. A warp is 32
consecutive threads of a block in linear order (the last warp of a block whose size is not
a multiple of 32 has fewer lanes, and the lanes it lacks take no part). Every lane of a
warp reaches a collective (shuffle, vote, match, reduction, syncwarp()) together, and every
thread of a block reaches a barrier() together: a collective reached by some and not others
raises `DivergenceError` at the user's line (VG210 for a barrier, VG214 for a warp's
collectives), naming a thread that arrived and one that did not (returned, left the loop,
or is on another path), before anything else happens. `activemask()` is no collective: it
gives the lanes of the warp on the caller's path (lock step: the GPU's result where the
warp has reconverged). A shuffle whose
source lane is in 0..31 but past the end of a partial warp raises `KernelError` (on a GPU
it reads an undefined value). A reduction combines lanes in the IR's tree order with the
operators of `ops`, so floats round as the GPU's do. After a barrier, the epoch of every
block that passed it and of each of its warps grows by one; after a syncwarp, its warp's
epoch (shadow memory orders accesses by these epochs).
"""
from __future__ import annotations

import numpy as np

from ..errors import DivergenceError, KernelError
from ..ir import nodes as N
from ..simt import warp_size as WARP_SIZE
from . import ops

# op -> the source's position in the caller's segment (inside 0..width-1 to read another
# lane) from the caller's position and the argument
_SOURCES = {
    "shfl_down": lambda position, arg: position + arg,
    "shfl_up": lambda position, arg: position - arg,
    "shfl_xor": lambda position, arg: position ^ arg,
    "shfl_idx": lambda position, arg: arg,
}
_VOTES = {"any": np.logical_or, "all": np.logical_and}
_NAMES = {**{op: N.warp_call(op) for op in N.WARP_OPS}, "warp": "syncwarp()", "block": "barrier()"}


class Warps:
    """The warps of a chunk of `lanes` lanes: whole blocks of `threads` threads each."""

    def __init__(self, lanes: int, threads: int, lane_thread: np.ndarray):
        self.threads = threads
        self.lane_id = (lane_thread % WARP_SIZE).astype(np.int32)
        per_block = -(-threads // WARP_SIZE)
        self.per_block = per_block
        self.of_lane = (np.arange(lanes) // threads) * per_block + lane_thread // WARP_SIZE
        self.starts = np.flatnonzero(self.lane_id == 0)  # first lane of each warp
        self.sizes = np.diff(np.append(self.starts, lanes))
        self.first_lane = self.starts[self.of_lane]  # of each lane's warp
        self.size_of_lane = self.sizes[self.of_lane]

    def per_warp(self, values: np.ndarray, ufunc) -> np.ndarray:
        """`ufunc` reduced over each warp's lanes, given back to every lane."""
        return np.repeat(ufunc.reduceat(values, self.starts), self.sizes)


def _check_warps(fr, mask: np.ndarray, what: str, loc) -> None:
    if mask.all():
        return
    warps = fr.warps
    arrived = np.add.reduceat(mask.astype(np.int32), warps.starts)
    split = (arrived > 0) & (arrived < warps.sizes)
    if split.any():
        start, size = warps.starts[int(split.argmax())], warps.sizes[int(split.argmax())]
        lanes = mask[start:start + size]
        came, missed = start + int(lanes.argmax()), start + int((~lanes).argmax())
        raise DivergenceError(
            f"warp divergence: {fr.describe(came)} (lane {warps.lane_id[came]}) reached "
            f"{_NAMES[what]}, but lane {warps.lane_id[missed]} of its warp "
            f"({fr.describe(missed)}) did not (observed while running on the cpu backend)", loc,
            hint="all lanes of a warp must reach a shuffle, vote, match, reduction or syncwarp() "
                 "together: call it outside the lane-dependent branch and use the result inside",
            code="VG214")


def _check_blocks(fr, mask: np.ndarray, loc) -> np.ndarray:
    """The blocks (of the chunk) whose threads all arrived; raises if some arrived partly."""
    arrived = mask.reshape(-1, fr.warps.threads)
    whole, some = arrived.all(axis=1), arrived.any(axis=1)
    split = some & ~whole
    if split.any():
        block = int(split.argmax())
        row = arrived[block]
        base = block * fr.warps.threads
        came, missed = base + int(row.argmax()), base + int((~row).argmax())
        raise DivergenceError(
            f"barrier divergence: {fr.describe(came)} reached barrier(), but "
            f"{fr.describe(missed)} of the same block did not (it returned, left a loop or "
            "took another branch; observed while running on the cpu backend)", loc,
            hint="every thread of a block must reach barrier(): keep it out of conditions and "
                 "loops that differ between threads (guard the memory accesses instead)",
            code="VG210")
    return whole


def shuffle(fr, node: N.WarpOp, value, arg, mask: np.ndarray) -> np.ndarray:
    op, width = node.op, node.width
    _check_warps(fr, mask, op, node.loc)
    warps = fr.warps
    value = np.broadcast_to(value, (fr.lanes,))
    lane = warps.lane_id.astype(np.int64)
    position = lane % width
    wanted = _SOURCES[op](position, np.broadcast_to(np.asarray(arg, np.int64), (fr.lanes,)))
    inside = (wanted >= 0) & (wanted < width)
    source = lane - position + wanted
    missing = inside & (source >= warps.size_of_lane)  # lanes a partial warp lacks
    if (missing & mask).any():
        lane = int((missing & mask).argmax())
        raise KernelError(
            f"{fr.describe(lane)} reads lane {source[lane]} of its warp with {_NAMES[op]}, but "
            f"that warp has only {warps.size_of_lane[lane]} lanes (blocks of {warps.threads} "
            "threads)", node.loc, hint="use blocks of a multiple of 32 threads, or keep the source "
                                  "lane inside the warp")
    # a lane outside `mask` may name a missing lane too: it gets its own value, unused
    return value[np.where(inside & ~missing, warps.first_lane + source, fr.lane)]


def vote(fr, node: N.WarpOp, pred, arg, mask: np.ndarray) -> np.ndarray:
    _check_warps(fr, mask, node.op, node.loc)
    pred = np.broadcast_to(np.asarray(pred, bool), (fr.lanes,))
    if node.op == "ballot":
        return _lanes_where(fr, pred)
    return fr.warps.per_warp(pred, _VOTES[node.op])


def activemask(fr, node: N.WarpOp, value, arg, mask: np.ndarray) -> np.ndarray:
    return _lanes_where(fr, mask)


def _lanes_where(fr, pred: np.ndarray) -> np.ndarray:
    """uint32 with bit k set where lane k of the warp has `pred`, on every lane."""
    warps = fr.warps
    return warps.per_warp(pred.astype(np.uint32) << warps.lane_id.astype(np.uint32), np.bitwise_or)


def match(fr, node: N.WarpOp, value, arg, mask: np.ndarray) -> np.ndarray:
    """match_any: the lanes of each lane's warp whose value has its bits; match_all: the
    warp's lanes where they all have one value, else 0."""
    _check_warps(fr, mask, node.op, node.loc)
    warps = fr.warps
    value = np.ascontiguousarray(np.broadcast_to(value, (fr.lanes,)))
    bits = value.view(f"u{value.dtype.itemsize}").astype(np.uint64)
    _, group = np.unique(np.stack([warps.of_lane.astype(np.uint64), bits]), axis=1,
                         return_inverse=True)
    group = group.reshape(-1)
    if node.op == "match_any":  # lanes' bits are distinct powers of two: their sum is their or
        peers = np.bincount(group, weights=np.ldexp(1.0, warps.lane_id))
        return peers[group].astype(np.uint32)
    whole = np.bincount(group)[group] == warps.size_of_lane
    members = (np.uint64(1) << warps.size_of_lane.astype(np.uint64)) - np.uint64(1)
    return np.where(whole, members, 0).astype(np.uint32)


def reduce(fr, node: N.WarpOp, value, arg, mask: np.ndarray) -> np.ndarray:
    """`value` combined over each warp in the IR's order: lane i takes in lane i + d (where
    the warp has it) for d = 16, 8, 4, 2, 1; every lane gets lane 0's result."""
    _check_warps(fr, mask, node.op, node.loc)
    combine = N.REDUCTIONS[node.op]
    f = ops.binary(combine, node.dtype) or ops.math(combine, node.dtype)
    warps = fr.warps
    slots = np.zeros((len(warps.starts), WARP_SIZE), ops.register_dtype(node.dtype))
    slots[warps.of_lane, warps.lane_id] = value
    present = np.arange(WARP_SIZE) < warps.sizes[:, None]
    d = WARP_SIZE // 2
    with np.errstate(all="ignore"):
        while d:
            here, there = slots[:, :d], slots[:, d:2 * d]
            slots[:, :d] = np.where(present[:, d:2 * d], f(here, there), here)
            d //= 2
    return slots[warps.of_lane, 0]


# op -> f(frame, node, value, argument, mask): the value of a `WarpOp` on every lane
OPERATIONS = {**dict.fromkeys(N.SHUFFLES, shuffle), **dict.fromkeys(N.VOTES, vote),
              "activemask": activemask, **dict.fromkeys(N.MATCHES, match),
              **dict.fromkeys(N.REDUCTIONS, reduce)}


def _check_grid(fr, mask: np.ndarray, loc) -> None:
    """Raises unless every thread of the grid (the frame of a cooperative kernel) arrived."""
    if mask.all() or not mask.any():
        return
    came, missed = int(mask.argmax()), int((~mask).argmax())
    raise DivergenceError(
        f"barrier divergence: {fr.describe(came)} reached grid_barrier(), but "
        f"{fr.describe(missed)} did not (it returned, left a loop or took another branch; "
        "observed while running on the cpu backend)", loc,
        hint="every thread of the grid must reach grid_barrier(): keep it out of conditions "
             "and loops that differ between threads or blocks (guard the memory accesses "
             "instead)", code="VG210")


def barrier(fr, scope: str, mask: np.ndarray, loc) -> None:
    if scope == "grid":
        _check_grid(fr, mask, loc)
        if fr.block_epoch is not None and mask.any():
            fr.grid_epoch += 1
            fr.block_epoch += 1
            fr.warp_epoch += 1
        return
    if scope == "warp":
        _check_warps(fr, mask, scope, loc)
        if fr.warp_epoch is not None:
            fr.warp_epoch[np.unique(fr.warps.of_lane[mask])] += 1
        return
    passed = _check_blocks(fr, mask, loc)
    if fr.block_epoch is not None:
        fr.block_epoch[passed] += 1
        fr.warp_epoch.reshape(-1, fr.warps.per_block)[passed] += 1


def evaluated_by_all(e: N.Expr, together: tuple) -> bool:
    """Whether the compiled code computes `e`, an operand evaluated lazily (a select's arm,
    the right side of `and`/`or`), on every lane rather than behind a branch: when it holds
    a warp operation and none of `together` (the operands the compiled code branches
    around with it: both arms of a select, or `e` alone) needs a branch
    (`codegen.lower.needs_branch`). Then the interpreter evaluates it on every lane too, so
    a collective sees the whole warp and `activemask()` the lanes the GPU's sees."""
    from ..codegen.lower import needs_branch
    from ..frontend import walk

    return any(isinstance(n, N.WarpOp) for n in walk([e])) and not any(map(needs_branch, together))
