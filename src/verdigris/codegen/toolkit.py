"""Where NVIDIA's tools live: ptxas, nvdisasm, cuobjdump and libdevice.

Takes: nothing (reads PATH, CUDA_HOME/CUDA_PATH and the installed NVIDIA wheels).
Gives: `find_tool(name)` (an executable's path or None) and `find_libdevice()` (the path of
libdevice.10.bc or None). Guarantees: each answer is computed once per process; the
cheap places (PATH, the toolkit directories) are tried before `cuda.pathfinder`, which
finds wheels (`nvidia-cuda-nvcc` for ptxas; `nvidia-nvvm`, or `nvidia-cuda-nvcc-cu12`,
for libdevice) but costs ~50 ms to import.
"""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

LIBDEVICE_RELPATH = Path("nvvm", "libdevice", "libdevice.10.bc")
INSTALL_HINT = ("install the CUDA toolkit, or the wheels: "
                "`pip install nvidia-cuda-nvcc nvidia-nvvm` (CUDA 12: nvidia-cuda-nvcc-cu12)")


def _toolkit_roots() -> list[Path]:
    roots = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    ptxas = shutil.which("ptxas")
    if ptxas:  # <root>/bin/ptxas, possibly behind a wrapper or link
        roots += [Path(ptxas).parent.parent, Path(ptxas).resolve().parent.parent]
    return roots + [Path("/usr/local/cuda")]


@functools.cache
def find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for root in _toolkit_roots():
        if (root / "bin" / name).is_file():
            return str(root / "bin" / name)
    from cuda.pathfinder import find_nvidia_binary_utility

    return find_nvidia_binary_utility(name)


@functools.cache
def find_libdevice() -> Path | None:
    for root in _toolkit_roots():
        if (root / LIBDEVICE_RELPATH).is_file():
            return root / LIBDEVICE_RELPATH
    from cuda.pathfinder import BitcodeLibNotFoundError, find_bitcode_lib

    try:
        return Path(find_bitcode_lib("device"))
    except BitcodeLibNotFoundError:
        return None
