"""The cpu backend: runs the typed kernel IR with NumPy, arrays in place.

Takes: an `ir.Kernel`, a launch configuration and NumPy arguments. Gives: `run_simt` (the
SIMT interpreter; see `simt`; atomics in `atomics`) and `Access` (what a memory observer
sees). Guarantees: the same semantics as the compiled kernels, as `ir.nodes` defines them;
every launch runs under shadow memory (`shadow`), which raises `SafetyError` at the first
race it observes.
"""
from .simt import Access, run_simt  # noqa: F401
