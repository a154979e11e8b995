"""`x.load4(...)` (docs/api.md "SIMT track"): x[..., 4*i] to x[..., 4*i + 3] as a tuple, each
read checked (bounds, races) as x[...] is; one `ld.global.v4` where the array is 16-byte
aligned with a unit inner stride. SIMT kernels only."""

import numpy as np
import pytest

import located
import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris.ir.nodes import ArrayType


def typed_ir(kernel, *args, **kwargs):
    values = kernel.bind(args, kwargs)
    return kernel.build(kernel.spec_key(values, kernel.describe_args(values), None))


def poisoned(shape, dtype):
    out = np.empty(shape, dtype)
    out[...] = np.nan if np.dtype(dtype).kind == "f" else -7
    return out


@simt.kernel
def group_sums(x, out):
    i = simt.global_id(0)
    if i < x.shape[0] // 4:
        a, b, c, d = x.load4(i)
        out[i] = (a + b) + (c + d)


def test_load4_reads_the_ith_group_of_four(rng):
    x = rng.standard_normal(4 * 77 + 3).astype(np.float32)  # a tail of 3 no group reads
    out = poisoned(80, np.float32)
    group_sums[3, 32](x, out)
    g = x[:4 * 77].reshape(77, 4)
    np.testing.assert_array_equal(out[:77], (g[:, 0] + g[:, 1]) + (g[:, 2] + g[:, 3]))
    assert np.isnan(out[77:]).all()


@simt.kernel
def row_groups(x, out):
    r, c = simt.global_id(1), simt.global_id(0)
    if r < x.shape[0] and c < x.shape[1] // 4:
        v = x.load4(r, vg.int32(c))        # an int32 group index: 4 * c is computed in int64
        out[r, c] = v[3] * 1000 + v[2] * 100 + v[1] * 10 + v[0]


def test_load4_of_a_two_dimensional_array_groups_the_last_axis(rng):
    x = rng.integers(0, 10, (5, 24)).astype(np.int64)
    out = poisoned((5, 6), np.int64)
    row_groups[(1, 5), (8, 1)](x, out)
    g = x.reshape(5, 6, 4)
    np.testing.assert_array_equal(out, g[..., 3] * 1000 + g[..., 2] * 100 + g[..., 1] * 10 + g[..., 0])


@simt.kernel
def groups_past_the_end(x, out):
    i = simt.global_id(0)
    if i < x.shape[0]:                     # counts elements, not groups
        a, b, c, d = x.load4(i)
        out[i] = a + b + c + d


def test_a_group_past_the_end_is_out_of_bounds_beside_its_fixed_twin(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = poisoned(64, np.float32)
    with pytest.raises(vg.BoundsError, match=r"out of bounds: x\[64\] with shape \(64,\)"):
        groups_past_the_end[2, 32](x, out)
    group_sums[2, 32](x, out)              # the twin: guarded by groups
    g = x.reshape(16, 4)  # float32 adds, in the kernel's order: (a + b) + (c + d)
    np.testing.assert_array_equal(out[:16], (g[:, 0] + g[:, 1]) + (g[:, 2] + g[:, 3]))


@simt.kernel
def reads_a_neighbours_write(x):
    i = simt.global_id(0)
    if i < x.shape[0] // 4 - 1:
        v = x.load4(i)
        x[4 * i + 4] = v[1]                # thread i + 1 reads this element


@simt.kernel
def writes_its_own_group(x):
    i = simt.global_id(0)
    if i < x.shape[0] // 4 - 1:
        v = x.load4(i)
        x[4 * i] = v[1]


def test_load4_races_are_refused_beside_the_fixed_twin(rng):
    x = rng.standard_normal(128).astype(np.float32)
    with pytest.raises(vg.SafetyError, match=r"thread .* x\[") as info:
        reads_a_neighbours_write[1, 32](x.copy())
    assert info.value.code == "VG203"  # a read of an element another thread writes
    y = x.copy()
    writes_its_own_group[1, 32](y)
    want = x.copy()
    want[0:124:4] = x[1:125:4]
    np.testing.assert_array_equal(y, want)


@tile.kernel
def tile_load4(x, out):
    v = x.load4(0)  # MARK-tile
    out[0] = v[0]


@simt.kernel
def load4_wrong_arity(x, out):
    out[0] = x.load4(0, 1)[0]  # MARK-arity


@simt.kernel
def load4_float_index(x, out):
    out[0] = x.load4(x[0])[0]  # MARK-float


@pytest.mark.parametrize("kernel, marker, words", [
    (tile_load4, "MARK-tile", "belongs to the SIMT track"),
    (load4_wrong_arity, "MARK-arity", "takes 1 index"),
    (load4_float_index, "MARK-float", "indices must be integers"),
])
def test_load4_misuse_is_refused_at_its_line(kernel, marker, words):
    with pytest.raises(vg.CompileError) as info:
        typed_ir(kernel, np.zeros(8, np.float32), np.zeros(1, np.float32))
    assert words in str(info.value), str(info.value)
    located.assert_points_at(info.value, marker, __file__)


@simt.kernel
def proven_group_sums(x, out):
    i = simt.global_id(0)
    if 4 * i + 3 < x.shape[0] and i < out.shape[0]:  # bounds the proofs read directly
        a, b, c, d = x.load4(i)
        out[i] = (a + b) + (c + d)


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("aligned", [True, False])
def test_an_aligned_load4_is_one_vector_load(aligned):
    f32 = ArrayType(vg.float32, 1, "global", unit_inner_stride=True, aligned16=aligned)
    kernel = proven_group_sums.specialize_types(dict(x=f32, out=f32), block=(256, 1, 1))
    ptx = codegen.compile_to_ptx(kernel, "sm_80").ptx
    assert ("ld.global.nc.v4.b32" in ptx) == aligned
    assert codegen.assemble(ptx, "sm_80")[:4] == b"\x7fELF"
