"""Every tile example: on the cpu backend against its NumPy float64 reference, and each of
its kernels as PTX for sm_80 and sm_90a, assembled by ptxas (at the specializations the
benchmarks use). `tests/gpu/test_tile_examples.py` runs them on the GPU."""
import importlib

import pytest

from verdigris import codegen, examples
from verdigris import types as T
from verdigris.examples import Result
from verdigris.ir import ArrayType

MODULES = [importlib.import_module(f"verdigris.examples.{name}") for name in examples.TILE_EXAMPLES]


def arr(dtype, ndim=1):
    return ArrayType(dtype, ndim, "global", True, True)


f32, bf16, i64 = T.float32, T.bfloat16, T.int64
# kernel name -> specializations to compile (the benchmarks' where they run one)
SPECS = {
    "add": [dict(a=arr(f32), b=arr(f32), out=arr(f32), BLOCK=1024),
            dict(a=arr(bf16), b=arr(bf16), out=arr(bf16), BLOCK=4096)],
    "bias_gelu": [dict(x=arr(bf16, 2), bias=arr(bf16), out=arr(bf16, 2), R=8, C=256)],
    "softmax": [dict(x=arr(f32, 2), out=arr(f32, 2), COLS=4096),
                dict(x=arr(bf16, 2), out=arr(bf16, 2), COLS=16384)],
    "softmax_online": [dict(x=arr(f32, 2), out=arr(f32, 2), BLOCK=4096)],
    "layernorm": [dict(x=arr(bf16, 2), w=arr(bf16), b=arr(bf16), out=arr(bf16, 2), n=i64, eps=f32,
                       COLS=8192)],
    "rmsnorm": [dict(x=arr(bf16, 2), w=arr(bf16), out=arr(bf16, 2), n=i64, eps=f32, COLS=8192)],
    "layernorm_forward": [dict(x=arr(bf16, 2), w=arr(bf16), b=arr(bf16), out=arr(bf16, 2),
                               mean=arr(f32), rstd=arr(f32), eps=f32, COLS=8192)],
    "layernorm_backward": [dict(dy=arr(bf16, 2), x=arr(bf16, 2), w=arr(bf16), mean=arr(f32),
                                rstd=arr(f32), dx=arr(bf16, 2), dw_partial=arr(f32, 2),
                                db_partial=arr(f32, 2), dsum=arr(bf16, 2), dx_partial=arr(f32, 2), ROWS=64,
                                COLS=COLS, PLUS_DSUM=plus, SUM_DX=plus)
                           for COLS, plus in ((8192, False), (1024, True))],
    "rmsnorm_forward": [dict(x=arr(bf16, 2), w=arr(bf16), out=arr(bf16, 2), rstd=arr(f32), eps=f32,
                             COLS=8192)],
    "rmsnorm_backward": [dict(dy=arr(bf16, 2), x=arr(bf16, 2), w=arr(bf16), rstd=arr(f32),
                              dx=arr(bf16, 2), dw_partial=arr(f32, 2), ROWS=64, COLS=8192)],
    "column_sums": [dict(partial=arr(f32, 2), out=arr(bf16), BR=8, BC=256)],
    "row_block_sums": [dict(x=arr(bf16, 2), partial=arr(f32, 2), ROWS=256, BR=16, BC=256)],
    "row_sum": [dict(x=arr(f32, 2), out=arr(f32), COLS=4096)],
    "row_max": [dict(x=arr(f32, 2), out=arr(f32), COLS=4096)],
    "cumsum_rows": [dict(x=arr(f32, 2), out=arr(f32, 2), COLS=1024)],
    "transpose": [dict(x=arr(f32, 2), out=arr(f32, 2), B=32), dict(x=arr(f32, 2), out=arr(f32, 2), B=64)],
    "dropout": [dict(x=arr(f32), out=arr(f32), seed=i64, p=f32, BLOCK=2048)],
}


def kernels_of(module):
    return [v for v in vars(module).values() if getattr(v, "__vg_kernel__", False)]


def test_every_tile_example_kernel_has_specializations():
    assert {k.__name__ for m in MODULES for k in kernels_of(m)} == set(SPECS)
    assert all(k.track == "tile" for m in MODULES for k in kernels_of(m))


@pytest.mark.parametrize("module", MODULES, ids=examples.TILE_EXAMPLES)
def test_tile_example_matches_numpy_on_cpu(module, rng):
    results = module.check(rng)
    assert results and all(isinstance(r, Result) for r in results)
    for r in results:
        assert r.ok, f"{r.name}: error {r.error:.3e} over tolerance {r.rtol:.0e}"


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("module", MODULES, ids=examples.TILE_EXAMPLES)
def test_tile_example_ptx_assembles(module, target):
    for kernel in kernels_of(module):
        for spec in SPECS[kernel.__name__]:
            compiled = codegen.compile_to_ptx(kernel.specialize_types(spec), target)
            assert f".target {target}" in compiled.ptx
            assert codegen.assemble(compiled.ptx, target, optimize=False)[:4] == b"\x7fELF"
