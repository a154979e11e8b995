"""Race findings as `SafetyError`s a user can act on.

Takes: the code, the two accesses (from `symbolic`), and the solver's `Outcome`. Gives:
`race_error(...)` and `unproven_error(...)`: a `SafetyError` at the user's line of one of
the accesses, naming two concrete threads, the element they meet on and the sizes that
make it happen, e.g. "thread (block 1, thread 0) and thread (block 0, thread 127) both
write out[127] (with out.shape[0] = 256, 2 blocks of 128 threads)", with a hint.
"""
from __future__ import annotations

from ..errors import SafetyError
from .codes import CODES
from .symbolic import Access

HINTS = {
    "VG202": "give each thread its own elements (index with simt.global_id(0)), use an atomic "
             "such as simt.atomic_add, or wrap the access in `with vg.unsafe():` if the race "
             "is intended",
    "VG203": "read from a different array than the one written (pass a separate output), or "
             "split the kernel in two launches",
    "VG204": "make every access to {array} in this kernel atomic, or do the plain accesses "
             "in a separate launch",
    "VG205": "restructure the index arithmetic (a guard such as `if c < W:` or an index "
             "built from simt.global_id), use an atomic, or wrap the access in "
             "`with vg.unsafe():`",
}


def thread_name(ids: dict) -> str:
    axes = 1 + max((int(n[3]) for n in ids), default=0)
    pick = [[ids.get(f"{kind}{a}@", 0) for a in range(axes)] for kind in ("bid", "tid")]
    block, thread = (str(v[0]) if axes == 1 else f"({', '.join(map(str, v))})" for v in pick)
    return f"thread (block {block}, thread {thread})"


def _dims(values: tuple) -> str:
    trimmed = list(values)
    while len(trimmed) > 1 and trimmed[-1] == 1:
        trimmed.pop()
    return str(trimmed[0]) if len(trimmed) == 1 else f"({', '.join(map(str, trimmed))})"


def _plural(text: str, word: str) -> str:
    return f"{text} {word}" + ("" if text == "1" else "s")


def situation(outcome) -> str:
    parts = [f"{label} = {value}" for label, value in outcome.sizes.items()]
    grid, block = outcome.launch
    parts.append(f"{_plural(_dims(grid), 'block')} of {_plural(_dims(block), 'thread')}")
    return "with " + ", ".join(parts)


def race_error(code: str, a: Access, b: Access, outcome) -> SafetyError:
    """`a` ran on the first thread of the counterexample, `b` on the second."""
    t1, t2 = (thread_name(ids) for ids in outcome.threads)
    element = f"{a.array}[{', '.join(map(str, outcome.element))}]"
    if code == "VG202":
        what, loc, other = f"{t1} and {t2} both write {element}", a.loc, b.loc
    elif code == "VG203":
        (w, tw), (r, tr) = ((a, t1), (b, t2)) if a.kind == "write" else ((b, t2), (a, t1))
        what, loc, other = f"{tw} writes {element} while {tr} reads it", r.loc, w.loc
    else:
        (m, tm), (p, tp) = ((a, t1), (b, t2)) if a.kind == "atomic" else ((b, t2), (a, t1))
        verb = "writes" if p.kind == "write" else "reads"
        what = f"{tm} updates {element} atomically while {tp} {verb} it without an atomic"
        loc, other = p.loc, m.loc
    where = f"; the other access is at line {other.line}" if other.line != loc.line else ""
    message = f"{CODES[code].title}: {what} ({situation(outcome)}){where}"
    return SafetyError(message, loc, HINTS[code].format(array=a.array), code)


def data_error(a: Access, b: Access, outcome) -> SafetyError:
    """A collision that needs values the checker cannot see (loaded, or carried by a loop)."""
    t1, t2 = (thread_name(ids) for ids in outcome.threads)
    element = f"{a.array}[{', '.join(map(str, outcome.element))}]"
    verbs = {"write": "writes", "read": "reads", "atomic": "updates"}
    example = (f"{t1} {verbs[a.kind]} {element} and {t2} {verbs[b.kind]} it if those values "
               f"allow ({situation(outcome)})")
    reason = f"the index depends on {', '.join(outcome.unknowns)}, which the checker cannot see; {example}"
    return unproven_error(a, b, reason)


def unproven_error(a: Access, b: Access, reason: str) -> SafetyError:
    what = "write" if "write" in (a.kind, b.kind) else "access"
    lines = sorted({a.loc.line, b.loc.line})
    where = f" (accesses at lines {' and '.join(map(str, lines))})" if len(lines) > 1 else ""
    message = (f"{CODES['VG205'].title}: could not prove that threads {what} distinct elements "
               f"of {a.array}{where}: {reason}")
    loc = next((x.loc for x in (a, b) if x.kind == "write"), a.loc)
    return SafetyError(message, loc, HINTS["VG205"], "VG205")
