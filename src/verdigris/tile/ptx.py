"""Inline PTX for what LLVM has no intrinsic for: tensor-core, async-copy and mbarrier ops.

Takes: an `Emitter` (module + builder) and LLVM values. Gives one function per instruction
family: `ldmatrix`, `mma_sync`, `wgmma` (operands in shared memory, or A in registers: `wgmma_ra`;
+ `wgmma_fence`, `wgmma_commit`, `wgmma_wait`), `mbarrier_init`/`arrive`/`arrive_expect_tx`/
`wait`, `tma_load` and `tma_store` (1-5-d boxes; `bulk_commit`, `bulk_wait_read`),
`cp_async`, `cp_async_commit`, `cp_async_wait` (sm_80's per-thread copies), `fence_proxy_async`,
`fence_mbarrier_init`, `named_barrier`, `setmaxnreg`, `cvt_tf32`,
`cvt_fp8x2`, `pack_half2`, `shared_address`.

Guarantees: every instruction that reads or writes memory, or synchronizes, is emitted as
`asm sideeffect` with a memory clobber, so LLVM neither drops, merges nor moves memory
accesses across it. Shared-memory operands are 32-bit shared-window addresses ("r").
Identical calls give identical assembly text (the PTX stays deterministic).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.dtypes import FLOAT, I1, I16, I32, I64


def _asm(em, ret: ir.Type, text: str, constraints: str, args: list, side_effect: bool = True):
    fn = ir.InlineAsm(ir.FunctionType(ret, [a.type for a in args]), text, constraints,
                      side_effect=side_effect)
    return em.b.call(fn, args)


def _fields(em, value, n: int) -> list:
    return [em.b.extract_value(value, i) for i in range(n)]


def shared_address(b, pointer: ir.Value) -> ir.Value:
    """The 32-bit shared-window address of a `ptr addrspace(3)` (an i32 is one already)."""
    return pointer if pointer.type == I32 else b.trunc(b.ptrtoint(pointer, I64), I32)


# ----------------------------------------------------------------------------- mma.sync


def ldmatrix(em, address: ir.Value, trans: bool) -> list:
    """`ldmatrix.x4` (b16): four 8x8 matrices, lanes 8i..8i+7 giving matrix i's row
    addresses; returns the four 32-bit registers of this lane."""
    text = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 {{$0,$1,$2,$3}}, [$4];"
    out = _asm(em, ir.LiteralStructType([I32] * 4), text, "=r,=r,=r,=r,r,~{memory}", [address])
    return _fields(em, out, 4)


# (operand dtype name) -> (shape, PTX type of A and B, A registers, B registers)
MMA_SYNC = {
    "bfloat16": ("m16n8k16", "bf16", 4, 2),
    "float16": ("m16n8k16", "f16", 4, 2),
    "tf32": ("m16n8k8", "tf32", 4, 2),
}


def mma_sync(em, kind: str, a: list, b: list, c: list) -> list:
    """`mma.sync.aligned.<shape>.row.col.f32.<t>.<t>.f32`: the 4 f32 accumulators of
    `c + a @ b` for one 16x8 tile."""
    shape, ptx_type, na, nb = MMA_SYNC[kind]
    d = "{$0,$1,$2,$3}"
    regs = lambda first, n: "{" + ",".join(f"${first + i}" for i in range(n)) + "}"  # noqa: E731
    text = (f"mma.sync.aligned.{shape}.row.col.f32.{ptx_type}.{ptx_type}.f32 {d}, "
            f"{regs(4, na)}, {regs(4 + na, nb)}, {regs(4 + na + nb, 4)};")
    constraints = ",".join(["=f"] * 4 + ["r"] * (na + nb) + [str(i) for i in range(4)])
    out = _asm(em, ir.LiteralStructType([FLOAT] * 4), text, constraints, a + b + c,
               side_effect=False)
    return _fields(em, out, 4)


def cvt_tf32(em, x: ir.Value) -> ir.Value:
    """float32 -> its tf32 rounding (to nearest, ties away from zero), as a float32 register:
    the b32 that `cvt.rna.tf32.f32` writes is the float32 of the tf32 value."""
    return em.b.bitcast(_asm(em, I32, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], side_effect=False), FLOAT)


FP8_CONVERSION_TARGETS = ("sm_89", "sm_90", "sm_90a")  # cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32
_FP8X2 = {"float8_e4m3fn": "e4m3x2", "float8_e5m2": "e5m2x2"}


def cvt_fp8x2(em, lo: ir.Value, hi: ir.Value, kind: str) -> ir.Value:
    """Two float32 values rounded to fp8 (to nearest-even, saturating to the largest finite
    value, as `codegen.fp8.encode`; a NaN gives a NaN, whose sign may differ from
    `encode`'s), `lo` in the low byte of the i16."""
    return em.call(f"llvm.nvvm.ff.to.{_FP8X2[kind]}.rn", I16, hi, lo)


def pack_half2(em, lo: ir.Value, hi: ir.Value, ptx_type: str) -> ir.Value:
    """Two float32 values (exactly representable) as one f16x2 / bf16x2 register."""
    return _asm(em, I32, f"cvt.rn.{ptx_type}x2.f32 $0, $1, $2;", "=r,f,f", [hi, lo],
                side_effect=False)


# ----------------------------------------------------------------------------- wgmma


def pin(em, values: list) -> list:
    """`values` in registers here: an empty side-effecting asm that outputs them, so no
    later instruction materializes them (a constant's `mov` after `wgmma.fence` would make
    ptxas serialize every wgmma of the kernel)."""
    count = len(values)
    kinds = ["=f" if v.type == FLOAT else "=r" for v in values]
    constraints = ",".join(kinds + [str(i) for i in range(count)])
    out = _asm(em, ir.LiteralStructType([v.type for v in values]), "", constraints, values)
    return _fields(em, out, count)


def wgmma_fence(em) -> None:
    _asm(em, ir.VoidType(), "wgmma.fence.sync.aligned;", "~{memory}", [])


def wgmma_commit(em) -> None:
    _asm(em, ir.VoidType(), "wgmma.commit_group.sync.aligned;", "~{memory}", [])


def wgmma_wait(em, pending: int, accumulators: list = ()) -> list:
    """`wgmma.wait_group pending`; the accumulators of the completed products pass through
    it, so no instruction reading them can be moved above the wait."""
    text = f"wgmma.wait_group.sync.aligned {pending};"
    if not accumulators:
        _asm(em, ir.VoidType(), text, "~{memory}", [])
        return []
    count = len(accumulators)
    constraints = ",".join(["=f"] * count + [str(i) for i in range(count)]) + ",~{memory}"
    out = _asm(em, ir.LiteralStructType([FLOAT] * count), text, constraints, list(accumulators))
    return _fields(em, out, count)


# operand dtype name -> (k per instruction, PTX type); transposes exist for 16-bit types only
WGMMA = {"bfloat16": (16, "bf16"), "float16": (16, "f16"), "float8_e4m3fn": (32, "e4m3"),
         "float8_e5m2": (32, "e5m2"), "tf32": (8, "tf32")}


def wgmma(em, a_type: str, b_type: str, n: int, acc: list, desc_a: ir.Value, desc_b: ir.Value,
          accumulate: ir.Value, trans_a: int, trans_b: int) -> list:
    """`wgmma.mma_async.sync.aligned.m64n<n>k<k>.f32.<a>.<b>` from two shared-memory
    descriptors: the n/2 accumulator registers of this thread after `acc + A @ B` (or
    `A @ B` when `accumulate` is false). Completes only at `wgmma_wait`."""
    k, pa = WGMMA[a_type]
    _, pb = WGMMA[b_type]
    count = len(acc)
    d = "{" + ",".join(f"${i}" for i in range(count)) + "}"
    transposes = f", {trans_a}, {trans_b}" if k == 16 else ""
    text = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${count + 2}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{pa}.{pb} {d}, ${count}, "
            f"${count + 1}, p, 1, 1{transposes};\n}}")
    constraints = ",".join(["=f"] * count + ["l", "l", "r"] + [str(i) for i in range(count)])
    out = _asm(em, ir.LiteralStructType([FLOAT] * count), text, constraints + ",~{memory}",
               [desc_a, desc_b, em.b.zext(accumulate, I32) if accumulate.type == I1 else accumulate]
               + acc)
    return _fields(em, out, count)


