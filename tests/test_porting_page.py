"""docs/porting.md keeps its promises: every verdigris name its tables and prose cite exists,
each peer's section shows the peer's kernel beside a port that runs, and the refusal it
quotes is what the checker says.

Its Python blocks themselves run in tests/test_docs.py (the ports, against NumPy); this file
checks what that cannot: names in inline code (`tile.scatter_add`, `simt.shared.dynamic`,
`vg.autotune`), which no block executes, so that a renamed or missing operation fails here
instead of misleading a porter; and the racy twin of the numba port, which the page only
describes.
"""
import re
from pathlib import Path

import pytest

import verdigris as vg
from verdigris import simt, tile

PAGE = Path(__file__).resolve().parents[1] / "docs" / "porting.md"
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`]+)`")                # a span may wrap a line
NAME = re.compile(r"(?<![\w.])(vg|tile|simt)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
MODULES = {"vg": vg, "tile": tile, "simt": simt}
PEERS = ["Triton", "cuTile Python", "numba-cuda", "CUDA C++"]


def cited_names(text: str) -> list[str]:
    prose = FENCED.sub("", text)
    return sorted({m.group(0) for span in INLINE.findall(prose) for m in NAME.finditer(span)})


def resolves(name: str) -> bool:
    module, *path = name.split(".")
    value = MODULES[module]
    for part in path:
        if not hasattr(value, part):
            return False
        value = getattr(value, part)
    return True


def test_the_page_cites_names_and_the_check_sees_a_missing_one():
    names = cited_names(PAGE.read_text())
    assert len(names) > 40 and "tile.scatter_add" in names and "simt.shared.dynamic" in names
    assert "tile.tune" not in names                     # cuTile's `cuda.tile.tune` is not ours
    assert not resolves("tile.atomic_exchange") and not resolves("simt.shared.nothing")


@pytest.mark.parametrize("name", cited_names(PAGE.read_text()))
def test_every_cited_verdigris_name_exists(name):
    assert resolves(name), f"docs/porting.md cites `{name}`, which verdigris does not have"


@pytest.mark.parametrize("peer", PEERS)
def test_each_peer_has_a_table_its_kernel_and_a_running_port(peer):
    sections = re.split(r"^## ", PAGE.read_text(), flags=re.M)
    section = next(s for s in sections if s.startswith(f"From {peer}\n"))
    assert re.search(rf"^\| {re.escape(peer)} \| verdigris \|$", section, re.M), "no spelling table"
    blocks = re.findall(r"(<!--\s*test:\s*skip[^>]*-->\s*\n)?^```(\w*)\n", section, re.M)
    peer_kernel = [lang for skip, lang in blocks if skip or lang != "python"]
    ports = [lang for skip, lang in blocks if not skip and lang == "python"]
    assert peer_kernel and ports, f"{peer}: the peer's kernel and a port that runs, side by side"


def python_blocks(text: str) -> list[str]:
    runnable = re.compile(r"(<!--\s*test:\s*skip[^>]*-->\s*\n)?^```python\n(.*?)^```", re.S | re.M)
    return [m.group(2) for m in runnable.finditer(text) if not m.group(1)]


@pytest.fixture
def cpu_backend():
    previous = vg.current_backend()
    vg.set_backend("cpu")
    yield
    vg.set_backend(previous)


def test_the_numba_port_without_its_middle_barrier_is_refused_as_the_page_says(tmp_path, cpu_backend):
    """The page's racy twin: the numba port (which runs in test_docs.py) minus the barrier
    after `m = buf[0]` is refused before it runs, with the threads and element it quotes."""
    text = PAGE.read_text()
    preamble, *ports = python_blocks(text)
    port = next(p for p in ports if "buf = simt.shared.array(BLOCK" in p)
    barrier = "    m = buf[0]\n    simt.barrier()\n"
    assert port.count(barrier) == 1
    racy = tmp_path / "racy_softmax.py"
    racy.write_text(preamble + port.replace(barrier, "    m = buf[0]\n"))
    quoted = re.search(r"\(VG211: `(.*?)`\)", text, re.S).group(1).replace("\n", " ")
    with pytest.raises(vg.SafetyError) as refused:
        exec(compile(racy.read_text(), str(racy), "exec"), {"__name__": "racy_softmax"})
    assert refused.value.code == "VG211" and quoted in str(refused.value)
