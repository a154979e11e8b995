"""`print(...)` in kernels: the text (block and thread ids, exact values, sep/end), one line
per thread that runs it in thread order (SIMT) or per block (tile) on the cpu backend; a
print's read takes no part in race verdicts (a racy twin that stores what it reads is
refused) but stays bounds checked; what print refuses; and the GPU form: `vprintf`
declared and called with the format and a naturally aligned argument buffer, assembled by
ptxas for every target."""
import re

import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, simt, tile
from verdigris import types as T
from verdigris.ir import ArrayType
from verdigris.ir.printer import format_kernel


@simt.kernel
def show_values(x, big, flags, n):
    i = simt.global_id(0)
    if i < n:
        print("i =", i, "x:", x[i], big[i], flags[i] > 0, "50%")


@simt.kernel
def show_grid(out):
    t = simt.thread_id(0) + simt.thread_id(1) * simt.block_dim(0)
    out[simt.block_id(0), t] = 1.0
    print(simt.thread_id(0), simt.thread_id(1), sep=",", end=";\n")


@simt.kernel
def peek_at_neighbour(out, seen):
    """Prints an element another thread writes: a print's read decides nothing."""
    i = simt.global_id(0)
    out[i] = 2.0
    print("neighbour", out[(i + 1) % out.shape[0]])
    seen[i] = 1.0


@simt.kernel
def copy_neighbour(out, seen):
    """The racy twin: the same read, stored."""
    i = simt.global_id(0)
    out[i] = 2.0
    seen[i] = out[(i + 1) % out.shape[0]]


@simt.kernel
def print_past_the_end(x):
    i = simt.global_id(0)
    print(x[i + 1])


@tile.kernel
def show_sums(x, out, B: vg.constexpr):
    b = tile.bid(0)
    t = tile.load(x, index=(b,), shape=(B,))
    print("block sum", tile.sum(t), b)
    tile.store(out, index=(b,), tile=t)


def simt_prefix(block, thread):
    return "[block (%d, 0, 0) thread (%d, %d, 0)] " % (block, thread[0], thread[1])


def test_each_thread_prints_one_line_in_thread_order(rng, capsys):
    n = int(rng.integers(5, 60))
    x = rng.standard_normal(64).astype(np.float32)
    big = rng.standard_normal(64)
    flags = rng.integers(-3, 3, 64).astype(np.int32)
    show_values[2, 32](x, big, flags, n)
    want = "".join(simt_prefix(i // 32, (i % 32, 0)) + "i = %d x: %.9g %.17g %s 50%%\n"
                   % (i, x[i], big[i], flags[i] > 0) for i in range(n))
    assert capsys.readouterr().out == want


def test_float_values_print_back_exactly(rng, capsys):
    x = rng.standard_normal(32).astype(np.float32)
    big = rng.standard_normal(32)
    show_values[1, 32](x, big, np.zeros(32, np.int32), 32)
    lines = capsys.readouterr().out.splitlines()
    shown = [line.split("x: ")[1].split() for line in lines]
    assert [np.float32(s[0]) for s in shown] == list(x)
    assert [float(s[1]) for s in shown] == list(big)


def test_sep_end_and_two_dimensional_ids(capsys):
    out = np.full((2, 6), np.nan, np.float32)
    show_grid[2, (3, 2)](out)
    want = "".join("[block (%d, 0, 0) thread (%d, %d, 0)] %d,%d;\n" % (b, tx, ty, tx, ty)
                   for b in range(2) for ty in range(2) for tx in range(3))
    assert capsys.readouterr().out == want


def test_a_tile_kernel_prints_one_line_per_block(rng, capsys):
    x = rng.standard_normal(40).astype(np.float32)
    out = np.full(40, np.nan, np.float32)
    show_sums[5](x, out, B=8)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" block sum ")[0] for line in lines] == ["[block (%d, 0, 0)]" % b for b in range(5)]
    sums = [float(line.split()[-2]) for line in lines]
    assert np.allclose(sums, x.reshape(5, 8).astype(np.float64).sum(axis=1), rtol=1e-5)
    assert [line.split()[-1] for line in lines] == [str(b) for b in range(5)]
    assert np.array_equal(out, x)


