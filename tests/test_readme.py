"""Every Python code block of README.md runs (on the cpu backend)."""
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_has_python_examples():
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    # Kernels need their source in a file, as in any user's program.
    path = tmp_path / f"readme_block_{index}.py"
    path.write_text(BLOCKS[index])
    monkeypatch.syspath_prepend(str(tmp_path))
    code = compile(BLOCKS[index], str(path), "exec")
    exec(code, {"__name__": f"readme_block_{index}", "__file__": str(path)})
