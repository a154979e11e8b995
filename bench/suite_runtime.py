"""`verdigris bench` cases for the runtime: launch overhead and first-call (compile) times.

Registers (issue 7's cases), all built from `bench/runtime.py`'s functions and kernels:
- launch overhead of the 4-argument axpy and of the 16-argument kernel (nine arrays, seven
  scalars), 256 elements in one block: ours with torch tensors, CuPy arrays and vg.Arrays
  (configurations; the best is chosen and re-timed, all are in the JSON) beside the raw
  `cuLaunchKernel` of the same compiled kernel with its arguments packed once (the
  roofline), torch's add, CuPy's RawKernel and Triton's axpy (those three for axpy only:
  they have no 16-argument kernel). The variants are `runtime.launch_variants`', built once
  per run.
- first call of vector add (SIMT), softmax (tile, 4096 columns) and GEMM (tile, 1024^3
  bf16): `runtime.first_call` in a fresh process (the inputs made before the clock starts
  and the kernels are defined, on both sides), ours beside Triton's and CuPy's (NVRTC; no
  GEMM), with an empty cache ("cold"), again with our background warm-up turned off
  ("cold, warm-up off": VERDIGRIS_WARMUP=0, which the peers ignore) and with the cache
  that a cold call filled ("warm"; `--quick` measures the two cold ones). Each figure is
  the median of several fresh processes (`timing.GpuTimer.first_call_rounds`).

Launch and first-call figures have no correctness check here: the kernels are the ones the
other cases check. The launch cases need torch; the first calls run where a peer's own
imports allow (ours needs only NumPy, and ml_dtypes for the GEMM's bfloat16 inputs).
"""
from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from pathlib import Path

from verdigris.benchsuite import ROOFLINE, case, has, load_script

runtime = load_script(Path(__file__).with_name("runtime.py"))  # NumPy and the stdlib only

# runtime.launch_variants names our variants "ours <kernel> (<array kind>)".
ARRAY_KINDS = {"torch": "torch tensors", "cupy": "CuPy arrays", "vg.Array": "vg.Array"}
# The peer -> the script of runtime.FIRST_CALL that times its first call.
FIRST_CALL_SCRIPTS = {"verdigris": "ours", "triton": "triton", "cupy": "cupy"}
# The kernel (as runtime.FIRST_CALL's scripts name it) -> the case's label, the peers that
# have it (runtime.py has no CuPy GEMM).
FIRST_CALLS = {
    "vector_add": ("vector add (SIMT)", ("verdigris", "triton", "cupy")),
    "softmax": ("softmax (tile)", ("verdigris", "triton", "cupy")),
    "gemm": ("GEMM 1024^3 bf16 (tile)", ("verdigris", "triton")),
}


@functools.lru_cache(maxsize=None)
def _work() -> str:
    """A directory with runtime.py's kernel modules (ours, Triton's, the CUDA C sources),
    written once per run: launch_variants imports from it, and so do the fresh processes."""
    work = tempfile.mkdtemp(prefix="vg-bench-runtime-")
    runtime._module(work, "vg_runtime_kernels", runtime.OURS)
    runtime._module(work, "bench_cupy_sources", f"CUPY = {runtime.CUPY!r}\n")
    if has("triton"):
        runtime._module(work, "tr_runtime_kernels", runtime.TRITON)
    return work


@functools.lru_cache(maxsize=None)
def _launch_variants() -> dict:
    return runtime.launch_variants(_work())


def _failed(name: str):
    def run():
        raise RuntimeError(f"{name!r} did not launch (bench/runtime.py printed why)")

    return run


def _launches(floor: str, ours: str, peers: dict) -> dict:
    """runtime.launch_variants' variants of one kernel as the suite's implementations; a
    variant it dropped (its launch failed) is reported as an error, not left out."""
    variants = _launch_variants()

    def variant(name):
        return variants.get(name) or _failed(name)

    return {ROOFLINE: variant(floor),
            "verdigris": {label: variant(f"{ours} ({kind})") for kind, label in ARRAY_KINDS.items()
                          if kind != "cupy" or has("cupy")},
            **{peer: variant(name) for peer, name in peers.items() if has(peer)}}


def _one_block(n) -> str:
    return f"{n} f32, one block"


@case("launch overhead, axpy (4 args)", kind="launch", sizes=[runtime.N], requires=["torch"],
      size_label=_one_block)
def bench_launch_axpy(n):
    return _launches("raw cuLaunchKernel (cuda-bindings)", "ours axpy",
                     {"torch": "torch.add(out=)", "cupy": "CuPy RawKernel", "triton": "Triton"})


@case("launch overhead, 16 args", kind="launch", sizes=[runtime.N], requires=["torch"],
      size_label=_one_block)
def bench_launch_sixteen(n):
    return _launches("raw cuLaunchKernel, 16-argument kernel", "ours 16 args", {})


@functools.lru_cache(maxsize=None)
def _bytecode_written() -> None:
    """Fresh processes import verdigris with the bytecode caches a user has: write them."""
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    str(Path(runtime.SRC) / "verdigris")], check=False)


COLD, COLD_NO_WARMUP, WARM = "cold", "cold, warm-up off", "warm"
_FILLED: dict = {}  # (script, kernel) -> a cache directory that a first call has filled


def _first_call_ms(script: str, kernel: str, state: str) -> float:
    """The first call of `kernel` through runtime.FIRST_CALL[script] in a fresh process:
    with an empty cache (COLD, COLD_NO_WARMUP: our warm-up turned off), or with the one an
    earlier cold call filled (WARM)."""
    _bytecode_written()

    def first_call(cache):
        ms, detail = runtime.first_call(script, kernel, _work(), cache,
                                        warmup=state != COLD_NO_WARMUP)
        if ms is None:
            raise RuntimeError(detail)
        return ms

    key = (script, kernel)
    if state != WARM or key not in _FILLED:
        cache = tempfile.mkdtemp(prefix=f"vg-bench-{script}-cache-")
        cold = first_call(cache)
        _FILLED[key] = cache
        if state != WARM:
            return cold
    return first_call(_FILLED[key])


def _first_call_case(kernel: str, peers):
    def setup(state):
        return {peer: functools.partial(_first_call_ms, FIRST_CALL_SCRIPTS[peer], kernel, state)
                for peer in peers if has(peer)}

    return setup


for _kernel, (_label, _peers) in FIRST_CALLS.items():
    case(f"first call: {_label}", kind="compile", sizes=[COLD, COLD_NO_WARMUP, WARM],
         quick=[COLD, COLD_NO_WARMUP], size_label=str)(_first_call_case(_kernel, _peers))
