"""`tile.mma` and `tile.dot` (and the `@` operator): the frontend's checks of a matrix
product, which it registers with the tile intrinsics (`tiles.intrinsic`).

Takes: the operand tiles (and an accumulator) the translator computes, and the precision
options. Gives: `matmul(...)`, a checked `ir.tiles.TileDot`, or for batches (3-d operands,
NumPy's matmul: a batch of one or a 2-d operand is shared by every product) the `Cat` of
one `TileDot` per batch element. Guarantees: each product's operands are
2-d with matching inner sizes and one dtype (or two fp8 formats) that tensor cores take
(tfloat32 operands become the float32 operands of a "tf32" product),
the result fits a block's registers and one step's operands its shared memory, and the
accumulator has the result's shape and dtype; else a `CompileError` at the user's line
that says what to change.
"""
from __future__ import annotations

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..ir import tiles as X
from .tile_pieces import sliced
from .tiles import (astype, broadcast_shape, broadcast_to, intrinsic, is_tile, show, tile_operand, tile_var,
                    to_shape)
from .typing import Static, is_number

# The largest products a block carries: the accumulator lives in registers (128 KiB is 128
# float32 registers per thread of 8 warps) and one step's operands in shared memory.
MAX_ACCUMULATOR_BYTES = 128 * 1024
MAX_OPERAND_BYTES = 96 * 1024
_DOT_HINT = ("tiles of float16, bfloat16, float8_e4m3fn/float8_e5m2, tfloat32 (float32 "
             "accumulator), float32 (exact, or tf32 with allow_tf32=True) or float64")


def _precision(a, input_precision, allow_tf32, tfloat32: bool, op: str, loc: Loc) -> str:
    """The rounding of the operands: "tf32" when asked for or when they were tfloat32, and
    only float32 has one."""
    asked = input_precision.value if isinstance(input_precision, Static) else input_precision
    allow = allow_tf32.value if isinstance(allow_tf32, Static) else allow_tf32
    if asked is not None and asked not in X.DOT_PRECISIONS:
        raise CompileError(f"tile.{op}(): input_precision must be one of "
                           f"{', '.join(map(repr, X.DOT_PRECISIONS))}, not {asked!r}", loc)
    if allow not in (None, True, False):
        raise CompileError(f"tile.{op}(): allow_tf32 must be a constant True or False", loc)
    if asked is not None and allow is not None and (asked == "tf32") != allow:
        raise CompileError(f"tile.{op}(): input_precision={asked!r} contradicts "
                           f"allow_tf32={allow}", loc, hint="give one of the two")
    if tfloat32 and (asked == "ieee" or allow is False):
        given = f"input_precision={asked!r}" if asked == "ieee" else "allow_tf32=False"
        raise CompileError(f"tile.{op}() of tfloat32 tiles is a TF32 product, which {given} "
                           "contradicts", loc, hint="leave it out, or multiply the float32 "
                                                    "tiles the tfloat32 ones come from exactly")
    tf32 = asked == "tf32" or allow is True or tfloat32
    return "tf32" if tf32 and a.dtype is T.float32 else "ieee"


def _tf32_operand(t):
    """A tfloat32 operand as the float32 tile a TF32 product takes: the tile it was rounded
    from where it is that conversion (the product rounds it, the same way), else itself
    converted exactly. So `x.astype(vg.tfloat32) @ y.astype(vg.tfloat32)` is the product
    `input_precision="tf32"` gives."""
    if isinstance(t, X.TileMap) and t.op == "cast":
        return t.args[0]
    return astype(t, T.float32, t.loc)


def matmul(tr, a, b, acc, input_precision, allow_tf32, op: str, loc: Loc):
    """`acc + a @ b` (`acc` None: a fresh accumulator), with the checks of `ir.tiles`: one
    `TileDot` of 2-d tiles, or for a batch (3-d) the `Cat` of one per batch element."""
    a, b = tile_operand(a, f"tile.{op}()", loc), tile_operand(b, f"tile.{op}()", loc)
    for name, t in (("a", a), ("b", b)):
        if len(t.shape) not in (2, 3):
            raise CompileError(f"tile.{op}() multiplies 2-d tiles (or batches of them, 3-d), but "
                               f"{name} has shape {show(t.shape)}", loc,
                               hint="reshape it to (rows, columns) or (batch, rows, columns)")
    if len(a.shape) == 3 or len(b.shape) == 3:
        return _batched(tr, a, b, acc, input_precision, allow_tf32, op, loc)
    return _product(a, b, acc, input_precision, allow_tf32, op, loc)


