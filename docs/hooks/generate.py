"""MkDocs hook: fills the pages with what verdigris itself prints, at build time.

Takes: page Markdown with two kinds of markers. Gives: `on_page_markdown` (the hook MkDocs
calls), `safety_codes()` and `command_output(command)` (the tests call them too).

- `<!-- safety-codes -->` becomes one section per code of `verdigris.safety.codes.CODES`:
  the rule, a racy program (from `verdigris.safety.explain`), the message it gets from
  actually running the checker on it (`verdigris check`, or running the program for codes
  only a run can produce), and the fixed program with the checker's verdict on it. Where
  this version of verdigris does not yet report the code for its example, the section says
  so and shows what `verdigris explain` documents instead.
- `<!-- output: verdigris ARGS -->` becomes a text block with the command and what it
  printed, run in the repository root on the cpu backend. Options before the colon:
  `lines=A-B` keeps those lines of the output (1-based, inclusive), `grep=REGEX` only the
  lines that match, `status=N` is the exit status the command must end with (default 0);
  any other status fails the build.
- `<!-- api: MODULE -->` becomes a mkdocstrings block (`::: MODULE`, its docstring and the
  functions defined in it) followed by a list of every other public function the module
  has when imported, with its docstring: the intrinsics made at import time
  (`simt.thread_id`, `tile.load`, `vg.math.exp`, ...), which mkdocstrings does not see.
- `<!-- include: PATH -->` becomes a Python block with the file at PATH (from the
  repository root); the tests run those files (`raises=ERROR` before the colon: the
  program must raise `vg.ERROR`).

Guarantees: nothing is pasted by hand, so the pages cannot drift from the tool; a command
that fails, or a marker that is malformed, fails the build with the page named.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import tempfile
from pathlib import Path

os.environ.setdefault("VERDIGRIS_BACKEND", "cpu")

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = re.compile(r"<!--\s*output(?P<options>(?:\s+\w+=\S+)*)\s*:\s*(?P<command>.+?)\s*-->")
API = re.compile(r"<!--\s*api\s*:\s*(?P<module>[\w.]+)\s*-->")
INCLUDE = re.compile(r"<!--\s*include(?P<options>(?:\s+\w+=\S+)*)\s*:\s*(?P<path>\S+)\s*-->")
DYNAMIC_CODES = {"VG302", "VG304"}  # only a run produces them; the others `verdigris check` finds


@contextlib.contextmanager
def _in_directory(path):
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def _cli(argv, cwd) -> tuple:
    """(exit status, stdout + stderr) of `verdigris ARGV`, run in this process."""
    from verdigris.cli import main

    buffer = io.StringIO()
    with _in_directory(cwd), contextlib.redirect_stdout(buffer), \
            contextlib.redirect_stderr(buffer):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
    return status, buffer.getvalue()


def command_output(command: str, cwd=ROOT) -> tuple:
    argv = shlex.split(command)
    if argv[:1] == ["verdigris"]:
        argv = argv[1:]
    elif argv[:3] == ["python", "-m", "verdigris"]:
        argv = argv[3:]
    else:
        raise ValueError(f"an output marker runs `verdigris ...`, not {command!r}")
    return _cli(argv, cwd)


def _run_program(path: Path) -> str:
    """Run a program file on the cpu backend; the last line Python would print if it
    raised (the error), or '' if it ran."""
    import verdigris as vg

    source = path.read_text()
    with _in_directory(path.parent):
        try:
            exec(compile(source, path.name, "exec"), {"__name__": "__main__"})
        except vg.Error as err:
            return f"{type(err).__module__}.{type(err).__name__}: {err}"
    return ""


def _code_block(text: str, language: str = "text") -> str:
    return f"```{language}\n{text.rstrip()}\n```\n"


def _paragraph(text: str) -> str:
    return " ".join(text.split())


def _safety_section(code: str, work: Path) -> str:
    from verdigris.safety.codes import CODES
    from verdigris.safety.explain import EXPLANATIONS, explain
    from verdigris.safety.explanation import program

    entry = EXPLANATIONS[code]
    racy, fixed = work / f"{code.lower()}_racy.py", work / f"{code.lower()}_fixed.py"
    racy.write_text(program(entry.racy))
    fixed.write_text(program(entry.fixed))
    parts = [f"## {code}: {CODES[code].title}\n", _paragraph(entry.rule) + "\n",
             "**Why it matters.** " + _paragraph(entry.why) + "\n",
             f"A program that breaks the rule, `{racy.name}`:\n", _code_block(racy.read_text(), "python")]
    if code in DYNAMIC_CODES:
        said = _run_program(racy)
        detected = f": {code}:" in said
        parts.append(f"Running it (`python {racy.name}`, on the cpu backend) ends with:\n")
    else:
        _, said = _cli(["check", racy.name], work)
        detected = re.search(rf"^{re.escape(racy.name)}:\d+:\d+: {code}: ", said, re.M) is not None
        parts.append(f"`verdigris check {racy.name}` says (a launch raises the same message):\n")
    parts.append(_code_block(said))
    if not detected:
        message = explain(code).split("\nMessage\n", 1)[1].split("\nFixed\n", 1)[0]
        parts.append(f"!!! note \"Not reported by this version yet\"\n    The checker does "
                     f"not report {code} for this example yet (the output above is what it "
                     f"says today). `verdigris explain {code}` documents the message it "
                     f"is meant to give (its lines count from the first line after the imports):\n\n" + "\n".join(
                         "        " + line.strip() for line in message.strip().splitlines())
                     + "\n")
    parts += [f"The fix, `{fixed.name}`:\n", _code_block(fixed.read_text(), "python")]
    if code in DYNAMIC_CODES:
        error = _run_program(fixed)
        parts.append("It runs without an error.\n" if not error
                     else "Running it still fails:\n\n" + _code_block(error))
    else:
        _, fixed_said = _cli(["check", fixed.name], work)
        parts += [f"`verdigris check {fixed.name}`:\n", _code_block(fixed_said)]
    return "\n".join(parts)


def safety_codes() -> str:
    from verdigris.safety.codes import CODES

    with tempfile.TemporaryDirectory(prefix="vg-docs-") as work:
        return "\n".join(_safety_section(code, Path(work)) for code in CODES)


def _output_block(match: re.Match, page: str) -> str:
    options = dict(item.split("=", 1) for item in match.group("options").split())
    unknown = set(options) - {"lines", "status", "grep"}
    if unknown:
        raise ValueError(f"{page}: unknown option {', '.join(unknown)} in {match.group(0)}")
    command = match.group("command")
    status, text = command_output(command)
    if status != int(options.get("status", 0)):
        raise RuntimeError(f"{page}: `{command}` exited with status {status}:\n{text}")
    lines = text.rstrip("\n").splitlines()
    if "lines" in options:
        first, last = (int(n) for n in options["lines"].split("-"))
        lines = lines[first - 1:last]
    if "grep" in options:
        lines = [line for line in lines if re.search(options["grep"], line)]
    if not lines:
        raise RuntimeError(f"{page}: `{command}` printed nothing that {match.group(0)} keeps")
    return _code_block("\n".join([f"$ {command}", *lines]))


def _api_block(match: re.Match) -> str:
    import importlib
    import inspect

    module = importlib.import_module(match.group("module"))
    own, made = [], []
    for name, value in vars(module).items():
        if name.startswith("_") or not (inspect.isfunction(value) or inspect.isclass(value)):
            continue
        if value.__module__ == module.__name__:
            own.append(name)
        elif value.__qualname__ != value.__name__:  # an intrinsic: qualname "simt.thread_id"
            made.append(name)
    for name, value in vars(module).items():  # namespaces such as simt.shared
        if isinstance(value, type(module)) and value.__name__.startswith(module.__name__ + "."):
            made += [f"{name}.{inner}" for inner, fn in vars(value).items()
                     if inspect.isfunction(fn) and not inner.startswith("_")]
    block = (f"::: {module.__name__}\n    options:\n      heading_level: 3\n"
             f"      members: [{', '.join(own)}]\n\n")
    prefix = module.__name__.removeprefix("verdigris.")
    docs = {}
    for name in made:
        value = module
        for part in name.split("."):
            value = getattr(value, part)
        text = " ".join((value.__doc__ or "").split())
        docs[name] = text.replace("|", "\\|").replace("[", "\\[")  # not links, not cells
    rows = [f"| `{prefix}.{name}` | {doc} |" for name, doc in docs.items()]
    return block + ("| name | what it does |\n|---|---|\n" + "\n".join(rows) + "\n"
                    if rows else "")


def _include_block(match: re.Match) -> str:
    return _code_block((ROOT / match.group("path")).read_text(), "python")


def render(markdown: str, page: str = "page") -> str:
    """`markdown` with every marker replaced."""
    if "<!-- safety-codes -->" in markdown:
        markdown = markdown.replace("<!-- safety-codes -->", safety_codes())
    markdown = API.sub(_api_block, INCLUDE.sub(_include_block, markdown))
    return OUTPUT.sub(lambda m: _output_block(m, page), markdown)


def on_page_markdown(markdown, page, config, files, **kwargs):
    return render(markdown, page.file.src_path)
