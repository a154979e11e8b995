"""Names user code writes in kernels of either track: `constexpr`, `func`, `unsafe`.

Takes: nothing. Gives: the markers the frontend recognises, and `device_only`, which builds
the host-side stand-ins of intrinsics (they say "only inside a kernel" if called on the
host). Guarantees: importing this pulls in no compiler module.
"""
from __future__ import annotations

import contextlib
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

    Called on the host it runs as plain Python, so helpers can be unit tested directly.
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


@contextlib.contextmanager
def unsafe():
    """`with vg.unsafe():` inside a kernel: the accesses inside are not proven race-free."""
    yield


def device_only(name: str, doc: str):
    """The host-side stand-in of intrinsic `name`: recognised by the frontend by identity."""

    def intrinsic(*args, **kwargs):
        raise CompileError(f"{name}() can only be called inside a verdigris kernel",
                           user_call_site(), hint="call it in a function decorated with "
                           "@simt.kernel, @tile.kernel or @vg.func")

    intrinsic.__name__ = name.rsplit(".", 1)[-1]
    intrinsic.__qualname__ = name
    intrinsic.__doc__ = doc
    intrinsic.__vg_intrinsic__ = name
    return intrinsic
