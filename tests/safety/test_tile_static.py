"""The static race checker on tile kernels: the tile safety suite (`tile_pairs.PAIRS`), the
shapes it must accept, and what a proof costs.

Every racy kernel is refused at its launch, before memory is touched, with its code, at the
line marked `# race`, naming two blocks and the element they meet on; every fixed twin is
accepted and computes its reference on the cpu backend.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import safety, tile

from . import tile_pairs
from .tile_pairs import PAIRS

IDS = [p.name for p in PAIRS]
BLOCK = r"block (\d+|\(\d+(, \d+)+\))"


def fresh(kernel):
    """The same kernel with an empty specialization cache (each test proves afresh)."""
    from verdigris.runtime.dispatch import KernelFunction

    return KernelFunction(kernel.fn, kernel.track)


def marked_line(kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    (offset,) = [k for k, line in enumerate(lines) if line.rstrip().endswith("# race")]
    return first + offset


def _dims(grid) -> tuple:
    dims = grid if isinstance(grid, tuple) else (grid,)
    return tuple(dims) + (1,) * (3 - len(dims))


def analyze(kernel, *args, grid=None, **kwargs):
    """The analysis of the specialization a launch over `grid` gets (no grid: any grid)."""
    k = fresh(kernel)
    values = k.bind(args, kwargs)
    key = k.spec_key(values, k.describe_args(values), None, None if grid is None else _dims(grid))
    return safety.analyze(k.build(key))


def test_the_suite_covers_the_issue_and_names_are_unique():
    assert len(PAIRS) >= 12 and len(set(IDS)) == len(IDS)
    assert {p.code for p in PAIRS} == {"VG202", "VG203", "VG204", "VG205"}


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_racy_tile_kernel_is_refused_before_memory_is_touched(pair, rng):
    grid, args, kwargs = pair.make(rng)
    before = [a.copy() for a in args]
    with pytest.raises(vg.SafetyError) as info:
        fresh(pair.racy)[grid](*args, **kwargs)
    err = info.value
    assert err.code == pair.code, str(err)
    for was, now in zip(before, args):
        np.testing.assert_array_equal(now, was)
    text = str(err)
    assert err.loc.file.endswith("tile_pairs.py") and err.loc.line == marked_line(pair.racy), text
    assert re.search(r"\n    .*# race\n    *\^", text), text  # the user's line with a caret
    assert "hint:" in text
    blocks = re.findall(BLOCK, text)
    assert len(blocks) >= 1 + (" from tile elements " not in text), text
    assert re.search(r"\w+\[-?\d+(, -?\d+)*\]", text), text  # the element
    if pair.code == "VG205":
        assert "which the checker cannot see" in text, text


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_fixed_tile_kernel_is_accepted_and_right(pair, rng):
    grid, args, kwargs = pair.make(rng)
    want = pair.reference(tuple(a.copy() for a in args))
    kernel = fresh(pair.fixed)
    result = analyze(pair.fixed, *args, grid=grid, **kwargs)
    assert not result.errors, result.errors[0]
    kernel[grid](*args, **kwargs)
    for position, expected in want.items():
        np.testing.assert_allclose(args[position], expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- messages


@tile.kernel
def store_tile_zero(x, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.load(x, index=(tile.bid(0),), shape=(B,)))


def test_message_names_two_blocks_the_element_and_the_tile():
    x = np.zeros(100, np.float32)
    err = analyze(store_tile_zero, x, x, B=16).errors[0]
    m = re.search(r"block (\d+) and block (\d+) both write out\[(\d+)\] \(both store the tile "
                  r"at index \(0,\) of shape \(16,\)\) \(with (.*)\)", err.message)
    assert m, err.message
    b1, b2, element = map(int, m.groups()[:3])
    assert b1 != b2 and 0 <= element < 16
    assert "out.shape[0] = " in m.group(4) and "a grid of" in m.group(4)
    assert err.loc.line == store_tile_zero.fn.__code__.co_firstlineno + 2


@tile.kernel
def overlapping_shapes(x, out):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(12,)))
    tile.store(out, index=(i,), tile=tile.load(x, index=(i,), shape=(8,)))


def test_tiles_of_different_shapes_meet_on_the_elements_they_share():
    x = np.zeros(100, np.float32)
    (err,) = analyze(overlapping_shapes, x, x).errors
    m = re.search(r"block (\d+) and block (\d+) both write out\[(\d+)\] \(block \d+ stores the "
                  r"tile at index \((\d+),\) of shape \((\d+),\) and block \d+ stores the tile at "
                  r"index \((\d+),\) of shape \((\d+),\)\)", err.message)
    assert m, err.message
    b1, b2, element, t1, s1, t2, s2 = map(int, m.groups())
    assert b1 != b2 and t1 == b1 and t2 == b2  # each block stores at its own index...
    assert t1 * s1 <= element < (t1 + 1) * s1 and t2 * s2 <= element < (t2 + 1) * s2  # ...meeting


@tile.kernel
def one_block_fixed_tile(x, out, B: vg.constexpr):
    tile.store(out, index=(0,), tile=tile.load(x, index=(0,), shape=(B,)) * 2.0)


def test_a_fixed_tile_is_fine_with_one_block_and_refused_with_more():
    x, out = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    k = fresh(one_block_fixed_tile)
    k[1](x, out, B=16)
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(vg.SafetyError) as info:
        k[2](x, out, B=16)
    assert info.value.code == "VG202"
    assert re.search(r"block [01] and block [01] both write out\[\d+\]", info.value.message)


@tile.kernel
def own_tile_ignores_axis_1(x, out, B: vg.constexpr):
    i = tile.bid(0)
    tile.store(out, index=(i,), tile=tile.load(out, index=(i,), shape=(B,)) + 1.0)


def test_blocks_along_an_axis_the_kernel_ignores_repeat_its_work():
    x = np.zeros(64, np.float32)
    assert not analyze(own_tile_ignores_axis_1, x, x, grid=(4, 1), B=16).errors
    errors = analyze(own_tile_ignores_axis_1, x, x, grid=(4, 2), B=16).errors
    assert [e.code for e in errors] == ["VG202", "VG203"]  # two stores, a load and a store
    assert re.search(r"block \(\d+, 1\)", errors[0].message), errors[0].message


# ----------------------------------------------------------------------------- accepted shapes


@tile.kernel
def in_place_own_tile(x, B: vg.constexpr):
    i = tile.bid(0)
    t = tile.load(x, index=(i,), shape=(B,))
    tile.store(x, index=(i,), tile=t - tile.max(t))


@tile.kernel
def rows_in_chunks(x, out, C: vg.constexpr):
    r = tile.bid(0)
    for c in range((x.shape[1] + C - 1) // C):
        t = tile.load(x, index=(r, c), shape=(1, C))
        tile.store(out, index=(r, c), tile=t * 2.0)


@tile.kernel
def persistent_2d(x, out, BR: vg.constexpr, BC: vg.constexpr):
    cols = (x.shape[1] + BC - 1) // BC
    for t in range(tile.bid(0), (x.shape[0] + BR - 1) // BR * cols, tile.num_blocks(0)):
        r, c = t // cols, t % cols
        tile.store(out, index=(r, c), tile=tile.load(x, index=(r, c), shape=(BR, BC)))


@tile.kernel
def transpose_3d_grid(x, out, B: vg.constexpr):
    i, j, k = tile.bid(0), tile.bid(1), tile.bid(2)
    t = tile.load(x, index=(k, i, j), shape=(1, B, B))
    tile.store(out, index=(k, j, i), tile=t.permute((0, 2, 1)))


@tile.kernel
def halves_of_own_tile(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    tile.store(out, index=(2 * i,), tile=tile.load(x, index=(2 * i + 1,), shape=(B,)))
    tile.store(out, index=(2 * i + 1,), tile=tile.load(x, index=(2 * i,), shape=(B,)))


@tile.kernel
def scatter_reshaped(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    where = (i * 4 * B + tile.arange(4 * B)).reshape((4, B)).T.reshape((4 * B,))
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(4 * B,)))


@tile.kernel
def histogram_atomic(idx, counts, B: vg.constexpr):
    where = tile.load(idx, index=(tile.bid(0),), shape=(B,))
    tile.scatter_add(counts, where, tile.full((B,), 1, vg.int32))


@tile.kernel
def only_block_zero_writes_total(x, total, B: vg.constexpr):
    s = tile.sum(tile.load(x, index=(tile.bid(0),), shape=(B,)))
    if tile.bid(0) == 0:
        total[0] = s


@tile.kernel
def racy_but_unsafe(x, out, B: vg.constexpr):
    with vg.unsafe():
        tile.store(out, index=(0,), tile=tile.load(x, index=(tile.bid(0),), shape=(B,)))


@tile.kernel
def divmod_of_bid(x, out, BR: vg.constexpr):
    t = int(tile.bid(0))
    tile.store(out, index=(t % 3, t // 3), tile=tile.load(x, index=(t // 3, t % 3), shape=(BR, BR)))


@tile.kernel
def divmod_unlike_divisors(x, out, BR: vg.constexpr):
    t = int(tile.bid(0))
    tile.store(out, index=(t // 3, t % 2), tile=tile.load(x, index=(t // 3, t % 3), shape=(BR, BR)))


@tile.kernel
def divmod_in_place_swapped(x, BR: vg.constexpr):
    t = int(tile.bid(0))
    tile.store(x, index=(t % 3, t // 3), tile=tile.load(x, index=(t // 3, t % 3), shape=(BR, BR)))


@tile.kernel
def scatter_reshaped_halved(x, out, B: vg.constexpr):
    i = int(tile.bid(0))
    where = (i * 4 * B + tile.arange(4 * B)).reshape((4, B)).T.reshape((4 * B,)) // 2
    tile.scatter(out, where, tile.load(x, index=(i,), shape=(4 * B,)))


@tile.kernel
def sorted_rows(x, keys, out, B: vg.constexpr):
    """Each block's row sorted, and `x`'s row reordered by `keys`' argsort (a gather)."""
    r = tile.bid(0)
    tile.store(keys, index=(r, 0), tile=tile.sort(tile.load(keys, index=(r, 0), shape=(1, B))))
    order = tile.argsort(tile.load(x, index=(r, 0), shape=(1, B)), descending=True)
    tile.store(out, index=(r, 0), tile=tile.gather(x, (r + tile.zeros((1, B), vg.int32), order)))