def wgmma_ra(em, a_type: str, b_type: str, n: int, acc: list, a_regs: list, desc_b: ir.Value,
             accumulate: ir.Value, trans_b: int) -> list:
    """`wgmma.mma_async` with A in registers: `a_regs` are this thread's four 32-bit words
    of the m64 x k A fragment (`register_a`: two 16-bit elements each, the layout of
    mma.sync's A, or four fp8), B from a shared-memory descriptor (`trans_b`: 16-bit
    types only)."""
    k, pa = WGMMA[a_type]
    _, pb = WGMMA[b_type]
    count = len(acc)
    d = "{" + ",".join(f"${i}" for i in range(count)) + "}"
    a = "{" + ",".join(f"${count + i}" for i in range(4)) + "}"
    transpose = f", {trans_b}" if k == 16 else ""
    text = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${count + 5}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{pa}.{pb} {d}, {a}, ${count + 4}, "
            f"p, 1, 1{transpose};\n}}")
    constraints = ",".join(["=f"] * count + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(count)])
    out = _asm(em, ir.LiteralStructType([FLOAT] * count), text, constraints + ",~{memory}",
               list(a_regs) + [desc_b, em.b.zext(accumulate, I32) if accumulate.type == I1 else accumulate]
               + acc)
    return _fields(em, out, count)


