"""One block's statements in program order (docs/safety.md, "One block's statements").

Each kernel of `tile_order_kernels` has statements that meet within a block (through two
shapes, a scalar beside a tile, a gather or scatter, a broadcast layout, a loop's next
iteration, the arms of an `if`): the lowering's code, run thread by thread on the host
(`host_jit`) with the block's threads taking turns first to last and last to first, leaves
what program order leaves, and so does the cpu backend. The barriers cost nothing where
statements never meet or meet only from one thread (PTX, after the checks, as a launch
compiles it), and a tile atomic beside a plain access of one block is refused (VG204),
beside its twin that keeps them apart.
"""
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, safety, tile
from verdigris import types as T
from verdigris.ir import ArrayType

import host_jit
from tile_order_kernels import CASES


def _poisoned(arguments: dict) -> dict:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arguments.items()}


@pytest.mark.parametrize("reverse", [False, True], ids=["first_to_last", "last_to_first"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_host_jit_gives_program_order_in_either_thread_order(name, reverse, rng):
    kernel, grid, make, want = CASES[name]
    arguments = make(rng)
    expected = want(**_poisoned(arguments))
    got = _poisoned(arguments)
    assert host_jit.run(kernel, grid, reverse=reverse, **got) is None
    for array, value in expected.items():
        np.testing.assert_array_equal(got[array], value, err_msg=f"{name}: {array}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_backend_gives_program_order_and_reports_no_race(name, rng):
    kernel, grid, make, want = CASES[name]
    arguments = make(rng)
    expected = want(**_poisoned(arguments))
    got = {k: vg.asarray(v) if isinstance(v, np.ndarray) else v for k, v in _poisoned(arguments).items()}
    kernel[grid](**got)
    for array, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got[array]), value, err_msg=f"{name}: {array}")


# ----------------------------------------------------------------------------- barriers


def _arr(dtype, ndim=1):
    return ArrayType(dtype, ndim, "global", True, True)


def _checked_ptx(kernel, specs: dict, target: str = "sm_90") -> str:
    ir = kernel.specialize_types(specs)
    safety.check(ir)
    return codegen.compile_to_ptx(ir, target).ptx


@tile.kernel
def same_view_in_place(x):
    i = tile.bid(0)
    t = tile.load(x, (i, 0), (8, 64))
    tile.store(x, (i, 0), t * 2.0)


@tile.kernel
def disjoint_shapes(x, out):
    i = tile.bid(0)
    tile.store(x, (i, 0), tile.full((1, 32), 1.0, vg.float32))
    tile.store(out, (i, 0), tile.load(x, (i, 1), (1, 64)))


@tile.kernel
def two_shapes_meeting(x, out):
    i = tile.bid(0)
    tile.store(x, (i, 0), tile.full((1, 32), 1.0, vg.float32))
    tile.store(out, (i, 0), tile.load(x, (i, 0), (1, 64)))


F32_2D = dict(x=_arr(T.float32, 2))


def test_the_issue_kernel_gets_one_barrier_and_its_twin_none():
    from tile_order_kernels import overwrite_half

    assert _checked_ptx(overwrite_half, F32_2D).count("bar.sync") == 1
    assert _checked_ptx(same_view_in_place, F32_2D).count("bar.sync") == 0  # one layout: one thread


def test_statements_proven_apart_get_no_barrier_and_meeting_ones_do():
    specs = dict(x=_arr(T.float32, 2), out=_arr(T.float32, 2))
    assert _checked_ptx(disjoint_shapes, specs).count("bar.sync") == 0
    assert _checked_ptx(two_shapes_meeting, specs).count("bar.sync") == 1


def test_a_broadcast_layout_is_not_one_thread():
    from tile_order_kernels import broadcast_read_back

    specs = dict(x=_arr(T.float32), a=_arr(T.float32), out=_arr(T.float32))
    assert _checked_ptx(broadcast_read_back, specs).count("bar.sync") == 1


def test_tile_examples_get_no_barrier_from_ordering():
    """The benchmarked tile kernels (the examples, at the benchmarks' specializations, and the
    matrix products) never meet themselves within a block: ordering adds nothing to them."""
    from verdigris.tile.lower import TileLowering

    import test_tile_examples
    import test_tile_mma

    cases = [(k, s) for m in test_tile_examples.MODULES for k in test_tile_examples.kernels_of(m)
             for s in test_tile_examples.SPECS[k.__name__]] + list(test_tile_mma.PTX_CASES.values())
    counted = 0
    for kernel, specs in cases:
        ir = kernel.specialize_types(specs)
        try:
            safety.check(ir)
        except vg.SafetyError:  # a product test kernel racy at any grid (it is launched on one block)
            continue
        lowering = TileLowering
        from verdigris.ir import tiles as X

        if X.has_dots(ir):
            from verdigris.tile.matmul import MmaLowering as lowering
        low = lowering(ir, "sm_90a")
        low.run()
        assert low.order.barriers == 0, kernel.__name__
        counted += 1
    assert counted >= 20


# ----------------------------------------------------------------------------- atomics


@tile.kernel
def add_then_read(x, out):
    i = tile.bid(0)
    tile.atomic_add(x, (i,), tile.full((64,), 1.0, vg.float32))
    tile.store(out, (i,), tile.load(x, (i,), (64,)))


@tile.kernel
def add_then_read_apart(x, y, out):
    i = tile.bid(0)
    tile.atomic_add(x, (i,), tile.full((64,), 1.0, vg.float32))
    tile.store(out, (i,), tile.load(y, (i,), (64,)))


def test_an_atomic_beside_a_plain_access_of_one_block_is_refused_with_both_statements():
    n = 128
    x, out = vg.asarray(np.zeros(n, np.float32)), vg.empty(n, vg.float32)
    with pytest.raises(vg.SafetyError) as caught:
        add_then_read[2](x, out)
    err = caught.value
    assert err.code == "VG204"
    text = str(err)
    source = open(__file__).read().splitlines()
    first = source.index("def add_then_read(x, out):") + 1
    lines = [first + 2, first + 3]  # the atomic, the load
    assert f"at line {lines[0]}" in text and f"at line {lines[1]}" in text, text
    assert "block 0 updates x[" in text and "atomically" in text, text
    y = vg.asarray(np.arange(n, dtype=np.float32))
    add_then_read_apart[2](x, y, out)
    np.testing.assert_array_equal(np.asarray(out), np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(x), np.ones(n, np.float32))


# ----------------------------------------------------------------------------- facts


def test_block_meets_are_known_before_the_race_checks_and_survive_the_disk_cache(tmp_path, monkeypatch):
    """The lowering may run beside the race checks (`runtime.proofs`: `safety.order_block`
    first), and after a cached verdict the pairs come back as positions, for fresh nodes."""
    from verdigris.frontend.access_nodes import accessing
    from verdigris.runtime import proofs
    from tile_order_kernels import halves_in_a_loop, read_back_half

    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    specs = dict(x=_arr(T.float32, 2), a=_arr(T.float32, 2), out=_arr(T.float32, 2))
    early = read_back_half.specialize_types(specs)
    safety.order_block(early)
    checked = read_back_half.specialize_types(specs)
    safety.check(checked)
    assert early.facts["block_meets"]  # the same pairs as the checks give, by position:
    positions = {id(n): i for i, n in enumerate(accessing(early))}
    again = {id(n): i for i, n in enumerate(accessing(checked))}
    assert {tuple(sorted((positions[x], positions[y]))) for x, y in early.facts["block_meets"]} == \
        {tuple(sorted((again[x], again[y]))) for x, y in checked.facts["block_meets"]}
    names = [p.name for p in halves_in_a_loop.params]
    first = halves_in_a_loop.specialize_types(dict(x=_arr(T.int32, 2)))
    proofs.start(first, ("order test",), names, False).settle()
    second = halves_in_a_loop.specialize_types(dict(x=_arr(T.int32, 2)))
    monkeypatch.setattr(safety, "check_races", None)  # a hit: the checker does not run
    proofs.start(second, ("order test",), names, False).settle()
    mine = {id(n): i for i, n in enumerate(accessing(first))}
    theirs = {id(n): i for i, n in enumerate(accessing(second))}
    assert first.facts["block_meets"]
    assert {tuple(sorted((mine[x], mine[y]))) for x, y in first.facts["block_meets"]} == \
        {tuple(sorted((theirs[x], theirs[y]))) for x, y in second.facts["block_meets"]}