@tile.kernel
def scatter_by_argsort(x, out, B: vg.constexpr):
    """out[r, order[j]] = x[r, j]: a permutation of the row, which the checker cannot know."""
    r = tile.bid(0)
    t = tile.load(x, index=(r, 0), shape=(1, B))
    tile.scatter(out, (r + tile.zeros((1, B), vg.int32), tile.argsort(t)), t)


F32 = np.zeros(64, np.float32)
M32 = np.zeros((8, 8), np.float32)


@pytest.mark.parametrize("kernel,args,kwargs", [
    (in_place_own_tile, (F32,), {"B": 16}),
    (rows_in_chunks, (M32, M32), {"C": 3}),
    (persistent_2d, (M32, M32), {"BR": 3, "BC": 5}),
    (transpose_3d_grid, (np.zeros((2, 8, 8), np.float32),) * 2, {"B": 4}),
    (halves_of_own_tile, (F32, F32), {"B": 10}),
    (scatter_reshaped, (F32, F32), {"B": 6}),
    (divmod_of_bid, (M32, M32), {"BR": 2}),
    (histogram_atomic, (np.zeros(64, np.int64), np.zeros(8, np.int32)), {"B": 16}),
    (only_block_zero_writes_total, (F32, F32), {"B": 16}),
    (racy_but_unsafe, (F32, F32), {"B": 16}),
    (sorted_rows, (M32, np.zeros((8, 8), np.int32), M32), {"B": 8}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_accepted_with_symbolic_sizes(kernel, args, kwargs):
    result = analyze(kernel, *args, **kwargs)
    assert not result.errors, result.errors[0]
    assert result.facts["race_free"]


@pytest.mark.parametrize("kernel,args,kwargs,code,words", [
    (divmod_unlike_divisors, (M32, M32), {"BR": 2}, "VG202", "both write out["),
    (divmod_in_place_swapped, (M32,), {"BR": 2}, "VG203", "while block"),
    (scatter_reshaped_halved, (F32, F32), {"B": 6}, "VG202", "from tile elements"),
    (scatter_by_argsort, (M32, M32), {"B": 8}, "VG205", "which the checker cannot see"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_refused_index_maps(kernel, args, kwargs, code, words):
    errors = analyze(kernel, *args, **kwargs).errors
    assert [e.code for e in errors] == [code], errors
    assert words in errors[0].message, errors[0].message


@tile.kernel
def scatter_bitwise_noise(x, out, S: vg.constexpr):
    i = int(tile.bid(0))
    k = (~tile.arange(S) & 3).reshape((S, 1)) + tile.zeros((S, S), vg.int32)
    rows, cols = tile.arange(S).reshape((S, 1)), tile.arange(S)
    tile.scatter(out, i * S * S + rows * S + cols + (k - k.T), tile.load(x, (i, 0), (S, S)))


def test_an_unknown_tile_and_its_transpose_are_different_unknowns():
    """`k - k.T` is not 0 (here k[r, c] = ~r & 3 = 3 - r, so out[6] is written twice): a
    checker that took the unknown `k` (a bitwise and of a negative value) for one value per
    tile would prove this scatter injective."""
    x, out = np.zeros((8, 4), np.float32), np.zeros(32, np.float32)
    errors = analyze(scatter_bitwise_noise, x, out, S=4).errors
    assert [e.code for e in errors] == ["VG205"]
    assert "which the checker cannot see" in errors[0].message
    from .test_tile_dynamic import run_on_cpu

    with pytest.raises(vg.SafetyError) as seen:
        run_on_cpu(scatter_bitwise_noise, 2, (x, out), {"S": 4})
    assert seen.value.code == "VG202" and "of one scatter" in seen.value.message


def test_accesses_inside_unsafe_are_exempt_and_counted():
    assert analyze(racy_but_unsafe, F32, F32, B=16).facts["unsafe_accesses"] == 2


def test_int32_products_that_wrap_only_to_negative_tiles_are_accepted():
    """`2 * bid` in int32 wraps past 2**31 on a grid of more than 2**30 blocks, but only to
    negative tile indices, which store nothing: the wrapped value is a function of `bid`,
    not any int32, so no two blocks meet."""

    @tile.kernel
    def doubled(x, out, B: vg.constexpr):
        i = tile.bid(0)
        tile.store(out, index=(2 * i,), tile=tile.load(x, index=(2 * i,), shape=(B,)))

    assert analyze(doubled, F32, F32, B=8).errors == []


def test_int32_products_that_wrap_onto_one_tile_are_a_race_with_a_hint():
    """`bid * 2**31` in int32 is 0 for every even block: blocks 0 and 2 store one tile."""

    @tile.kernel
    def aliased(x, out, B: vg.constexpr):
        i = tile.bid(0) * 65536 * 32768
        tile.store(out, index=(i,), tile=tile.load(x, index=(0,), shape=(B,)))

    (err,) = analyze(aliased, F32, F32, B=8).errors
    assert err.code == "VG202" and "wraps around in int32 arithmetic" in err.message
    assert re.search(r"block 0 and block 2 both write out\[\d\]", err.message), err.message
    assert "int(tile.bid(0))" in err.hint


@tile.kernel
def rows_by_head(x, out, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), tile.bid(2)
    row = b * tile.num_blocks(1) + h  # (batch * heads, seq) rows, as attention's lse
    tile.store(out, index=(row, m), tile=tile.load(x, index=(row, m), shape=(1, BM)) * 2.0)


@tile.kernel
def rows_by_head_one_short(x, out, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), tile.bid(2)
    row = b * (tile.num_blocks(1) - 1) + h
    tile.store(out, index=(row, m), tile=tile.load(x, index=(row, m), shape=(1, BM)) * 2.0)  # race


@tile.kernel
def rows_by_head_far_apart(x, out, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), tile.bid(2)
    row = b * (tile.num_blocks(1) * 65536) + h  # b * 65536 * num_blocks(1) wraps in int32
    tile.store(out, index=(row, m), tile=tile.load(x, index=(row, m), shape=(1, BM)) * 2.0)  # race


@tile.kernel
def flat_index(x, out, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), int(tile.bid(2))  # int64 from the first product on
    t = (b * tile.num_blocks(1) + h) * tile.num_blocks(0) + m
    tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(BM,)) * 2.0)


@tile.kernel
def flat_index_int32(x, out, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), tile.bid(2)
    t = (b * tile.num_blocks(1) + h) * tile.num_blocks(0) + m  # 2**31 x-blocks: wraps
    tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(BM,)) * 2.0)  # race


@tile.kernel
def rows_by_head_and_a_loop(x, out, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), tile.bid(2)
    for k in range(2):  # row b*H + h + 1 is also the next head's row
        row = b * tile.num_blocks(1) + h + k
        tile.store(out, index=(row, m), tile=tile.load(x, index=(row, m), shape=(1, BM)))  # race


@tile.kernel
def rows_by_head_scaled(x, out, s, BM: vg.constexpr):
    m, h, b = tile.bid(0), tile.bid(1), tile.bid(2)
    row = s * (b * tile.num_blocks(1) + h)  # s == 0: every block's row 0
    tile.store(out, index=(row, m), tile=tile.load(x, index=(row, m), shape=(1, BM)))  # race


@pytest.mark.parametrize("kernel", [rows_by_head, flat_index], ids=lambda k: k.fn.__name__)
def test_int32_mixed_radix_rows_are_proven_by_the_fast_path(kernel):
    """`b * num_blocks(1) + h` in int32 may leave int32 (a wrap atom), but on the y and z axes
    it stays below 65535**2 < 2**32 values, where wrapping is one-to-one: the mixed-radix rule
    proves it without the solver, as it does the int64 flat index of three axes (it took 0.1-0.4 s of solver on this machine and ran past
    the limit on the GPU host, refusing every attention launch at GPT-2's grid)."""
    x = np.zeros((64, 64) if kernel is rows_by_head else (4096,), np.float32)
    analysis = analyze(kernel, x, x.copy(), BM=16)
    assert analysis.errors == [] and analysis.facts["fast_proofs"] >= 1
    assert analysis.facts["solver_queries"] == 0, analysis.facts


@pytest.mark.parametrize("kernel, wraps", [(rows_by_head_one_short, False), (rows_by_head_far_apart, True),
                                           (flat_index_int32, True), (rows_by_head_and_a_loop, False),
                                           (rows_by_head_scaled, None)], ids=lambda k: getattr(k, "__name__", ""))
def test_mixed_radix_rows_that_meet_are_refused(kernel, wraps):
    """Twins of the rows above: a radix one short of the digit's extent, int32 products with
    more values than 2**32, which wrap onto other blocks' rows, a loop that adds a digit
    over the radix, and a run-time factor that may be 0 (wraps: None, either way)."""
    x = np.zeros((64, 64) if kernel is not flat_index_int32 else (4096,), np.float32)
    scalars = (np.int32(3),) if kernel is rows_by_head_scaled else ()
    (err,) = analyze(kernel, x, x.copy(), *scalars, BM=16).errors
    assert err.code == "VG202" and err.loc.line == marked_line(kernel), err.message
    assert wraps is None or ("wraps around in int32" in err.message) == wraps, err.message


@tile.kernel
def rows_from_bid(x, out, STEP: vg.constexpr, TRIPS: vg.constexpr, B: vg.constexpr):
    r = int(tile.bid(0))
    for t in range(r * STEP, r * STEP + TRIPS):  # rows meet where TRIPS > STEP
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)))  # race