def _batched(tr, a, b, acc, input_precision, allow_tf32, op: str, loc: Loc):
    """NumPy's matmul of a batch: product i multiplies a[i] by b[i], a 2-d operand (or a
    batch of one) taking part in every product; the products one after another along
    axis 0 (each a `TileDot` of the matrices `tile_pieces.sliced` cuts out of operands
    read through variables: each computed once, and the IR stays a tree)."""
    sizes = {t.shape[0] for t in (a, b) if len(t.shape) == 3} - {1}
    if len(sizes) > 1:
        raise CompileError(f"tile.{op}(a, b) of batches of shapes {show(a.shape)} and "
                           f"{show(b.shape)}: the batch sizes differ", loc,
                           hint="give both operands one batch size, or one a batch of one "
                                "(or a 2-d tile), which every product then shares")
    batch = sizes.pop() if sizes else 1
    m, n = a.shape[-2], b.shape[-1]
    dtype = T.from_name(X.DOT_INPUTS.get(a.dtype.name, "float32"))
    if batch * m * n * dtype.itemsize > MAX_ACCUMULATOR_BYTES:
        raise CompileError(f"tile.{op}(): a batch of {batch} {m}x{n} {dtype.name} results is more "
                           f"than a block holds in registers ({MAX_ACCUMULATOR_BYTES // dtype.itemsize} "
                           "elements)", loc, hint="use smaller tiles or fewer products per block")
    if is_tile(acc) and not (len(acc.shape) <= 3 and all(
            e in (1, want) for e, want in zip(reversed(acc.shape), (n, m, batch)))):
        raise CompileError(f"tile.{op}(): acc has shape {show(acc.shape)}, but a @ b has "
                           f"shape {show((batch, m, n))}", loc)
    if batch > 1:
        a, b = _reader(tr, a, loc), _reader(tr, b, loc)
        acc = _reader(tr, acc, loc) if is_tile(acc) else (lambda value=acc: value)
    else:
        a, b, acc = (lambda value=a: value), (lambda value=b: value), (lambda value=acc: value)
    products = []
    for i in range(batch):
        product = _product(_matrix(a(), i, loc), _matrix(b(), i, loc),
                           None if acc() is None else _matrix(acc(), i, loc),
                           input_precision, allow_tf32, op, loc)
        products.append(X.Reshape(loc, product, product.dtype, (1, m, n)))
    return products[0] if batch == 1 else X.Cat(loc, tuple(products), 0, dtype, (batch, m, n))


def _reader(tr, value, loc: Loc):
    """A function giving a fresh read of `value`: of its variable, or of a new one it is
    assigned to here (so that the products of a batch share no node)."""
    if not isinstance(value, X.TileVar):
        key = tr.fresh("operand")
        tr.unit.types[key] = X.TileType(value.dtype, value.shape)
        tr.emit(N.Assign(loc, key, value))
        value = tile_var(loc, key, tr.unit.types[key])
    return lambda: tile_var(loc, value.name, value.type)


def _matrix(t, i: int, loc: Loc):
    """Matrix i of a batch (a batch of one: its matrix; a 2-d tile or less, or a scalar,
    itself: `_product` broadcasts an accumulator)."""
    if not is_tile(t) or len(t.shape) < 3:
        return t
    part = sliced(t, (i if t.shape[0] > 1 else 0, 0, 0), (1, 1, 1), (1, *t.shape[1:]), loc)
    return X.Reshape(loc, part, t.dtype, t.shape[1:])


