"""Runs the tile lowering's LLVM IR on the host CPU, so that the GPU code path itself
(vector and masked loads, stores, atomics, gathers, scatters and their bounds faults,
Philox, and with cooperating threads reductions, scans and layout conversions through
shared memory) is checked without a GPU.

Takes: a tile kernel, a grid, NumPy arguments (and `num_warps=`, `dtypes=` for arrays of raw
bfloat16 bits). Gives: `run(kernel, grid, **arguments)`, which specializes the kernel for the arguments (as a
launch does: arrays whose extents and row strides are multiples of 16 on the grid), lowers it with
`tile.lower.lower` (the code the GPU would get, before LLVM's NVPTX back end), retargets
the IR to the host (address spaces dropped, the special registers read from globals the
harness sets, libdevice's `__nv_*` functions mapped to the C library, atomics' device
scope dropped), JIT-compiles it with llvmlite's MCJIT and calls it once per (block, thread)
on the arrays in place. Returns the fault record's words when a bounds fault was recorded,
else None. With `proven=True` it runs the variant a launch meeting the bounds proofs'
conditions gets (after the safety check; tiles proven inside their arrays have no masks),
and raises `GuardFails` for a launch that would get the checked one. A vector access at an
address that is not a multiple of its size, which faults on a GPU, raises `Misaligned`; an
access to global memory outside every array argument raises `OutOfBounds`.

Threads of a kernel without barriers or shuffles run one after another (first to last, or
with `reverse=True` last to first). Otherwise each thread of a block is a greenlet, and
they take turns (`_Block`): one runs until it reaches a barrier, then the next, in that
order again after each barrier: `bar.sync` waits for the block, `shfl.sync.bfly` is an
exchange through a slot per thread between two barriers of the warp, shared memory the
module's globals (blocks run one after another; dynamic shared memory one of the size the
module names). Threads that nothing orders where they
meet give different results in the two orders. Small blocks (one or two warps) keep that quick.
`Unsupported` is raised for any other NVPTX intrinsic.
"""
from __future__ import annotations

import ctypes
import functools
import re
import types

import greenlet

import numpy as np
from numpy.lib.array_utils import byte_bounds

from verdigris import types as T
from verdigris.codegen import checks
from verdigris.codegen.dtypes import NARROW_FORMATS, round_to_format
from verdigris.frontend.typing import Weak
from verdigris.ir import ArrayType, abi_params
from verdigris.runtime import speckeys


class Unsupported(Exception):
    pass


_SREGS = [f"{r}.{a}" for r in ("tid", "ctaid", "ntid", "nctaid") for a in "xyz"]
_LIBM = {"rsqrtf": None, "rsqrt": None}  # __nv_ names with no C library twin (defined below)


def _narrow_bits(name: str):
    """x -> the 16 bits of x rounded to float16/bfloat16 (once, from x's own precision),
    returned as the float whose low bits they are: half and bfloat travel in the low 16 bits
    of an SSE register on x86-64."""
    def convert(x):
        value = np.float32(round_to_format(x, *NARROW_FORMATS[name]))
        bits = value.astype(np.float16).view(np.uint16) if name == "float16" else value.view(np.uint32) >> 16
        return float(np.uint32(bits).view(np.float32))
    return convert


def _widen(x):
    return float(np.array([x], np.float32).view(np.uint32).astype(np.uint16).view(np.float16)[0])


