"""The elementwise operations of tiles, as a table: an op's name -> how one element is
computed in registers.

Takes: a `TileMap` node and its operands' dtype. Gives: `operation(e, operand)`, a function
(emitter, the argument registers) -> the result register, which `TileLowering` applies to
every element a thread holds. Guarantees: the same arithmetic as the SIMT track's
(`codegen.arith`, `codegen.mathlib`, `codegen.casts`), but for conversions into tfloat32
(the products' own cvt, `ptx.cvt_tf32`) and `sigmoid` (rounded once); an op a dtype does
not define is a CompileError at the node.
"""
from __future__ import annotations

from llvmlite import ir

from .. import errors
from ..codegen import arith, casts, mathlib
from ..ir import nodes as N
from ..ir import tiles as X
from ..types import DType, tfloat32
from . import ptx


def _unary(em, op, src, dst, a):
    return arith.unary(em, op, src, *a)


def _binary(em, op, src, dst, a):
    return arith.binary(em, op, src, *a)


def _compare(em, op, src, dst, a):
    return arith.compare(em, op, src, *a)


def _math(em, op, src, dst, a):
    return mathlib.call(em, op, src, tuple(a))


def _cast(em, op, src, dst, a):
    """`casts.cast`, except into tfloat32 (from float32 only, the frontend converts first),
    rounded by the cvt the products' tf32 operands use; out of it is exact (one register)."""
    if dst is tfloat32:
        return ptx.cvt_tf32(em, a[0])
    return casts.cast(em, a[0], src, dst)


def _where(em, op, src, dst, a):
    return em.b.select(*a)


def _sigmoid(em, op, src, dst, a):
    """1 / (1 + exp(-x)) in float32 (float64 for float64), rounded once to `dst`."""
    from .. import types as T
    from ..codegen.dtypes import round_narrow

    wide = T.float64 if dst.bits == 64 else T.float32
    x = a[0]
    one = ir.Constant(x.type, 1.0)
    e = mathlib.call(em, "exp", wide, (em.b.fneg(x),))
    return round_narrow(em.b, dst, em.b.fdiv(one, em.b.fadd(one, e)))


_SUPPORTED = {_unary: lambda op, dt: arith.supports_unary(op, dt),
              _binary: lambda op, dt: arith.supports_binary(op, dt),
              _math: lambda op, dt: mathlib.supports(op, dt),
              _sigmoid: lambda op, dt: dt.is_float}
_OPS = {
    **{op: _unary for op in N.UNARY_OPS}, **{op: _binary for op in N.BINARY_OPS},
    **{op: _compare for op in N.COMPARE_OPS}, **{op: _math for op in (*N.MATH_FUNCS, *N.ROUNDED_FUNCS)},
    "cast": _cast, "where": _where, "sigmoid": _sigmoid,
}


def operation(e: X.TileMap, operand: DType):
    """f(emitter, argument registers) -> result register, for `e`'s op."""
    kind = _OPS.get(e.op)
    if kind is None or not _SUPPORTED.get(kind, lambda op, dt: True)(e.op, operand):
        raise errors.CompileError(f"{e.op} is not defined on {operand.name} tiles", e.loc)
    return lambda em, args: kind(em, e.op, operand, e.dtype, args)
