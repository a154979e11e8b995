"""Tile operations whose exchange through shared memory is past the static 48 KiB
(`tile.lower.Exchange`): their two buffers go to dynamic shared memory (one, with a
barrier after each user, when two do not fit), after the matrix products' part; the module
names the size every launch must give (`runtime.module.dynamic_shared` reads it from the
PTX or the cubin); past the target's limit the operation is refused at its line. The GPU
lowering runs on the host (`host_jit`) against the cpu backend."""
import json
import re

import numpy as np
import pytest

import located
import test_tile_pieces
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.runtime.module import dynamic_shared
from verdigris.tile import matmul
from tests import fakecuda
from test_tile_pieces import arr, extracted, joined, lowered_on_host

needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


def joined_ptx(target: str, r: int, cx: int, cy: int, axis: int, dtype=T.float32) -> str:
    specs = dict(x=arr(dtype, 2), y=arr(dtype, 2), out=arr(dtype, 2), R=r, CX=cx, CY=cy, AXIS=axis)
    return codegen.compile_to_ptx(joined.specialize_types(specs), target).ptx


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("axis", [0, 1])
def test_two_buffers_past_48_kib_are_dynamic(target, axis):
    ptx = joined_ptx(target, 128, 64, 64, axis)
    buffer = 128 * 129 * 4  # the (128, 128) result, rows one element longer
    assert dynamic_shared(ptx.encode()) == 2 * buffer
    assert ".extern .shared .align 16 .b8 vg_dsmem[]" in ptx and "smem0" not in ptx
    cubin = codegen.assemble(ptx, target)
    assert dynamic_shared(cubin) == 2 * buffer


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_one_buffer_with_barriers_when_two_do_not_fit(target):
    ptx = joined_ptx(target, 128, 128, 128, 1)
    buffer = 128 * 257 * 4  # two would be 257 KiB
    assert dynamic_shared(ptx.encode()) == buffer
    assert len(re.findall(r"\bbar\.sync\b|\bbarrier\.sync\b", ptx)) == 2  # after the writes, after the reads
    codegen.assemble(ptx, target)


def test_small_exchanges_stay_static():
    ptx = joined_ptx("sm_90a", 16, 24, 40, 1)
    assert dynamic_shared(ptx.encode()) == 0 and "vg_dsmem" not in ptx and "vg_$_smem0[" in ptx


@pytest.mark.parametrize("target,limit", [("sm_80", 163 * 1024), ("sm_90a", 227 * 1024)])
def test_past_the_targets_limit_is_refused_at_its_line(target, limit):
    with pytest.raises(vg.CompileError) as info:
        joined_ptx(target, 256, 128, 128, 1)
    err = info.value
    assert f"moves {256 * 257 * 4} bytes through shared memory" in str(err), str(err)
    assert f"{limit // 1024} KiB ({limit} bytes) a block has on {target}" in str(err), str(err)
    located.assert_points_at(err, "c = tile.cat((a, b), AXIS)", test_tile_pieces.__file__)


@pytest.mark.parametrize("axis", [0, 1])
def test_a_dynamic_exchange_lowered_for_the_gpu(axis, rng):
    x = rng.standard_normal((32, 64)).astype(np.float64)
    y = rng.standard_normal((32, 64)).astype(np.float64)
    (got, want), = lowered_on_host(joined, 1, ("out",), 1, x=x, y=y, out=np.zeros((32, 128)),
                                   R=32, CX=64, CY=64, AXIS=axis)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("i,j", [(0, 0), (3, 2)])
def test_an_extract_stages_only_the_sub_tile(i, j, rng):
    specs = dict(x=arr(T.float16, 2), out=arr(T.float16, 2), R=64, C=96, I=i, J=j, SR=16, SC=32, METHOD=True)
    ptx = codegen.compile_to_ptx(extracted.specialize_types(specs), "sm_90a").ptx
    assert re.findall(r"\.shared .*\[(\d+)\]", ptx) == [str(16 * 34 * 2)]  # float16, not the (64, 96) tile
    x = rng.standard_normal((64, 96)).astype(np.float16)
    (got, want), = lowered_on_host(extracted, 1, ("out",), 2, x=x, out=np.zeros((16, 32), np.float16),
                                   R=64, C=96, I=i, J=j, SR=16, SC=32, METHOD=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x[16 * i:16 * i + 16, 32 * j:32 * j + 32])