def test_a_loop_of_one_trip_from_the_block_id_is_proven_and_of_two_refused():
    """`t = bid + k` with k < 1 has the digits k (one value) then bid, both of multiplier 1:
    the fast path orders equal multipliers by their extents (gelu_backward at ROWS == BR
    went to the solver, 1.1 s on a busy machine). Two trips of the same loop overlap."""
    x = np.zeros(64, np.float32)
    for step, trips in ((1, 1), (2, 2), (4, 3)):
        fine = analyze(rows_from_bid, x, x.copy(), STEP=step, TRIPS=trips, B=8)
        assert fine.errors == [] and fine.facts["solver_queries"] == 0, fine.facts
    (err,) = analyze(rows_from_bid, x, x.copy(), STEP=1, TRIPS=2, B=8).errors
    assert err.code == "VG202" and err.loc.line == marked_line(rows_from_bid), err.message


# ----------------------------------------------------------------------------- cost


def _tile_kernels():
    """Every tile kernel of the tile tests and examples, with arguments to specialize on."""
    import importlib

    seen = []
    for pair in PAIRS:
        grid, args, kwargs = pair.make(np.random.default_rng(0))
        seen.append((pair.fixed, args, kwargs, grid))
    examples = importlib.import_module("verdigris.examples")
    for name in getattr(examples, "TILE_EXAMPLES", ()):
        module = importlib.import_module(f"verdigris.examples.{name}")
        seen.append((module, None, None, None))
    return seen


