"""The operations of the typed kernel IR: the operators, functions, warp operations and
scopes that nodes name, and their semantics.

Takes: nothing. Gives: the vocabularies `SPECIAL_KINDS`, `UNARY_OPS`, `BINARY_OPS`,
`COMPARE_OPS`, `MATH_FUNCS` (name -> arity), `MATH_PREDICATES`, `ROUNDED_FUNCS`,
`BIT_FUNCS`, `ATOMIC_OPS`, the warp operations (`SHUFFLES`, `VOTES`, `MATCHES`,
`REDUCTIONS`, `WARP_OPS`, `warp_call`), `BARRIER_SCOPES`, `BARRIER_NAMES` and
`FENCE_SCOPES`; `ir.nodes` holds them in its namespace (`N.MATH_FUNCS`), beside the nodes
that name them (`N.Binary.op`, `N.MathCall.func`, ...).

Guarantees, the semantics of the operators (both backends implement exactly these):
- Integers wrap at their width. `floordiv`/`mod` floor (Python); division by zero gives 0
  for integers (no trap), IEEE results for floats.
- `truediv` is only built on floats. `pow` on floats only.
- Float `mul` feeding `add`/`sub` may be fused into one multiply-add with a single rounding
  on the GPU when `Kernel.fma` is set (opt-in); otherwise every operation rounds, as on the
  cpu backend.
- Shifts: `lshift` by >= width gives 0; `rshift` by >= width gives 0 (unsigned) or the sign
  fill (signed); a negative shift amount is treated as >= width.
- float -> int casts truncate toward zero and saturate at the target's range; NaN -> 0.
- Comparisons involving NaN are false except `ne`.
"""
from __future__ import annotations

SPECIAL_KINDS = ("thread_id", "block_id", "block_dim", "grid_dim", "lane_id")

UNARY_OPS = ("neg", "not", "invert")  # not: bool only; invert: integers (~x)

BINARY_OPS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
              "and", "or", "xor", "lshift", "rshift")

COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")

# Math functions both backends provide. Float args of one dtype; result that dtype.
# `abs`, `min`, `max` also take integers. The frontend maps Python and `math` names here.
MATH_FUNCS = {
    # name: arity
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1,
    "sqrt": 1, "rsqrt": 1, "cbrt": 1, "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1,
    "atan": 1, "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "erf": 1, "erfc": 1, "floor": 1, "ceil": 1, "trunc": 1, "round": 1, "abs": 1,
    "isnan": 1, "isinf": 1, "isfinite": 1,
    "pow": 2, "atan2": 2, "min": 2, "max": 2, "copysign": 2, "fmod": 2, "hypot": 2,
    "fma": 3,
    "popc": 1, "clz": 1, "ffs": 1, "brev": 1,
}
MATH_PREDICATES = ("isnan", "isinf", "isfinite")  # result bool_
# Rounding and flush-to-zero variants of float32 division, sqrt and exp2, one PTX
# instruction each (cuTile's rounding_mode= / flush_to_zero=, docs/api.md "Rounding modes"):
# "<function>.<mode>[.ftz]", where `.ftz` flushes subnormal operands and results to a zero
# of their sign. The defaults (round to nearest, subnormals kept) are the plain
# Binary("truediv") and MathCall("sqrt"/"exp2"). name: arity
ROUNDED_FUNCS = {
    "div.rn.ftz": 2, "div.full": 2, "div.full.ftz": 2, "div.approx": 2, "div.approx.ftz": 2,
    "sqrt.rn.ftz": 1, "sqrt.approx": 1, "sqrt.approx.ftz": 1,
    "exp2.approx.ftz": 1,
}
# Integer bit functions (CUDA's __popc, __clz, __ffs, __brev, of any integer width): the
# number of set bits, of leading zeros, the position of the lowest set bit counted from 1
# (0 for none), all int32; the bits in reverse order, in the operand's dtype.
BIT_FUNCS = ("popc", "clz", "ffs", "brev")

ATOMIC_OPS = ("add", "sub", "max", "min", "and", "or", "xor", "exch", "cas")

SHUFFLES = ("shfl_down", "shfl_up", "shfl_xor", "shfl_idx")
VOTES = ("ballot", "any", "all")
MATCHES = ("match_any", "match_all")
# reduce_<op> -> how two lanes' values combine: a `Binary` op, or a `MathCall` (min, max)
REDUCTIONS = {"reduce_add": "add", "reduce_min": "min", "reduce_max": "max",
              "reduce_and": "and", "reduce_or": "or", "reduce_xor": "xor"}
WARP_OPS = (*SHUFFLES, *VOTES, "activemask", *MATCHES, *REDUCTIONS)


def warp_call(op: str) -> str:
    """How a kernel calls warp operation `op`, for messages: `shfl_down()`, `any_()`."""
    return f"{op}_()" if op in ("any", "all") else f"{op}()"


BARRIER_SCOPES = ("grid", "block", "warp")  # widest first
BARRIER_NAMES = {"grid": "grid_barrier", "block": "barrier", "warp": "syncwarp"}  # simt.<name>()

FENCE_SCOPES = ("block", "gpu", "system")
