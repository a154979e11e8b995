"""PTX -> cubin with NVIDIA's ptxas, and cubin -> SASS text with nvdisasm or cuobjdump.

Takes: PTX text and a target (`nvptx.TARGETS`), or a cubin. Gives: `ptxas_available()`,
`assemble(ptx, target) -> bytes` and `disassemble(cubin) -> str`. Guarantees: the tools
are looked up once (`toolkit`); a missing tool raises `BackendError` saying what to
install; PTX that ptxas rejects raises `CompileError` with ptxas's message (that is a
compiler bug, never the user's).
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ..errors import BackendError, CompileError
from .nvptx import TARGETS
from .toolkit import INSTALL_HINT, find_tool

# Both print SASS of every kernel in a cubin; nvdisasm's is the cleaner listing.
_DISASSEMBLERS = (("nvdisasm", ("-c",)), ("cuobjdump", ("-sass",)))


def ptxas_available() -> bool:
    return find_tool("ptxas") is not None


def _run(argv: list, what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"{what} failed (exit {done.returncode}):\n{done.stderr.strip()}")


def assemble(ptx: str, target: str) -> bytes:
    """The cubin ptxas makes of `ptx` for `target` (sm_90a needs PTX that says so)."""
    ptxas = find_tool("ptxas")
    if ptxas is None:
        raise BackendError("ptxas was not found", hint=INSTALL_HINT)
    if target not in TARGETS:
        raise CompileError(f"unknown target {target!r}; the targets are {', '.join(TARGETS)}")
    with tempfile.TemporaryDirectory(prefix="verdigris-") as tmp:
        source, cubin = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        source.write_text(ptx)
        _run([ptxas, f"-arch={target}", "-o", str(cubin), str(source)], "ptxas")
        return cubin.read_bytes()


def disassemble(cubin: bytes) -> str:
    """SASS of `cubin`, from nvdisasm or else cuobjdump."""
    for tool, flags in _DISASSEMBLERS:
        path = find_tool(tool)
        if path is None:
            continue
        with tempfile.TemporaryDirectory(prefix="verdigris-") as tmp:
            file = Path(tmp, "kernel.cubin")
            file.write_bytes(cubin)
            done = subprocess.run([path, *flags, str(file)], capture_output=True, text=True)
            if done.returncode != 0:
                raise BackendError(f"{tool} failed (exit {done.returncode}):\n{done.stderr.strip()}")
            return done.stdout
    raise BackendError("neither nvdisasm nor cuobjdump was found to show SASS",
                       hint="install the CUDA toolkit, or `pip install nvidia-cuda-nvdisasm "
                            "nvidia-cuda-cuobjdump`")
