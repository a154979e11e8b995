"""The compiled launcher: an optional C extension in front of a torch launch's generated launcher.

Takes: a generated Python launcher (`fastpath`) just built for a launch, and that launch's
`launch_cuda.Plan`. Gives `wrap(launcher, plan, num_warps)`: a `_claunch.Launcher` (the
C type of `claunch.c`) to put at the head of the configuration in the Python launcher's
place, or None where the Python launcher stays alone; `mode()` and `extension()`.
(claunch_args.h holds what the extension reads, checks and packs of each argument.)

Where: the extension is built at its first use (the warm-up thread's, in a program that
imported torch, or the first torch launch's) with the system C compiler and Python's
headers (~0.3 s, as Triton builds its launcher), one file per source and Python version in
the verdigris cache directory (`cache.cache_dir`); later processes load it (~1 ms).

Guarantees:
- `VERDIGRIS_LAUNCHER=python` never builds it; `c` requires it (a BackendError saying why
  it could not be built); unset, it is used where it builds and silently not where it
  does not (no compiler, no headers, an unwritable cache directory).
- It stands in front of launches whose arrays are all of torch's own tensor types
  (`torch.Tensor`, `nn.Parameter`: not a subclass, which may override what the Python
  launcher reads) whose DLPack C exchange API (`__dlpack_c_exchange_api__`) describes
  them, on the plain `cuLaunchKernel` path (not a cooperative kernel's, not a kernel's own
  launch, no fp8 scalar), with at most 64 parameters of at most 8 dimensions. Per
  launch it checks what the Python launcher checks, from the same plan: exact types,
  dtype, device, rank, C order, unit inner stride, 16-byte alignment, extents, the tile
  track's divisibility facts, scalar ranges, constexprs, module constants, the bounds
  guard and `vg.assume` facts (one call of a generated Python function, for kernels that
  have them), the alias check, the fault flag; it packs what `struct` would pack. Any
  miss hands the call, unchanged, to the Python launcher behind it, which decides again.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from inspect import Parameter
from types import SimpleNamespace

from ..errors import BackendError
from ..ir.limits import MAX_ELEMENTS, MAX_EXTENT
from . import cache, driver, faults, interop, streams
from .dlpack import KDL_CUDA
from .module import _FORMAT, CudaKernel
from .scalars import NARROW_END, NARROW_LOW, narrowness
from .speckeys import MULTIPLE, OFF_GRID, divisibility

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "claunch.c")
HEADER = os.path.join(os.path.dirname(SOURCE), "claunch_args.h")  # which it includes
ROLES = {"ptr": 0, "shape": 1, "stride": 2, "scalar": 3}
FIXED = 4
_LIMITS = (MAX_EXTENT, MAX_ELEMENTS, OFF_GRID, MULTIPLE, NARROW_LOW, NARROW_END)
_lock = threading.Lock()
_loaded: dict = {}  # "module" -> the extension, or the reason it is not there


def mode() -> str:
    """`VERDIGRIS_LAUNCHER`: "python", "c", or "auto" (unset)."""
    chosen = os.environ.get("VERDIGRIS_LAUNCHER", "auto").strip().lower() or "auto"
    if chosen not in ("python", "c", "auto"):
        raise BackendError(f"VERDIGRIS_LAUNCHER={chosen!r}: it is 'python', 'c' or unset")
    return chosen


def extension():
    """The `_claunch` module, built and loaded once per process; None where it cannot be
    (or with VERDIGRIS_LAUNCHER=python); BackendError with VERDIGRIS_LAUNCHER=c."""
    chosen = mode()
    if chosen == "python" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None  # (its one set of slots per launcher rests on the GIL)
    with _lock:
        if "module" not in _loaded:
            try:
                _loaded["module"] = _load(_build())
            except (OSError, ImportError, subprocess.SubprocessError, BackendError) as err:
                _loaded["module"] = str(err) or type(err).__name__
    found = _loaded["module"]
    if isinstance(found, str):
        if chosen == "c":
            raise BackendError(f"VERDIGRIS_LAUNCHER=c, but the compiled launcher could not be "
                               f"built: {found}", hint="install a C compiler and Python's "
                               "headers (python3-dev), or unset VERDIGRIS_LAUNCHER")
        return None
    return found


def _build() -> str:
    """The extension's path in the cache directory, compiled there if it is not yet."""
    source = b""
    for name in (SOURCE, HEADER):
        with open(name, "rb") as f:
            source += f.read()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    digest = hashlib.sha256(source + sys.version.encode() + suffix.encode()).hexdigest()[:16]
    folder = cache.cache_dir()
    path = os.path.join(folder, f"claunch-{digest}{suffix}")
    if os.path.exists(path):
        return path
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise BackendError(f"no Python.h in {include}")
    compiler = shlex.split(sysconfig.get_config_var("CC") or "") or [shutil.which("cc") or "cc"]
    if shutil.which(compiler[0]) is None:
        compiler = [shutil.which("cc") or shutil.which("gcc") or "cc"]
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f".claunch.{os.getpid()}{suffix}")
    done = subprocess.run(compiler + ["-O2", "-shared", "-fPIC", f"-I{include}", "-o", partial,
                                      SOURCE, "-ldl"], capture_output=True, text=True)
    if done.returncode:
        raise BackendError(f"{compiler[0]} failed: {done.stderr.strip()[-500:]}")
    os.replace(partial, path)
    return path


