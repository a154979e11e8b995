"""`vg.autotune`: pick a kernel's fastest configuration by timing the candidates once per key.

Takes: `configs` (dicts of constexpr values, plus `num_warps` for tile kernels), `key` (names
of the kernel's parameters whose values the best choice depends on), and optionally
`timer` (`timer(run) -> seconds`, for tests). Gives: `autotune(configs, key)`, a decorator
over a kernel; the result is launched like the kernel (`k[grid](...)`, `k[grid, block](...)`),
without the tuned parameters, where `grid` (and a SIMT `block`) may be a function of the
launch's arguments and the chosen config, as one dict (`lambda meta: vg.cdiv(meta["n"],
meta["BLOCK"])`).

    @vg.autotune(configs=[{"BLOCK": 1024}, {"BLOCK": 4096, "num_warps": 8}], key=["n"])
    @tile.kernel
    def add(a, b, out, n, BLOCK: vg.constexpr): ...

    add[lambda meta: vg.cdiv(meta["n"], meta["BLOCK"])](a, b, out, n)

Guarantees:
- The key of a launch is the values of the `key` parameters (an array's shape, a scalar's
  value) and the dtypes of every array argument. The first launch with a new key times
  every config on the GPU (CUDA events around repeated launches, after a warm-up) and
  prints one line to stderr with the times and the winner; the winner is kept in memory
  and on disk (`runtime.cache`'s directory, keyed by the kernel's source, the configs,
  the key and the GPU's name), so a later process does not time again.
- Timing runs the kernel on the launch's own arguments: the arrays it writes are copied
  first and restored after, then the winner runs once; the launch's result is that of one
  launch of the winner.
- On the cpu backend (unless a `timer` is given) the first config is used, untimed.
- Configs and keys are checked against the kernel's parameters (`LaunchError` otherwise).

`fastest(...)` is the same timing and caching for any list of launches: a launcher that
chooses among kernels and split-K plans per shape (`examples/tile_matmul_shapes.py`).
"""
from __future__ import annotations

import inspect
import json
import sys

import numpy as np

from ..errors import LaunchError
from . import backend, cache
from .interop import byte_extent, describe

LAUNCH_OPTIONS = ("num_warps",)
TIMED_SECONDS = 0.02  # each config runs about this long when timed


def autotune(configs, key, *, timer=None):
    """Decorator: `@vg.autotune(configs=[...], key=[...])` over `@tile.kernel`/`@simt.kernel`.

    `configs`: dicts of constexpr values (and `num_warps` for tile kernels). `key`: names of
    the parameters whose values the best choice depends on (an array's shape, a scalar's
    value; the arrays' dtypes always count). The first launch with a new key times every
    config on the GPU, prints the times and the winner, and keeps the winner in memory and
    on disk (per kernel source, configs, key and GPU); later launches use it. Launch the
    result like the kernel, without the tuned parameters; the grid may be a function of
    one dict holding the launch's arguments and the chosen config:
    `k[lambda meta: vg.cdiv(meta["n"], meta["BLOCK"])](x, out, n)`. On the cpu backend the
    first config runs, untimed. `timer(run) -> seconds` replaces the GPU timing (tests)."""
    return lambda kernel: Autotuner(kernel, configs, key, timer)