# ----------------------------------------------------------------------------- mbarrier, TMA


def mbarrier_init(em, bar: ir.Value, count: int) -> None:
    _asm(em, ir.VoidType(), "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
         [bar, ir.Constant(I32, count)])


def fence_mbarrier_init(em) -> None:
    """Makes mbarrier initializations visible to the async proxy (the copy engine)."""
    _asm(em, ir.VoidType(), "fence.mbarrier_init.release.cluster;", "~{memory}", [])


def fence_proxy_async(em, space: str = "shared::cta") -> None:
    """Orders this thread's ordinary writes to `space` before later async-proxy accesses
    (wgmma and TMA reads of shared memory; TMA stores to global memory) once a barrier
    follows."""
    _asm(em, ir.VoidType(), f"fence.proxy.async.{space};", "~{memory}", [])


def mbarrier_arrive(em, bar: ir.Value) -> None:
    _asm(em, ir.VoidType(), "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", [bar])


def mbarrier_arrive_expect_tx(em, bar: ir.Value, nbytes: int) -> None:
    _asm(em, ir.VoidType(), "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
         "r,r,~{memory}", [bar, ir.Constant(I32, nbytes)])


WAIT_LIMIT = 1 << 28  # polls of an mbarrier before a wait counts as a deadlock


def mbarrier_wait(em, bar: ir.Value, parity: ir.Value) -> None:
    """Spin until the phase of `bar` with parity `parity` (0 or 1, i32) has completed. A
    wait that polls WAIT_LIMIT times (seconds: far beyond any real wait) traps, so a
    pipeline that can never make progress fails its launch instead of hanging the GPU."""
    text = ("{\n.reg .pred done;\n.reg .b32 polls;\nmov.b32 polls, 0;\nvg_wait_${:uid}:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
            "@done bra vg_waited_${:uid};\nadd.u32 polls, polls, 1;\n"
            f"setp.lt.u32 done, polls, {WAIT_LIMIT};\n"
            "@done bra vg_wait_${:uid};\ntrap;\nvg_waited_${:uid}:\n}")
    _asm(em, ir.VoidType(), text, "r,r,~{memory}", [bar, parity])