def test_tile_examples_are_proven_without_the_solver(capsys, uncompiled):
    """The tile examples' stores and loads are proven by the fast path (no z3 query, which
    is what keeps a proof well under a few milliseconds); the times are printed, not
    asserted (the suite has no timing assertions)."""
    from verdigris.runtime.dispatch import KernelFunction

    rows = []
    original = KernelFunction.specialization

    def timed(self, key, **options):
        known = key in self._specializations
        spec = original(self, key, **options)
        if not known and self.track == "tile":
            rows.append((self.__name__, safety.analyze(spec.kernel)))
        return spec

    KernelFunction.specialization = timed
    try:
        for kernel, args, kwargs, grid in _tile_kernels():
            if args is None:  # an example module: it checks itself
                assert all(r.ok for r in kernel.check(np.random.default_rng()))
            else:
                fresh(kernel)[grid](*args, **kwargs)
    finally:
        KernelFunction.specialization = original
    assert rows and all(not r.errors for _, r in rows)
    examples = {"add", "bias_gelu", "softmax", "softmax_online", "layernorm", "rmsnorm",
                "row_sum", "row_max", "cumsum_rows", "transpose", "dropout"}
    assert examples <= {name for name, _ in rows}
    assert all(not r.solver_queries for name, r in rows if name in examples), rows
    with capsys.disabled():
        print("\ntile proof time per specialization (analysis, solver queries):")
        for name, result in rows:
            print(f"  {name:28s} {result.seconds * 1e3:7.2f} ms  {result.solver_queries} queries")