class Autotuner:
    """A kernel with its configs: `k[grid](...)` (tile) or `k[grid, block](...)` (SIMT)."""

    __vg_kernel__ = True

    def __init__(self, kernel, configs, key, timer=None):
        if not getattr(kernel, "__vg_kernel__", False) or isinstance(kernel, Autotuner):
            raise LaunchError("vg.autotune(...) decorates a kernel: put it above @tile.kernel "
                              "or @simt.kernel")
        self.kernel, self.timer = kernel, timer
        self.__name__ = kernel.__name__
        names = {p.name: p for p in kernel.params}
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise LaunchError(f"{self.__name__}: autotune needs a non-empty list of configs "
                              "(dicts of constexpr values)", hint="e.g. configs=[{'BLOCK': 1024}, "
                              "{'BLOCK': 4096}]")
        self.configs = [dict(c) for c in configs]
        for config in self.configs:
            for name in config:
                if name in LAUNCH_OPTIONS and kernel.track == "tile":
                    continue
                if name not in names or not names[name].constexpr:
                    raise LaunchError(f"{self.__name__}: config entry {name!r} is not a constexpr "
                                      f"parameter of the kernel" + (" (num_warps is for tile kernels)"
                                                                    if name in LAUNCH_OPTIONS else ""))
        self.key = list(key)
        unknown = [k for k in self.key if k not in names]
        if unknown:
            raise LaunchError(f"{self.__name__}: autotune key {unknown[0]!r} is not a parameter")
        self.best: dict = {}  # key -> config index

    def __repr__(self) -> str:
        return f"<verdigris autotuned {self.kernel.track} kernel {self.__name__}>"

    @property
    def tuned_kernel(self):
        """The kernel whose configurations this times (`verdigris compile` and `check`
        compile it with a config's constexprs)."""
        return self.kernel

    def __getitem__(self, config) -> "_TunedLaunch":
        return _TunedLaunch(self, config)

    # ---------------------------------------------------------------- the choice

    def key_of(self, meta: dict) -> tuple:
        values = []
        for name in self.key:
            info = _describe(meta[name])
            values.append((name, tuple(info.shape) if info is not None else meta[name]))
        dtypes = tuple(info.dtype.name for info in map(_describe, meta.values()) if info is not None)
        return tuple(values), dtypes

    def choose(self, tuning_key: tuple, launches: list, written: list, stream=None) -> int:
        """The index of the best config for `tuning_key`; `launches[i]()` runs config i."""
        choice = self.best.get(tuning_key)
        if choice is None:
            choice = self.best[tuning_key] = fastest(
                self.__name__, (inspect.getsource(self.kernel.fn), repr(self.configs)),
                [_show(c) for c in self.configs], launches, tuning_key, written, stream,
                self.timer)
        return choice


def fastest(name: str, identity, labels: list, launches: list, tuning_key: tuple,
            written=(), stream=None, timer=None) -> int:
    """The index of the fastest of `launches` (zero-argument callables, described by
    `labels`) for `tuning_key` ((key values, dtypes), as `Autotuner.key_of` gives), timed
    once per key and kept on disk (keyed by `identity`, the code and candidates being
    chosen between, the key and the GPU): on the cpu backend (unless a `timer` is given)
    the first, untimed. `written`: (value, info) of the arrays the launches write and
    must find as they were, restored after each timing. Prints the times and the winner."""
    if timer is None and backend.current() == "cpu":
        return 0
    disk_key = cache.key(repr(identity), ("autotune", tuple(labels), tuning_key, _device_name()),
                         "autotune")
    stored = cache.get(disk_key)
    if stored is not None:
        return json.loads(stored)["choice"]
    timer = timer or (lambda run: _cuda_timer(run, stream))
    saved = _Snapshot(written)
    times = []
    for launch in launches:
        times.append(timer(launch))
        saved.restore()
    choice = min(range(len(times)), key=times.__getitem__)
    cache.put(disk_key, json.dumps({"choice": choice, "seconds": times}).encode())
    print(f"verdigris: autotuned {name} for {_show_key(tuning_key)}: "
          + ", ".join(f"{label} {t * 1e6:.1f} us" for label, t in zip(labels, times))
          + f" -> {labels[choice]}", file=sys.stderr)
    return choice


