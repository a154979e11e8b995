"""PTX -> cubin with NVIDIA's ptxas, and cubin -> SASS text with nvdisasm or cuobjdump.

Takes: PTX text and the GPU architecture to assemble for (`sm_86`: any ptxas knows; PTX
for a `TARGETS` target assembles for that architecture and, without an `a` suffix, later
ones), or a cubin. Gives: `ptxas_path()`, `ptxas_available()`, `assemble(ptx, arch) ->
bytes` (the ptxas program), `nvjitlink_available()` and `link(ptx, arch) -> bytes` (the
same through the nvJitLink library, in this process), and `disassemble(cubin) -> str`.
Guarantees: the cubin keeps the PTX's line table (`-lineinfo`, which changes no
instruction); the tools are looked up once (`toolkit`); a missing tool raises `BackendError`
saying what to install; PTX that ptxas or nvJitLink rejects raises `CompileError` with its
message (a compiler bug, never the user's).
"""
from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

from ..errors import BackendError, CompileError
from .toolkit import INSTALL_HINT, find_tool

# Keep the PTX's `.loc` line table in the cubin (profilers and compute-sanitizer show the
# kernel's Python lines from it); it changes no instruction.
LINE_INFO_FLAGS = ("-lineinfo",)
# Both print SASS of every kernel in a cubin; nvdisasm's is the cleaner listing, and with
# `-g` it names the Python file and line of each run of instructions (the line table).
_DISASSEMBLERS = (("nvdisasm", ("-c", "-g")), ("cuobjdump", ("-sass",)))


def ptxas_path() -> str | None:
    return find_tool("ptxas")


def ptxas_available() -> bool:
    return ptxas_path() is not None


def _run(argv: list, error: type) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tool = Path(argv[0]).name
        raise error(f"{tool} failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return done.stdout


def assemble(ptx: str, arch: str, optimize: bool = True) -> bytes:
    """The cubin ptxas makes of `ptx` for `arch`. `optimize=False` runs ptxas at -O0: the
    PTX is checked as fully (syntax, types, the target's instructions, registers and shared
    memory) in a fraction of the optimizing back end's time (6 s against 47 s for a
    16,384-element sort network), for callers that need to know it assembles, not its
    code."""
    ptxas = ptxas_path()
    if ptxas is None:
        raise BackendError("ptxas was not found", hint=INSTALL_HINT)
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CompileError(f"{arch!r} is not a GPU architecture (such as sm_90)")
    with tempfile.TemporaryDirectory(prefix="verdigris-") as tmp:
        source, cubin = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        source.write_text(ptx)
        level = [] if optimize else ["-O0"]
        _run([ptxas, f"-arch={arch}", *level, *LINE_INFO_FLAGS, "-o", str(cubin), str(source)], CompileError)
        return cubin.read_bytes()


@functools.cache
def nvjitlink_available() -> bool:
    """Whether NVIDIA's nvJitLink library (the `nvidia-nvjitlink` wheel, or a toolkit's)
    can be loaded: PTX -> cubin in this process, without starting ptxas."""
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()
    except Exception:  # no cuda-bindings, or no library: cuda-pathfinder raises its own
        return False
    return True


def link(ptx: str, arch: str) -> bytes:
    """The cubin nvJitLink makes of `ptx` for `arch` (what `assemble` gives, in process)."""
    from cuda.bindings import nvjitlink

    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CompileError(f"{arch!r} is not a GPU architecture (such as sm_90)")
    data = ptx.encode()
    handle = nvjitlink.create(1 + len(LINE_INFO_FLAGS), [f"-arch={arch}", *LINE_INFO_FLAGS])
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise CompileError(f"nvJitLink failed:\n{log.rstrip(bytes(1)).decode()}") from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def disassemble(cubin: bytes) -> str:
    """SASS of `cubin`, from nvdisasm or else cuobjdump."""
    for tool, flags in _DISASSEMBLERS:
        path = find_tool(tool)
        if path is None:
            continue
        with tempfile.TemporaryDirectory(prefix="verdigris-") as tmp:
            file = Path(tmp, "kernel.cubin")
            file.write_bytes(cubin)
            return _run([path, *flags, str(file)], BackendError)
    raise BackendError("neither nvdisasm nor cuobjdump was found to show SASS",
                       hint="install the CUDA toolkit, or `pip install nvidia-cuda-nvdisasm "
                            "nvidia-cuda-cuobjdump`")
