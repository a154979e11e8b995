"""The element type of an array argument at a launch site, read from its source: for
`verdigris check` (`scan`), which runs no user code.

Takes: the `ast` expression passed at a launch and the bindings of its scope (name -> the
expression a name is bound to once, `statics.scope_bindings`). Gives `element_dtype(node,
bindings) -> DType | None`. Guarantees: a dtype only where the source states it, through
the calls and methods users write to make or move arrays:

- a `dtype=` keyword (`np.zeros(n, dtype=np.int32)`, `torch.arange(n, dtype=torch.int64)`,
  `rng.integers(0, 9, n, dtype=np.uint8)`), or the positional dtype of the constructors
  that take one (`vg.zeros(n, vg.int64)`, `np.full(n, 7, np.int16)`);
- `.astype(d)`, `.to(d)` and `.view(d)` where `d` names a dtype;
- calls and methods that keep their input's dtype (`vg.asarray(a)`, `np.ascontiguousarray`,
  `torch.from_numpy`, `.copy()`, `.cuda()`, `.reshape(...)`, `.T`, `a[...]` views, `*_like`);
- a name bound once to any of these.

A dtype is named by a dtype object of NumPy, torch, CuPy or verdigris (`np.uint8`,
`torch.bfloat16`, `vg.i32`), or a string (`"float16"`). Anything else (a function's
result, a parameter) gives None: the caller keeps its default.
"""
from __future__ import annotations

import ast

from .. import types as T

_NAMED = {**{d.name: d for d in T.ALL}, **{d.short: d for d in T.ALL},
          "bool_": T.bool_, "half": T.float16, "float": T.float32, "double": T.float64,
          "int": T.int32, "long": T.int64, "short": T.int16}
# `np.dtype(float)`, `np.dtype(int)`: what NumPy means by the Python builtins
_BUILTIN = {"float": T.float64, "int": T.int64, "bool": T.bool_}

# constructors -> the position of their dtype argument (after shape and fill value)
_DTYPE_POSITION = {"zeros": 1, "empty": 1, "ones": 1, "full": 2, "zeros_like": 1,
                   "empty_like": 1, "ones_like": 1, "full_like": 2, "array": 1, "asarray": 1}
# calls whose first argument's dtype they keep, unless a dtype is given
_KEEP_CALLS = frozenset({"asarray", "array", "ascontiguousarray", "asfortranarray", "copy",
                         "from_numpy", "from_dlpack", "as_tensor", "tensor", "zeros_like",
                         "empty_like", "ones_like", "full_like", "to_device", "device_array_like"})
# methods that keep their object's dtype
_KEEP_METHODS = frozenset({"copy", "cuda", "cpu", "contiguous", "reshape", "view", "ravel",
                           "flatten", "transpose", "permute", "squeeze", "unsqueeze",
                           "numpy", "clone", "detach", "swapaxes", "get", "to"})
_MAX_DEPTH = 16  # names bound to names bound to ...: a cycle is impossible, a bound is cheap


def dtype_named(node) -> T.DType | None:
    """The dtype a dtype expression names: `np.uint8`, `torch.bfloat16`, `vg.i32`,
    `"float16"`, `float`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return T.from_numpy(node.value)  # NumPy's spelling: "float" is float64
        except TypeError:
            return _NAMED.get(node.value)  # "bfloat16", "bf16", "f32": verdigris's
    if isinstance(node, ast.Name):
        return _BUILTIN.get(node.id) or _NAMED.get(node.id)
    if isinstance(node, ast.Attribute):
        return _NAMED.get(node.attr)
    return None


def element_dtype(node, bindings: dict, depth: int = 0) -> T.DType | None:
    """The element dtype of the array `node` evaluates to, where the source states it."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(node, ast.Name):
        bound = bindings.get(node.id)
        return None if bound is None else element_dtype(bound, bindings, depth + 1)
    if isinstance(node, ast.Subscript):
        return element_dtype(node.value, bindings, depth + 1)
    if isinstance(node, ast.Attribute):
        return element_dtype(node.value, bindings, depth + 1) if node.attr in ("T", "mT") \
            else None
    if not isinstance(node, ast.Call):
        return None
    stated = _stated_dtype(node)
    if stated is not None:
        return stated
    method = node.func.attr if isinstance(node.func, ast.Attribute) else None
    if method in ("astype", "to", "view") and node.args:
        named = dtype_named(node.args[0])  # `.to("cuda")`, `.view(n, 2)` name none
        if named is not None or method == "astype":
            return named
    name = method or (node.func.id if isinstance(node.func, ast.Name) else None)
    if name in _KEEP_CALLS and node.args:
        return element_dtype(node.args[0], bindings, depth + 1)
    if method in _KEEP_METHODS:
        return element_dtype(node.func.value, bindings, depth + 1)
    return None


def _stated_dtype(call: ast.Call) -> T.DType | None:
    for keyword in call.keywords:
        if keyword.arg == "dtype":
            return dtype_named(keyword.value)
    name = call.func.attr if isinstance(call.func, ast.Attribute) else \
        call.func.id if isinstance(call.func, ast.Name) else None
    position = _DTYPE_POSITION.get(name)
    if position is not None and len(call.args) > position:
        return dtype_named(call.args[position])
    return None
