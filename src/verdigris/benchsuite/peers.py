"""The peers a benchmark run compares against, and which of them are installed.

Takes: nothing (looks at the installed distributions). Gives: `PEERS` (peer name -> its
import name and distribution names, in table order), `installed()` (peer -> version, for
those present), `has(peer)`. Guarantees: nothing is imported to answer (importing torch
takes seconds); the answers are computed once per process.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Peer:
    module: str  # what `import` takes
    distributions: tuple  # PyPI names that provide it, first match wins


PEERS = {
    "verdigris": Peer("verdigris", ("verdigris",)),
    "torch": Peer("torch", ("torch",)),
    "triton": Peer("triton", ("triton",)),
    "cupy": Peer("cupy", ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x")),
    "cutile": Peer("cuda.tile", ("cuda-tile",)),
    "flash_attn": Peer("flash_attn", ("flash-attn", "flash_attn")),
}


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


@lru_cache(maxsize=None)
def installed() -> dict:
    """{peer: version} for every peer whose module can be imported here."""
    found = {}
    for name, peer in PEERS.items():
        if not _findable(peer.module):
            continue
        for dist in peer.distributions:
            try:
                found[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        else:  # imported from a checkout (PYTHONPATH), say: no distribution metadata
            module = sys.modules.get(peer.module)
            found[name] = getattr(module, "__version__", "unknown version")
    return found


def has(peer: str) -> bool:
    """Whether `peer` (a key of PEERS) is installed."""
    if peer not in PEERS:
        raise KeyError(f"unknown peer {peer!r}; the peers are {', '.join(PEERS)}")
    return peer in installed()
