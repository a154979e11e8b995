"""Every example: on the cpu backend against NumPy, and as PTX assembled by ptxas."""
import importlib
import os

import pytest

from verdigris import codegen, examples
from verdigris.examples import Result

MODULES = [importlib.import_module(f"verdigris.examples.{name}") for name in examples.SIMT_EXAMPLES]


def kernels_of(module):
    return [v for v in vars(module).values() if getattr(v, "__vg_kernel__", False)]


@pytest.mark.parametrize("module", MODULES, ids=examples.SIMT_EXAMPLES)
def test_example_matches_numpy_on_cpu(module, rng):
    results = module.check(rng)
    assert results and all(isinstance(r, Result) for r in results)
    for r in results:
        assert r.ok, f"{r.name}: error {r.error:.3e} over tolerance {r.rtol:.0e}"


# One representative specialization per example kernel, as the CLI's --sig spells it.
SIGNATURES = {
    "axpy": "f32, f32[::1], f32[::1], f32[::1]",
    "scale_add_2d": "f32[:, :], f32[:, ::1], f32[:, ::1], f32",
    "softplus": "f32[::1], f32[::1]",
    "mandelbrot": "i32[:, ::1], f32, f32, f32, 200",
    "activations": "f32[::1], f32[::1], f32[::1], f32[::1], f32[::1]",
    "matvec": "f32[:, ::1], f32[::1], f32[::1], 37, 4",
    "block_sum": "f32[::1], f32[::1], 256, 8",
    "histogram": "u8[::1], i64[::1], 8",
    "scan_tiles": "f32[::1], f32[::1], f64[::1], f64[::1], i32[::1], 8, 16",
    "reset_tiles": "f64[::1], f64[::1], i32[::1]",
    "transpose": "f32[:, ::1], f32[:, ::1], 32, 8",
    "jacobi_step": "f32[:, ::1], f32[:, ::1], 32, 8",
    "jacobi_sweeps": "f32[:, ::1], f32[:, ::1], i32",
    "sgemm": "f32[:, ::1], f32[:, ::1], f32[:, ::1], 128, 128, 8, 8, 8",
    "gather_sum": "f32[::1], i64[:, ::1], f32[::1], 8",
    "gather_sum_any": "f32[::1], i64[:, ::1], f32[::1]",
    "spmv_csr": "i32[::1], i32[::1], f32[::1], f32[::1], f32[::1], 8",
}


def test_every_example_kernel_has_a_signature():
    names = {k.__name__ for m in MODULES for k in kernels_of(m)}
    assert names == set(SIGNATURES)


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("module", [pytest.param(m, marks=pytest.mark.slow) if name == "sgemm" else m
                                    for m, name in zip(MODULES, examples.SIMT_EXAMPLES)],
                         ids=examples.SIMT_EXAMPLES)  # (sgemm: LLVM takes ~30 s a target)
def test_example_ptx_assembles(module, target):
    from verdigris.runtime.signatures import parse_signature

    for kernel in kernels_of(module):
        ir = kernel.specialize_types(parse_signature(kernel, SIGNATURES[kernel.__name__]))
        compiled = codegen.compile_to_ptx(ir, target)
        assert f".target {target}" in compiled.ptx
        assert f".entry {compiled.entry}" in compiled.ptx
        cubin = codegen.assemble(compiled.ptx, target, optimize=False)
        assert cubin[:4] == b"\x7fELF"


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI must have ptxas")
def test_ptxas_is_present_in_ci():
    """Without ptxas the PTX tests above would skip silently: CI must have it."""
    assert codegen.ptxas_available()
