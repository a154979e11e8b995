"""Names user code writes in kernels of either track: `constexpr`, `func`, `unsafe`, `assume`.

Takes: nothing. Gives: the markers the frontend recognises, `plain_helper` (which plain
functions kernels inline, as `func`s), and `device_only`, which builds the host-side
stand-ins of intrinsics (they say "only inside a kernel" if called on the host, except
while `HOST_THREAD` gives them a host implementation: a kernel stepped through as one
thread). Guarantees: importing this pulls in no compiler module.
"""
from __future__ import annotations

import contextlib
import functools
import types

from .errors import CompileError, user_call_site


class constexpr:
    """Annotation for compile-time parameters: `def k(x, BLOCK: vg.constexpr)`.

    Each distinct value gives its own specialization; the value is folded into the body.
    """

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"


def checked_function(fn, decorator: str):
    """`fn` if `decorator` (`@simt.kernel`, `@vg.func`, ...) can take it: a function written
    with `def` in a file; else a CompileError at the user's line saying what it got."""
    if isinstance(fn, types.FunctionType) and fn.__name__ != "<lambda>":
        return fn
    if isinstance(fn, types.FunctionType):
        what, hint = "a lambda", "write it as a def function"
    elif isinstance(fn, type):
        what, hint = f"the class {fn.__name__}", "decorate a def function, not a class"
    elif callable(fn):
        what, hint = f"{fn!r}", "decorate a def function written in Python"
    else:
        what, hint = f"the {type(fn).__name__} {fn!r}", \
            f"put {decorator} on the line above a def function"
    raise CompileError(f"{decorator} takes a function defined with def, not {what}",
                       user_call_site(), hint=hint)


class func:
    """`@vg.func`: a device helper callable from kernels of either track (always inlined).

    Kernels inline the plain functions of your own code too; `@vg.func` marks a helper as
    device code explicitly, which a function of an installed package needs (the plain
    functions of the standard library and installed packages are host code). Called on
    the host it runs as plain Python, so helpers can be unit tested directly.
    """

    def __init__(self, fn):
        self.fn = checked_function(fn, "@vg.func")
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<vg.func {self.fn.__qualname__}>"


def plain_helper(fn) -> bool:
    """Whether kernels inline `fn`, an undecorated function, as a `@vg.func` helper: a
    function written with `def` in the user's code. Lambdas, generators, coroutines and the
    functions of the standard library, of installed packages and of verdigris itself are
    host functions (their bodies are not kernel code), but for the few verdigris marks as
    kernel code too (`vg.cdiv`, as Triton's `tl.cdiv` and cuTile's `ct.cdiv`)."""
    if not isinstance(fn, types.FunctionType) or fn.__name__ == "<lambda>":
        return False
    import inspect

    if fn.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE
                               | inspect.CO_ASYNC_GENERATOR):
        return False
    if getattr(fn, "__vg_inline__", False):  # verdigris's own functions that are kernel code
        return True
    module = fn.__module__ or ""
    if module.partition(".")[0] == "verdigris" and not module.startswith("verdigris.examples"):
        return False
    return not _in_library(fn.__code__.co_filename)


def _in_library(file: str) -> bool:
    """Whether `file` is part of the standard library or an installed package."""
    import os

    real = os.path.realpath(file)
    return any(real.startswith(root + os.sep) for root in _library_roots())


@functools.cache
def _library_roots() -> frozenset:
    import os
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += getattr(site, "getsitepackages", list)() + [site.getusersitepackages()]
    return frozenset(os.path.realpath(r) for r in roots)


@contextlib.contextmanager
def unsafe():
    """`with vg.unsafe():` inside a kernel: the accesses inside are not proven race-free."""
    yield


# While a kernel's Python function runs as one thread on the host (`runtime.debugging`):
# intrinsic name -> its host implementation for that thread; empty otherwise.
HOST_THREAD: dict = {}


def device_only(name: str, doc: str):
    """The host-side stand-in of intrinsic `name`: recognised by the frontend by identity."""

    def intrinsic(*args, **kwargs):
        host = HOST_THREAD.get(name)
        if host is not None:
            return host(*args, **kwargs)
        raise CompileError(f"{name}() can only be called inside a verdigris kernel",
                           user_call_site(), hint="call it in a function decorated with "
                           "@simt.kernel, @tile.kernel or @vg.func")

    intrinsic.__name__ = name.rsplit(".", 1)[-1]
    intrinsic.__qualname__ = name
    intrinsic.__doc__ = doc
    intrinsic.__vg_intrinsic__ = name
    return intrinsic


assume = device_only("vg.assume", """`vg.assume(condition)` at the top of a kernel's body: a fact of every
launch that the proofs may use (`n % 32 == 0`, `j_count <= x.shape[1]`). The condition
reads only what is fixed for the whole launch (integer scalar arguments, array extents
`x.shape[k]`, constexprs, `block_dim`/`grid_dim` or `tile.num_blocks`) with comparisons,
`and`/`or`/`not` and integer arithmetic; every launch evaluates it on the host, in exact
integers, before anything runs, and a launch where it is false (or where a part of it
leaves its dtype) is refused with `vg.AssumptionError` (VG304), naming the condition and
the values that broke it.""")
