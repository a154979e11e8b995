"""Every code block of the documentation runs, on the cpu backend.

- Python blocks of a docs page run in order, in one namespace per page (a tutorial builds
  up), each from its own file so kernels have their source.
- `sh` blocks: each `verdigris ...` line runs through the CLI in the repository root and
  must exit 0. Any other command (pip, pytest, mkdocs) makes the block fail unless it is
  marked.
- Marker comments on the line before a block: `<!-- test: skip REASON -->` (not run, shown
  as skipped with the reason), `<!-- test: pending REASON -->` (a feature being built: run,
  and an expected failure until it passes).
- Files included with `<!-- include: PATH -->` run too; `raises=ERROR` says the program
  must raise `vg.ERROR`.
- The build hook's markers all resolve: the generated safety section has every code with
  the checker's output, and every quoted command runs.

README's Python blocks are run by test_readme.py; its `sh` blocks are held to the same
rules here.
"""
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

import verdigris as vg
from verdigris.cli import main
from verdigris.safety.codes import CODES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "bench" not in p.relative_to(DOCS).parts)
BLOCK = re.compile(r"(?:<!--\s*test:\s*(?P<kind>skip|pending)\s+(?P<reason>.*?)\s*-->\s*\n)?"
                   r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.S | re.M)
INCLUDE = re.compile(r"<!--\s*include(?:\s+raises=(?P<raises>\w+))?\s*:\s*(?P<path>\S+)\s*-->")


def _hook():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "hooks" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(page: Path, lang: str):
    return [m for m in BLOCK.finditer(page.read_text()) if m.group("lang") == lang]


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture
def cpu_backend():
    previous = vg.current_backend()
    vg.set_backend("cpu")
    yield
    vg.set_backend(previous)


def test_there_are_pages_and_each_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert len(PAGES) >= 8
    for page in PAGES:
        if "snippets" not in page.parts:
            assert str(page.relative_to(DOCS)) in nav, f"{name(page)} is not in mkdocs.yml's nav"


PYTHON_PAGES = [p for p in PAGES if blocks(p, "python")]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=name)
def test_python_blocks_of_a_page_run_in_order(page, tmp_path, monkeypatch, cpu_backend):
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = {"__name__": f"docs_{page.stem}"}
    ran = pending = 0
    for index, match in enumerate(blocks(page, "python")):
        if match.group("kind") == "skip":
            continue
        path = tmp_path / f"{page.stem}_block_{index}.py"
        path.write_text(match.group("body"))
        code = compile(match.group("body"), str(path), "exec")
        if match.group("kind") == "pending":
            try:
                exec(code, namespace)
            except Exception as exc:  # expected while the feature is being built
                pending += 1
                reason = f"{match.group('reason')}: {type(exc).__name__}: {exc}"
                print(f"pending block {index} of {name(page)}: {reason}")
            continue
        exec(code, namespace)
        ran += 1
    if not ran and not pending:
        pytest.skip(f"every Python block of {name(page)} is marked skip")
    if pending:
        pytest.xfail(f"{pending} block(s) pending in {name(page)}")


def _marked(page):
    return [pytest.param(page, m, id=f"{name(page)}:{page.read_text()[:m.start()].count(chr(10)) + 1}")
            for m in BLOCK.finditer(page.read_text()) if m.group("kind") == "skip"]


@pytest.mark.parametrize("page, match", [p for page in PAGES for p in _marked(page)])
def test_skipped_blocks_say_why(page, match):
    assert len(match.group("reason")) > 8, "say why the block does not run"
    pytest.skip(match.group("reason"))


SH_BLOCKS = [pytest.param(page, m, id=f"{name(page)}:{page.read_text()[:m.start()].count(chr(10)) + 1}")
             for page in [*PAGES, ROOT / "README.md"] for m in blocks(page, "sh")
             if m.group("kind") is None]


@pytest.mark.parametrize("page, match", SH_BLOCKS)
def test_shell_blocks_run(page, match, capsys, monkeypatch, cpu_backend):
    monkeypatch.chdir(ROOT)
    for line in match.group("body").splitlines():
        command = line.split("#", 1)[0].strip()
        if not command:
            continue
        argv = shlex.split(command)
        assert argv[0] == "verdigris", (
            f"{name(page)}: `{command}` cannot run in the tests: run only `verdigris ...` "
            "commands, or mark the block <!-- test: skip REASON -->")
        status = main(argv[1:])
        out, err = capsys.readouterr()
        assert status == 0, f"`{command}` exited with {status}:\n{out}\n{err}"


INCLUDES = [pytest.param(m.group("path"), m.group("raises"), id=m.group("path"))
            for page in PAGES for m in INCLUDE.finditer(page.read_text())]


@pytest.mark.parametrize("path, raises", INCLUDES)
def test_included_programs_run(path, raises, monkeypatch, cpu_backend):
    file = ROOT / path
    monkeypatch.syspath_prepend(str(file.parent))
    code = compile(file.read_text(), str(file), "exec")
    if raises:
        with pytest.raises(getattr(vg, raises)):
            exec(code, {"__name__": "__main__"})
    else:
        exec(code, {"__name__": "__main__"})


def test_the_safety_page_shows_every_code_with_what_the_checker_says(cpu_backend):
    text = _hook().render((DOCS / "safety.md").read_text(), "safety.md")
    sections = re.split(r"^## (?=VG\d{3}: )", text, flags=re.M)[1:]
    assert [s[:5] for s in sections] == list(CODES)
    for section in sections:
        code = section[:5]
        shown = re.findall(r"```text\n(.*?)```", section, re.S)
        assert shown and shown[0].strip(), f"{code}: no output"
        detected = re.search(rf"^{code.lower()}_racy\.py:\d+:\d+: {code}[: ]", shown[0], re.M) \
            or f": {code}:" in shown[0]
        # the page says the checker does not report a code exactly when it does not
        assert bool(detected) != ("Not reported by this version yet" in section), section


def test_every_hook_marker_resolves(cpu_backend):
    hook = _hook()
    for page in PAGES:
        text = page.read_text()
        if "<!-- output" in text or "<!-- include" in text or "<!-- api" in text:
            rendered = hook.render(text, name(page))
            assert "<!-- output" not in rendered and "<!-- include" not in rendered
            assert "<!-- api" not in rendered


def test_an_output_marker_with_a_failing_command_fails_the_build():
    hook = _hook()
    with pytest.raises(RuntimeError, match="exited with status 2"):
        hook.render("<!-- output: verdigris explain VG999 -->")
    assert "$ verdigris explain VG201\nVG201: " in hook.render("<!-- output lines=1-1: verdigris explain VG201 -->")


def test_readme_states_the_docs_build_command():
    assert "mkdocs build --strict" in (ROOT / "README.md").read_text()
