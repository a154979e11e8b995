"""`Atomic` lowering: one indivisible read-modify-write of one element, as CUDA's atomics.

Takes: an `Emitter`, the op (`ir.nodes.ATOMIC_OPS`), the element's dtype, its address and
the operand registers (`compare` for "cas"). Gives: the element's old value, in register
form. `supports(op, dtype)` says whether an op exists for a dtype, so the caller can raise
a located `CompileError`.

Guarantees: relaxed (`monotonic`) ordering at device scope, which is what CUDA's atomicAdd
and friends do, unless the caller asks for another (the tile track's `atomic_cas`,
`atomic_xchg` and locks: `tile.locks`). Integer ops wrap; max/min are signed or unsigned by dtype; float "sub" adds
the negation; float max/min are LLVM's `fmax`/`fmin` (IEEE maxNum/minNum: a NaN operand
loses to a number), which NVPTX expands to a compare-and-swap loop where the GPU has no
instruction; float16 and bfloat16 operate on the element in its 16-bit format (the
float32 register is rounded once, exactly, since it always holds a representable value).
"cas" compares bit patterns, as the hardware and the cpu backend do: floats are
exchanged as integers of their width, so a NaN can be swapped out and -0.0 does not match
0.0.
"""
from __future__ import annotations

from llvmlite import ir

from ..types import DType
from .dtypes import mem_type, to_mem, to_reg
from .emitter import Emitter

SCOPE = 'syncscope("device")'
ORDERING = f"{SCOPE} monotonic"  # CUDA's atomicAdd: relaxed, device scope
FAIL_ORDERING = "monotonic"

# op -> atomicrmw operation, per dtype kind ("i" signed, "u" unsigned, "f" float)
_RMW = {
    "i": {"add": "add", "sub": "sub", "max": "max", "min": "min", "and": "and", "or": "or",
          "xor": "xor", "exch": "xchg"},
    "f": {"add": "fadd", "sub": "fadd", "max": "fmax", "min": "fmin", "exch": "xchg"},
}
_RMW["u"] = {**_RMW["i"], "max": "umax", "min": "umin"}


def supports(op: str, dt: DType) -> bool:
    return dt.kind in _RMW and (op == "cas" or op in _RMW[dt.kind])


def _as_bits(em: Emitter, value: ir.Value) -> ir.Value:
    """A float in memory form as the integer of its width (cas compares bits)."""
    if isinstance(value.type, ir.IntType):
        return value
    width = {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(value.type)]
    return em.b.bitcast(value, ir.IntType(width))


def atomic(em: Emitter, op: str, dt: DType, ptr: ir.Value, value: ir.Value,
           compare: ir.Value | None, order: str = "monotonic") -> ir.Value:
    """The atomic, at device scope, with LLVM's memory `order` ("monotonic": CUDA's relaxed
    atomics; "acquire", "release", "acq_rel"). A compare-and-swap carries its order (NVPTX
    emits `atom.<order>.gpu.cas`); NVPTX emits every other read-modify-write relaxed
    whatever its order says, so those take a release fence before and an acquire fence
    after (`fence.acq_rel.gpu`), the PTX memory model's release and acquire patterns."""
    b = em.b
    if op == "sub" and dt.is_float:
        value = b.fneg(value)
    operand = to_mem(b, dt, value)
    if op == "cas":
        fail = "acquire" if order in ("acquire", "acq_rel") else FAIL_ORDERING
        new, expected = _as_bits(em, operand), _as_bits(em, to_mem(b, dt, compare))
        old = b.extract_value(b.cmpxchg(ptr, expected, new, f'{SCOPE} {order}', fail), 0)
        if old.type != mem_type(dt):
            old = b.bitcast(old, mem_type(dt))
        return to_reg(b, dt, old)
    if order in ("release", "acq_rel"):
        b.fence("release", "device")
    old = b.atomic_rmw(_RMW[dt.kind][op], ptr, operand, ORDERING)
    if order in ("acquire", "acq_rel"):
        b.fence("acquire", "device")
    return to_reg(b, dt, old)
