"""Code generator: typed IR -> LLVM IR -> O3 -> PTX (-> cubin), and the IR's semantics.

There is no GPU here, so two kinds of checks:
- PTX: kernels built by hand compile for every target, the LLVM verifies, ptxas
  assembles the PTX (skipped without ptxas), read-only arrays load through `ld.global.nc`,
  and identical input gives identical PTX.
- Semantics: the same lowering, retargeted to the host CPU (NVPTX special registers
  become globals the harness sets per thread, libdevice functions become libm's), runs
  every thread in turn; results are compared with Python/NumPy references.
"""
import ctypes
import ctypes.util
import hashlib
import itertools
import math
import re
import subprocess
import sys
from fractions import Fraction

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from verdigris import codegen
from verdigris import types as T
from verdigris.codegen import checks, libdevice, mathlib
from verdigris.codegen.fp8 import FORMATS as FP8_FORMATS
from verdigris.errors import CompileError, Loc
from verdigris.ir import nodes as N
from verdigris.ir.abi import abi_params
from verdigris.safety import bounds

L = Loc(__file__, 1)
TARGETS = list(codegen.TARGETS)
needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
INT_DTYPES = [T.int8, T.int16, T.int32, T.int64, T.uint8, T.uint16, T.uint32, T.uint64]

# ----------------------------------------------------------------------------- IR builders


def const(value, dt):
    return N.Const(L, value, dt)


def var(name, dt):
    return N.Var(L, name, dt)


def binop(op, a, b):
    return N.Binary(L, op, a, b, a.dtype)


def compare(op, a, b):
    return N.Compare(L, op, a, b, T.bool_)


def cast(value, dt):
    return N.Cast(L, value, dt)


def array(name, dt, ndim=1, unit=True, aligned=False):
    return N.ArrayRef(L, name, N.ArrayType(dt, ndim, "global", unit, aligned))


def load(a, *indices):
    return N.Load(L, a, indices, a.dtype)


def store(a, indices, value):
    return N.Store(L, a, tuple(indices), value)


def assign(name, value):
    return N.Assign(L, name, value)


def math_call(func, *args):
    return N.MathCall(L, func, args, T.bool_ if func in N.MATH_PREDICATES else args[0].dtype)


def global_id():
    sreg = [cast(N.Special(L, k, 0, T.int32), T.int64) for k in ("block_id", "block_dim", "thread_id")]
    return binop("add", binop("mul", sreg[0], sreg[1]), sreg[2])


def _stored(stmts):
    for s in stmts:
        if isinstance(s, N.Store):
            yield s.array.name
        for attr in ("then", "orelse", "body"):
            yield from _stored(getattr(s, attr, ()))


def kernel(name, params, body, locals_=None, facts=None):
    """params: (name, ArrayRef or DType) pairs; the body is wrapped in the kernel region."""
    ps = [N.Param(n, "array", L, type=p.type) if isinstance(p, N.ArrayRef) else N.Param(n, "scalar", L, dtype=p)
          for n, p in params]
    arrays = {n for n, p in params if isinstance(p, N.ArrayRef)}
    writes = frozenset(_stored(body))
    return N.Kernel(name, "simt", ps, dict(locals_ or {}), [N.Region(L, "kernel", body)], L,
                    writes=writes, reads=frozenset(arrays - writes), facts=dict(facts or {}))


def elementwise(name, dt_in, dt_out, make, arity=1):
    """out[i] = make(a[i], b[i], ...) for i < out.shape[0]."""
    ins = [array(n, dt_in) for n in "abc"[:arity]]
    out = array("out", dt_out)
    i = var("i", T.int64)
    body = [assign("i", global_id()),
            N.If(L, compare("lt", i, N.Shape(L, out, 0, T.int64)),
                 [store(out, [i], make(*(load(a, i) for a in ins)))], [])]
    return kernel(name, [(a.name, a) for a in ins] + [("out", out)], body, {"i": T.int64})


def axpy():
    x, y, out = array("x", T.float32, aligned=True), array("y", T.float32, aligned=True), array("out", T.float32)
    i = var("i", T.int64)
    value = binop("add", binop("mul", var("alpha", T.float32), load(x, i)), load(y, i))
    body = [assign("i", global_id()),
            N.If(L, compare("lt", i, N.Shape(L, out, 0, T.int64)), [store(out, [i], value)], [])]
    return kernel("axpy", [("alpha", T.float32), ("x", x), ("y", y), ("out", out)], body, {"i": T.int64})


# ----------------------------------------------------------------------------- host harness

_CTYPES = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
           "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
           "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "float32": ctypes.c_float,
           "float64": ctypes.c_double}
_SREGS = {"tid": "thread_id", "ctaid": "block_id", "ntid": "block_dim", "nctaid": "grid_dim"}
_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_ENGINES = []  # keep JIT engines (and their code) alive for the whole session


def _bind_libdevice_to_libm(text: str) -> None:
    for name in set(re.findall(r"@(__nv_\w+)\(", text)):
        symbol = name.removeprefix("__nv_")
        llvm.add_symbol(name, ctypes.cast(getattr(_LIBM, symbol), ctypes.c_void_p).value)


