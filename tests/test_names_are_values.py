"""Names are values (docs/api.md): a rebinding in straight-line code makes a new value of any
dtype, shape or kind, on both tracks; bindings that meet where control flow merges must agree
(scalars join by the promotion rules), and the error names both assignments."""

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris.ir.nodes import ArrayType
from verdigris.ir.tiles import TileType


def typed_ir(kernel, *args, **kwargs):
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def compile_error(kernel, *args, **kwargs) -> vg.CompileError:
    with pytest.raises(vg.CompileError) as info:
        typed_ir(kernel, *args, **kwargs)
    return info.value


def assert_names(err, *markers):
    """`err` names every assignment marked `markers`, each with its line and a caret."""
    for marker in markers:
        located.assert_points_at(err, marker, __file__)
    source = open(__file__).read().splitlines()
    for marker in markers:
        line = next(i + 1 for i, t in enumerate(source) if marker in t and "assert_" not in t)
        assert f"{__file__}:{line}:" in str(err), str(err)


def poisoned(shape, dtype):
    out = np.empty(shape, dtype)
    out[...] = np.nan if np.dtype(dtype).kind == "f" else -7
    return out


# ----------------------------------------------------------------------------- straight line


@simt.kernel
def scalar_widens(x, out):
    i = simt.global_id(0)
    v = i                      # an integer: indexes x
    if v < x.shape[0]:
        w = x[v]
        v = v * 0.25           # a float64 from here on: x holds float64
        v = v + w
        out[i] = v


def test_a_simt_rebinding_makes_a_new_value_of_another_dtype(rng):
    x = rng.standard_normal(50)
    out = poisoned(50, np.float64)
    scalar_widens[2, 32](x, out)
    np.testing.assert_allclose(out, np.arange(50) * 0.25 + x)
    types = typed_ir(scalar_widens, x, out).locals
    versions = [t for k, t in types.items() if k.partition("#")[0] == "v"]
    assert any(t.is_int for t in versions) and vg.float64 in versions


@simt.kernel
def parameter_rebound(x, out, n):
    i = simt.global_id(0)
    n = n * 0.5                 # n: int32 parameter, now float64
    if i < x.shape[0]:
        out[i] = x[i] * n


def test_a_scalar_parameter_may_be_rebound_to_another_dtype(rng):
    x = rng.standard_normal(40)
    out = poisoned(40, np.float64)
    parameter_rebound[2, 32](x, out, np.int32(3))
    np.testing.assert_allclose(out, x * 1.5)


@tile.kernel
def astype_rebinding(x, out, B: vg.constexpr):
    p = tile.load(x, index=(0,), shape=(B,))
    p = p.astype(vg.float16)    # p is float16 now (it used to stay float32, silently)
    p = p.astype(vg.float32)
    tile.store(out, index=(0,), tile=p)


def test_astype_rebinding_gives_the_new_dtype(rng):
    x = (1 + rng.random(64) / 100).astype(np.float32)
    out = poisoned(64, np.float32)
    astype_rebinding[1](x, out, B=64)
    np.testing.assert_array_equal(out, x.astype(np.float16).astype(np.float32))
    assert not np.array_equal(out, x)  # the float16 rounding happened
    locals_ = typed_ir(astype_rebinding, x, out, B=64).locals
    assert TileType(vg.float16, (64,)) in locals_.values()