DYNAMIC_LAUNCHES = """
import json
import numpy as np
import verdigris as vg
from tests.fakecuda import last_launch
from tests.fakecuda.kernels import side_by_side
BUNDLE = None

kernel = side_by_side if BUNDLE is None else vg.load_bundle(BUNDLE)
x = vg.asarray(np.zeros((128, 64), np.float32))
out = vg.asarray(np.zeros((128, 128), np.float32))
shared = []
for _ in range(3):  # the general path, then the generated launcher
    kernel[1](x, x, out, R=128, C=64)
    shared.append(last_launch().shared)
print(json.dumps(shared))
"""


@pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")
@needs_ptxas
def test_every_launch_gives_the_dynamic_shared_memory(tmp_path):
    """On the fake driver (which refuses past 48 KiB without the opt-in): the first launch,
    the generated launcher's, a later process's through the launch record, and a bundle's."""
    from tests.fakecuda.kernels import side_by_side

    bundle = side_by_side.compile_aot("f32[:, ::1], f32[:, ::1], f32[:, ::1], 128, 64", grid=(1,),
                                      targets=["sm_90a"])
    bundle.save(tmp_path / "side.vgb")
    bundled = DYNAMIC_LAUNCHES.replace("BUNDLE = None", f"BUNDLE = {str(tmp_path / 'side.vgb')!r}")
    for code in (DYNAMIC_LAUNCHES, DYNAMIC_LAUNCHES, bundled):
        done = fakecuda.run(code, VERDIGRIS_CACHE_DIR=str(tmp_path / "cache"))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == [2 * 128 * 129 * 4] * 3


@tile.kernel
def product_then_cat(a, b, c, x, out, R: vg.constexpr, C: vg.constexpr):
    p = tile.load(a, index=(0, 0), shape=(64, 64))
    q = tile.load(b, index=(0, 0), shape=(64, 64))
    tile.store(c, index=(0, 0), tile=tile.mma(p, q, tile.zeros((64, 64), vg.float32)))
    t = tile.load(x, index=(0, 0), shape=(R, C))
    tile.store(out, index=(0, 0), tile=tile.cat((t, t[:, 16:]), 1))  # not one layout: through shared


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_buffers_lie_after_the_products_part(target):
    specs = dict(a=arr(T.float16, 2), b=arr(T.float16, 2), c=arr(T.float32, 2), x=arr(T.float32, 2),
                 out=arr(T.float32, 2), R=64, C=64)
    kernel = product_then_cat.specialize_types(specs)
    products = matmul.plan(kernel, target).dynamic_shared
    ptx = codegen.compile_to_ptx(kernel, target).ptx
    buffer = 64 * 129 * 4
    assert products > 0 and dynamic_shared(ptx.encode()) == -(-products // 16) * 16 + 2 * buffer
    codegen.assemble(ptx, target)


@tile.kernel
def transposed(x, out, R: vg.constexpr, C: vg.constexpr):
    t = tile.load(x, index=(0, 0), shape=(R, C))
    tile.store(out, index=(0, 0), tile=t.T * 2)  # the stored layout is not the loaded one's


@needs_ptxas
def test_a_transpose_past_48_kib_is_dynamic(rng):
    specs = dict(x=arr(T.float32, 2), out=arr(T.float32, 2), R=128, C=128)
    ptx = codegen.compile_to_ptx(transposed.specialize_types(specs), "sm_90a").ptx
    assert dynamic_shared(ptx.encode()) == 2 * 128 * 129 * 4
    x = rng.standard_normal((32, 128))
    (got, want), = lowered_on_host(transposed, 1, ("out",), 1, x=x, out=np.zeros((128, 32)), R=32, C=128)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x.T * 2)