def on_host(k: N.Kernel):
    """`launch(grid, block, **args)`: runs the lowered kernel on the CPU, thread by thread."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = codegen.lower_to_llvm(k, "sm_90")
    text = re.sub(r"^target (triple|datalayout).*$", "", text, flags=re.M).replace("ptx_kernel ", "")
    text = re.sub(r"^declare .*@llvm\.nvvm\.read\.ptx\.sreg.*$", "", text, flags=re.M)
    text = re.sub(r"llvm\.nvvm\.read\.ptx\.sreg\.(\w+)\.([xyz])", r"vg.sreg.\1.\2", text)
    text += "".join(f'@"vg.{r}.{a}" = global i32 0\n'
                    f'define i32 @"vg.sreg.{r}.{a}"() {{\n  %v = load i32, ptr @"vg.{r}.{a}"\n  ret i32 %v\n}}\n'
                    for r in _SREGS for a in "xyz")
    _bind_libdevice_to_libm(text)
    module = llvm.parse_assembly(text)
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten())
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    _ENGINES.append(engine)
    abi = abi_params(k)
    argtypes = [ctypes.c_void_p if p.role == "ptr" else _CTYPES[p.dtype.name] for p in abi] + [ctypes.c_void_p]
    fn = ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(codegen.entry_symbol(k.name)))
    regs = {(kind, a): ctypes.c_int32.from_address(engine.get_global_value_address(f"vg.{r}.{a}"))
            for r, kind in _SREGS.items() for a in "xyz"}

    def launch(grid, block, **args):
        """Runs every thread; returns the fault record (`codegen.checks`) the run left."""
        record = np.zeros(checks.RECORD_WORDS, np.int64)
        fault_block = np.array([0, record.ctypes.data], np.int64)
        flat = []
        for p in abi:
            value = args[p.param]
            flat.append({"ptr": lambda: value.ctypes.data, "shape": lambda: value.shape[p.axis],
                         "stride": lambda: value.strides[p.axis] // value.itemsize}.get(p.role, lambda: value)())
        grid, block = (tuple(d) + (1,) * (3 - len(d)) for d in (grid, block))
        for kind, dims in (("grid_dim", grid), ("block_dim", block)):
            for a, d in zip("xyz", dims):
                regs[kind, a].value = d
        for index in itertools.product(*(range(d) for d in grid[::-1] + block[::-1])):
            for kind, ids in (("block_id", index[2::-1]), ("thread_id", index[:2:-1])):
                for a, d in zip("xyz", ids):
                    regs[kind, a].value = d
            fn(*flat, fault_block.ctypes.data)
        return record
    return launch


def run_elementwise(k, *inputs, out_dtype):
    out = np.zeros(len(inputs[0]), out_dtype)
    on_host(k)((len(out),), (1,), out=out, **dict(zip("abc", inputs)))
    return out


def same_floats(got, want):
    """Equal bit for bit up to NaN payloads (so -0.0 != 0.0)."""
    got, want = np.asarray(got), np.asarray(want, dtype=got.dtype)
    both_nan = np.isnan(got) & np.isnan(want)
    return both_nan | ((got == want) & (np.signbit(got) == np.signbit(want)))


# ----------------------------------------------------------------------------- PTX


def compile_checked(k, target="sm_90"):
    """PTX for `k`, with its LLVM verified and, where ptxas is present, assembled."""
    llvm.parse_assembly(codegen.lower_to_llvm(k, target)).verify()
    compiled = codegen.compile_to_ptx(k, target)
    assert f".target {target}" in compiled.ptx and f".entry {compiled.entry}(" in compiled.ptx
    if codegen.ptxas_available():
        assert codegen.assemble(compiled.ptx, target, optimize=False)[:4] == b"\x7fELF"
    return compiled


@pytest.mark.parametrize("target", TARGETS)
def test_axpy_compiles_for_every_target(target):
    compiled = compile_checked(axpy(), target)
    assert compiled.entry == "axpy" and compiled.target == target
    assert [p.symbol for p in compiled.abi] == ["alpha", "x", "x.shape0", "y", "y.shape0", "out", "out.shape0"]
    assert set(compiled.timings) == {"lower", "libdevice", "optimize", "emit"}
    print(f"axpy {target}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in compiled.timings.items()))


def proven(k):
    """`k` with the facts of its bounds proofs, as `safety.check` stores them."""
    proof = bounds.prove(k)
    k.facts.update(in_bounds=proof.in_bounds, bounds_preconditions=proof.preconditions)
    return k


def test_readonly_arrays_load_through_the_noncoherent_cache():
    ptx = codegen.compile_to_ptx(proven(axpy())).ptx
    assert len(re.findall(r"ld\.global\.nc\.", ptx)) == 2  # x[i] and y[i]
    assert len(re.findall(r"st\.global\.", ptx)) == 1
    out = array("out", T.float32)
    i = var("i", T.int64)
    in_place = kernel("scale", [("out", out)], [assign("i", global_id()),
                                                store(out, [i], binop("mul", load(out, i), const(2.0, T.float32)))],
                      {"i": T.int64})
    ptx = codegen.compile_to_ptx(in_place).ptx
    assert "ld.global." in ptx and "ld.global.nc" not in ptx


def test_pointer_attributes_follow_writes_facts_and_alignment():
    def param_line(k):
        return next(line for line in codegen.lower_to_llvm(k, "sm_90").splitlines() if line.startswith("define"))

    line = param_line(axpy())
    assert re.search(r"ptr addrspace\(1\) noalias readonly align 16 captures\(none\) %x", line)
    assert re.search(r"ptr addrspace\(1\) %out", line)  # written, no alias proof: no noalias
    proven = axpy()
    proven.facts["noalias"] = True  # what the launch-time alias check establishes
    assert re.search(r"ptr addrspace\(1\) noalias %out", param_line(proven))


_COLD_SCRIPT = f"""
import hashlib, sys, time
sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
from test_codegen import axpy
from verdigris import codegen
k = axpy()
start = time.perf_counter()
compiled = codegen.compile_to_ptx(k, "sm_90")
ptx_done = time.perf_counter()
cubin = codegen.assemble(compiled.ptx, "sm_90") if codegen.ptxas_available() else b""
done = time.perf_counter()
print(hashlib.sha256(compiled.ptx.encode()).hexdigest())
print(f"cold compile_to_ptx {{(ptx_done - start) * 1e3:.1f}} ms "
      + str({{k: round(v * 1e3, 2) for k, v in compiled.timings.items()}})
      + f", ptxas {{(done - ptx_done) * 1e3:.1f}} ms, total {{(done - start) * 1e3:.1f}} ms")