def tma_load(em, dst: ir.Value, tensor_map: ir.Value, coords: list, bar: ir.Value) -> None:
    """`cp.async.bulk.tensor.<n>d` of the box at element `coords` (innermost first, i32) of
    the tensor map's array into shared memory at `dst`, completing its bytes on `bar`."""
    n = len(coords)
    box = ", ".join(f"${2 + i}" for i in range(n))
    text = (f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes "
            f"[$0], [$1, {{{box}}}], [${2 + n}];")
    _asm(em, ir.VoidType(), text, ",".join(["r", "l"] + ["r"] * n + ["r", "~{memory}"]),
         [dst, tensor_map, *coords, bar])


def tma_store(em, src: ir.Value, tensor_map: ir.Value, coords: list, reduce: str | None = None) -> None:
    """`cp.async.bulk.tensor.<n>d` global <- shared: the box at `src` to element `coords`
    (innermost first) of the tensor map's array; parts outside the array are not written.
    With `reduce` ("add"), `cp.reduce.async.bulk.tensor`: the box combined into the array
    (the tensor map's element type), each element atomically. Completes in this thread's
    bulk group (`bulk_commit`, `bulk_wait_read`)."""
    n = len(coords)
    box = ", ".join(f"${1 + i}" for i in range(n))
    copy = "cp.async.bulk.tensor" if reduce is None else "cp.reduce.async.bulk.tensor"
    op = "" if reduce is None else f".{reduce}"
    text = f"{copy}.{n}d.global.shared::cta{op}.tile.bulk_group [$0, {{{box}}}], [${1 + n}];"
    _asm(em, ir.VoidType(), text, ",".join(["l"] + ["r"] * n + ["r", "~{memory}"]),
         [tensor_map, *coords, src])


def bulk_commit(em) -> None:
    _asm(em, ir.VoidType(), "cp.async.bulk.commit_group;", "~{memory}", [])


def bulk_wait_read(em, pending: int) -> None:
    """Until at most `pending` of this thread's bulk groups still read shared memory."""
    _asm(em, ir.VoidType(), f"cp.async.bulk.wait_group.read {pending};", "~{memory}", [])


def cp_async(em, dst: ir.Value, src: ir.Value, src_bytes: ir.Value) -> None:
    """`cp.async.cg.shared.global` of one 16-byte chunk: `src_bytes` (0-16, i32) bytes
    from global address `src` (i64, 16-byte aligned) to shared address `dst` (16-byte
    aligned), the rest of the chunk zero-filled: only `src_bytes` bytes are read. Completes
    in this thread's async group (`cp_async_commit`, `cp_async_wait`)."""
    _asm(em, ir.VoidType(), "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
         [dst, src, src_bytes])


def cp_async_commit(em) -> None:
    """Closes this thread's current group of `cp_async` copies (an empty group too)."""
    _asm(em, ir.VoidType(), "cp.async.commit_group;", "~{memory}", [])


def cp_async_wait(em, pending: int) -> None:
    """Until at most `pending` of this thread's newest groups are incomplete: the copies of
    the older ones have landed, visible to this thread (to others after a barrier)."""
    _asm(em, ir.VoidType(), f"cp.async.wait_group {pending};", "~{memory}", [])


# ----------------------------------------------------------------------------- warp groups


def named_barrier(em, barrier_id, threads: int, arrive: bool = False) -> None:
    """`bar.sync id, threads`: a barrier among `threads` threads (whole warps) only; `id`
    an int or an i32 value (uniform over each warp). `arrive`: `bar.arrive`, which counts
    this warp's threads towards the barrier without waiting for it (the producer's side of
    a producer/consumer barrier)."""
    op = "bar.arrive" if arrive else "bar.sync"
    if isinstance(barrier_id, int):
        _asm(em, ir.VoidType(), f"{op} {barrier_id}, {threads};", "~{memory}", [])
    else:
        _asm(em, ir.VoidType(), f"{op} $0, {threads};", "r,~{memory}", [barrier_id])


def setmaxnreg(em, registers: int, increase: bool) -> None:
    """`setmaxnreg.inc/dec`: this warpgroup's register budget per thread (all its warps run it)."""
    _asm(em, ir.VoidType(), f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {registers};",
         "~{memory}", [])
