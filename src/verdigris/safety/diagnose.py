"""Race findings as `SafetyError`s a user can act on.

Takes: the code, the two accesses (from `symbolic`), and the solver's `Outcome`. Gives:
`race_error(...)` and `unproven_error(...)`: a `SafetyError` at the user's line of one of
the accesses, naming two concrete threads, the element they meet on and the sizes that
make it happen, e.g. "thread (block 1, thread 0) and thread (block 0, thread 127) both
write out[127] (with out.shape[0] = 256, 2 blocks of 128 threads)", with a hint (how to
widen the index, where the example's index wrapped around in int32: `wrap_note`). Also `divergence_error` (a barrier or warp operation
that one thread reaches and another does not, and the condition that splits them),
`partial_warp_error` (a shuffle that reads a lane its partial warp lacks)
and `uninitialized_error` (a shared element read before anything wrote it).
"""
from __future__ import annotations

from ..errors import SafetyError
from .codes import CODES
from .trace import Access

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
    "wrap": "thread and block ids (simt.thread_id, block_id, block_dim, grid_dim) are "
                  "int32, and so is arithmetic on them, which wraps past 2**31 on a grid that "
                  "large: widen before multiplying, e.g. `int(simt.block_id(0)) * 256 + t`, or "
                  "index with simt.global_id(axis), which is int64",
    "wrap 64": "a 64-bit value wraps past 2**63 (or below 0 when unsigned) where the values "
               "shown make it that large: a launch whose 64-bit arguments lie in int32's "
               "range runs a variant proven for those values (a Python int width below 2**31 "
               "is one); for larger values keep what scales an index 32-bit (pass it as "
               "np.int32, so that a product with a thread id stays exact), or cast to an "
               "unsigned type only what cannot be negative",
    "VG210": "move the barrier (simt.barrier(), or a call that holds one, such as "
             "simt.block_ticket()) out of the condition, so that every thread of the block "
             "reaches it (guard only the memory accesses), or make the condition the same for "
             "the whole block (built from block ids, scalar arguments, constexprs or loop "
             "counters)",
    "VG210 grid": "move simt.grid_barrier() out of the condition, so that every thread of "
                  "the grid reaches it (guard only the memory accesses), or make the condition "
                  "the same for the whole grid (built from scalar arguments, constexprs, sizes "
                  "or loop counters)",
    "VG211": "put simt.barrier() between the write and the other threads' accesses (in a "
             "loop, also one at the end of the body, before the next iteration's writes)",
    "VG212": "put simt.syncwarp() between the write and the other lane's access, or exchange "
             "the values in registers with simt.shfl_down / simt.shfl_xor",
    "VG213": "write every element the block reads before the barrier() that precedes the "
             "read (e.g. store a neutral value where the input runs out)",
    "VG214": "let all 32 lanes of the warp reach it (compute the value under the condition, "
             "call it outside), or make the condition the same for the whole warp (e.g. built "
             "from simt.thread_id(0) // 32)",
    "VG214 partial": "launch blocks of a multiple of 32 threads, or keep the last warp's "
                     "lanes from reading past it (e.g. `if simt.thread_id(0) < 32:` around "
                     "the shuffle in a block of 40)",
    "VG204 shared": "make every access to {array} between two barriers atomic, or separate "
                    "the atomics from the plain accesses with simt.barrier()",
}

# what follows the two threads of a block race, per code
_UNORDERED = {"VG211": "with no barrier() between them",
              "VG212": "two lanes of one warp with no syncwarp() between them"}


def thread_name(ids: dict) -> str:
    axes = 1 + max((int(n[3]) for n in ids if n[:3] in ("bid", "tid")), default=0)
    pick = [[ids.get(f"{kind}{a}@", 0) for a in range(axes)] for kind in ("bid", "tid")]
    block, thread = (str(v[0]) if axes == 1 else f"({', '.join(map(str, v))})" for v in pick)
    ticket = f", ticket {ids['ticket@']}" if "ticket@" in ids else ""
    return f"thread (block {block}{ticket}, thread {thread})"


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
    if a.kind == b.kind == "write":
        what, loc, other = f"{t1} and {t2} both write {element}", a.loc, b.loc
    elif "atomic" not in (a.kind, b.kind):
        (w, tw), (r, tr) = ((a, t1), (b, t2)) if a.kind == "write" else ((b, t2), (a, t1))
        what, loc, other = f"{tw} writes {element} while {tr} reads it", r.loc, w.loc
    else:
        (m, tm), (p, tp) = ((a, t1), (b, t2)) if a.kind == "atomic" else ((b, t2), (a, t1))
        verb = "writes" if p.kind == "write" else "reads"
        what = f"{tm} updates {element} atomically while {tp} {verb} it without an atomic"
        loc, other = p.loc, m.loc
    where = f"; the other access is at line {other.line}" if other.line != loc.line else ""
    shared = getattr(a, "memory", "global") == "shared"
    if code in _UNORDERED:
        what = f"{what}, {_UNORDERED[code]}"
    elif shared:
        what = f"{what} between the same two barriers"
    message = f"{CODES[code].title}: {what}{wrap_note(outcome)} ({situation(outcome)}){where}"
    hint = HINTS[wrap_hint(outcome) or ("VG204 shared" if code == "VG204" and shared else code)]
    return SafetyError(message, loc, hint.format(array=a.array), code)


