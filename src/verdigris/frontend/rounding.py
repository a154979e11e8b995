"""cuTile's `rounding_mode=` and `flush_to_zero=` (docs/api.md "Rounding modes"):
`tile.truediv(x, y, rounding_mode=None, flush_to_zero=False)`, the same two keywords on
`sqrt` (`tile.sqrt`, `vg.math.sqrt`) and `flush_to_zero=` on `exp2`.

Takes: the operands (scalars or tiles) and the keywords, constants: a mode is None or one
of "rn", "full", "approx" (any case, so cuTile's enum names "RN", "FULL", "APPROX" as
strings too), `flush_to_zero` a bool.
Gives: the plain IR for the defaults (round to nearest, subnormals kept: `Binary("truediv")`,
`MathCall("sqrt")`), else a `MathCall` of an `ir.nodes.ROUNDED_FUNCS` variant
("div.approx.ftz", ...), element by element over tiles.
Guarantees: any other mode is a CompileError naming those there are: the directed
roundings rz, rm, rp (not supported yet), "full" for sqrt and any mode for exp2 (PTX has
none); so are the variants on float64 (PTX has approx, full and .ftz for float32 only:
float64 always rounds to nearest). Constant operands
fold with Python's IEEE arithmetic whatever the mode.
"""
from __future__ import annotations

from ..errors import CompileError, Loc
from ..ir import nodes as N
from . import tiles
from .typing import Static, binary

MODES = {"truediv": ("rn", "full", "approx"), "sqrt": ("rn", "approx"), "exp2": ()}
_PTX_NAME = {"truediv": "div"}
KEYWORDS = {"sqrt": ("rounding_mode", "flush_to_zero"), "exp2": ("flush_to_zero",)}  # math
_APPROX_ONLY = {"exp2": "approx"}  # exp2's one PTX instruction with .ftz is ex2.approx.ftz


def variant(function: str, rounding_mode, flush_to_zero, loc: Loc) -> str | None:
    """The ROUNDED_FUNCS name for `function` ("truediv", "sqrt", "exp2") in this mode, or
    None for the default."""
    mode = rounding_mode.value if isinstance(rounding_mode, Static) else rounding_mode
    ftz = flush_to_zero.value if isinstance(flush_to_zero, Static) else flush_to_zero
    if type(ftz) is not bool:
        raise CompileError(f"flush_to_zero= takes a constant True or False, not {ftz!r}", loc)
    if mode is not None:
        modes = MODES[function]
        if not isinstance(mode, str) or mode.lower() not in modes:
            raise CompileError(
                f"{function}() has no rounding_mode={mode!r}", loc,
                hint=f"it takes rounding_mode={' or '.join(map(repr, modes))} (None: 'rn'); "
                     "the directed roundings (rz, rm, rp) are not supported yet"
                     if modes else "exp2 takes flush_to_zero= only")
        mode = mode.lower()
    if mode in (None, "rn") and not ftz:
        return None
    ptx = _PTX_NAME.get(function, function)
    return f"{ptx}.{mode or _APPROX_ONLY.get(function, 'rn')}{'.ftz' * ftz}"


def renamed(e, name: str | None, loc: Loc):
    """The scalar division or math call `e`, computed by the variant `name` (None: as it is)."""
    if name is None or not isinstance(e, (N.Binary, N.MathCall)):
        return e  # a constant, folded
    if e.dtype.bits > 32:
        raise CompileError(f"rounding_mode= and flush_to_zero= are float32's (and narrower "
                           f"floats'), not {e.dtype.name}'s", loc,
                           hint="float64 division and sqrt always round to nearest: leave "
                                "the keywords out")
    args = (e.lhs, e.rhs) if isinstance(e, N.Binary) else e.args
    call = N.MathCall(e.loc, name, args, e.dtype)
    call.weak = e.weak
    return call


@tiles.intrinsic("truediv", "x", "y", ("rounding_mode", Static(None)),
                 ("flush_to_zero", Static(False)))
def _truediv(tr, loc, x, y, rounding_mode, flush_to_zero):
    """cuTile's `truediv`: x / y, rounded as `rounding_mode` says."""
    name = variant("truediv", rounding_mode, flush_to_zero, loc)
    return tiles.elementwise(lambda a, b: renamed(binary("truediv", a, b, loc), name, loc),
                             (x, y), loc)