class _TunedLaunch:
    __slots__ = ("tuner", "config")

    def __init__(self, tuner: Autotuner, config):
        self.tuner, self.config = tuner, config

    def __call__(self, *args, stream=None, **kwargs):
        tuner = self.tuner
        kernel = tuner.kernel
        names = [p.name for p in kernel.params]
        meta = dict(zip(names, args))
        meta.update(kwargs)
        missing = [n for n in tuner.key if n not in meta]
        if missing:
            raise LaunchError(f"{tuner.__name__} is missing its argument {missing[0]!r}")
        tuned = sorted({name for c in tuner.configs for name in c} & set(kwargs))
        if tuned:
            raise LaunchError(f"{tuner.__name__}: {tuned[0]!r} is chosen by vg.autotune from "
                              "its configs; the launch cannot also give it",
                              hint=f"leave {tuned[0]}= out of the launch, or launch "
                                   f"{tuner.__name__}.tuned_kernel to give it yourself")

        def launch(config: dict):
            constexprs = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
            options = {k: v for k, v in config.items() if k in LAUNCH_OPTIONS}
            full = {**meta, **constexprs}

            def run():
                where = self.config(full) if callable(self.config) else self.config
                if kernel.track == "simt":
                    where = tuple(w(full) if callable(w) else w for w in where)
                kernel[where](*args, stream=stream, **kwargs, **constexprs, **options)
            return run

        launches = [launch(c) for c in tuner.configs]
        choice = tuner.best.get(tuner.key_of(meta))
        if choice is None:
            written = _written_arrays(kernel, args, kwargs, tuner.configs[0])
            choice = tuner.choose(tuner.key_of(meta), launches, written, stream)
        launches[choice]()


def _describe(value):
    if isinstance(value, (int, float, bool, np.generic)) or value is None:
        return None
    try:
        return describe(value)
    except LaunchError:
        return None


def _written_arrays(kernel, args, kwargs, config: dict) -> list:
    """The arguments the kernel writes (those timing would change), as (value, info)."""
    constexprs = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    values = kernel.bind(args, {**kwargs, **constexprs})
    infos = kernel.describe_args(values)
    spec = kernel.specialization(kernel.spec_key(values, infos, None))
    return [(values[i], infos[i]) for i in spec.written_slots]


class _Snapshot:
    """Copies of arrays, to put back after timing ran the kernel on them."""

    def __init__(self, arrays: list):
        self.saved = []
        for value, info in arrays:
            if info.device < 0:
                host = np.asarray(value)
                self.saved.append((host, host.copy()))
            else:
                from .arrays import _Allocation
                from .hostops import copy_bytes

                lo, hi = byte_extent(info)
                copy = _Allocation(hi - lo, info.device)
                copy_bytes(copy.ptr, lo, hi - lo, info.device)
                self.saved.append((lo, copy))

    def restore(self) -> None:
        for target, copy in self.saved:
            if isinstance(target, np.ndarray):
                target[...] = copy
            else:
                from .hostops import copy_bytes

                copy_bytes(target, copy.ptr, copy.nbytes, copy.device)


def _cuda_timer(run, stream=None) -> float:
    """Seconds per launch of `run`: CUDA events on the launches' stream around enough
    launches to take about `TIMED_SECONDS`, after a warm-up (which also compiles)."""
    from . import driver, streams

    drv = driver.api()
    run()
    driver.synchronize()
    stream = streams.handle(stream)
    start, end = (driver.check(drv.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    try:
        def timed(reps: int) -> float:
            driver.check(drv.cuEventRecord(start, stream), "cuEventRecord")
            for _ in range(reps):
                run()
            driver.check(drv.cuEventRecord(end, stream), "cuEventRecord")
            driver.check(drv.cuEventSynchronize(end), "cuEventSynchronize")
            return driver.check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime") * 1e-3 / reps
        once = timed(1)
        return timed(max(3, min(1000, int(TIMED_SECONDS / max(once, 1e-7)))))
    finally:
        for event in (start, end):
            drv.cuEventDestroy(event)


def _device_name() -> str:
    if backend.current() == "cpu":
        return "cpu"
    from . import driver

    return driver.properties(0).name


def _show(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _show_key(tuning_key: tuple) -> str:
    values, dtypes = tuning_key
    return ", ".join([f"{k}={v}" for k, v in values] + list(dtypes))