def test_a_print_of_what_another_thread_writes_is_no_race(capsys):
    out, seen = np.full(64, np.nan, np.float32), np.zeros(64, np.float32)
    peek_at_neighbour[2, 32](out, seen)
    assert len(capsys.readouterr().out.splitlines()) == 64
    assert np.all(out == 2.0) and np.all(seen == 1.0)


def test_the_same_read_stored_is_refused_naming_two_threads():
    out, seen = np.full(64, np.nan, np.float32), np.zeros(64, np.float32)
    with pytest.raises(vg.SafetyError) as err:
        copy_neighbour[2, 32](out, seen)
    assert err.value.code.startswith("VG2") and "thread" in str(err.value)


def test_a_print_read_is_still_bounds_checked():
    with pytest.raises(vg.BoundsError, match="x"):
        print_past_the_end[1, 32](np.zeros(32, np.float32))


@pytest.mark.parametrize("body, message", [
    ("print(tile.arange(8), tile.arange(4))", "different shapes"),
    ("print(x)", "array 'x'"),
    ("print(1, file=None)", "sep= and end="),
    ("print(1, sep=2)", "string literal"),
])
def test_what_print_refuses(tmp_path, body, message):
    import importlib.util

    source = tmp_path / "kernel_print.py"
    source.write_text("import verdigris as vg\nfrom verdigris import tile\n\n@tile.kernel\n"
                      f"def k(x):\n    {body}\n")
    spec = importlib.util.spec_from_file_location("kernel_print", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(vg.CompileError, match=message) as err:
        module.k[1](np.zeros(8, np.float32))
    assert err.value.loc.line == 6


def test_the_ir_shows_the_print():
    kernel = show_grid.specialize(np.zeros((2, 6), np.float32))
    assert "print(thread_id" in format_kernel(kernel) and "sep=','" in format_kernel(kernel)


def f32(rank=1):
    return ArrayType(T.float32, rank)


def simt_llvm_and_ptx(target="sm_90"):
    kernel = show_values.specialize_types({"x": f32(), "big": ArrayType(T.float64, 1),
                                           "flags": ArrayType(T.int32, 1), "n": T.int64})
    compiled = codegen.compile_to_ptx(kernel, target)
    return compiled.llvm_ir, compiled.ptx


def test_vprintf_is_declared_and_called_with_the_format_and_its_buffer():
    llvm, ptx = simt_llvm_and_ptx()
    assert re.search(r"declare i32 @vprintf\(ptr, ptr\)", llvm)
    call = re.search(r"call i32 @vprintf\(ptr [^,]+, ptr [^)]+\)", llvm)
    assert call, llvm
    # ids as u32, then i64 (int64 i), double (the float32 promoted), double, ptr (the bool's text)
    assert re.search(r"\{ i32, i32, i32, i32, i32, i32, i64, double, double, ptr \}", llvm), llvm
    fmt = b"[block (%u, %u, %u) thread (%u, %u, %u)] i = %lld x: %.9g %.17g %s 50%%\n\0"
    assert "c\"" + "".join(chr(c) if 32 <= c < 127 and c not in b'"\\' else "\\%02X" % c for c in fmt) + "\"" in llvm
    assert re.search(r"^\.extern \.func .*vprintf", ptx, re.M) and re.search(r"call(\.uni)? .*vprintf", ptx)


def test_a_tile_print_is_one_call_by_the_first_thread():
    kernel = show_sums.specialize_types({"x": f32(), "out": f32(), "B": 64})
    llvm = codegen.compile_to_ptx(kernel, "sm_90").llvm_ir
    assert llvm.count("call i32 @vprintf") == 1
    assert "{ i32, i32, i32, double, i64 }" in llvm


@tile.kernel
def show_elements(x, out, R: vg.constexpr, C: vg.constexpr):
    b = tile.bid(0)
    t = tile.load(x, index=(b, 0), shape=(R, C))
    print("t =", t, "row sum", tile.sum(t, axis=1).reshape((R, 1)) + tile.zeros((R, C), vg.float32),
          "block", b, t > 0)
    tile.store(out, index=(b, 0), tile=t)


def element_lines(x, R, C):
    blocks = x.shape[0] // R
    return ["[block (%d, 0, 0) element (%d, %d)] t = %.9g row sum %.9g block %d %s"
            % (b, i, j, x[b * R + i, j], np.float32(x[b * R + i].sum(dtype=np.float32)), b, x[b * R + i, j] > 0)
            for b in range(blocks) for i in range(R) for j in range(C)]


def test_a_tile_prints_one_line_per_element_in_row_major_order(rng, capsys):
    R, C = 2, 3  # padded to 2 x 4 inside: the padding prints nothing
    x = rng.standard_normal((6, C)).astype(np.float32)
    out = np.full_like(x, np.nan)
    show_elements[3](x, out, R=R, C=C)
    lines = capsys.readouterr().out.splitlines()
    want = element_lines(x, R, C)
    assert [line.split(" row sum")[0] for line in lines] == [line.split(" row sum")[0] for line in want]
    assert [line.split(" block ")[1] for line in lines] == [line.split(" block ")[1] for line in want]
    assert np.array_equal(out, x)


def test_a_tile_print_is_a_call_per_register_by_the_first_holder():
    kernel = show_elements.specialize_types({"x": f32(2), "out": f32(2), "R": 2, "C": 3})
    llvm = codegen.compile_to_ptx(kernel, "sm_90").llvm_ir
    assert llvm.count("call i32 @vprintf") >= 1
    assert "{ i32, i32, i32, i32, i32, double, double, i64, ptr }" in llvm
    assert "element (%u, %u)] t = %.9g row sum %.9g block %lld %s" in llvm


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", list(codegen.TARGETS))
def test_ptxas_assembles_kernels_that_print(target):
    assert codegen.assemble(simt_llvm_and_ptx(target)[1], target)[:4] == b"\x7fELF"
    kernel = show_sums.specialize_types({"x": f32(), "out": f32(), "B": 64})
    assert codegen.assemble(codegen.compile_to_ptx(kernel, target).ptx, target)[:4] == b"\x7fELF"
    kernel = show_elements.specialize_types({"x": f32(2), "out": f32(2), "R": 2, "C": 3})
    assert codegen.assemble(codegen.compile_to_ptx(kernel, target).ptx, target)[:4] == b"\x7fELF"


@simt.kernel
def show_element(x):
    i = simt.global_id(0)
    if i < x.shape[0]:
        print(x[i])


DTYPES = [vg.int8, vg.uint8, vg.int16, vg.int32, vg.uint32, vg.int64, vg.uint64,
          vg.float16, vg.bfloat16, vg.float32, vg.float64, vg.bool_]


def random_of(rng, dtype, n):
    if dtype == vg.bool_:
        return rng.random(n) < 0.5
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        return rng.integers(info.min, info.max, n, dtype=dtype.np, endpoint=True)
    return (rng.standard_normal(n) * 100).astype(dtype.np)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_every_dtype_prints_its_exact_value(rng, capsys, dtype):
    x = random_of(rng, dtype, 16)
    show_element[1, 16](x)
    values = [line.split("] ")[1] for line in capsys.readouterr().out.splitlines()]
    if dtype == vg.bool_:
        assert values == [str(bool(v)) for v in x]
    elif dtype.is_int:
        assert values == [str(int(v)) for v in x]
    else:
        assert [dtype.np.type(float(v)) for v in values] == list(x)  # exact, through float64


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_every_dtype_prints_on_the_gpu_with_its_conversion(dtype):
    kernel = show_element.specialize_types({"x": ArrayType(dtype, 1)})
    compiled = codegen.compile_to_ptx(kernel, "sm_90")
    conversion = {True: "%s"}.get(dtype == vg.bool_) or (
        ("%lld" if dtype.is_signed else "%llu") if dtype.is_int else "%.17g" if dtype.itemsize == 8 else "%.9g")
    word = "ptr" if dtype == vg.bool_ else "i64" if dtype.is_int else "double"
    assert "{ i32, i32, i32, i32, i32, i32, %s }" % word in compiled.llvm_ir
    assert conversion + "\\0A\\00" in compiled.llvm_ir
    assert codegen.assemble(compiled.ptx, "sm_90")[:4] == b"\x7fELF"
