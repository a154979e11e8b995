"""A specialization's safety verdict, from the disk cache when this compiler reached it before.

Takes: a freshly built, unchecked `ir.Kernel`, its specialization key and the kernel's
parameter names. Gives: `check(kernel, key, names)`, which runs `safety.check` (raising
its `SafetyError`) unless the disk cache holds the verdict for this exact kernel, and
either way leaves the checker's facts in `kernel.facts` (`in_bounds`; the preconditions'
texts, without their polynomials, after a hit) and returns the bounds guard
(`safety.bounds.launch_guard`'s function, with its `.condition`; None without
preconditions).

Guarantees: only accepted kernels are recorded, under a key made of the printed IR (which
holds everything the checker reads: the body, the types, the block and one-block grid
axes, `vg.unsafe` regions), the specialization key and the compiler's fingerprint
(`cache`), so a hit gives the verdict the checker would give. A hit imports neither the
checker nor the solver: with the compiled image also cached, a specialization costs the
frontend and two small file reads. A miss on the cuda backend means a compile follows:
the code generator's setup starts on a thread first (`codegen.prefetch`), beside the check.
"""
from __future__ import annotations

import json

from ..codegen import checks
from ..ir.printer import format_kernel
from . import backend, cache


def check(kernel, key: tuple, names: list):
    record_key = cache.key(format_kernel(kernel), ("safety verdict", key), "any target")
    record = _read(cache.get(record_key))
    if record is not None:
        unproven = set(record["checked"])
        kernel.facts.update({k: tuple(v) if isinstance(v, list) else v
                             for k, v in record["facts"].items()})
        kernel.facts["in_bounds"] = frozenset(
            id(site) for i, site in enumerate(checks.sites(kernel)) if i not in unproven)
        kernel.facts["bounds_preconditions"] = tuple((None, text) for text in record["texts"])
        return guard(record["guard"])
    if backend.current() == "cuda":
        from .. import codegen

        codegen.prefetch(kernel)
    from .. import safety

    safety.check(kernel)
    launch_guard = safety.bounds.launch_guard(kernel, names)
    facts = {k: v for k, v in kernel.facts.items() if _plain(v)}
    cache.put(record_key, json.dumps({
        "checked": list(checks.checked_sites(kernel)), "facts": facts,
        "texts": [text for _, text in kernel.facts.get("bounds_preconditions", ())],
        "guard": None if launch_guard is None else launch_guard.condition}).encode())
    return launch_guard


def _plain(value) -> bool:
    """Whether a fact survives JSON (numbers, strings, flags and tuples of them)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def guard(condition: str | None):
    """The launch guard function of a recorded condition (as `safety.bounds.launch_guard`
    makes it: over `values`, `infos`, `grid`, `block`)."""
    if condition is None:
        return None
    function = eval(f"lambda values, infos, grid, block: {condition}", {"int": int})  # noqa: S307
    function.condition = condition
    return function


def _read(data: bytes | None):
    if data is None:
        return None
    try:
        record = json.loads(data)
        return record if {"checked", "facts", "texts", "guard"} <= set(record) else None
    except (ValueError, AttributeError):
        return None
