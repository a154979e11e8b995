"""Which backend kernels run on: "cuda" where a GPU and driver are present, else "cpu".

Takes: `vg.set_backend(name)`, or the `VERDIGRIS_BACKEND` environment variable. Gives:
`current()`. Guarantees: the choice is made once, lazily, at the first launch; falling back
to the cpu backend is announced once on stderr; asking for "cuda" where it is unavailable
is a `BackendError` that says why.
"""
from __future__ import annotations

import os
import sys

from ..errors import BackendError

BACKENDS = ("cuda", "cpu")
_chosen: str | None = None
_on_switch: list = []  # called after set_backend (cached launchers belong to one backend)


def on_switch(callback) -> None:
    """Call `callback()` after every `set_backend`."""
    _on_switch.append(callback)


def set_backend(name: str) -> None:
    """Run kernels on `name` ("cuda" or "cpu", in any case, as VERDIGRIS_BACKEND) from now on."""
    global _chosen
    name = name.lower() if isinstance(name, str) else name
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "cuda":
        _require_cuda()
    _chosen = name
    for callback in _on_switch:
        callback()


def current() -> str:
    """The backend kernels run on, "cuda" or "cpu": the one `set_backend` or
    `VERDIGRIS_BACKEND` chose, else cuda where a GPU and driver are present (cpu otherwise,
    announced once on stderr). Raises BackendError for a backend that cannot run."""
    global _chosen
    if _chosen is None:
        requested = os.environ.get("VERDIGRIS_BACKEND", "").strip().lower()
        if requested:
            set_backend(requested)
        else:
            from . import driver

            _chosen = "cuda" if driver.is_available() else "cpu"
            if _chosen == "cpu":
                print("verdigris: no CUDA GPU found, running kernels on the cpu backend "
                      "(set VERDIGRIS_BACKEND=cpu to silence this)", file=sys.stderr)
    return _chosen


def _require_cuda() -> None:
    from . import driver

    if driver.is_available():
        return
    driver.device_count()  # raises a BackendError that says why, when it can
    raise BackendError("the cuda backend needs an NVIDIA GPU, and the driver reports none",
                       hint="use vg.set_backend('cpu')")
