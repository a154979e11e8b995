"""The text form of a kernel's signature, as `verdigris compile --sig` and bundles take it.

Takes: a kernel (`@vg.kernel` function: its parameters, name and track) and a signature
such as `'f32, f32[:], f32[:, ::1], 128'`, one item per parameter. Gives
`parse_signature(kernel, text)`: the spec per parameter name, in order, that
`specialize_types` and bundles read (a `DType`, an `ArrayType`, a `Multiple` or `Narrow`
scalar, or a constexpr's Python value), and `SignatureError`, what a malformed signature
raises (the CLI reports it as a usage error, bundles as a `CompileError`).

Guarantees: every item is checked against its parameter (count, literal constexprs, known
dtypes, array axes, where `:16` and `:narrow` may stand), and a signature that breaks a
rule is refused with a message naming the parameter or the item, never a traceback.
"""
from __future__ import annotations

import ast
import inspect

from .. import types as T


class SignatureError(ValueError):
    """A signature that does not fit its kernel (the message says why)."""


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(ch, 0)
        if depth < 0:
            raise SignatureError(f"unbalanced brackets in the signature: a ')' or ']' closes "
                             f"nothing in {current + ch!r}")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if depth:
        raise SignatureError(f"unbalanced brackets in the signature: {text!r} leaves {depth} "
                         "'[' or '(' open")
    return parts + [current.strip()] if current.strip() else parts


def _dtype(name: str) -> T.DType:
    try:
        found = T.from_any(name.strip())  # "float32", "f32", "bool", "b1"
    except TypeError:
        raise SignatureError(f"unknown dtype {name.strip()!r} (use e.g. f32, float32, i64, bf16, "
                         "bool)") from None
    if found is T.tfloat32:  # no argument has it: a kernel converts its tiles into it
        raise SignatureError(f"{name.strip()!r} is a dtype of tiles only: an argument holding "
                             "TF32 values is f32")
    return found


def parse_signature(kernel, text: str) -> dict:
    """'f32, f32[:], f32[:, ::1], 128' -> a spec per parameter, in order.

    Arrays are written as NumPy-style slices, one per axis: `[:]` any stride, `[::1]` unit
    stride on the innermost axis (C-contiguous rows). Constexpr parameters take a value;
    trailing ones with defaults may be left out, as in a call.
    A tile kernel's integer or array type may end in `:16`, as Triton's signatures do: the
    integer is a multiple of 16, or the array is on the grid (extents multiples of 16
    below 2**30, row strides multiples of 16), what a launch with such values specializes
    on (`i64:16`, `bf16[:, ::1]:16`). A plain `i64` or `u64` is compiled for any value;
    `i64:narrow` (or `i64:16:narrow`) for values in int32's range only (`Param.narrow`:
    what a launch with such a value specializes on, on both tracks).
    """
    from ..frontend.typing import Multiple, Narrow
    from ..ir.nodes import ArrayType

    items = _split_top_level(text)
    params = kernel.params
    defaulted = [p for p in params[len(items):] if p.constexpr and p.default is not inspect.Parameter.empty]
    if len(items) + len(defaulted) != len(params):
        raise SignatureError(f"{kernel.__name__} has {len(params)} parameters "
                             f"({', '.join(p.name for p in params)}) but the signature gives {len(items)}")
    specs = {p.name: p.default for p in defaulted}  # trailing constexprs left out: their defaults
    for p, item in zip(params, items):
        if p.constexpr:
            try:
                specs[p.name] = ast.literal_eval(item)
            except (ValueError, SyntaxError):
                raise SignatureError(f"constexpr {p.name!r} needs a Python literal, not {item!r}") from None
            continue
        item, narrow = _narrow(item)
        item, sixteen = _divisibility(kernel, p.name, item)
        if narrow:
            dtype = _dtype(item) if "[" not in item else None
            if dtype is None or dtype.name not in ("int64", "uint64"):
                raise SignatureError(f"{p.name}: ':narrow' is for i64 and u64 scalars, not {item!r}")
            specs[p.name] = Narrow(dtype, 16 if sixteen else 1)
            continue
        if "[" in item:
            name, _, dims = item.partition("[")
            axes = [a.replace(" ", "") for a in dims.rstrip("]").split(",")]
            if any(a not in (":", "::1") for a in axes) or "::1" in axes[:-1]:
                raise SignatureError(f"bad array type {item!r}: each axis is ':' and the last may be '::1'")
            specs[p.name] = ArrayType(_dtype(name), len(axes), "global", axes[-1] == "::1", True,
                                      on_grid=sixteen)
        elif sixteen:
            dtype = _dtype(item)
            if not dtype.is_int:
                raise SignatureError(f"{p.name}: ':16' is for integers and arrays, not {dtype.name}")
            specs[p.name] = Multiple(dtype, 16)
        else:
            specs[p.name] = _dtype(item)
    return specs


def _narrow(item: str) -> tuple:
    """(the type without a trailing ':narrow', whether it had one)."""
    base, colon, suffix = item.strip().rpartition(":")
    return (base.strip(), True) if colon and suffix.strip() == "narrow" else (item, False)


def _divisibility(kernel, name: str, item: str) -> tuple:
    """(the type without a trailing ':16', whether it had one): after a scalar's name or an
    array's closing bracket."""
    base, colon, suffix = item.strip().rpartition(":")
    base = base.strip()
    if not colon or suffix.strip() != "16" or not (base.endswith("]") or "[" not in base):
        return item, False
    if kernel.track != "tile":
        raise SignatureError(f"{name}: ':16' is for tile kernels (a SIMT kernel is not specialized on it)")
    return base, True
