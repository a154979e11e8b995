"""Tile races refused from a witness (`safety.witness`): fast, real, and never a proof.

Each racy twin of the tile suite that the search of small launches can refuse is refused
without a solver query (how fast a refusal is, counted rather than timed: a query is what
took seconds); the launch its message names, replayed on the cpu backend without the
static check, shows the race between the same two blocks on the same element; the search
finds nothing in any pair of accesses of any fixed twin; a race only a large grid shows
is still refused, by the solver.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import tile
from verdigris.safety import tiles, witness

from .test_dynamic import OBSERVABLE
from .test_tile_dynamic import run_on_cpu
from .test_tile_static import BLOCK, analyze, fresh
from .tile_pairs import PAIRS

WITNESSED = [p for p in PAIRS if p.code != "VG205" and not p.by_solver]


@pytest.mark.parametrize("pair", WITNESSED, ids=[p.name for p in WITNESSED])
def test_racy_twin_is_refused_from_a_witness_without_the_solver(pair, rng):
    grid, args, kwargs = pair.make(rng)
    result = analyze(pair.racy, *args, grid=grid, **kwargs)
    assert [e.code for e in result.errors][:1] == [pair.code], result.errors
    assert result.solver_queries == 0 and result.facts["witnesses"] >= 1, result.errors[0]


def _sizes(message: str) -> dict:
    """{array: {axis: extent}} and {parameter: value} of a message's `(with ...)` (a tile
    kernel's, up to `a grid of`; a SIMT kernel's, up to `N blocks of`)."""
    shapes, params = {}, {}
    situation = re.search(r"\(with (.*?), (?:a grid of|\(?[\d, ]+\)? blocks? of)", message).group(1)
    for label, value in re.findall(r"([\w.\[\]]+) = (-?\d+)", situation):
        shape = re.fullmatch(r"(\w+)\.shape\[(\d+)\]", label)
        if shape:
            shapes.setdefault(shape.group(1), {})[int(shape.group(2))] = int(value)
        else:
            params[label] = int(value)
    return shapes, params


def _grid(message: str) -> tuple:
    text = re.search(r"a grid of (\d+|\([\d, ]+\)) block", message).group(1)
    return tuple(int(d) for d in re.findall(r"\d+", text))


def _meeting(message: str) -> tuple:
    """(the two blocks, the element) a race message names."""
    blocks = {m[0] for m in re.findall(BLOCK, message)}
    element = re.search(r"\w+\[-?\d+(, -?\d+)*\]", message).group(0)
    return blocks, element


@pytest.mark.parametrize("pair", WITNESSED, ids=[p.name for p in WITNESSED])
def test_the_witness_replays_on_the_cpu_backend(pair, rng):
    """The launch the message names (its extents, parameters and grid; other arrays as the
    pair makes them), run without the static check: the shadow memory sees the race, with
    the message's code, between its two blocks on its element."""
    _, args, kwargs = pair.make(rng)
    k = fresh(pair.racy)
    static = analyze(pair.racy, *args, grid=None, **kwargs).errors[0]
    shapes, params = _sizes(static.message)
    named = dict(zip([p.name for p in k.params], args))
    for name, extents in shapes.items():
        made = named[name]
        shape = tuple(extents.get(axis, n) for axis, n in enumerate(made.shape))
        named[name] = rng.standard_normal(shape).astype(made.dtype)
    named.update(params)
    replay_args = tuple(named[p.name] for p in k.params if p.name in named and p.name not in kwargs)
    with pytest.raises(vg.SafetyError) as info:
        run_on_cpu(pair.racy, _grid(static.message), replay_args, kwargs)
    dynamic = info.value
    assert dynamic.code in OBSERVABLE.get(pair.code, {pair.code}), str(dynamic)
    assert _meeting(dynamic.message) == _meeting(static.message), (static.message, dynamic.message)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_no_witness_in_a_fixed_twin(pair, rng):
    """The search only refuses: in a race-free kernel it finds nothing, for any pair of
    its accesses (those the fast path proves apart included)."""
    grid, args, kwargs = pair.make(rng)
    k = fresh(pair.fixed)
    values = k.bind(args, kwargs)
    trace = tiles.execute(k.build(k.spec_key(values, k.describe_args(values), None, None)))
    for i, a in enumerate(trace.accesses):
        for b in trace.accesses[i:]:
            if a.array == b.array and "write" in (a.kind, b.kind) and not a.unsafe and not b.unsafe \
                    and not (a is b and a.op == "scatter"):
                assert witness.search(a, b, trace.space) is None, (a.loc, b.loc)


@tile.kernel
def fifty_blocks_apart(x, out, B: vg.constexpr):
    """Blocks b and b + 50 store one tile: only a grid of 51 blocks or more shows it."""
    t = tile.bid(0) % 50
    tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)))  # race


def test_a_race_the_small_launches_miss_is_refused_by_the_solver():
    x = np.zeros(100, np.float32)
    result = analyze(fifty_blocks_apart, x, x.copy(), B=4)
    assert [e.code for e in result.errors] == ["VG202"], result.errors
    assert result.facts["witnesses"] == 0 and result.solver_queries == 1
    blocks = [int(b) for b, _ in re.findall(BLOCK, result.errors[0].message)]
    assert abs(blocks[0] - blocks[1]) % 50 == 0 and blocks[0] != blocks[1], result.errors[0].message


@tile.kernel
def quarter_turns(x, out, B: vg.constexpr):
    """int32: block 4's tile index 4 * 2**30 wraps around to block 0's, 0."""
    t = tile.bid(0) * 1073741824
    tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)))  # race


def test_a_witness_through_a_wrap_around_says_so():
    x = np.zeros(64, np.float32)
    result = analyze(quarter_turns, x, x.copy(), B=4)
    assert [e.code for e in result.errors] == ["VG202"], result.errors
    assert result.facts["witnesses"] == 1 and result.solver_queries == 0
    message = result.errors[0].message
    assert "block 0 and block 4 both write out[0]" in message and "wraps around in int32" in message, message
    assert "widen before multiplying" in result.errors[0].hint