@tile.kernel
def reshapes(x, out, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    t = t[None, :]                         # (1, B)
    t = tile.reshape(t, (B, 1))            # (B, 1)
    mean = t * 2.0
    mean = tile.sum(mean, axis=0) / B      # (1,)
    tile.store(out, index=(0,), tile=mean)


def test_a_tile_name_may_change_shape(rng):
    x = rng.standard_normal(16).astype(np.float32)
    out = poisoned(1, np.float32)
    reshapes[1](x, out, B=16)
    np.testing.assert_allclose(out, [2 * x.astype(np.float64).mean()], rtol=1e-5)


@tile.kernel
def widened_offsets(out, n, B: vg.constexpr):
    o = tile.arange(B)
    o += n                                 # n: int64, so o is an int64 tile (promotion)
    tile.store(out, index=(0,), tile=o)


def test_augmented_assignment_promotes_as_the_operator_does():
    out = poisoned(8, np.int64)
    n = np.int64(2 ** 40)
    widened_offsets[1](out, n, B=8)
    np.testing.assert_array_equal(out, np.arange(8) + 2 ** 40)
    assert TileType(vg.int64, (8,)) in typed_ir(widened_offsets, out, n, B=8).locals.values()


# ----------------------------------------------------------------------------- merges


@simt.kernel
def scalar_join(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:
        v = 1
        if x[i] > 0:
            v = x[i] * 0.5             # float64 on one path, int32 on the other: they join
        out[i] = v


def test_scalars_that_meet_join_by_promotion(rng):
    x = rng.standard_normal(40)
    out = poisoned(40, np.float64)
    scalar_join[2, 32](x, out)
    np.testing.assert_allclose(out, np.where(x > 0, x * 0.5, 1.0))


@tile.kernel
def dead_after_merge(x, out, flag, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))
    if flag > 0:
        t = t[:, None]                 # (B, 1) here only, and not read after the if
        tile.store(out, index=(0, 0), tile=t * 3.0)
    else:
        t = t.astype(vg.int32)         # another dtype, also dead after the if
        tile.store(out, index=(0, 0), tile=t[:, None].astype(vg.float32))


def test_bindings_that_disagree_but_are_not_read_after_the_merge_are_fine(rng):
    x = rng.standard_normal(8).astype(np.float32)
    for flag, want in ((1, x * 3), (0, np.trunc(x))):
        out = poisoned((8, 1), np.float32)
        dead_after_merge[1](x, out, flag, B=8)
        np.testing.assert_allclose(out[:, 0], want, rtol=1e-6)


@tile.kernel
def shapes_meet(x, out, flag, B: vg.constexpr):
    t = tile.load(x, index=(0,), shape=(B,))    # MARK-merge-first
    if flag > 0:
        t = t[None, :]                           # MARK-merge-second
    tile.store(out, index=(0,), tile=t)         # MARK-merge-read


def test_tiles_that_meet_with_different_shapes_are_refused_naming_both():
    err = compile_error(shapes_meet, np.zeros(8, np.float32), np.zeros(8, np.float32), 1, B=8)
    assert_names(err, "MARK-merge-first", "MARK-merge-second")
    assert "MARK-merge-read" in str(err)  # where they are read
    assert "(8,)" in str(err) and "(1, 8)" in str(err)


@simt.kernel
def arrays_meet(a, b, out, flag):
    i = simt.global_id(0)
    src = a
    if flag > 0:
        src = b
    if i < out.shape[0]:
        out[i] = src[i] * 2.0


def test_a_name_bound_to_one_of_two_arrays_reads_the_one_its_path_chose(rng):
    a, b = rng.standard_normal(40), rng.standard_normal(40)
    for flag, want in ((0, a), (1, b)):
        out = poisoned(40, np.float64)
        arrays_meet[2, 32](a, b, out, flag)
        np.testing.assert_array_equal(out, 2 * want)


@simt.kernel
def selected_write_racy(a, b, flag):
    i = simt.global_id(0)
    dst = a
    if flag > 0:
        dst = b
    dst[i // 2] = 1.0          # two threads per element, in whichever array


@simt.kernel
def selected_write_fixed(a, b, flag):
    i = simt.global_id(0)
    dst = a
    if flag > 0:
        dst = b
    dst[i] = 1.0


def test_a_write_through_a_selected_array_writes_either_array():
    a, b = np.zeros(64, np.float32), np.zeros(64, np.float32)
    assert typed_ir(selected_write_fixed, a, b, 1).writes == {"a", "b"}  # alias checks see both
    with pytest.raises(vg.SafetyError) as info:
        selected_write_racy[1, 64](a, b, 1)
    assert info.value.code == "VG202", str(info.value)  # a counterexample, not "not proven"
    selected_write_fixed[1, 64](a, b, 1)
    assert (b == 1).all() and (a == 0).all()
    with pytest.raises(vg.AliasError):
        selected_write_fixed[1, 64](a, a, 0)


@simt.kernel
def ping_pong(a, b, n):
    i = simt.global_id(0)
    src = a                       # MARK-pingpong-first
    dst = b
    for k in range(n):
        dst[i] = src[i] + 1.0
        src, dst = dst, src       # MARK-pingpong-second


def test_arrays_swapped_around_a_loop_are_refused_naming_both():
    a = np.zeros(32, np.float32)
    err = compile_error(ping_pong, a, a.copy(), 3)
    assert "carried around this loop" in str(err)
    assert_names(err, "MARK-pingpong-first", "MARK-pingpong-second")


# ----------------------------------------------------------------------------- loops


@tile.kernel
def carried_reshape(x, out, B: vg.constexpr):
    acc = tile.zeros((B,), vg.float32)           # MARK-carry-first
    for k in range(4):
        acc = acc + tile.load(x, index=(k,), shape=(B,))
        acc = acc[None, :]                       # MARK-carry-second
    tile.store(out, index=(0, 0), tile=acc)


def test_a_loop_carried_tile_that_changes_shape_is_refused_naming_both():
    err = compile_error(carried_reshape, np.zeros(32, np.float32), np.zeros((1, 8), np.float32), B=8)
    assert_names(err, "MARK-carry-first", "MARK-carry-second")
    assert "carried around this loop" in str(err)


@tile.kernel
def carried_dtype(x, out, B: vg.constexpr):
    acc = tile.zeros((B,), vg.int32)                      # MARK-dtype-first
    for k in range(x.shape[0] // B):
        acc += tile.load(x, index=(k,), shape=(B,))      # MARK-dtype-second
    tile.store(out, index=(0,), tile=acc.astype(vg.float32))


def test_a_loop_carried_tile_that_changes_dtype_is_refused_naming_both():
    err = compile_error(carried_dtype, np.zeros(32, np.float32), np.zeros(8, np.float32), B=8)
    assert_names(err, "MARK-dtype-first", "MARK-dtype-second")


@tile.kernel
def loop_local_rebinding(x, out, B: vg.constexpr):
    t = tile.zeros((B,), vg.float32)
    for k in range(x.shape[0] // B):
        t = tile.load(x, index=(k,), shape=(B,))    # not read before this: not carried
        t = t[:, None] * 2.0
        tile.store(out, index=(k, 0), tile=t)


def test_a_rebinding_inside_a_loop_that_is_not_carried_is_fine(rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = poisoned((32, 1), np.float32)
    loop_local_rebinding[1](x, out, B=8)
    np.testing.assert_allclose(out[:, 0], 2 * x)


@simt.kernel
def scalar_carried(x, out):
    acc = 0                        # int32, joined with the body's float64: float64
    for i in range(x.shape[0]):
        acc += x[i]
    out[0] = acc


def test_a_loop_carried_scalar_joins_by_promotion(rng):
    x = rng.standard_normal(20)
    out = poisoned(1, np.float64)
    scalar_carried[1, 1](x, out)
    np.testing.assert_allclose(out, [x.sum()])


@simt.kernel
def while_carried(out, n):
    i = 0
    total = 0
    while i < n:
        i = i + 1
        total = total + i * 0.5    # int32 -> float64: joined with the entry's binding
    out[0] = total


def test_a_while_loop_carries_scalars_through_its_condition():
    out = poisoned(1, np.float64)
    while_carried[1, 1](out, np.int32(10))
    np.testing.assert_allclose(out, [0.5 * 55])


@tile.kernel
def after_loop(x, out, B: vg.constexpr):
    t = tile.zeros((B,), vg.float32)
    for k in range(2):              # runs: its end is the only way out
        t = tile.load(x, index=(k,), shape=(B,))[None, :]
    tile.store(out, index=(0, 0), tile=t)


def test_a_loop_that_surely_runs_leaves_only_from_its_end(rng):
    x = rng.standard_normal(16).astype(np.float32)
    out = poisoned((1, 8), np.float32)
    after_loop[1](x, out, B=8)
    np.testing.assert_array_equal(out[0], x[8:])


# ----------------------------------------------------------------------------- the checker


@simt.kernel
def halved_index_racy(out, n):
    t = simt.thread_id(0)
    for k in range(n):
        i = t                              # int32
        i = vg.int64(i) // 2 + k * 64      # a new int64 value: two threads share each element
        out[i] = 1.0


@simt.kernel
def halved_index_fixed(out, n):
    t = simt.thread_id(0)
    for k in range(n):
        i = t                              # int32
        i = vg.int64(i) + k * 64           # a new int64 value: one thread per element
        out[i] = 1.0


def test_the_race_checker_sees_the_rebound_value_in_a_loop():
    locals_ = typed_ir(halved_index_fixed, np.zeros(128, np.float32), np.int32(2)).locals
    assert {locals_[k] for k in locals_ if k.partition("#")[0] == "i"} == {vg.int32, vg.int64}
    with pytest.raises(vg.SafetyError) as info:
        halved_index_racy[1, 64](np.zeros(128, np.float32), np.int32(2))
    assert info.value.code == "VG202", str(info.value)  # a counterexample, not "not proven"
    out = poisoned(128, np.float32)
    halved_index_fixed[1, 64](out, np.int32(2))
    np.testing.assert_array_equal(out, 1.0)


@simt.kernel
def loop_variable_rebound(out, n):
    for i in range(n):
        if i > 2:
            i = i * 0.5        # MARK-loop-variable
    out[0] = i


def test_a_loop_variable_that_meets_a_float_after_the_loop_is_refused():
    err = compile_error(loop_variable_rebound, np.zeros(1, np.float64), np.int32(4))
    assert "loop variable" in str(err)


@simt.kernel
def parameter_joined(out, n):
    if n > 2:
        n = n * 0.5            # float64 on one path, the int32 parameter on the other
    out[0] = n


def test_a_parameter_rebound_on_one_path_joins_by_promotion():
    for n, want in ((5, 2.5), (1, 1.0)):
        out = poisoned(1, np.float64)
        parameter_joined[1, 1](out, np.int32(n))
        np.testing.assert_array_equal(out, [want])


# ----------------------------------------------------------------------------- PTX

F32, F64, I32, I64 = vg.float32, vg.float64, vg.int32, vg.int64
PTX_SPECS = {  # kernel -> parameter specs: versions of a name, merges, selected arrays
    "scalar_widens": (scalar_widens, dict(x=ArrayType(F64, 1, "global"), out=ArrayType(F64, 1, "global"))),
    "parameter_joined": (parameter_joined, dict(out=ArrayType(F64, 1, "global"), n=I32)),
    "while_carried": (while_carried, dict(out=ArrayType(F64, 1, "global"), n=I32)),
    "arrays_meet": (arrays_meet, dict(a=ArrayType(F64, 1, "global"), b=ArrayType(F64, 1, "global"),
                                      out=ArrayType(F64, 1, "global"), flag=I32)),
    "astype_rebinding": (astype_rebinding, dict(x=ArrayType(F32, 1, "global"),
                                                out=ArrayType(F32, 1, "global"), B=64)),
    "reshapes": (reshapes, dict(x=ArrayType(F32, 1, "global"), out=ArrayType(F32, 1, "global"), B=16)),
    "widened_offsets": (widened_offsets, dict(out=ArrayType(I64, 1, "global"), n=I64, B=8)),
    "dead_after_merge": (dead_after_merge, dict(x=ArrayType(F32, 1, "global"),
                                                out=ArrayType(F32, 2, "global"), flag=I32, B=8)),
    "loop_local_rebinding": (loop_local_rebinding, dict(x=ArrayType(F32, 1, "global"),
                                                        out=ArrayType(F32, 2, "global"), B=8)),
}


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("name", sorted(PTX_SPECS))
def test_rebound_names_assemble(name):
    kernel, specs = PTX_SPECS[name]
    ptx = codegen.compile_to_ptx(kernel.specialize_types(specs), "sm_80").ptx
    assert codegen.assemble(ptx, "sm_80")[:4] == b"\x7fELF"


@simt.kernel
def constants_meet(out, flag, D: vg.constexpr):
    dt = D                     # MARK-constant-first
    if flag > 0:
        dt = vg.float16        # MARK-constant-second
    out[0] = dt(1.5)


def test_a_name_bound_to_one_of_two_constants_under_if_selects_too():
    for flag, want in ((0, 1.0), (1, 1.5)):
        out = poisoned(1, np.float32)
        constants_meet[1, 1](out, flag, D=vg.int32)
        np.testing.assert_array_equal(out, [want])


@simt.kernel
def constant_parameter_carried(out, n, D: vg.constexpr):   # MARK-param-first
    for k in range(n):
        out[k] = D(1.5)
        D = vg.float16                                      # MARK-param-second


def test_a_constant_parameter_rebound_around_a_loop_is_refused_naming_both():
    err = compile_error(constant_parameter_carried, np.zeros(4, np.float32), 4, D=vg.float32)
    assert "carried around this loop" in str(err)
    assert_names(err, "MARK-param-first", "MARK-param-second")


@tile.kernel
def attention_like(q, k, out, B: vg.constexpr):
    p = tile.load(q, index=(0, 0), shape=(B, B))     # float32
    p = p.astype(vg.float16)                         # Triton's `p = p.to(tl.float16)`
    v = tile.load(k, index=(0, 0), shape=(B, B))
    tile.store(out, index=(0, 0), tile=tile.mma(p, v, tile.zeros((B, B), vg.float32)))


def test_a_product_takes_the_rebound_float16_operand(rng):
    q = rng.standard_normal((16, 16)).astype(np.float32)
    k = rng.standard_normal((16, 16)).astype(np.float16)
    out = poisoned((16, 16), np.float32)
    attention_like[1](q, k, out, B=16)
    want = q.astype(np.float16).astype(np.float64) @ k.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=2e-3, atol=2e-3)


@simt.kernel
def array_after_loop(a, b, out, n):
    src = a                       # MARK-after-loop-first
    for k in range(n):
        src = b                   # MARK-after-loop-second
    out[0] = src[0]


def test_an_array_name_that_a_loop_may_rebind_is_refused_naming_both():
    a = np.zeros(4, np.float32)
    err = compile_error(array_after_loop, a, a.copy(), a.copy(), np.int32(2))
    assert_names(err, "MARK-after-loop-first", "MARK-after-loop-second")
    assert "helper" in str(err)


@simt.kernel
def signed_zeros(out, flag):
    w = (0.0, 1.0)
    if flag > 0:
        w = (-0.0, 1.0)        # equal to w under ==, but not the same constant
    out[0] = w[0]


def test_constants_are_selected_bit_for_bit():
    for flag in (0, 1):
        out = poisoned(1, np.float64)
        signed_zeros[1, 1](out, flag)
        assert out[0] == 0 and np.signbit(out[0]) == bool(flag)


@simt.kernel
def selected_unsafe(a, b, flag):
    i = simt.global_id(0)
    dst = a
    if flag > 0:
        dst = b
    with vg.unsafe():
        dst[0] = i


def test_an_unsafe_region_after_a_selecting_if_is_listed_once():
    a = np.zeros(4, np.float32)
    assert len(typed_ir(selected_unsafe, a, a.copy(), 1).unsafe_regions) == 1
