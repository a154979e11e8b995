"""The cpu backend: runs the typed kernel IR with NumPy, arrays in place.

Takes: an `ir.Kernel`, a launch configuration and NumPy arguments. Gives: `run_simt` (the
SIMT interpreter; see `simt`; arrays and accesses in `memory`, atomics in `atomics`, warps
and barriers in `warp`), `run_tile` (the tile interpreter; see `tiles`; its random numbers
in `philox`) and `Access` (what a memory observer sees).
Guarantees: the same semantics as the compiled kernels, as `ir.nodes` and `ir.tiles`
define them; every launch runs under shadow memory (`shadow`), which raises `SafetyError`
at the first race it observes.
"""
# Loaded on first use: the code generator imports `cpu.ops` (the shared scalar semantics),
# and that must not pull in the interpreters and shadow memory.
_LAZY = {"Access": "simt", "run_simt": "simt", "run_tile": "tiles"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