"""


def test_identical_input_gives_identical_ptx_in_this_and_a_fresh_process():
    first, second = codegen.compile_to_ptx(axpy()), codegen.compile_to_ptx(axpy())
    assert first.ptx == second.ptx and first == second
    fresh = subprocess.run([sys.executable, "-c", _COLD_SCRIPT], capture_output=True, text=True, check=True)
    digest, timing = fresh.stdout.splitlines()
    assert digest == hashlib.sha256(first.ptx.encode()).hexdigest()
    print(timing)  # the cold cost of a first compile, imports excluded


# ----------------------------------------------------------------------------- kernels run on the host


def test_axpy_on_host(rng):
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n + 5, np.nan, np.float32)  # the tail is beyond out.shape[0] as passed
    on_host(axpy())((8,), (128,), alpha=np.float32(2.5).item(), x=x, y=y, out=out[:n])
    assert np.array_equal(out[:n], np.float32(2.5) * x + y)  # no contraction: mul then add
    assert np.isnan(out[n:]).all()


def test_strided_2d_views(rng):
    a, b, out = array("a", T.float64, 2, unit=False), array("b", T.float64, 2, unit=False), array("out", T.float64, 2)
    r, c = var("r", T.int64), var("c", T.int64)
    body = [assign("r", cast(N.Special(L, "block_id", 0, T.int32), T.int64)),
            assign("c", cast(N.Special(L, "thread_id", 0, T.int32), T.int64)),
            store(out, [r, c], binop("sub", load(a, r, c), binop("mul", const(3.0, T.float64), load(b, c, r))))]
    k = kernel("strided", [("a", a), ("b", b), ("out", out)], body, {"r": T.int64, "c": T.int64})
    compile_checked(k)
    rows, cols = 5, 7
    va = rng.standard_normal((20, 30))[1::2, ::3][:rows, :cols]
    vb = rng.standard_normal((40, 50))[::-3, 2::2].T[:cols, :rows]  # negative, transposed strides
    result = np.full((rows, cols), np.nan)
    on_host(k)((rows,), (cols,), a=va, b=vb, out=result)
    assert np.array_equal(result, va - 3.0 * vb.T)


def _range_kernel(dt, step_is_const, step_value=None):
    """out = [iterations, sum of the values, the loop variable afterwards] of a range with a break."""
    out = array("out", T.int64)
    v, count, total = var("v", dt), var("count", T.int64), var("total", T.int64)
    step = const(step_value, dt) if step_is_const else var("step", dt)
    loop = N.For(L, "v", var("start", dt), var("stop", dt), step, [
        N.If(L, compare("eq", v, var("brk", dt)), [N.Break(L)], []),
        assign("count", binop("add", count, const(1, T.int64))),
        assign("total", binop("add", total, cast(v, T.int64)))])
    body = [assign("count", const(0, T.int64)), assign("total", const(0, T.int64)), assign("v", const(7, dt)),
            loop, store(out, [const(0, T.int64)], count), store(out, [const(1, T.int64)], total),
            store(out, [const(2, T.int64)], cast(v, T.int64))]
    params = [("start", dt), ("stop", dt)] + ([] if step_is_const else [("step", dt)]) + [("brk", dt), ("out", out)]
    return kernel("ranged", params, body, {"v": dt, "count": T.int64, "total": T.int64})


def _python_range(start, stop, step, brk):
    count = total = 0
    v = 7
    for v in range(start, stop, step) if step else ():
        if v == brk:
            break
        count, total = count + 1, _wrap(total + v, T.int64)
    return [count, total, v]


RANGES = {  # dtype -> (start, stop, step, break value) cases
    T.int32: [(0, 10, 1, 99), (10, 0, -1, 99), (10, -7, -3, 99), (10, -7, -3, 4), (0, 10, 3, 99), (5, 5, 1, 99),
              (0, 10, 0, 99), (2**31 - 6, 2**31 - 1, 2, 99), (-2**31 + 5, -2**31, -2, 99), (-5, 2**31 - 1, 2**30, 99),
              (2**31 - 1, -2**31, -2**31, 99), (3, 100, 7, 45)],
    T.uint8: [(250, 255, 3, 0), (0, 255, 100, 0), (10, 20, 1, 15), (3, 3, 1, 0), (255, 0, 1, 0)],
    T.int64: [(-2**63, 2**63 - 1, 2**62, 0), (100, -100, -37, 0), (0, 5, 1, 3)],
}


@pytest.mark.parametrize("dt", list(RANGES), ids=lambda d: d.name)
def test_for_follows_python_range_with_runtime_step_and_break(dt):
    run = on_host(_range_kernel(dt, step_is_const=False))
    for start, stop, step, brk in RANGES[dt]:
        out = np.zeros(3, np.int64)
        run((1,), (1,), start=start, stop=stop, step=step, brk=brk, out=out)
        assert out.tolist() == _python_range(start, stop, step, brk), (start, stop, step, brk)


@pytest.mark.parametrize("step", [-3, -1, 1, 2**30])
def test_for_with_constant_step(step):
    k = _range_kernel(T.int32, step_is_const=True, step_value=step)
    compile_checked(k)
    run = on_host(k)
    for start, stop, brk in [(10, -7, 99), (-7, 10, 99), (10, -7, 4), (-7, 10, -4), (2**31 - 5, 2**31 - 1, 99),
                             (-2**31 + 5, -2**31, 99), (-2**31, 2**31 - 1, 99)]:
        if len(range(start, stop, step)) > 1000:
            continue
        out = np.zeros(3, np.int64)
        run((1,), (1,), start=start, stop=stop, brk=brk, out=out)
        assert out.tolist() == _python_range(start, stop, step, brk), (start, stop, brk)


@pytest.mark.parametrize("dt", list(RANGES), ids=lambda d: d.name)
def test_for_with_constant_step_counts_its_iterations_as_python(dt):
    """A constant step gives a loop that counts its iterations (`_trip_count`): the same values."""
    for start, stop, step, brk in RANGES[dt]:
        out = np.zeros(3, np.int64)
        on_host(_range_kernel(dt, step_is_const=True, step_value=step))((1,), (1,), start=start, stop=stop,
                                                                        brk=brk, out=out)
        assert out.tolist() == _python_range(start, stop, step, brk), (start, stop, step, brk)


def test_while_with_continue_and_nested_break():
    out = array("out", T.int64)
    i, j, acc = var("i", T.int64), var("j", T.int64), var("acc", T.int64)
    one = const(1, T.int64)
    inner = N.While(L, const(True, T.bool_), [
        assign("j", binop("add", j, one)),
        N.If(L, compare("ge", j, i), [N.Break(L)], []),
        assign("acc", binop("add", acc, const(1000, T.int64)))])
    body = [assign("i", const(0, T.int64)), assign("acc", const(0, T.int64)),
            N.While(L, compare("lt", i, var("n", T.int64)), [
                assign("i", binop("add", i, one)),
                N.If(L, compare("eq", binop("mod", i, const(3, T.int64)), const(0, T.int64)), [N.Continue(L)], []),
                assign("acc", binop("add", acc, i)),
                assign("j", const(0, T.int64)),
                inner]),
            store(out, [const(0, T.int64)], acc)]
    k = kernel("whiles", [("n", T.int64), ("out", out)], body, {"i": T.int64, "j": T.int64, "acc": T.int64})
    compile_checked(k)
    run = on_host(k)
    for n in (0, 1, 7, 20):
        want = sum(i + 1000 * (i - 1) for i in range(1, n + 1) if i % 3)
        result = np.zeros(1, np.int64)
        run((1,), (1,), n=n, out=result)
        assert result[0] == want


def test_early_exit_of_kernel_and_of_an_inlined_region(rng):
    x, out = array("x", T.float32), array("out", T.int32)
    i, v = var("i", T.int64), var("v", T.int32)
    body = [assign("i", global_id()),
            N.If(L, compare("ge", i, var("n", T.int64)), [N.Exit(L, "kernel"), store(out, [i], const(5, T.int32))], []),
            N.Region(L, "sign", [
                N.If(L, compare("lt", load(x, i), const(0.0, T.float32)),
                     [assign("v", const(-1, T.int32)), N.Exit(L, "sign"), assign("v", const(99, T.int32))], []),
                assign("v", const(1, T.int32))]),
            store(out, [i], v)]
    k = kernel("exits", [("n", T.int64), ("x", x), ("out", out)], body, {"i": T.int64, "v": T.int32})
    compile_checked(k)
    xs = rng.standard_normal(64).astype(np.float32)
    result = np.full(64, 7, np.int32)
    on_host(k)((2,), (32,), n=50, x=xs, out=result)
    assert np.array_equal(result[:50], np.where(xs[:50] < 0, -1, 1)) and (result[50:] == 7).all()


def test_local_arrays_are_row_major_and_per_thread(rng):
    x, out = array("x", T.float32), array("out", T.float32)
    tmp = N.ArrayRef(L, "tmp", N.ArrayType(T.float32, 1, "local", shape=(8,)))
    grid = N.ArrayRef(L, "grid", N.ArrayType(T.int16, 2, "local", shape=(3, 4)))
    i, j, r, acc = var("i", T.int64), var("j", T.int64), var("r", T.int64), var("acc", T.float32)
    f32 = lambda e: cast(e, T.float32)  # noqa: E731
    body = [assign("i", global_id()), N.LocalAlloc(L, tmp), N.LocalAlloc(L, grid),
            N.For(L, "j", const(0, T.int64), const(8, T.int64), const(1, T.int64),
                  [store(tmp, [j], binop("mul", load(x, i), f32(j)))]),
            N.For(L, "r", const(0, T.int64), const(3, T.int64), const(1, T.int64), [
                N.For(L, "j", const(0, T.int64), const(4, T.int64), const(1, T.int64),
                      [store(grid, [r, j], cast(binop("add", binop("mul", r, const(10, T.int64)), j), T.int16))])]),
            assign("acc", const(0.0, T.float32)),
            N.For(L, "j", const(7, T.int64), const(-1, T.int64), const(-1, T.int64),
                  [assign("acc", binop("add", binop("mul", acc, const(0.5, T.float32)), load(tmp, j)))]),
            store(out, [i], binop("add", acc, f32(load(grid, const(2, T.int64), const(1, T.int64)))))]
    k = kernel("locals", [("x", x), ("out", out)], body, {"i": T.int64, "j": T.int64, "r": T.int64, "acc": T.float32})
    compile_checked(k)
    xs = rng.standard_normal(16).astype(np.float32)
    result = np.zeros(16, np.float32)
    on_host(k)((1,), (16,), x=xs, out=result)
    want = np.zeros(16, np.float32)
    for j in range(7, -1, -1):
        want = want * np.float32(0.5) + xs * np.float32(j)
    assert np.array_equal(result, want + np.float32(21))


# ----------------------------------------------------------------------------- integer semantics


def _wrap(value, dt):
    value &= (1 << dt.bits) - 1
    return value - (1 << dt.bits) if dt.is_signed and value >> (dt.bits - 1) else value


def _int_inputs(rng, dt, n=400):
    info = np.iinfo(dt.np)
    special = [0, 1, info.max, info.min, info.max - 1, 7, 3] + ([-1, -7, info.min + 1] if dt.is_signed else [])
    return np.concatenate([np.array(special, dt.np), rng.integers(info.min, info.max, n, dt.np, endpoint=True),
                           rng.integers(-9 if dt.is_signed else 0, 9, n, dt.np)])


@pytest.mark.parametrize("dt", INT_DTYPES, ids=lambda d: d.name)
def test_integer_floordiv_and_mod_floor_wrap_and_divide_by_zero_to_zero(rng, dt):
    a = _int_inputs(rng, dt)
    b = rng.permutation(_int_inputs(rng, dt))
    for op, ref in (("floordiv", lambda x, y: x // y), ("mod", lambda x, y: x % y)):
        got = run_elementwise(elementwise(op, dt, dt, lambda x, y: binop(op, x, y), 2), a, b, out_dtype=dt.np)
        want = [0 if y == 0 else _wrap(ref(x, y), dt) for x, y in zip(a.tolist(), b.tolist())]
        assert got.tolist() == want, op


@pytest.mark.parametrize("dt", INT_DTYPES, ids=lambda d: d.name)
def test_shifts_saturate_at_the_width(rng, dt):
    a = _int_inputs(rng, dt, 100)
    amounts = np.array(list(range(-3 if dt.is_signed else 0, dt.bits + 4)) + [np.iinfo(dt.np).max], dt.np)
    a, n = np.repeat(a, len(amounts)), np.tile(amounts, len(a))

    def left(x, s):
        return 0 if not 0 <= s < dt.bits else _wrap(x << s, dt)

    def right(x, s):
        return x >> s if 0 <= s < dt.bits else (-1 if x < 0 else 0)

    for op, ref in (("lshift", left), ("rshift", right)):
        got = run_elementwise(elementwise(op, dt, dt, lambda x, y: binop(op, x, y), 2), a, n, out_dtype=dt.np)
        assert got.tolist() == [ref(x, s) for x, s in zip(a.tolist(), n.tolist())], op


@pytest.mark.parametrize("dt", [T.int8, T.int32, T.int64, T.uint16, T.uint64], ids=lambda d: d.name)
def test_integer_wraps_negates_and_inverts(rng, dt):
    a, b = _int_inputs(rng, dt), rng.permutation(_int_inputs(rng, dt))
    for op, ref in (("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y)):
        got = run_elementwise(elementwise(op, dt, dt, lambda x, y: binop(op, x, y), 2), a, b, out_dtype=dt.np)
        assert got.tolist() == [_wrap(ref(x, y), dt) for x, y in zip(a.tolist(), b.tolist())], op
    for op, ref in (("neg", lambda x: -x), ("invert", lambda x: ~x)):
        got = run_elementwise(elementwise(op, dt, dt, lambda x: N.Unary(L, op, x, dt)), a, out_dtype=dt.np)
        assert got.tolist() == [_wrap(ref(x), dt) for x in a.tolist()], op


@pytest.mark.parametrize("src", INT_DTYPES + [T.bool_], ids=lambda d: d.name)
def test_integer_casts_wrap(rng, src):
    a = rng.integers(0, 2, 50).astype(bool) if src.is_bool else _int_inputs(rng, src, 100)
    for dst in INT_DTYPES + [T.float32, T.float64, T.bool_]:
        got = run_elementwise(elementwise("cast", src, dst, lambda x: cast(x, dst)), a, out_dtype=dst.np)
        if dst.is_bool:
            want = (a != 0).tolist()
        elif dst.is_float:
            want = a.astype(dst.np).tolist()  # one rounding to nearest even
        else:
            want = [_wrap(int(x), dst) for x in a.tolist()]
        assert got.tolist() == want, dst.name


# ----------------------------------------------------------------------------- float semantics

SPECIAL_FLOATS = [0.0, -0.0, 0.5, -0.5, 1.5, -2.5, np.inf, -np.inf, np.nan, 1e-30, -3e38, 2.0**31, -2.0**31 - 1,
                  2.0**63, 2.0**64, -2.0**63, 255.9, 256.0, 65535.5, -129.0, 1e300, -1e300]


def _float_inputs(rng, dt, n=300):
    spread = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 22, n)
    values = np.concatenate([np.array(SPECIAL_FLOATS), spread])
    with np.errstate(over="ignore"):
        return values.astype(dt.np)


def _saturate(x, dst):
    if math.isnan(x):
        return 0
    info = np.iinfo(dst.np)
    return int(min(max(x, info.min), info.max)) if math.isinf(x) else min(max(math.trunc(x), info.min), info.max)


@pytest.mark.parametrize("src", [T.float16, T.float32, T.float64], ids=lambda d: d.name)
def test_float_to_int_truncates_and_saturates_nan_to_zero(rng, src):
    a = _float_inputs(rng, src)
    for dst in INT_DTYPES:
        got = run_elementwise(elementwise("f2i", src, dst, lambda x: cast(x, dst)), a, out_dtype=dst.np)
        assert got.tolist() == [_saturate(x, dst) for x in a.astype(np.float64).tolist()], dst.name
    got = run_elementwise(elementwise("f2b", src, T.bool_, lambda x: cast(x, T.bool_)), a, out_dtype=np.bool_)
    assert np.array_equal(got, a != 0)  # NaN -> True, as Python's bool()


@pytest.mark.parametrize("src", [T.float16, T.float32, T.float64], ids=lambda d: d.name)
def test_float_to_float_rounds_once(rng, src):
    a = _float_inputs(rng, src)
    for dst in (T.float16, T.float32, T.float64):
        if (src, dst) == (T.float64, T.float16):
            continue  # the host needs compiler-rt's __truncdfhf2 for it (the GPU has cvt.rn.f16.f64)
        got = run_elementwise(elementwise("f2f", src, dst, lambda x: cast(x, dst)), a, out_dtype=dst.np)
        with np.errstate(over="ignore"):
            assert same_floats(got, a.astype(dst.np)).all(), dst.name


@pytest.mark.parametrize("dt", [T.float16, T.float32, T.float64], ids=lambda d: d.name)
def test_float_arithmetic_floordiv_and_mod_match_numpy(rng, dt):
    a = _float_inputs(rng, dt)
    b = np.concatenate([rng.permutation(a)[:-4], np.array([0.0, -0.0, np.inf, -np.inf], dt.np)])
    refs = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
            "floordiv": np.floor_divide, "mod": np.remainder}
    for op, ref in refs.items():
        got = run_elementwise(elementwise(op, dt, dt, lambda x, y: binop(op, x, y), 2), a, b, out_dtype=dt.np)
        with np.errstate(all="ignore"):
            want = ref(a, b)  # float16: NumPy computes in float32 and rounds, as verdigris does
        assert same_floats(got, want).all(), (op, a[~same_floats(got, want)], b[~same_floats(got, want)])


def test_float_comparisons_are_false_with_nan_except_ne(rng):
    a = _float_inputs(rng, T.float32)
    b = rng.permutation(a)
    refs = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}
    for op, ref in refs.items():
        got = run_elementwise(elementwise(op, T.float32, T.bool_, lambda x, y: compare(op, x, y), 2), a, b,
                              out_dtype=np.bool_)
        assert np.array_equal(got, ref(a, b)), op


def test_float16_constants_round_to_nearest_even():
    for value in (0.1, 1 / 3, 65519.0, 65520.0, 6e-8, 1e-8, -2.0**-25, 2.0**-25 * 1.0001):
        k = elementwise("c", T.float16, T.float16, lambda x, v=value: const(v, T.float16))
        got = run_elementwise(k, np.zeros(1, np.float16), out_dtype=np.float16)
        with np.errstate(over="ignore"):
            assert same_floats(got, np.array([value]).astype(np.float16)).all(), value


# ----------------------------------------------------------------------------- fp8


def _fp8_value(code, fmt):
    m_bits = fmt.mantissa_bits
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code & 0x7F) >> m_bits, code & ((1 << m_bits) - 1)
    if fmt.finite_only and code & 0x7F == 0x7F:
        return math.nan
    if not fmt.finite_only and exponent == (1 << (7 - m_bits)) - 1:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - fmt.bias - m_bits)
    return sign * (1 + mantissa / 2**m_bits) * 2.0 ** (exponent - fmt.bias)


def _fp8_encode_reference(x, fmt):
    """Nearest finite code by search; ties to the even code; beyond the largest: saturate."""
    if math.isnan(x):
        return 0x7F | (0x80 if math.copysign(1, x) < 0 else 0)
    sign = 0x80 if math.copysign(1, x) < 0 else 0
    grid = [Fraction(_fp8_value(c, fmt)) for c in range(fmt.max_code + 1)]
    a = Fraction(abs(x)) if math.isfinite(x) else grid[-1]
    best = min(range(len(grid)), key=lambda c: (abs(grid[c] - a), c & 1))
    return best | sign


@pytest.mark.parametrize("name", list(FP8_FORMATS))
def test_fp8_decodes_every_code_exactly(name):
    dt, fmt = T.from_name(name), FP8_FORMATS[name]
    codes = np.arange(256, dtype=np.uint8)
    got = run_elementwise(elementwise("dec", dt, T.float32, lambda x: cast(x, T.float32)), codes, out_dtype=np.float32)
    assert same_floats(got, np.array([_fp8_value(c, fmt) for c in range(256)], np.float32)).all()


@pytest.mark.parametrize("src", [T.float32, T.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(FP8_FORMATS))
def test_fp8_encodes_to_nearest_even_and_saturates(rng, name, src):
    dt, fmt = T.from_name(name), FP8_FORMATS[name]
    exact = [_fp8_value(c, fmt) for c in range(fmt.max_code + 1)]
    midpoints = [(p + q) / 2 for p, q in zip(exact, exact[1:])]
    values = np.array(exact + midpoints + [np.nextafter(m, np.inf) for m in midpoints] + SPECIAL_FLOATS
                      + list(rng.standard_normal(200) * 10.0 ** rng.integers(-5, 6, 200)))
    with np.errstate(over="ignore"):
        values = np.concatenate([values, -values]).astype(src.np)
    got = run_elementwise(elementwise("enc", src, dt, lambda x: cast(x, dt)), values, out_dtype=np.uint8)
    assert got.tolist() == [_fp8_encode_reference(x, fmt) for x in values.astype(np.float64).tolist()]


@pytest.mark.parametrize("name", list(FP8_FORMATS))
def test_fp8_constants_and_arithmetic_round_once_from_float32(rng, name):
    dt, fmt = T.from_name(name), FP8_FORMATS[name]
    for value in (-0.3, 1e6, -math.inf, 2.0**-12, fmt.max_finite * 1.03):
        k = elementwise("c", dt, dt, lambda x, v=value: const(v, dt))
        got = run_elementwise(k, np.zeros(1, np.uint8), out_dtype=np.uint8)[0]
        assert got == _fp8_encode_reference(value, fmt), value
    a, b = rng.integers(0, 256, 500, dtype=np.uint8), rng.integers(0, 256, 500, dtype=np.uint8)
    values_a, values_b = (np.array([_fp8_value(c, fmt) for c in x.tolist()], np.float32) for x in (a, b))
    for op, ref in (("add", np.add), ("mul", np.multiply), ("truediv", np.true_divide)):
        got = run_elementwise(elementwise(op, dt, dt, lambda x, y: binop(op, x, y), 2), a, b, out_dtype=np.uint8)
        with np.errstate(all="ignore"):
            exact = ref(values_a, values_b)  # float32, correctly rounded
        want = [_fp8_encode_reference(x, fmt) for x in exact.astype(np.float64).tolist()]
        nan = np.isnan(exact)
        assert np.array_equal(got[~nan], np.array(want)[~nan]) and ((got[nan] & 0x7F) == 0x7F).all(), op


# ----------------------------------------------------------------------------- math


def test_mathlib_covers_every_math_function_and_libdevice_defines_them():
    floats = set(N.MATH_FUNCS) - set(N.BIT_FUNCS)
    assert set(mathlib.LIBDEVICE_FUNCS) | set(mathlib.INTRINSICS) | set(mathlib.PREDICATES) == floats
    assert set(N.BIT_FUNCS) <= set(mathlib.INT_FUNCS)
    defined = libdevice.functions()
    for name in mathlib.LIBDEVICE_FUNCS:
        for ty in (ir.FloatType(), ir.DoubleType()):
            assert mathlib.libdevice_name(name, ty) in defined


def test_libdevice_text_holds_what_the_set_reaches_and_survives_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VERDIGRIS_CACHE_DIR", str(tmp_path))
    names = ("__nv_expf", "__nv_logf")
    libdevice.prefetch()  # parsed on a thread; the first text takes that module
    made = libdevice._make_text(names, "sm_90")
    assert libdevice._Ahead.parsed is None and libdevice._Ahead.thread is None
    defined = set(re.findall(r"^define linkonce_odr [^@]*@([\w.$]+)\(", made, re.M))
    assert set(names) <= defined and "__nv_sinf" not in defined and "__nv_exp" not in defined
    assert not re.search(r"^define (?!linkonce_odr)", made, re.M)
    assert len(list(tmp_path.iterdir())) == 1
    assert libdevice._make_text(names, "sm_90") == made  # from the disk cache


def _all_math_kernel(dt):
    """out[k * n + i] = the k-th math function of (a[i], b[i], c[i])."""
    a, b, c, out = (array(n, dt) for n in ("a", "b", "c", "out"))
    i, n = var("i", T.int64), N.Shape(L, a, 0, T.int64)
    body = [assign("i", global_id())]
    floats = sorted((f, arity) for f, arity in N.MATH_FUNCS.items() if f not in N.BIT_FUNCS)
    for k, (func, arity) in enumerate(floats):
        args = [load(x, i) for x in (a, b, c)[:arity]]
        value = math_call(func, *args)
        if func in N.MATH_PREDICATES:
            value = cast(value, dt)
        body.append(store(out, [binop("add", binop("mul", const(k, T.int64), n), i)], value))
    return kernel(f"math_{dt.name}", [("a", a), ("b", b), ("c", c), ("out", out)], body, {"i": T.int64})


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt", [T.float32, T.float64, T.float16, T.bfloat16, T.float8_e4m3fn], ids=lambda d: d.name)
def test_every_math_function_compiles_to_self_contained_ptx(dt, target):
    ptx = compile_checked(_all_math_kernel(dt), target).ptx
    assert "__nv_" not in ptx and ".extern" not in ptx  # libdevice linked and inlined
    assert not re.search(r"\ssqrt\.approx", ptx)  # __CUDA_PREC_SQRT reflects to 1 (rsqrt is approximate)


NUMPY_MATH = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": np.vectorize(math.erf), "erfc": np.vectorize(math.erfc), "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "round": np.rint, "abs": np.abs, "isnan": np.isnan, "isinf": np.isinf,
    "isfinite": np.isfinite, "pow": np.power, "atan2": np.arctan2, "min": np.fmin, "max": np.fmax,
    "copysign": np.copysign, "fmod": np.fmod, "hypot": np.hypot,
    "fma": np.vectorize(lambda x, y, z: float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))),
}
EXACT = {"floor", "ceil", "trunc", "round", "abs", "isnan", "isinf", "isfinite", "min", "max", "copysign", "sqrt",
         "fmod"}
DOMAINS = {"log": (1e-3, 1e3), "log2": (1e-3, 1e3), "log10": (1e-3, 1e3), "log1p": (-0.9, 1e3), "sqrt": (0, 1e4),
           "rsqrt": (1e-3, 1e4), "asin": (-1, 1), "acos": (-1, 1), "acosh": (1, 1e3), "atanh": (-0.99, 0.99),
           "pow": (0.1, 4), "exp": (-30, 30), "exp2": (-30, 30), "expm1": (-30, 30), "sinh": (-20, 20),
           "cosh": (-20, 20)}


@pytest.mark.parametrize("dt", [T.float32, T.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("func", sorted(set(N.MATH_FUNCS) - {"rsqrt", *N.BIT_FUNCS}))
def test_math_function_maps_to_the_right_operation(rng, func, dt):
    """On the host libm stands in for libdevice: this checks the name -> function mapping."""
    arity = N.MATH_FUNCS[func]
    lo, hi = DOMAINS.get(func, (-50, 50))
    args = [rng.uniform(lo, hi, 200).astype(dt.np) for _ in range(arity)]
    if func in EXACT:  # halfway cases, NaNs, infinities, signed zeros
        extra = np.array([0.5, -0.5, 1.5, 2.5, -2.5, -0.0, 0.0, np.nan, np.inf, -np.inf], dt.np)
        args = [np.concatenate([x, rng.permutation(extra)]) for x in args]
    out_dt = T.bool_ if func in N.MATH_PREDICATES else dt
    got = run_elementwise(elementwise(func, dt, out_dt, lambda *xs: math_call(func, *xs), arity), *args,
                          out_dtype=out_dt.np)
    with np.errstate(all="ignore"):
        want = NUMPY_MATH[func](*args)
    if func in ("min", "max"):  # IEEE minNum/maxNum leave the sign of a zero result open
        assert np.array_equal(got, want, equal_nan=True)
    elif func in EXACT:
        assert same_floats(got.astype(dt.np), np.asarray(want).astype(dt.np)).all()
    else:
        np.testing.assert_allclose(got, want, rtol=4e-6 if dt is T.float32 else 1e-13, atol=1e-30)


@pytest.mark.parametrize("dt", [T.int8, T.int32, T.int64, T.uint8, T.uint32], ids=lambda d: d.name)
def test_integer_abs_min_max(rng, dt):
    a, b = _int_inputs(rng, dt), rng.permutation(_int_inputs(rng, dt))
    got = run_elementwise(elementwise("abs", dt, dt, lambda x: math_call("abs", x)), a, out_dtype=dt.np)
    assert got.tolist() == [_wrap(abs(x), dt) for x in a.tolist()]  # abs(INT_MIN) wraps
    for func, ref in (("min", min), ("max", max)):
        got = run_elementwise(elementwise(func, dt, dt, lambda x, y: math_call(func, x, y), 2), a, b, out_dtype=dt.np)
        assert got.tolist() == [ref(x, y) for x, y in zip(a.tolist(), b.tolist())]


# ----------------------------------------------------------------------------- laziness, bool, errors


def _guarded(make_arm):
    """out[i] = arm(i) if i < n else -1.0, and (i < n and arm(i) > 0) as a second output."""
    x, out, flag = array("x", T.float32), array("out", T.float32), array("flag", T.bool_)
    i = var("i", T.int64)
    inside = compare("lt", i, var("n", T.int64))
    body = [assign("i", global_id()),
            store(out, [i], N.Select(L, inside, make_arm(x, i), const(-1.0, T.float32), T.float32)),
            store(flag, [i], N.Logical(L, "and", inside, compare("gt", make_arm(x, i), const(0.0, T.float32)),
                                       T.bool_))]
    return kernel("guarded", [("n", T.int64), ("x", x), ("out", out), ("flag", flag)], body, {"i": T.int64})


@pytest.mark.parametrize("arm, lazy, reference", [
    (lambda x, i: load(x, i), True, lambda xs, idx: xs),
    (lambda x, i: math_call("exp", cast(i, T.float32)), True, lambda xs, idx: np.exp(idx.astype(np.float32))),
    (lambda x, i: binop("mul", cast(i, T.float32), const(0.5, T.float32)), False, lambda xs, idx: idx * 0.5),
], ids=["load", "math", "cheap"])
def test_select_and_logical_evaluate_only_what_they_need(rng, arm, lazy, reference):
    k = _guarded(arm)
    text = codegen.lower_to_llvm(k, "sm_90")
    assert ("select.then:" in text and "and.then:" in text) == lazy
    assert (" select i1 " in text) == (not lazy)
    compile_checked(k)
    xs = rng.standard_normal(64).astype(np.float32)
    out, flag = np.zeros(64, np.float32), np.zeros(64, np.bool_)
    on_host(k)((1,), (64,), n=40, x=xs, out=out, flag=flag)
    idx = np.arange(64)
    values = reference(xs, idx)
    np.testing.assert_allclose(out, np.where(idx < 40, values, -1.0), rtol=1e-6)
    assert np.array_equal(flag, (idx < 40) & (values > 0))


def test_bool_arrays_and_scalars_are_bytes_in_memory(rng):
    a, out = array("a", T.bool_), array("out", T.bool_)
    i = var("i", T.int64)
    value = N.Logical(L, "or", N.Unary(L, "not", load(a, i), T.bool_), var("flip", T.bool_), T.bool_)
    k = kernel("bools", [("a", a), ("flip", T.bool_), ("out", out)], [assign("i", global_id()), store(out, [i], value)],
               {"i": T.int64})
    compile_checked(k)
    xs = rng.integers(0, 2, 32).astype(np.bool_)
    for flip in (False, True):
        result = np.zeros(32, np.bool_)
        on_host(k)((1,), (32,), a=xs, flip=flip, out=result)
        assert np.array_equal(result.view(np.uint8), (~xs | flip).view(np.uint8))


def test_scalar_parameter_assigned_in_the_body():
    out = array("out", T.int32)
    n = var("n", T.int32)
    body = [assign("n", binop("mul", n, const(3, T.int32))), store(out, [const(0, T.int64)], n)]
    k = kernel("reassign", [("n", T.int32), ("out", out)], body, {"n": T.int32})
    result = np.zeros(1, np.int32)
    on_host(k)((1,), (1,), n=14, out=result)
    assert result[0] == 42


@pytest.mark.parametrize("name, symbol", [("axpy", "axpy"), ("_k", "_k"), ("_", "k_"), ("noyau_\u00e9", "noyau__u00e9"),
                                          ("\u03bb", "_u03bb")])
def test_entry_symbol_is_a_valid_ptx_identifier(name, symbol):
    k = elementwise(name, T.float32, T.float32, lambda x: x)
    assert codegen.entry_symbol(name) == symbol
    compiled = compile_checked(k)
    assert compiled.entry == symbol


def test_unknown_target_is_a_compile_error():
    with pytest.raises(CompileError, match="unknown target 'sm_75'"):
        codegen.compile_to_ptx(axpy(), "sm_75")


def test_unsupported_math_and_operators_point_at_the_node():
    bad = elementwise("bad", T.int32, T.int32, lambda x: math_call("exp", x))
    with pytest.raises(CompileError, match=r"exp\(\) is not defined on int32"):
        codegen.lower_to_llvm(bad, "sm_90")
    bad = elementwise("bad", T.float32, T.float32, lambda x, y: binop("lshift", x, y), 2)
    with pytest.raises(CompileError, match="operator 'lshift' is not defined on float32"):
        codegen.lower_to_llvm(bad, "sm_90")
    inconsistent = axpy()
    inconsistent.writes = frozenset()  # its pointers would be readonly: storing through one is UB
    with pytest.raises(CompileError, match="store to 'out'"):
        codegen.lower_to_llvm(inconsistent, "sm_90")


# ----------------------------------------------------------------------------- through the frontend


def test_frontend_axpy_compiles_and_runs(rng):
    from verdigris.examples.axpy import axpy as axpy_kernel

    n = 300
    x, y, out = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    k = axpy_kernel.specialize(2.5, x, y, out)
    compiled = compile_checked(k)
    assert len(re.findall(r"ld\.global\.nc\.", compiled.ptx)) == 2
    on_host(k)((3,), (128,), alpha=2.5, x=x, y=y, out=out)
    assert np.array_equal(out, np.float32(2.5) * x + y)


# ----------------------------------------------------------------------------- atomics

ATOMIC_CASES = [(op, dt) for dt in (T.int32, T.int64, T.uint32, T.uint64, T.float32, T.float64)
                for op in N.ATOMIC_OPS if not (dt.is_float and op in ("and", "or", "xor"))] + \
               [("add", T.float16)]  # bfloat16: on the GPU (tests/gpu/test_atomics_gpu.py)


def _atomic_kernel(op, dt):
    """Thread t: olds[t] = atomic_<op>(a, t % 5, values[t] (, compares[t]))."""
    a, values, compares, olds = array("a", dt), array("values", dt), array("compares", dt), array("olds", dt)
    t = var("t", T.int64)
    index = binop("mod", t, const(5, T.int64))
    at = N.Atomic(L, op, a, (index,), load(values, t), load(compares, t) if op == "cas" else None, dt)
    body = [assign("t", global_id()), assign("old", at), store(olds, [t], var("old", dt))]
    k = kernel(f"atomic_{op}", [("a", a), ("values", values), ("compares", compares), ("olds", olds)], body,
               {"t": T.int64, "old": dt})
    k.writes = frozenset({"a", "olds"})
    return k


@pytest.mark.parametrize("op,dt", ATOMIC_CASES, ids=lambda v: getattr(v, "name", v))
def test_atomics_match_the_cpu_backend(op, dt, rng):
    from verdigris import cpu

    k = _atomic_kernel(op, dt)
    for target in ("sm_80", "sm_90a"):
        compile_checked(k, target)
    n = 40
    if dt.is_float:
        values = rng.choice([-2.5, -1.0, -0.0, 0.0, 0.5, 3.0, np.nan], n)
    else:
        values = rng.integers(0, 7, n) if dt.is_signed is False else rng.integers(-3, 4, n)
    np_dt = np.dtype(dt.np)
    start = values[:5].astype(np_dt)
    compares = np.concatenate([start, values[:n - 5]]).astype(np_dt)  # some cas calls match
    inputs = dict(values=values.astype(np_dt), compares=compares)
    got = dict(a=start.copy(), olds=np.zeros(n, np_dt))
    on_host(k)((2,), (n // 2,), **inputs, **got)
    want = dict(a=start.copy(), olds=np.zeros(n, np_dt))
    cpu.run_simt(k, (2, 1, 1), (n // 2, 1, 1), {**inputs, **want})
    for name in ("a", "olds"):
        if op in ("max", "min") and dt.is_float:  # maxNum/minNum may pick either signed zero
            assert np.array_equal(got[name], want[name], equal_nan=True)
        else:
            assert same_floats(got[name], want[name]).all() if dt.is_float else np.array_equal(got[name], want[name])
