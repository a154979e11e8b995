"""`with tile.lock(locks, index):` in a tile kernel: the frontend of `ir.locks.Locked`.

Takes: the translator, the `with` statement's call and body. Gives: `translate(tr, call,
body, loc)`, which emits a `Locked` (the element index evaluated once, before the block
takes the lock, so acquire and release name one element), and `check_lock_arrays(body)`,
run on a whole kernel's body. Guarantees (what `ir.locks` promises its users): the lock
array is an int32 array parameter; a `Locked` body holds no other `Locked` and nothing
that leaves it early (a `return`, or a `break`/`continue` of a loop around the lock);
a lock array is accessed by nothing but `tile.lock` (else another statement could free a
lock a block holds); each refusal is a `CompileError` at the user's line that says why.
"""
from __future__ import annotations

import ast

from .. import types as T
from ..errors import CompileError, Loc
from ..ir import nodes as N
from ..ir.locks import Locked
from .typing import Static

USAGE = "tile.lock(locks, index)"


def translate(tr, call: ast.Call, body: list, loc: Loc) -> None:
    tr.check_track("tile.lock", loc)
    args = [tr.expr(a) for a in call.args]
    kwargs = {k.arg: tr.expr(k.value) for k in call.keywords}
    named = dict(zip(("locks", "index"), args)) | kwargs
    if len(args) > 2 or set(named) != {"locks", "index"}:
        raise CompileError(f"{USAGE} takes a lock array and the index of one of its elements",
                           loc, hint="e.g. `with tile.lock(locks, tile.bid(0) % GROUPS):`")
    locks = named["locks"]
    if not (isinstance(locks, N.ArrayRef) and locks.type.space == "global"
            and locks.dtype == T.int32):
        raise CompileError(f"{USAGE} needs an int32 array parameter of the kernel as `locks`",
                           loc, hint="pass e.g. np.zeros(groups, np.int32): every lock free (0) "
                                     "before the launch")
    index = named["index"]
    items = index.value if isinstance(index, Static) and isinstance(index.value, tuple) else (index,)
    indices = tuple(i if isinstance(i, N.Const) else tr.hoist(i, loc)
                    for i in tr.indices_for(locks, [(i, loc) for i in items], loc))
    zero, one = N.Const(loc, 0, T.int32), N.Const(loc, 1, T.int32)
    stmts = tr.nested(body)
    _check_body(stmts)
    tr.emit(Locked(loc, N.Atomic(loc, "cas", locks, indices, one, zero, T.int32), stmts,
                   N.Atomic(loc, "exch", locks, indices, zero, None, T.int32)))


def _check_body(stmts: list) -> None:
    from . import walk

    nodes = list(walk(stmts))
    inner = {n.label for n in nodes if isinstance(n, N.Region)}
    for n in nodes:
        if isinstance(n, Locked):
            raise CompileError("a tile.lock inside another: a block that waits for a lock while "
                               "it holds one can wait forever", n.loc,
                               hint="take one lock at a time (finish the first `with` first)")
        if isinstance(n, N.Exit) and n.label not in inner:
            raise CompileError("a `return` inside `with tile.lock(...)` would leave the lock "
                               "held", n.loc, hint="return after the `with` block")
    if N.leaves_loop(stmts):
        leaving = next(n for n in nodes if isinstance(n, (N.Break, N.Continue)))
        raise CompileError("a `break` or `continue` inside `with tile.lock(...)` that leaves "
                           "its loop would leave the lock held", leaving.loc,
                           hint="take the lock inside the loop's body, or leave the loop after "
                                "the `with` block")


def check_lock_arrays(body: list) -> None:
    from . import READ_NODES, WRITE_NODES, walk

    nodes = list(walk(body))
    held = {s.acquire.array.name for s in nodes if isinstance(s, Locked)}
    own = {id(a) for s in nodes if isinstance(s, Locked) for a in (s.acquire, s.release)}
    for n in nodes:
        if isinstance(n, READ_NODES + WRITE_NODES) and n.array.name in held and id(n) not in own:
            raise CompileError(f"'{n.array.name}' holds the locks of a tile.lock, so nothing "
                               "else in the kernel may access it (a write could free a lock "
                               "that a block holds)", n.loc,
                               hint="keep the lock array for tile.lock alone; use another array "
                                    "for this")