@tile.kernel
def scatter_folded(x, out, SLACK: vg.constexpr, B: vg.constexpr):
    """out[offsets % n] = x[offsets] where offsets < n + SLACK: with SLACK 0 each element
    once; with SLACK 5 the last tile's lanes past the end fold onto out[0..4] again."""
    i = int(tile.bid(0))
    offsets = i * B + tile.arange(B)
    n = x.shape[0]
    tile.scatter(out, (offsets % n,), tile.load(x, index=(i,), shape=(B,)), mask=offsets < n + SLACK)


def test_a_scatter_mask_is_a_condition_of_the_proof(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.empty_like(x)
    assert not analyze(scatter_folded, x, out, SLACK=0, B=128).errors
    (err,) = analyze(scatter_folded, x, out, SLACK=5, B=128).errors
    assert err.code == "VG202"


# ----------------------------------------------------------------------------- block orders


ORDERS = {  # the orders of issue 26 (item 4), each with its tile sizes and GROUP as constexprs
    "Triton's grouped order": tile_pairs.grouped_order,
    "cuTile's grouped order": tile_pairs.cutile_order,
    "Triton's, in a persistent loop": tile_pairs.persistent_triton_order,
    "cuTile's, in a persistent loop": tile_pairs.persistent_grouped,
}
RACY_ORDERS = {
    "Triton's dividing by GROUP_M in the last group": tile_pairs.grouped_order_wrong_divisor,
    "cuTile's with the column as a remainder": tile_pairs.cutile_order_column_remainder,
    "persistent, stepping by 1": tile_pairs.persistent_grouped_step_one,
    "persistent Triton's dividing by GROUP_M": tile_pairs.persistent_triton_order_wrong_divisor,
}
TILINGS = [(8, 8, 2), (128, 128, 8), (64, 32, 3)]  # BM, BN, GROUP_M (3: groups of 3 rows)
C = np.zeros((37, 24), np.float32)  # the sizes are run-time values in the proof


def _order_proof(kernel, tiling, times: int = 2):
    """The analysis of the order for any M and N, and each of `times` proofs' seconds."""
    bm, bn, group = tiling
    runs = [analyze(kernel, C, C, BM=bm, BN=bn, GROUP_M=group) for _ in range(times)]
    return runs[-1], [r.seconds for r in runs]


def test_block_orders_are_proven_by_their_rule_in_under_a_second(capsys):
    """Each order, at each tiling, is proven without the general query (`injective`: the
    rule's own query has a budget of steps of about 0.2 s of the CI machine; the general
    query took 16-120 s on these). Each is measured twice; the times are printed."""
    rows = []
    for name, kernel in ORDERS.items():
        for tiling in TILINGS:
            result, seconds = _order_proof(kernel, tiling)
            assert not result.errors, result.errors[0]
            assert result.solver_queries == 0 and result.facts["fast_proofs"] >= 1, (name, tiling)
            rows.append((name, tiling, seconds))
    from verdigris.examples.tile_gemm import gemm_grouped

    a = np.zeros((200, 72), np.float16)
    for tiling in [{}, {"BM": 64, "BN": 32, "BK": 16, "GROUP": 3}]:
        runs = [analyze(gemm_grouped, a, a.T.copy(), np.zeros((200, 200), np.float32), **tiling)
                for _ in range(2)]
        assert not runs[-1].errors and runs[-1].solver_queries == 0, runs[-1].errors
        rows.append(("examples.tile_gemm.gemm_grouped", tuple(tiling.values()) or "defaults",
                     [r.seconds for r in runs]))
    with capsys.disabled():
        print("\nblock order proofs (the whole race analysis, twice):")
        for name, tiling, seconds in rows:
            print(f"  {name:36s} {str(tiling):16s} " + "  ".join(f"{s * 1e3:7.1f} ms" for s in seconds))


@pytest.mark.parametrize("name", RACY_ORDERS)
def test_racy_block_orders_are_refused_at_other_tilings(name):
    """The racy twins of the suite, with groups of 3 rows and tiles of two shapes: each
    refused with two blocks and the element they both write, or, where the counterexample
    takes the solver past the proof's time limit (`budgets.KERNEL_S`), as not proven."""
    result, _ = _order_proof(RACY_ORDERS[name], (64, 32, 3), times=1)
    if [e.code for e in result.errors] == ["VG205"]:
        assert "time limit" in result.errors[0].message, result.errors[0].message
        return
    assert [e.code for e in result.errors] == ["VG202"], result.errors
    assert re.search(rf"{BLOCK} and {BLOCK} both write out\[\d+, \d+\]", result.errors[0].message), \
        result.errors[0].message


def test_the_grouped_gemm_example_needs_no_unsafe():
    from verdigris.examples import tile_gemm

    assert "unsafe" not in inspect.getsource(tile_gemm.gemm_grouped.fn)


def test_a_refusal_is_kept_with_its_specialization_and_on_disk(rng, monkeypatch, tmp_path):
    """A refused specialization is refused again at each launch with the same error, and not
    checked again (a refusal may take the solver seconds); a later process (here: the
    kernel defined afresh, its specializations empty) reads the refusal from the disk
    cache, as it reads a proof, and refuses with the same error, unchecked."""
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    calls = []
    original = safety.analyze
    monkeypatch.setattr(safety, "analyze", lambda *a, **k: calls.append(1) or original(*a, **k))
    grid, args, kwargs = tile_pairs.grouped_setup(rng)
    messages = []
    for kernel in [fresh(tile_pairs.grouped_order_wrong_divisor)] * 3 + \
            [fresh(tile_pairs.grouped_order_wrong_divisor)]:
        with pytest.raises(vg.SafetyError) as info:
            kernel[grid](*args, **kwargs)
        messages.append(str(info.value))
    assert len(calls) == 1 and len(set(messages)) == 1 and "VG202" in messages[0]
    assert info.value.loc.line == marked_line(tile_pairs.grouped_order_wrong_divisor)


def test_a_recorded_refusal_is_used_only_where_it_points_at_the_same_source(rng):
    """The disk record's key is the IR, which has no file names or columns: a kernel of the
    same IR in another file, or a quoted line edited within, is checked again."""
    from verdigris.runtime import proofs

    grid, args, kwargs = tile_pairs.grouped_setup(rng)
    k = fresh(tile_pairs.grouped_order_wrong_divisor)
    values = k.bind(args, kwargs)
    kernel = k.build(k.spec_key(values, k.describe_args(values), None, _dims(grid)))
    error = safety.analyze(kernel).errors[0]
    written = proofs._written(error, kernel)
    assert str(proofs._refusal(written, kernel)) == str(error)
    assert proofs._refusal({**written, "kernel": "elsewhere.py"}, kernel) is None
    assert proofs._refusal({**written, "lines": ["    tile.store(out, index=(0, 0),\n"]}, kernel) is None


@tile.kernel
def every_block_in_tile_zero_of_idx(idx, out):
    i = tile.load(idx, index=(0,), shape=(1,))
    tile.scatter(out, i, tile.load(out, index=(tile.bid(0),), shape=(1,)))


def test_a_refusal_not_proven_is_checked_again_by_a_later_process(monkeypatch, tmp_path):
    """VG205 (not proven: here an index loaded from memory; elsewhere a proof's time
    limit, which depends on the machine) is kept in memory, never on disk."""
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    calls = []
    original = safety.analyze
    monkeypatch.setattr(safety, "analyze", lambda *a, **k: calls.append(1) or original(*a, **k))
    idx, out = np.zeros(1, np.int32), np.zeros(8, np.float32)
    for kernel in (fresh(every_block_in_tile_zero_of_idx), fresh(every_block_in_tile_zero_of_idx)):
        for _ in range(2):
            with pytest.raises(vg.SafetyError) as info:
                kernel[4](idx, out)
            assert info.value.code == "VG205", str(info.value)
    assert len(calls) == 2


@vg.func
def _triton_order(pid, rows, cols, GROUP):
    """Triton's grouped order of `rows` x `cols` tiles, GROUP block rows at a time."""
    in_group = GROUP * cols
    first = (pid // in_group) * GROUP
    group_rows = min(rows - first, GROUP)
    return first + (pid % in_group) % group_rows, (pid % in_group) // group_rows


@tile.kernel
def grouped_in_place(x, SHIFT: vg.constexpr, BM: vg.constexpr, BN: vg.constexpr, GROUP: vg.constexpr):
    """Doubles x in place, tile by tile (SHIFT 0), or reading the tile to the right (1)."""
    i, j = _triton_order(tile.bid(0), (x.shape[0] + BM - 1) // BM, (x.shape[1] + BN - 1) // BN, GROUP)
    t = tile.load(x, index=(i, j + SHIFT), shape=(BM, BN))
    tile.store(x, index=(i, j), tile=t * 2.0)


@tile.kernel
def grouped_batches(x, out, SIZED_BY_X: vg.constexpr, BM: vg.constexpr, BN: vg.constexpr,
                    GROUP: vg.constexpr):
    """Grid axis 1 is the batch: the order's tile and the batch together name the block.
    SIZED_BY_X: the order counts x's tiles, and `out` may have more rows than x, where the
    last group's `min` no longer keeps the order injective."""
    sizes = x.shape if SIZED_BY_X else out.shape
    i, j = _triton_order(tile.bid(0), (sizes[1] + BM - 1) // BM, (sizes[2] + BN - 1) // BN, GROUP)
    z = tile.bid(1)
    tile.store(out, index=(z, i, j), tile=tile.load(x, index=(z, i, j), shape=(1, BM, BN)))


@tile.kernel
def grouped_run_time_group(x, out, G, BM: vg.constexpr, BN: vg.constexpr):
    """GROUP as a run-time value: G = 0 would send every block to tile (0, 0), so the
    order is safe only on launches with G >= 1, which the kernel states, and a G past
    2**31 / cols would wrap GROUP * cols in int64: the kernel states G's range."""
    vg.assume(1 <= G <= 64)
    i, j = _triton_order(tile.bid(0), (out.shape[0] + BM - 1) // BM, (out.shape[1] + BN - 1) // BN, G)
    tile.store(out, index=(i, j), tile=tile.load(x, index=(i, j), shape=(BM, BN)))


@tile.kernel
def persistent_from_twice_bid(x, out, B: vg.constexpr):
    """`t` from 2 * bid by num_blocks: block 1's first tile is block 0's second on 2 blocks."""
    for t in range(2 * tile.bid(0), (x.shape[0] + B - 1) // B, tile.num_blocks(0)):
        tile.store(out, index=(t,), tile=tile.load(x, index=(t,), shape=(B,)))


@tile.kernel
def grouped_int64_cdiv(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP: vg.constexpr):
    """cuTile's order on an int64 block id, the tile counts as -(-n // B)."""
    bid = int(tile.bid(0))
    rows, cols = -(-out.shape[0] // BM), -(-out.shape[1] // BN)
    first = (bid // (GROUP * cols)) * GROUP
    group_rows = min(rows - first, GROUP)
    i, j = first + bid % group_rows, (bid % (GROUP * cols)) // group_rows
    tile.store(out, index=(i, j), tile=tile.load(x, index=(i, j), shape=(BM, BN)))


@tile.kernel
def grouped_persistent_while(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP: vg.constexpr):
    """A persistent loop written as a while loop stepping an int64 index."""
    rows, cols = (out.shape[0] + BM - 1) // BM, (out.shape[1] + BN - 1) // BN
    t = int(tile.bid(0))
    while t < rows * cols:
        i, j = _triton_order(t, rows, cols, GROUP)
        tile.store(out, index=(i, j), tile=tile.load(x, index=(i, j), shape=(BM, BN)))
        t += tile.num_blocks(0)


@tile.kernel
def grouped_by_columns(x, out, BM: vg.constexpr, BN: vg.constexpr, GROUP: vg.constexpr):
    """Groups of GROUP block columns, row by row."""
    j, i = _triton_order(tile.bid(0), (out.shape[1] + BN - 1) // BN, (out.shape[0] + BM - 1) // BM, GROUP)
    tile.store(out, index=(i, j), tile=tile.load(x, index=(i, j), shape=(BM, BN)))


BATCHES = (np.zeros((3, 37, 24), np.float32),) * 2


def test_block_order_variants_proven_without_the_general_query():
    for kernel, args, kwargs in [
            (grouped_in_place, (C,), {"SHIFT": 0, "BM": 8, "BN": 8, "GROUP": 3}),
            (grouped_batches, BATCHES, {"SIZED_BY_X": False, "BM": 8, "BN": 8, "GROUP": 2}),
            (grouped_run_time_group, (C, C, 4), {"BM": 8, "BN": 8}),
            (tile_pairs.two_persistent_loops, (F32, F32), {"B": 8}),
            *[(k, (C, C), {"BM": 8, "BN": 8, "GROUP": 3})
              for k in (grouped_int64_cdiv, grouped_persistent_while, grouped_by_columns)]]:
        result = analyze(kernel, *args, **kwargs)
        assert not result.errors, result.errors[0]
        # (a query of one block's own statements, `blockorder`, may remain: in place)
        assert result.solver_queries == result.facts["block_meet_queries"], kernel.__name__


@pytest.mark.parametrize("kernel,args,kwargs,code,words", [
    (grouped_in_place, (C,), {"SHIFT": 1, "BM": 8, "BN": 8, "GROUP": 3}, "VG203", "while block"),
    (persistent_from_twice_bid, (F32, F32), {"B": 8}, "VG202", "both write out["),
    (grouped_batches, BATCHES, {"SIZED_BY_X": True, "BM": 8, "BN": 8, "GROUP": 2}, "VG202",
     "both write out["),
], ids=["in place, reading the next tile", "persistent from 2 * bid", "order sized by another array"])
def test_block_order_variants_refused(kernel, args, kwargs, code, words):
    errors = analyze(kernel, *args, **kwargs).errors
    assert [e.code for e in errors] == [code], errors
    assert words in errors[0].message and len(re.findall(BLOCK, errors[0].message)) >= 2, errors[0].message


@tile.kernel
def grouped_run_time_group_unbounded(x, out, G, BM: vg.constexpr, BN: vg.constexpr):
    """The twin without the fact's upper bound: a G near 2**31 makes G * cols wrap."""
    vg.assume(G >= 1)
    i, j = _triton_order(tile.bid(0), (out.shape[0] + BM - 1) // BM, (out.shape[1] + BN - 1) // BN, G)
    tile.store(out, index=(i, j), tile=tile.load(x, index=(i, j), shape=(BM, BN)))


def test_a_run_time_group_is_proven_only_within_the_range_the_kernel_states(rng):
    """`vg.assume(1 <= G <= 64)` bounds G for the proof, so `G * cols` is exact; without the
    upper bound the order is refused (G * cols wraps to 0 in int64 where it is 2**64: a
    witness, `test_wrap_witness`); a launch whose G
    breaks the fact is refused before it runs (the proof's range is the launch's)."""
    assert not analyze(grouped_run_time_group, C, C, 4, BM=8, BN=8).errors
    errors = analyze(grouped_run_time_group_unbounded, C, C, 4, BM=8, BN=8).errors
    assert [e.code for e in errors] == ["VG202"] and "wraps around in int64" in errors[0].message, errors
    x = rng.standard_normal(C.shape).astype(np.float32)
    out = np.full_like(x, np.nan)
    for g in (0, 65):
        with pytest.raises(vg.AssumptionError):
            grouped_run_time_group[15](x, out, g, BM=8, BN=8)
    assert np.isnan(out).all()
    grouped_run_time_group[15](x, out, 3, BM=8, BN=8)
    np.testing.assert_array_equal(out, x)
