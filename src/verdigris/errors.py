"""Source locations, the error classes of the public API, and caret formatting.

Takes: a `Loc` (file, line, column, and the chain of call sites through inlined
`@vg.func` helpers) and a message. Gives: exceptions whose text names the file, line and
column, shows the user's line with a caret under the column, says what is wrong and, where
one is known, what to do. Guarantees: every error a user can cause is a subclass of
`Error`; formatting never raises (a missing source file only drops the quoted line).
"""
from __future__ import annotations

import itertools
import linecache
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    """A position in the user's source: 1-based line, 0-based column (as `ast`)."""

    file: str
    line: int
    col: int = 0
    function: str = ""
    call_site: "Loc | None" = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def inlined_at(self, call_site: "Loc | None") -> "Loc":
        """This location, as reached through a call at `call_site`."""
        if call_site is None:
            return self
        chain = call_site if self.call_site is None else self.call_site.inlined_at(call_site)
        return Loc(self.file, self.line, self.col, self.function, chain)

    def excerpt(self) -> str:
        """The source line with a caret under the column, or '' if the file is unreadable."""
        text = linecache.getline(self.file, self.line)
        if not text:
            return ""
        text = text.rstrip("\n").expandtabs(4)
        return f"    {text}\n    {' ' * self.col}^"


UNKNOWN_LOC = Loc("<unknown>", 0, 0)


def _is_machinery(module: str) -> bool:
    """verdigris's own modules; its examples are user code (their launches are named)."""
    return module.partition(".")[0] == "verdigris" and not module.startswith("verdigris.examples")


def user_call_site() -> Loc | None:
    """Where the user called into verdigris: the innermost frame outside its modules, with
    the column of the call. None when there is no such frame, or when it is a thread's
    machinery (a compile that verdigris runs on a thread of its own)."""
    frame = sys._getframe(1)
    while frame is not None and _is_machinery(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
    if frame is None or frame.f_globals.get("__name__", "").startswith(("threading", "concurrent.")):
        return None
    col = 0
    positions = getattr(frame.f_code, "co_positions", None)  # Python 3.11 and later
    if positions is not None:  # the current instruction's (line, end line, column, end column)
        line, _, start, _ = next(itertools.islice(positions(), frame.f_lasti // 2, None), (None,) * 4)
        col = start if line == frame.f_lineno and start is not None else 0
    return Loc(frame.f_code.co_filename, frame.f_lineno, col, frame.f_code.co_name)


def format_message(message: str, loc: Loc | None, hint: str = "", code: str = "") -> str:
    """`file:line:col: [CODE] message`, the quoted line with a caret, the inline chain, a hint."""
    head = f"{code}: {message}" if code else message
    if loc is None or loc.line <= 0:
        lines = [head]
    else:
        lines = [f"{loc}: {head}"]
        excerpt = loc.excerpt()
        if excerpt:
            lines.append(excerpt)
        site = loc.call_site
        while site is not None:
            lines.append(f"  inlined from {site}" + (f" ({site.function})" if site.function else ""))
            excerpt = site.excerpt()
            if excerpt:
                lines.append(excerpt)
            site = site.call_site
    if hint:
        lines.append(f"  hint: {hint}")
    return "\n".join(lines)


class Error(Exception):
    """Base of every error verdigris raises on purpose."""

    # An error about a call made on the host names the user's call when it has no location
    # of its own (`user_call_site`)
    at_user_call = False

    def __init__(self, message: str, loc: Loc | None = None, hint: str = "", code: str = ""):
        if loc is None and self.at_user_call:
            loc = user_call_site()
        self.message = message
        self.loc = loc
        self.hint = hint
        self.code = code
        super().__init__(format_message(message, loc, hint, code))


class CompileError(Error):
    """The kernel cannot be compiled: an unsupported construct, a type error, bad arguments."""


class UnsupportedConstruct(CompileError):
    """Code no kernel can have, whatever its argument types: Python the kernel languages do
    not have (a `print`, a `try`, a call of a host function, recursion) or a name that is
    not defined; so `verdigris check` reports it without a launch."""


class UndefinedName(UnsupportedConstruct):
    """A kernel reads a name its module does not define (`.name`). `verdigris check`, which
    runs only part of a module, reports it only where the module binds the name nowhere."""

    def __init__(self, name: str, loc=None):
        self.name = name
        super().__init__(f"name {name!r} is not defined", loc, hint="define it at module level "
                         "before the kernel, import it, or pass it as an argument")


class SafetyError(CompileError):
    """A safety rule is broken. `.code` is VG2xx (races, aliasing) or VG3xx (memory safety)."""


class AliasError(SafetyError):
    """At a launch: an array the kernel writes overlaps another array argument."""


class LaunchError(Error):
    """A launch cannot be made: wrong arguments, a grid or block past the launch limits
    (naming the axis, the value and the limit), host arrays on the GPU. Without a location
    of its own it names the user's call (`user_call_site`)."""

    at_user_call = True


class AssumptionError(LaunchError):
    """A launch breaks a fact the kernel states with `vg.assume(...)`: refused on the host
    before anything runs, at the assumption's line, with the values that broke it (VG304)."""


class ArrayError(Error, ValueError, TypeError):
    """An array call on the host got what it cannot use: a shape that does not fit, a value
    the dtype cannot hold, an unknown dtype, a view that cannot be reshaped or written. It
    names the user's call. It is also a ValueError and a TypeError, the errors NumPy raises
    for the same mistakes, so code written to catch those catches it too."""

    at_user_call = True


class KernelError(Error):
    """A fault while a kernel ran."""


class BoundsError(KernelError):
    """An index out of bounds, naming kernel, line, block, thread, index and shape."""

    @classmethod
    def of(cls, array: str, index, shape: tuple, where: str, loc, advice: str = "") -> "BoundsError":
        """VG302 for `array[index]` outside `shape`, `where` saying in which kernel, block
        and thread (or tile element); `advice` ends the hint (what else the access offers)."""
        index = [int(i) for i in index]
        hint = ("a negative index is out of bounds: indices never wrap around"
                if min(index, default=0) < 0 else
                "guard the access with the array's shape (`if i < x.shape[0]:`), launch no "
                "more threads than there are elements, or give a tile scatter or gather "
                "mask= for its lanes past the end")
        return cls(f"out of bounds: {array}[{', '.join(map(str, index))}] with shape {shape} "
                   f"in {where}", loc, hint=hint + advice, code="VG302")


class DivergenceError(KernelError, SafetyError):
    """While a kernel ran: a barrier (or a warp's shuffle, vote or syncwarp) reached by some
    threads of the block (warp) and not others. Observed at run time, so a KernelError; the
    safety rule it breaks (VG210, VG214 for a warp), so also a SafetyError, as the static
    checker reports it."""


class BackendError(Error):
    """The chosen backend is unavailable (no driver, no GPU) or failed outside a kernel."""
