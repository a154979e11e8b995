"""The long form of every safety code, for `verdigris explain CODE`.

Takes: a code from `safety.codes.CODES`. Gives: `EXPLANATIONS` (code -> `Explanation`, as
data: the rule, why it matters, a small racy program, the message it gets, the fixed
program: the codes of threads that meet are `explain_threads`', those of bounds and launch
facts are here; the form and `program(snippet)`, which makes a snippet a complete file, are
`explanation`'s) and `explain(code) -> str`, the text the command prints. Guarantees: one entry per code in `CODES`; every `racy` and
`fixed` snippet is Python that parses; each message's line and column point into its racy
snippet. The tests hold it to that, and run each pair through `verdigris check` (racy:
refused with its code, at its line; fixed: clean) wherever the checker sees the problem
statically.
"""
from __future__ import annotations

import textwrap

from .codes import CODES
from .explain_threads import THREADS
from .explanation import Explanation, snippet

# VG304's kernel, launched with a fact broken (racy) and kept (fixed)
_FILL_ROWS = """
            @simt.kernel
            def fill_rows(x, out, n, m):
                vg.assume(m <= n)  # each row's m values fit in its n slots
                i = simt.global_id(0)
                if i < x.shape[0]:
                    for j in range(m):
                        out[i * n + j] = x[i]


            x = vg.asarray(np.ones(100, np.float32))
            out = vg.empty(800, vg.float32)
"""

EXPLANATIONS = {
    **THREADS,
    "VG301": Explanation(
        rule="""An index that is out of bounds on every launch is refused while compiling:
            a constant index past a local or shared array's static size, or a negative
            constant index. Indices never wrap around: x[-1] is not the last element.""",
        why="""Reading past an array reads another array's memory (or faults); writing
            there corrupts it. When the compiler can see it always happens, it is a bug in
            the kernel, not in the data.""",
        racy=snippet("""
            @simt.kernel
            def last_minus(x, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    out[i] = x[i] - x[-1]  # -1 is out of bounds, not the last element
            """),
        message="""kernel.py:5:27: VG301: index -1 of 'x' is out of bounds: verdigris never
            wraps negative indices""",
        hint="write x.shape[0] - 1",
        fixed=snippet("""
            @simt.kernel
            def last_minus(x, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    out[i] = x[i] - x[x.shape[0] - 1]
            """),
    ),
    "VG302": Explanation(
        rule="""An access the compiler could not prove in bounds is checked while the
            kernel runs. On the cpu backend the access raises vg.BoundsError before memory
            is touched; on a GPU it is not performed, and the fault is raised at the next
            synchronization with the kernel, line, block, thread, index and shape.""",
        why="""The grid usually has more threads than elements (the last block is
            partial), so a kernel without a bounds guard indexes past the end. An
            unchecked GPU access would read or overwrite a neighbouring allocation
            silently.""",
        racy=snippet("""
            @simt.kernel
            def double(x, out):
                i = simt.global_id(0)
                out[i] = 2.0 * x[i]  # no guard: the last block runs past the end


            x = vg.asarray(np.ones(1000, np.float32))
            out = vg.empty_like(x)
            double[4, 256](x, out)  # 1024 threads for 1000 elements
            """),
        message="""kernel.py:4:20: VG302: out of bounds: x[1000] with shape (1000,) in
            kernel double, block (3, 0, 0) thread (232, 0, 0)""",
        fixed=snippet("""
            @simt.kernel
            def double(x, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    out[i] = 2.0 * x[i]


            x = vg.asarray(np.ones(1000, np.float32))
            out = vg.empty_like(x)
            double[vg.cdiv(1000, 256), 256](x, out)
            """),
    ),
    "VG303": Explanation(
        rule="""A variable is read only where every path to the read has assigned it. A
            variable set in one arm of an `if` only, in a loop that may run no times, after
            a `break`, or in a helper that can end without a `return`, is refused while
            compiling, at the read.""",
        why="""Python raises UnboundLocalError on the paths that reach such a read, but only
            when one is taken; a GPU kernel has no such check and reads whatever the
            register held, so the result is wrong only for some inputs.""",
        racy=snippet("""
            @simt.kernel
            def clamp_low(x, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    if x[i] > 0.0:
                        v = x[i]
                    out[i] = v  # v was never set where x[i] <= 0


            x = vg.asarray(np.linspace(-1, 1, 1000, dtype=np.float32))
            out = vg.empty_like(x)
            clamp_low[vg.cdiv(1000, 256), 256](x, out)
            """),
        message="""kernel.py:7:18: VG303: variable 'v' may be used before it is assigned: some
            path to this line does not assign it""",
        hint="give v a value on every path to this line, for example before the `if` or loop "
             "that assigns it",
        fixed=snippet("""
            @simt.kernel
            def clamp_low(x, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    v = 0.0
                    if x[i] > 0.0:
                        v = x[i]
                    out[i] = v


            x = vg.asarray(np.linspace(-1, 1, 1000, dtype=np.float32))
            out = vg.empty_like(x)
            clamp_low[vg.cdiv(1000, 256), 256](x, out)
            """),
    ),
    "VG304": Explanation(
        rule="""A kernel may state a fact its proofs need with vg.assume(condition) at the
            top of its body: a condition on what is fixed for the whole launch (integer
            scalar arguments, array extents, constexprs, grid and block sizes). The race
            and bounds proofs take it as given, and every launch evaluates it on the host,
            in exact integers, before anything runs: a launch where it is false, or where a
            part of it leaves its dtype, is refused with vg.AssumptionError.""",
        why="""The kernel was proven safe only for launches where the fact holds: under
            m <= n the rows below write disjoint slots, but with m > n a thread's last
            writes land in the next thread's row, a race the proof never looked at.""",
        racy=snippet(_FILL_ROWS + """            fill_rows[1, 128](x, out, 8, 9)  # 9 values for rows of 8
            """),
        message="""kernel.py:3:5: VG304: the launch of fill_rows breaks `vg.assume(m <= n)`:
            it is false with m = 9, n = 8""",
        hint="the kernel's proofs rely on this fact: launch it with arguments that satisfy it",
        fixed=snippet(_FILL_ROWS + """            fill_rows[1, 128](x, out, 8, 5)
            """),
    ),
}


def _paragraph(text: str, indent: str = "  ") -> str:
    words = " ".join(text.split())
    return textwrap.fill(words, 88, initial_indent=indent, subsequent_indent=indent)


def _code(text: str) -> str:
    return textwrap.indent(text.rstrip(), "    ")


def explain(code: str) -> str:
    """The long form of `code` (a key of CODES); KeyError for an unknown code."""
    entry = EXPLANATIONS[code]
    message = "    " + " ".join(entry.message.split())
    if entry.hint:
        message += "\n      hint: " + entry.hint
    return "\n".join([
        f"{code}: {CODES[code].title}", "",
        "Rule", _paragraph(entry.rule), "",
        "Why it matters", _paragraph(entry.why), "",
        "Racy", _code(entry.racy), "",
        "Message", message, "",
        "Fixed", _code(entry.fixed), ""])
