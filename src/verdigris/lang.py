"""Names user code writes in kernels of either track: `constexpr`, `func`, `unsafe`, `assume`.

Takes: nothing. Gives: the markers the frontend recognises, and `device_only`, which builds
the host-side stand-ins of intrinsics (they say "only inside a kernel" if called on the
host, except while `HOST_THREAD` gives them a host implementation: a kernel stepped
through as one thread). Guarantees: importing this pulls in no compiler module.
"""
from __future__ import annotations

import contextlib

from .errors import CompileError, user_call_site


class constexpr:
    """Annotation for compile-time parameters: `def k(x, BLOCK: vg.constexpr)`.

    Each distinct value gives its own specialization; the value is folded into the body.
    """

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"


class func:
    """`@vg.func`: a device helper callable from kernels of either track (always inlined).

    Called on the host it runs as plain Python, so helpers can be unit tested directly.
    """

    def __init__(self, fn):
        self.fn = fn
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
