"""Atomic read-modify-writes for the cpu backend, vectorized over lanes.

Takes: an atomic op and IR dtype (`scan_for`), then the memory's elements, the active
lanes' element indices in lane order, and their values (and compares, for "cas") in
register form (`perform`). Gives: each lane's *old* value, in register form; the elements
are updated in place.

Guarantees: the result of the lanes performing their atomics one after another in lane
order (a valid serialization): each lane gets the element's contents just before its own
update, each element ends with the contents after its last lane's. Integer ops wrap;
float "max"/"min" are IEEE maxNum/minNum (a NaN operand loses to a number); float adds
round after every step, as the serialized atomics do; "cas" compares bit patterns, as the
hardware's compare-and-swap does (so a NaN can be swapped out and -0.0 does not match 0.0).

How: lanes are grouped by element with a stable argsort (which keeps lane order within a
group). Each group is the sequence [element, v0, v1, ...] and a ufunc's `accumulate`
gives all its prefixes, sequentially and rounding at each step. Groups are laid out as
the rows of 2-d tables, one table per power-of-two size class, so padding at most doubles
the work and no Python loop runs over lanes. "exch" needs no scan: each lane gets its
predecessor's value. "cas", and bfloat16 adds (NumPy has no bfloat16 ufunc), step one rank
of every group at a time: as many NumPy steps as the most lanes aiming at one element.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .. import types as T
from . import ops


@dataclass(frozen=True, eq=False)
class _Groups:
    """The active lanes sorted by element: lanes of one element are one group."""

    order: np.ndarray  # sorted position -> lane
    starts: np.ndarray  # group -> its first sorted position
    sizes: np.ndarray  # group -> number of lanes
    group: np.ndarray  # sorted position -> group
    rank: np.ndarray  # sorted position -> place within its group

    @classmethod
    def of(cls, keys: np.ndarray) -> "_Groups":
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        sizes = np.diff(np.append(starts, len(keys)))
        group = np.repeat(np.arange(len(starts)), sizes)
        return cls(order, starts, sizes, group, np.arange(len(keys)) - starts[group])


# A scan: (groups, element contents per group, values and compares in sorted lane order)
# -> (old value per sorted lane, final contents per group).
Scan = Callable[[_Groups, np.ndarray, np.ndarray, Optional[np.ndarray]], tuple]


def _accumulated(ufunc) -> Scan:
    def scan(g, current, values, compares):
        old, final = np.empty_like(values), np.empty_like(current)
        size_class = np.ceil(np.log2(g.sizes + 1)).astype(np.int64)  # row width 2**class
        lane_class = size_class[g.group]
        row_of = np.empty(len(g.sizes), np.int64)
        for width_log2 in np.unique(size_class):
            groups = np.flatnonzero(size_class == width_log2)
            lanes = np.flatnonzero(lane_class == width_log2)
            row_of[groups] = np.arange(len(groups))
            rows = row_of[g.group[lanes]]
            table = np.zeros((len(groups), 1 << int(width_log2)), values.dtype)
            table[:, 0] = current[groups]
            table[rows, 1 + g.rank[lanes]] = values[lanes]
            prefixes = ufunc.accumulate(table, axis=1, dtype=values.dtype)
            old[lanes] = prefixes[rows, g.rank[lanes]]
            final[groups] = prefixes[np.arange(len(groups)), g.sizes[groups]]
        return old, final
    return scan


def _exchange(g, current, values, compares):
    previous = np.concatenate((values[:1], values[:-1]))
    old = np.where(g.rank == 0, current[g.group], previous)
    return old, values[g.starts + g.sizes - 1]


def _stepped(step) -> Scan:
    """Rank by rank: every group's lane of rank r updates its element at once."""
    def scan(g, current, values, compares):
        old, contents = np.empty_like(values), current.copy()
        by_size = np.argsort(-g.sizes, kind="stable")
        descending = g.sizes[by_size]
        for r in range(int(descending[0])):
            groups = by_size[:np.searchsorted(-descending, -r, side="left")]
            at = g.starts[groups] + r
            old[at] = contents[groups]
            contents[groups] = step(contents[groups], values[at],
                                    None if compares is None else compares[at])
        return old, contents
    return scan


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _compare_and_swap(contents, values, compares):
    return np.where(_bits(contents) == _bits(compares), values, contents)


_UFUNCS = {
    ("add", "int"): np.add, ("add", "float"): np.add,
    ("sub", "int"): np.subtract, ("sub", "float"): np.subtract,
    ("max", "int"): np.maximum, ("max", "float"): np.fmax,
    ("min", "int"): np.minimum, ("min", "float"): np.fmin,
    ("and", "int"): np.bitwise_and, ("or", "int"): np.bitwise_or,
    ("xor", "int"): np.bitwise_xor,
}


def scan_for(op: str, dtype: T.DType) -> Optional[Scan]:
    """How atomic `op` on `dtype` elements combines a group, or None if it is undefined."""
    if dtype.is_bool:
        return None
    if op == "exch":
        return _exchange
    if op == "cas":
        return _stepped(_compare_and_swap)
    if dtype.name in ops.NARROW:  # registers are float32; each step rounds to the format
        return _stepped(ops.binary(op, dtype)) if op == "add" else None
    ufunc = _UFUNCS.get((op, "float" if dtype.is_float else "int"))
    return None if ufunc is None else _accumulated(ufunc)


def perform(scan: Scan, data: np.ndarray, index: tuple, values: np.ndarray,
            compares: Optional[np.ndarray], decode, encode) -> np.ndarray:
    """Apply the active lanes' atomics to `data` (elements at `index`, one array per axis,
    in lane order); returns each lane's old value in register form."""
    g = _Groups.of(np.ravel_multi_index(index, data.shape))
    elements = tuple(i[g.order[g.starts]] for i in index)
    old_sorted, final = scan(g, decode(data[elements]), values[g.order],
                             None if compares is None else compares[g.order])
    data[elements] = encode(final)
    old = np.empty_like(old_sorted)
    old[g.order] = old_sorted
    return old