def _product(a, b, acc, input_precision, allow_tf32, op: str, loc: Loc) -> X.TileDot:
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise CompileError(f"tile.{op}(a, b): a is {m}x{k} and b is {k2}x{n}: the inner sizes "
                           f"{k} and {k2} differ", loc,
                           hint="a (M, K) tile times a (K, N) tile; transpose one with .T")
    fp8 = ("float8_e4m3fn", "float8_e5m2")
    if T.tfloat32 in (a.dtype, b.dtype) and a.dtype is not b.dtype:
        other = "b" if a.dtype is T.tfloat32 else "a"
        raise CompileError(f"tile.{op}() of a {a.dtype.name} tile and a {b.dtype.name} tile: "
                           "tfloat32 multiplies tfloat32 only", loc,
                           hint=f"convert {other} too, {other}.astype(vg.tfloat32) (both "
                                "rounded: a TF32 product), or the other back, "
                                ".astype(vg.float32) (an exact float32 product)")
    tfloat32 = a.dtype is T.tfloat32
    if tfloat32:
        a, b = _tf32_operand(a), _tf32_operand(b)
    if a.dtype.name not in X.DOT_INPUTS or b.dtype.name not in X.DOT_INPUTS:
        bad = a.dtype if a.dtype.name not in X.DOT_INPUTS else b.dtype
        raise CompileError(f"tile.{op}() does not multiply {bad.name} tiles", loc,
                           hint=f"it takes {_DOT_HINT}; convert with .astype(...)")
    if a.dtype is not b.dtype and not (a.dtype.name in fp8 and b.dtype.name in fp8):
        raise CompileError(f"tile.{op}() of a {a.dtype.name} tile and a {b.dtype.name} tile: "
                           "both operands need one dtype", loc,
                           hint=f"convert one, e.g. b.astype(vg.{a.dtype.name})")
    dtype = T.from_name(X.DOT_INPUTS[a.dtype.name])
    if m * n * dtype.itemsize > MAX_ACCUMULATOR_BYTES:
        raise CompileError(f"tile.{op}(): a {m}x{n} {dtype.name} result is more than a block "
                           f"holds in registers ({MAX_ACCUMULATOR_BYTES // dtype.itemsize} "
                           "elements, such as 128x256)", loc, hint="use smaller tiles")
    if (m + n) * k * a.dtype.itemsize > MAX_OPERAND_BYTES:
        raise CompileError(f"tile.{op}(): operands of {m}x{k} and {k}x{n} {a.dtype.name} take "
                           f"{(m + n) * k * a.dtype.itemsize} bytes, more than the "
                           f"{MAX_OPERAND_BYTES} one step may hold in shared memory", loc,
                           hint="loop over K in smaller pieces and accumulate with tile.mma")
    if acc is not None:
        if is_number(acc) or not is_tile(acc):
            acc = to_shape(acc, dtype, (m, n), loc)
        elif acc.dtype is not dtype:
            raise CompileError(f"tile.{op}() accumulates {a.dtype.name} products in "
                               f"{dtype.name}, but acc is {acc.dtype.name}", loc,
                               hint=f"start it as tile.zeros(({m}, {n}), vg.{dtype.name}), or "
                                    f"convert: acc.astype(vg.{dtype.name})")
        acc = broadcast_to(acc, (m, n), loc) if acc.shape != (m, n) and \
            broadcast_shape([acc.shape, (m, n)], loc) == (m, n) else acc
        if acc.shape != (m, n):
            raise CompileError(f"tile.{op}(): acc has shape {show(acc.shape)}, but a @ b has "
                               f"shape {show((m, n))}", loc)
    precision = _precision(a, input_precision, allow_tf32, tfloat32, op, loc)
    return X.TileDot(loc, a, b, acc, precision, dtype, (m, n))


@intrinsic("mma", "a", "b", "acc", ("input_precision", Static(None)), ("allow_tf32", Static(None)),
           moves_tfloat32=True)
def _mma(tr, loc, a, b, acc, input_precision, allow_tf32):
    return matmul(tr, a, b, acc, input_precision, allow_tf32, "mma", loc)


@intrinsic("dot", "a", "b", ("input_precision", Static(None)), ("allow_tf32", Static(None)),
           moves_tfloat32=True)
def _dot(tr, loc, a, b, input_precision, allow_tf32):
    return matmul(tr, a, b, None, input_precision, allow_tf32, "dot", loc)
