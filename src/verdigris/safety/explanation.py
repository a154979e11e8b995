"""The form of a safety code's long explanation (`explain`), and how its snippets become files.

Takes nothing. Gives `Explanation` (rule, why, racy program, message, fixed program, hint),
`snippet(text)` (a dedented snippet), `PRELUDE` and `program(snippet)` (a snippet as a
complete file, its lines moved down by `PRELUDE_LINES`).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

PRELUDE = "import numpy as np\n\nimport verdigris as vg\nfrom verdigris import simt\n\n\n"


@dataclass(frozen=True)
class Explanation:
    rule: str  # what is refused, in a few sentences
    why: str  # what goes wrong if it ran anyway
    racy: str  # a small program that breaks the rule (without the imports: see `program`)
    message: str  # what verdigris says about it, lines counted in `racy`
    fixed: str  # the same program, corrected
    hint: str = ""  # the hint line of the message, if it has one


def snippet(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def program(snippet: str) -> str:
    """A snippet as a complete file: the imports it needs, then the snippet. Its lines
    move down by PRELUDE_LINES."""
    return PRELUDE + snippet


PRELUDE_LINES = PRELUDE.count("\n")