@functools.cache
def _llvm():
    """llvmlite with the host target, and the compiler-rt conversions MCJIT cannot find."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    callbacks = [("__extendhfsf2", ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(_widen))]
    for suffix, name in (("hf", "float16"), ("bf", "bfloat16")):
        for source, ctype in (("sf", ctypes.c_float), ("df", ctypes.c_double)):
            callbacks.append((f"__trunc{source}{suffix}2",
                              ctypes.CFUNCTYPE(ctypes.c_float, ctype)(_narrow_bits(name))))
    callbacks += _callbacks()
    for name, callback in callbacks:
        llvm.add_symbol(name, ctypes.cast(callback, ctypes.c_void_p).value)
    _llvm.keep = callbacks  # the callbacks must outlive every JIT-compiled kernel
    return llvm


_COOPERATION = {"llvm.nvvm.barrier0": "vgh_barrier", "llvm.nvvm.shfl.sync.bfly.i32": "vgh_shfl_i32",
                "llvm.nvvm.shfl.sync.bfly.f32": "vgh_shfl_f32"}


def _host_ir(text: str) -> tuple:
    """(host IR, whether the threads cooperate)."""
    text = _ACCESS.sub(r"\1call void @vgh_bounded(ptr addrspace(1) \3, i64 1)\n\1\2", text)
    text = re.sub(r'@"([A-Za-z_.][\w.]*)"', r"@\1", text)  # llvmlite quotes names with dots
    text = re.sub(r'^target (triple|datalayout) = .*$', "", text, flags=re.M)
    text = re.sub(r"\s*addrspace\(\d+\)", "", text)
    text = text.replace("ptx_kernel ", "").replace('syncscope("device") ', "")
    dynamic = re.search(r"^@vg_dynamic_shared_(\d+) =", text, flags=re.M)
    if dynamic:  # the dynamic shared memory a launch gives (`tile.sharedmem.DYNAMIC_SHARED_SYMBOL`)
        text = re.sub(r"^@vg_dsmem = external global \[0 x i8\]",
                      f"@vg_dsmem = global [{dynamic.group(1)} x i8] zeroinitializer", text, flags=re.M)
    cooperates = False
    for intrinsic, callback in _COOPERATION.items():
        if f"@{intrinsic}(" in text:
            cooperates = True
            text = text.replace(f"@{intrinsic}(", f"@{callback}(")
    extra = []
    for sreg in _SREGS:
        name = sreg.replace(".", "_")
        text = re.sub(rf"^declare .*@llvm\.nvvm\.read\.ptx\.sreg\.{re.escape(sreg)}\(\).*$", "", text, flags=re.M)
        text = text.replace(f"@llvm.nvvm.read.ptx.sreg.{sreg}()", f"@vgh_{name}()")
        if sreg.startswith("tid."):  # one per OS thread: a callback
            extra.append(f"declare i32 @vgh_{name}()")
            continue
        extra.append(f"@vgh_g_{name} = global i32 0\n"
                     f"define i32 @vgh_{name}() {{\n  %v = load i32, ptr @vgh_g_{name}\n  ret i32 %v\n}}")
    for ret, name, params in re.findall(r"^declare (\w+) @__nv_(\w+)\(([^)]*)\)", text, flags=re.M):
        text = re.sub(rf"^declare .*@__nv_{name}\(.*$", "", text, flags=re.M)
        args = [p.split()[0] for p in params.split(",") if p.strip()]
        formals = ", ".join(f"{t} %a{i}" for i, t in enumerate(args))
        actuals = ", ".join(f"{t} %a{i}" for i, t in enumerate(args))
        if name in _LIBM:  # 1 / sqrt
            body = (f"  %s = call {ret} @sqrt{'f' if ret == 'float' else ''}({actuals})\n"
                    f"  %r = fdiv {ret} 1.0, %s\n  ret {ret} %r")
            extra.append(f"declare {ret} @sqrt{'f' if ret == 'float' else ''}({', '.join(args)})")
        else:
            body = f"  %r = call {ret} @{name}({actuals})\n  ret {ret} %r"
            extra.append(f"declare {ret} @{name}({', '.join(args)})")
        extra.append(f"define {ret} @__nv_{name}({formals}) {{\n{body}\n}}")
    text = _predicated_accesses(text, extra)
    leftover = re.search(r"@llvm\.nvvm\.[\w.]+", text)
    if leftover:
        raise Unsupported(f"NVPTX intrinsic {leftover.group()}")
    return text + "\n" + "\n".join(dict.fromkeys(extra)) + "\n", cooperates


_ASM = re.compile(r'call (\{[^}]*\}|\w+) asm\s+(?:sideeffect\s+)?"([^"]*)",\s*"([^"]*)"\(')


def _predicated_accesses(text: str, extra: list) -> str:
    """The tile lowering's predicated vector accesses (`@p ld.global[.nc][.vN].bB` into
    registers preset to the padding, `@p st.global[.vN].bB`: inline PTX) as calls of host
    functions that branch on the predicate, and `mov.u32 $0, N` (a rolled loop's trip
    count) as a function returning N. Any other inline assembly is `Unsupported`."""
    made: dict = {}

    def host(match) -> str:
        ret, asm = match.group(1), match.group(2)
        constant = re.fullmatch(r"mov\.u32 \$0, (\d+);", asm)  # a trip count hidden from LLVM
        if constant:
            name = made.setdefault(("mov", constant.group(1)), f"vgh_constant_{constant.group(1)}")
            extra.append(f"define i32 @{name}() {{\n  ret i32 {constant.group(1)}\n}}")
            return f"call i32 @{name}("
        found = re.search(r"(@\$\d+ )?(ld|st)\.global(?:\.nc)?(?:\.v(\d))?\.b(\d+)", asm)
        if found is None:
            raise Unsupported(f"inline assembly {asm!r}")
        plain, op, count, bits = found.group(1) is None, found.group(2), int(found.group(3) or 1), found.group(4)
        name = made.setdefault((op, count, bits, plain), f"vgh_{op}_{count}x{bits}{'_plain' if plain else ''}")
        word, vector = f"i{bits}", f"<{count} x i{bits}>"
        # an access proven inside its array has no predicate (nor padding): always taken
        head = "" if plain else ("i1 %c, " + (f"{word} %pad, " if op == "ld" else ""))
        taken = ("" if plain else f"  br i1 %c, label %{op}, label %done\n{op}:\n") \
            + f"  call void @vgh_aligned(ptr %a, i64 {count * int(bits) // 8 - 1})\n" \
            + f"  call void @vgh_bounded(ptr %a, i64 {count * int(bits) // 8})\n"
        done = "  br label %done\ndone:\n"
        if op == "ld":
            fields = "".join(f"  %e{j} = extractelement {vector} %v, i32 {j}\n  %s{j + 1} = insertvalue {ret} "
                             f"%s{j}, {word} %e{j}, {j}\n" for j in range(count)) if count > 1 else ""
            loaded = f"%s{count}" if count > 1 else "%v"
            padded = "".join(f"  %p{j + 1} = insertvalue {ret} %p{j}, {word} %pad, {j}\n" for j in range(count)) \
                if count > 1 else ""
            padding = f"%p{count}" if count > 1 else "%pad"
            result = f"  ret {ret} {loaded}\n" if plain else \
                f"{done}  %r = phi {ret} [{padding}, %entry], [{loaded}, %ld]\n  ret {ret} %r\n"
            extra.append(
                f"define {ret} @{name}({head}ptr %a) {{\nentry:\n"
                + ("" if plain else padded.replace("%p0", "undef")) + taken
                + f"  %v = load {vector if count > 1 else word}, ptr %a, align 1\n"
                + fields.replace("%s0", "undef") + result + "}")
        else:
            words = ", ".join(f"{word} %w{j}" for j in range(count))
            build = "".join(f"  %v{j + 1} = insertelement {vector} %v{j}, {word} %w{j}, i32 {j}\n"
                            for j in range(count)).replace("%v0", "undef")
            extra.append(f"define void @{name}({head}ptr %a, {words}) {{\nentry:\n{taken}{build}"
                         f"  store {vector} %v{count}, ptr %a, align 1\n{'' if plain else done}  ret void\n}}")
        return f"call {ret} @{name}("
    extra += [_ALIGNED, _BOUNDED]
    return _ASM.sub(host, text)


# Every access to global memory (a load, store, atomic, or vector access of inline PTX that
# is taken) is tested to lie within the arguments' buffers (`byte_bounds`, and the fault
# record's): the GPU would read or write another allocation, or fault; `run` raises
# `OutOfBounds`. The buffers are `vgh_ranges`' first `vgh_nranges` [start, end) pairs.
_ACCESS = re.compile(r'^(\s+)((?:%"?[\w.]+"? = )?(?:load [^,]+, |store [^,]+, |atomicrmw (?:volatile )?\w+ |cmpxchg )'
                     r'ptr addrspace\(1\) (%"?[\w.]+"?))', re.M)
MAX_RANGES = 64
_BOUNDED = f"""@vgh_ranges = global [{MAX_RANGES} x [2 x i64]] zeroinitializer
@vgh_nranges = global i64 0
declare void @vgh_outside()
define void @vgh_bounded(ptr %p, i64 %size) {{
entry:
  %a = ptrtoint ptr %p to i64
  %end = add i64 %a, %size
  %n = load i64, ptr @vgh_nranges
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %test]
  %done = icmp eq i64 %i, %n
  br i1 %done, label %outside, label %test
test:
  %lop = getelementptr [{MAX_RANGES} x [2 x i64]], ptr @vgh_ranges, i64 0, i64 %i, i64 0
  %hip = getelementptr [{MAX_RANGES} x [2 x i64]], ptr @vgh_ranges, i64 0, i64 %i, i64 1
  %l = load i64, ptr %lop
  %h = load i64, ptr %hip
  %ge = icmp uge i64 %a, %l
  %le = icmp ule i64 %end, %h
  %in = and i1 %ge, %le
  %next = add i64 %i, 1
  br i1 %in, label %inside, label %loop
outside:
  call void @vgh_outside()
  br label %inside
inside:
  ret void
}}"""


class OutOfBounds(Exception):
    pass


_OUTSIDE = [0]  # accesses outside every buffer since the last `run` began


# A GPU faults on a vector access whose address is not a multiple of its size (CUDA's
# "misaligned address"): each one the host runs is tested, and `run` raises `Misaligned`.
_ALIGNED = """declare void @vgh_misaligned()
define void @vgh_aligned(ptr %a, i64 %mask) {
entry:
  %i = ptrtoint ptr %a to i64
  %m = and i64 %i, %mask
  %bad = icmp ne i64 %m, 0
  br i1 %bad, label %fault, label %done
fault:
  call void @vgh_misaligned()
  br label %done
done:
  ret void
}"""


class Misaligned(Exception):
    pass


_MISALIGNED = [0]  # vector accesses at a misaligned address since the last `run` began


class _Block:
    """The cooperation state of the block being run: one thread runs at a time, the first
    of `sequence` (thread ids, in the order they take turns) that is not waiting at a
    barrier (of the block, or of its warp) or done; a barrier reached by all it waits for
    lets them all go on, in `sequence` order again. So the interleaving is a function of
    `sequence`: run forward and in reverse, a kernel whose threads are not ordered where
    they meet gives two results. Two exchange slots per thread for shuffles, used in turn.

    Each thread is a greenlet (its own C stack, the JIT-compiled code's frames included) that
    the scheduler, `run_threads`, switches to; a thread waiting at a barrier switches back. A
    switch costs about a microsecond, where handing the turn between OS threads cost 30."""

    def __init__(self, sequence: list):
        self.rank = {t: i for i, t in enumerate(sequence)}
        self.runnable = set(sequence)
        self.arrived: dict = {}  # barrier -> the threads waiting at it
        # shuffle slots, two sets used in turn: a thread writes a set again only two shuffles
        # later, after a barrier its warp passes once every partner has read it (one barrier
        # a shuffle, where one set needed a second)
        self.slots = ([0] * len(sequence), [0] * len(sequence))
        self.shuffles = dict.fromkeys(sequence, 0)
        self.scheduler = greenlet.getcurrent()

    def run_threads(self, body) -> None:
        """Runs `body()` as each thread of the block (`_current` the running one and this
        block), taking turns as the class doc says."""
        threads = {t: greenlet.greenlet(body) for t in self.rank}
        _current.block = self
        try:
            while self.runnable:
                tid = min(self.runnable, key=self.rank.__getitem__)
                _current.tid = tid
                threads[tid].switch()
                if threads[tid].dead:
                    self.runnable.discard(tid)
        finally:
            _current.block = None
        if any(not g.dead for g in threads.values()):
            # greenlets left suspended in the JIT-compiled code are kept: killing one raises
            # in a ctypes callback, which swallows the error and runs the kernel on
            _ABANDONED.extend(threads.values())
            waiting = {t for members in self.arrived.values() for t in members}
            raise RuntimeError(f"threads {sorted(waiting)} wait at a barrier some threads never reach")

    def sync(self, barrier, members: int) -> None:
        tid = _current.tid
        waiting = self.arrived.setdefault(barrier, set())
        waiting.add(tid)
        self.runnable.discard(tid)
        if len(waiting) == members:
            self.runnable |= self.arrived.pop(barrier)
        self.scheduler.switch()

    def barrier(self) -> None:
        self.sync("block", len(self.rank))

    def shuffle(self, value, lanes: int):
        tid = _current.tid
        slots = self.slots[self.shuffles[tid] & 1]
        self.shuffles[tid] += 1
        slots[tid] = value
        self.sync(("warp", tid // 32), 32)
        return slots[(tid & ~31) | ((tid & 31) ^ lanes)]


_current = types.SimpleNamespace(tid=0, block=None)  # the thread running, and its block
_ABANDONED: list = []


def _callbacks() -> list:
    """(symbol, ctypes callback) of what the host IR calls into Python."""
    i32, f32 = ctypes.c_int32, ctypes.c_float
    return [
        ("vgh_barrier", ctypes.CFUNCTYPE(None)(lambda: _current.block.barrier())),
        ("vgh_misaligned", ctypes.CFUNCTYPE(None)(lambda: _MISALIGNED.__setitem__(0, _MISALIGNED[0] + 1))),
        ("vgh_outside", ctypes.CFUNCTYPE(None)(lambda: _OUTSIDE.__setitem__(0, _OUTSIDE[0] + 1))),
        ("vgh_shfl_i32", ctypes.CFUNCTYPE(i32, i32, i32, i32, i32)(
            lambda mask, value, lanes, clamp: _current.block.shuffle(value, lanes))),
        ("vgh_shfl_f32", ctypes.CFUNCTYPE(f32, i32, f32, i32, i32)(
            lambda mask, value, lanes, clamp: _current.block.shuffle(value, lanes))),
        *((f"vgh_tid_{axis}", ctypes.CFUNCTYPE(i32)(lambda axis=axis: _current.tid if axis == "x" else 0))
          for axis in "xyz"),
    ]


_CTYPES = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
           "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
           "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "float32": ctypes.c_float,
           "float64": ctypes.c_double, "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16}


def _spec(value, dtype=None):
    if isinstance(value, np.ndarray):
        dtype = dtype or T.from_numpy(value.dtype)
        strides = tuple(s // value.itemsize for s in value.strides)
        return ArrayType(dtype, value.ndim, "global", value.ndim > 0 and value.strides[-1] == value.itemsize,
                         value.ctypes.data % 16 == 0, on_grid=speckeys.on_grid(value.shape, strides))
    if isinstance(value, np.generic):
        return T.from_name(value.dtype.name)
    if type(value) is float:  # as a launch specializes it: float64, weak
        return Weak()
    return T.of_python_scalar(value)


def run(kernel_fn, grid, num_warps: int | None = None, dtypes: dict | None = None, proven: bool = False,
        reverse: bool = False, **arguments):
    """`dtypes`: the DType of arrays passed as raw bits (bfloat16 as uint16). `proven`: the
    variant a launch meeting the bounds proofs' conditions runs (tiles proven inside their
    arrays unmasked; `GuardFails` where this launch does not meet them). `reverse`: the
    threads of a block take turns from the last to the first (between barriers)."""
    from verdigris.tile.lower import launch_block, lower

    llvm = _llvm()
    constexprs = {p.name for p in kernel_fn.params if p.constexpr}
    dtypes = dtypes or {}
    specs = {name: (v if name in constexprs else _spec(v, dtypes.get(name))) for name, v in arguments.items()}
    grid = tuple(grid) if isinstance(grid, tuple) else (grid,)
    grid = grid + (1,) * (3 - len(grid))
    kernel = kernel_fn.specialize_types(specs, block=None if num_warps is None else (32 * num_warps, 1, 1),
                                        grid=grid if proven else None)
    if proven:
        kernel = _as_proven(kernel_fn, kernel, grid, arguments)
    text, cooperates = _host_ir(str(lower(kernel, "sm_90")))
    module = llvm.parse_assembly(text)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    from verdigris.codegen.lower import entry_symbol

    abi = abi_params(kernel)
    values, types = [], []
    for p in abi:
        value = arguments[p.param]
        if p.role == "ptr":
            values.append(value.ctypes.data)
            types.append(ctypes.c_void_p)
        elif p.role in ("shape", "stride"):
            values.append(value.shape[p.axis] if p.role == "shape" else value.strides[p.axis] // value.itemsize)
            types.append(ctypes.c_int64)
        else:
            types.append(_CTYPES[p.dtype.name])
            values.append(np.asarray(value, p.dtype.np).item() if p.dtype.name not in ("float16", "bfloat16")
                          else int(np.asarray(value, p.dtype.np).view(np.uint16)))
    record = np.zeros(checks.RECORD_WORDS, np.int64)
    _MISALIGNED[0] = _OUTSIDE[0] = 0
    fault_block = np.array([0, record.ctypes.data], np.int64)
    buffers = [byte_bounds(v) for v in (*arguments.values(), record, fault_block) if isinstance(v, np.ndarray)]
    ranges = (ctypes.c_int64 * (2 * MAX_RANGES)).from_address(engine.get_global_value_address("vgh_ranges"))
    ranges[:2 * len(buffers)] = [int(b) for pair in buffers for b in pair]
    ctypes.c_int64.from_address(engine.get_global_value_address("vgh_nranges")).value = len(buffers)
    function = ctypes.CFUNCTYPE(None, *types, ctypes.c_void_p)(
        engine.get_function_address(entry_symbol(kernel.name)))
    sreg = {name: ctypes.c_int32.from_address(engine.get_global_value_address(f"vgh_g_{name.replace('.', '_')}"))
            for name in _SREGS if not name.startswith("tid.")}
    threads = launch_block(kernel)[0]
    for axis, n in zip("xyz", grid):
        sreg[f"nctaid.{axis}"].value = n
    sreg["ntid.x"].value, sreg["ntid.y"].value, sreg["ntid.z"].value = threads, 1, 1

    def thread():
        function(*values, fault_block.ctypes.data)

    sequence = list(range(threads))[::-1 if reverse else 1]

    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                sreg["ctaid.x"].value, sreg["ctaid.y"].value, sreg["ctaid.z"].value = x, y, z
                if not cooperates:
                    for _current.tid in sequence:
                        thread()
                    continue
                _Block(sequence).run_threads(thread)
    if _MISALIGNED[0]:
        raise Misaligned(f"{_MISALIGNED[0]} vector accesses at addresses not a multiple of their size")
    if _OUTSIDE[0]:
        raise OutOfBounds(f"{_OUTSIDE[0]} accesses outside every array")
    return record.tolist() if record[checks.RECORD_FLAG] else None


class GuardFails(Exception):
    pass


def _as_proven(kernel_fn, kernel, grid: tuple, arguments: dict):
    """`kernel` checked, as the launch `grid`, `arguments` compiles it: the variant that
    uses the bounds proofs, which this launch must pass the guard of."""
    from types import SimpleNamespace

    from verdigris import safety

    safety.check(kernel)
    names = [p.name for p in kernel_fn.params]
    values = [arguments[n] for n in names]
    infos = [SimpleNamespace(shape=v.shape) if isinstance(v, np.ndarray) else None for v in values]
    guard = safety.bounds.launch_guard(kernel, names)
    if guard is not None and not guard(values, infos, grid, (1, 1, 1)):
        raise GuardFails(f"this launch runs the checked variant: {guard.condition}")
    return checks.as_launched(kernel, checked=False)