def _load(path: str):
    spec = importlib.util.spec_from_file_location("verdigris.runtime._claunch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dl_device(ordinal: int) -> tuple:
    """The DLPack device of a CUDA ordinal, as a launch's tensors must report it."""
    return (KDL_CUDA, ordinal)


def wrap(launcher, plan, num_warps):
    """A compiled launcher in front of `launcher` (which it hands every call it does not
    take), or None where this launch is not one it covers."""
    compiled, kernel = plan.compiled, launcher.kernel
    if not plan.torch_args or type(compiled).launch is not CudaKernel.launch \
            or len(kernel.params) > 64:
        return None
    torch = sys.modules.get("torch")
    arrays = [v for v, info in zip(plan.values, plan.infos) if info is not None]
    # torch's own tensor types only: a subclass may override what the Python launcher
    # reads (`data_ptr()`...), which the exchange API does not see
    if torch is None or any(type(v) not in (torch.Tensor, torch.nn.Parameter) for v in arrays):
        return None
    try:
        capsule = type(arrays[0]).__dlpack_c_exchange_api__ if arrays else None
    except AttributeError:
        return None
    if compiled.raw_launch is not driver.api().cuLaunchKernel:
        return None
    built = extension()
    if built is None:
        return None
    entry = built.driver_entry("cuLaunchKernel_ptsz" if os.environ.get(
        "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM") == "1" else "cuLaunchKernel")
    slots = _slots(plan)
    if not entry or slots is None:
        return None
    device = dl_device(plan.device)
    constants = tuple((holder, name if isinstance(holder, dict) else None, value)
                      for holder, name, value in kernel._constants or ()) or None
    try:
        params = _params(built, plan, device)
        if params is None:
            return None
        front = built.Launcher(
            launcher, int(compiled.function), entry, tuple(plan.grid), tuple(plan.block),
            compiled.shared, faults.flag_address(plan.device), capsule, device, params,
            slots, _guard(launcher, plan), _reporter(compiled), streams.handle, num_warps,
            constants, kernel.track == "tile", _LIMITS, tuple(p.name for p in kernel.params),
            tuple(p.default for p in kernel.params), Parameter.empty)
    except Exception:  # noqa: BLE001 (a tensor its library will not describe, an exchange
        return None  # API of another version: whatever is raised, the Python launcher stays)
    front.__dict__.update(launcher.__dict__, fallback=launcher)
    return front


def _params(built, plan, device):
    """Per parameter, what the extension checks of it (`fill_param` in claunch.c)."""
    out = []
    for i, (value, info, entry) in enumerate(zip(plan.values, plan.infos, plan.key[2:])):
        fact = divisibility(entry)
        fact = -1 if fact is None else int(fact)
        if entry[0] == "c":
            out.append(("c", entry[1]))
        elif entry[0] == "s":
            narrow = narrowness(entry)
            out.append(("s", type(value), entry[4] if entry[3:4] == ("weak",) else 0, fact,
                        -1 if narrow is None else int(narrow), int(entry[1].startswith("u"))))
        else:
            dtype, where, _, _, _ = built.describe(value)
            ndim, unit, aligned = entry[2:5]
            if where != device or ndim > 8:
                return None
            contiguous = tuple(info.strides) == interop._c_strides(tuple(info.shape))
            out.append(("a", type(value), type(value).__dlpack_c_exchange_api__, dtype, ndim,
                        info.dtype.itemsize, int(contiguous), int(unit), int(aligned), fact,
                        int(i in plan.spec.written_slots)))
    return tuple(out)


def _slots(plan):
    """Per ABI value, (role, argument, axis, struct format, fixed value): the fault block's
    address is the last, fixed; None where a scalar's format is not one the extension
    packs (fp8, which needs ml_dtypes)."""
    abi = plan.compiled.packer.abi
    out = []
    for (index, role, axis), param in zip(plan.spec.abi_slots, abi):
        name = param.dtype.name
        fmt = "r" if name == "bfloat16" else None if name.startswith("float8") else _FORMAT[name]
        if fmt is None:
            return None
        out.append((ROLES[role], index, axis or 0, fmt, 0))
    if len(abi) != len(plan.spec.abi_slots) + 1:
        return None
    return tuple(out) + ((FIXED, 0, 0, _FORMAT[abi[-1].dtype.name],
                          faults.block_address(plan.device)),)


def _guard(launcher, plan):
    """None, or a function of every array's extents then every argument that is true when
    the bounds guard picks this launch's variant and its `vg.assume` facts hold (the
    Python launcher's tests of them, `fastpath._inline_guard`)."""
    from .fastpath import _inline_guard

    spec = plan.spec
    if spec.bounds_guard is None and spec.assumptions is None:
        return None
    names = [p.name for p in launcher.kernel.params]
    facts = {i: SimpleNamespace(shapes=[f"_n{i}_{k}" for k in range(len(info.shape))])
             for i, info in enumerate(plan.infos) if info is not None}
    tests, env = [], {}
    if spec.bounds_guard is not None:
        condition = _inline_guard(spec.bounds_guard.condition, names, facts, plan)
        tests.append(f"not ({condition})" if plan.checked else f"({condition})")
    if spec.assumptions is not None:
        env["_vg_assumed"] = spec.assumptions.holds
        atoms = _inline_guard(", ".join(spec.assumptions.atoms), names, facts, plan)
        tests.append(f"_vg_assumed({atoms})")
    shapes = [n for f in facts.values() for n in f.shapes]
    source = (f"def guard({', '.join(shapes + names)}):\n"
              f"    return {' and '.join(tests)}\n")
    namespace: dict = {}
    exec(cache.code(source, f"<verdigris launch guard: {launcher.kernel.__name__}>"), env,
         namespace)
    return namespace["guard"]


def _reporter(compiled):
    """What the extension calls when the driver refuses a launch: `launch_failed` with the
    driver's code as a CUresult."""
    result = driver.api().CUresult

    def failed(code, grid, block, address, stream, shared):
        compiled.launch_failed(result(code), grid, block, address, stream, shared)
    return failed
