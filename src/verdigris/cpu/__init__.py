"""The cpu backend: runs the typed kernel IR with NumPy, arrays in place.

Takes: an `ir.Kernel`, a launch configuration and NumPy arguments. Gives: `run_simt` (the
SIMT interpreter; see `simt`; atomics in `atomics`), `run_tile` (the tile interpreter; see
`tiles`; its random numbers in `philox`) and `Access` (what a memory observer sees).
Guarantees: the same semantics as the compiled kernels, as `ir.nodes` and `ir.tiles`
define them; every launch runs under shadow memory (`shadow`), which raises `SafetyError`
at the first race it observes.
"""
from .simt import Access, run_simt  # noqa: F401
from .tiles import run_tile  # noqa: F401