def wrap_hint(outcome) -> str:
    """The hint for an example whose arithmetic wraps around ("" where none does): how to
    widen 32-bit ids, or, where only 64-bit values wrap, how to keep them exact."""
    if not outcome.wraps:
        return ""
    return "wrap 64" if all(label.startswith(("int64", "uint64")) for label in outcome.wraps) else "wrap"


def wrap_note(outcome) -> str:
    """Where the example's arithmetic wraps around (in an index or a condition: a race only
    a large launch or extreme values can have)."""
    return f", where a value wraps around in {' and '.join(outcome.wraps)}" if outcome.wraps else ""


GROUPS = {"grid": "threads of the grid", "block": "threads of one block", "warp": "lanes of one warp"}


def divergence_error(code: str, subject: str, loc, condition, outcome, scope: str) -> SafetyError:
    """`subject` (e.g. "barrier()"), which every thread of its `scope` ("grid", "block" or
    "warp") must reach together, at `loc` is reached by the first thread of `outcome` and
    not by the second; `condition`: (its source text, Loc) that splits them, or None."""
    t1, t2 = (thread_name(ids) for ids in outcome.threads)
    group = GROUPS[scope]
    under = f"under `{condition[0]}` (line {condition[1].line})" if condition else "under a condition"
    message = (f"{CODES[code].title}: {subject} is {under}, which differs between {group}: "
               f"{t1} reaches it and {t2} does not ({situation(outcome)})")
    return SafetyError(message, loc, HINTS.get(f"{code} {scope}", HINTS[code]), code)


def partial_warp_error(subject: str, loc, lanes: int, outcome, source: int) -> SafetyError:
    """The shuffle `subject` at `loc`, in the thread of `outcome`, of its block's last warp
    (which has only `lanes` lanes), reads lane `source`, which that warp lacks."""
    message = (f"{CODES['VG214'].title}: {thread_name(outcome.threads[0])}, of the block's "
               f"last warp, which has {lanes} lanes, reads lane {source} with {subject}: that "
               f"lane does not exist, and what it reads is undefined on a GPU "
               f"({situation(outcome)})")
    return SafetyError(message, loc, HINTS["VG214 partial"], "VG214")


def uninitialized_error(r: Access, outcome, certain: bool = True) -> SafetyError:
    """The read `r` (on the thread of `outcome`) of an element nothing wrote before it;
    not `certain` where the read runs only for some values the checker cannot see (loaded,
    or how far a loop with an early exit runs)."""
    element = f"{r.array}[{', '.join(map(str, outcome.element))}]"
    reads = "reads" if certain else "may read"
    allow = "" if certain else ", if the values it depends on let it run"
    message = (f"{CODES['VG213'].title}: {thread_name(outcome.threads[0])} {reads} {element}, "
               f"which no thread of its block writes before{allow} ({situation(outcome)})")
    return SafetyError(message, r.loc, HINTS["VG213"], "VG213")


def data_error(a: Access, b: Access, outcome) -> SafetyError:
    """A collision that needs values the checker cannot see (loaded, or carried by a loop)."""
    t1, t2 = (thread_name(ids) for ids in outcome.threads)
    element = f"{a.array}[{', '.join(map(str, outcome.element))}]"
    verbs = {"write": "writes", "read": "reads", "atomic": "updates"}
    example = (f"{t1} {verbs[a.kind]} {element} and {t2} {verbs[b.kind]} it if those values "
               f"allow{wrap_note(outcome)} ({situation(outcome)})")
    reason = f"the index depends on {', '.join(outcome.unknowns)}, which the checker cannot see; {example}"
    return unproven_error(a, b, reason, hint=HINTS[wrap_hint(outcome) or "VG205"])


def unproven_error(a, b, reason: str, who: str = "threads", hint: str = HINTS["VG205"]) -> SafetyError:
    """VG205 for two accesses (of threads, or of blocks for the tile track)."""
    what = "write" if "write" in (a.kind, b.kind) else "access"
    lines = sorted({a.loc.line, b.loc.line})
    where = f" (accesses at lines {' and '.join(map(str, lines))})" if len(lines) > 1 else ""
    message = (f"{CODES['VG205'].title}: could not prove that {who} {what} distinct elements "
               f"of {a.array}{where}: {reason}")
    loc = next((x.loc for x in (a, b) if x.kind == "write"), a.loc)
    return SafetyError(message, loc, hint, "VG205")
