"""The kernel object: `k[grid, block](*args)` -> specialize, check, compile, launch.

Takes: the user's function and track (from `@simt.kernel`), then at each launch the grid,
block and arguments. Gives: `KernelFunction`, whose launches run on the current backend.
Guarantees:
- Bad launches (argument count, missing constexpr, grid shape, host arrays on the GPU,
  arrays of different devices) raise `LaunchError` naming the kernel and the parameter; a
  grid or block past the limits the proofs assume (`runtime.limits`) raises it on every
  backend, naming the axis, the value and the limit.
- A grid with no blocks launches nothing, after the same checks (arguments, alias check,
  race check) and compile as any launch.
- The cpu backend runs on the memory the alias check inspected: each array argument is
  described once (`interop.describe`, which exports a DLPack object once) and the NumPy
  view it runs on is made from that description, not from a second export.
- Before anything is enqueued, an array the kernel writes that overlaps any other array
  argument raises `AliasError` naming both parameters, the writing line and the call site
  (`aliasing`), and a launch that breaks a `vg.assume` fact raises `AssumptionError`
  (`assumptions`).
- Each specialization (`specialization`: dtypes, ranks, inner-stride and alignment facts,
  constexpr values, whether each int64 or uint64 scalar lies in int32's range:
  `narrowness`) is built once per process (in memory) and compiled once per machine (disk
  cache); on the cuda backend a later process launches it from its launch record
  (`records`), without the frontend.
"""
from __future__ import annotations

import functools
import time
import weakref

import numpy as np

from .. import types as T
from ..errors import CompileError, LaunchError, Loc
from ..frontend import ParamInfo, build_kernel, signature
from ..frontend.typing import Multiple, Narrow, Static, Weak
from ..ir import abi_params
from ..ir import nodes as N
from ..ir.limits import MODEL
from ..lang import checked_function
from . import backend, constants, limits, warmup
from .aliasing import check_aliasing
from .interop import describe, host_view
from .launches import Launch
from .specialization import Specialization
from .speckeys import MULTIPLE, constexpr_entry, divisibility, on_grid
from .scalars import is_narrow, narrowness, refuse_narrowed_floats, scalar_dtype, scalar_entry

MAX_BLOCK_THREADS = MODEL.block_threads
MAX_CACHED_CONFIGS = 4096
def _dims(value, what: str, name: str, empty: bool = False) -> tuple:
    """A grid or block shape, padded to three; `empty`: a launch's grid, which may have no
    blocks (`k[vg.cdiv(n, 256), 256]` with n = 0 launches nothing, as in Triton)."""
    dims = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and not
                                          isinstance(d, bool) for d in dims):
        raise LaunchError(f"{name}: the {what} must be an int or a tuple of 1 to 3 ints, "
                          f"not {value!r}")
    if any(d < (0 if empty else 1) for d in dims):
        raise LaunchError(f"{name}: every {what} dimension must be "
                          f"{'0 or more' if empty else 'positive'}, got {value!r}",
                          hint="the grid counts blocks, e.g. vg.cdiv(n, 256)" if what == "grid"
                          else "a block has 1 to 1024 threads, e.g. 256")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if what == "block":
        limits.check_shape(name, (1, 1, 1), dims)
    else:
        limits.check_shape(name, dims, None)
    return dims


# `@simt.kernel(...)` / `@tile.kernel(...)` options and their defaults (see ir.nodes.Kernel):
# fuse float multiply-adds on the GPU; blocks that must fit on one multiprocessor at once
KERNEL_OPTIONS = {"fma": False, "min_blocks_per_sm": None}
MAX_BLOCKS_PER_SM = 32  # every GPU verdigris targets (sm_80 to sm_90)


class KernelFunction:
    """A kernel: launch with `k[grid, block](*args)` (SIMT) or `k[grid](*args)` (tile), or
    a SIMT kernel with `k.forall(n)(*args)` (numba's spelling: enough blocks for n threads)."""

    __vg_kernel__ = True
    _constants: tuple | None = None  # `runtime.constants.snapshot`, taken at the first build

    def __init__(self, fn, track: str, **options):
        checked_function(fn, f"@{track}.kernel")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.track = track
        definition = Loc(fn.__code__.co_filename, fn.__code__.co_firstlineno, 0)
        unknown = sorted(set(options) - set(KERNEL_OPTIONS))
        if unknown:
            raise CompileError(f"@{track}.kernel: unknown option {', '.join(map(repr, unknown))}; "
                               f"the options are {', '.join(KERNEL_OPTIONS)}", definition)
        blocks = options.get("min_blocks_per_sm")
        if blocks is not None and not (type(blocks) is int and 1 <= blocks <= MAX_BLOCKS_PER_SM):
            raise CompileError(f"@{track}.kernel: min_blocks_per_sm={blocks!r}: give a whole "
                               f"number from 1 to {MAX_BLOCKS_PER_SM} (the blocks that should "
                               "fit on one multiprocessor at once), or leave it out", definition)
        self.options = {**KERNEL_OPTIONS, **options}
        self._params: tuple[ParamInfo, ...] | None = None
        self._specializations: dict = {}
        self._recorded: dict = {}  # key -> specialization from a launch record (`records`)
        # (grid, block) as written -> what `k[grid, block]` gives: that configuration's
        # `Launch`, or the generated launcher at the head of its chain (`fastpath`)
        self._launches: dict = {}
        _KERNELS.add(self)
        warmup.kernel_defined(self)

    def __repr__(self) -> str:
        return f"<verdigris {self.track} kernel {self.__name__}>"

    def __call__(self, *args, **kwargs):
        config = "grid, block" if self.track == "simt" else "grid"
        raise LaunchError(f"{self.__name__} is a kernel: launch it with "
                          f"{self.__name__}[{config}](...)")

    @property
    def debug(self):
        """`k.debug[grid, block](*args, block_id=b, thread_id=t)`: thread t of block b of that
        launch, run as the kernel's own Python function, so that `breakpoint()` and pdb step
        through it (SIMT kernels; `runtime.debugging` says what the thread sees)."""
        from .debugging import Debugging

        return Debugging(self)

    @property
    def params(self) -> tuple[ParamInfo, ...]:
        if self._params is None:
            self._params = signature(self.fn)
        return self._params

    def __getitem__(self, config):
        try:  # a subscript, not .get(): ~20 ns less on every launch written k[grid, block](...)
            return self._launches[config]
        except KeyError:
            pass
        except TypeError:  # unhashable: a list where a grid or block goes; _dims says so
            self._make_launch(config)
            raise
        if len(self._launches) >= MAX_CACHED_CONFIGS:
            self._launches.clear()
        launch = self._launches[config] = self._make_launch(config)
        return launch

    def forall(self, n, block: int = 256) -> "Launch":
        """numba's `forall`: `k.forall(n)(*args)` is `k[vg.cdiv(n, block), block](*args)`,
        enough one-dimensional blocks of `block` threads (256 unless given) for `n` threads
        (SIMT kernels). As in numba, the kernel maps `simt.global_id(0)` to its task and
        skips the threads at `n` and past it itself; the launch is checked as any other."""
        if self.track != "simt":
            raise LaunchError(f"{self.__name__}: forall() launches SIMT kernels; a tile kernel "
                              "takes its grid of blocks", hint=f"{self.__name__}[grid](...)")
        for what, value, least in (("the thread count", n, 0), ("the block", block, 1)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
                raise LaunchError(f"{self.__name__}: forall(n, block): {what} must be an int of "
                                  f"at least {least}, not {value!r}")
        return self[-(-int(n) // int(block)), int(block)]

    def _make_launch(self, key) -> "Launch":
        config = (key, None) if self.track != "simt" else key
        if not (isinstance(config, tuple) and len(config) == 2) or \
                (self.track == "simt" and config[1] is None):
            raise LaunchError(f"{self.__name__}: a SIMT launch needs a grid and a block: "
                              f"{self.__name__}[grid, block](...)", hint="a block is 1 to 1024 "
                              "threads, e.g. 256; a tile kernel (@tile.kernel) chooses its own")
        if callable(config[0]):  # Triton's `k[lambda meta: ...]`: the grid of each call's arguments
            from .gridfn import GridOfArguments

            return GridOfArguments(self, config[0], config[1])
        grid = _dims(config[0], "grid", self.__name__, empty=True)
        block = _dims(config[1], "block", self.__name__) if config[1] is not None else None
        if block is not None:  # along each axis, grid x block threads fit in int32
            limits.check_shape(self.__name__, grid, block)
        return Launch(self, grid, block, key)

    # ---------------------------------------------------------------- specialization

    def bind(self, args: tuple, kwargs: dict) -> list:
        """Arguments in parameter order, defaults filled in; LaunchError if they don't fit."""
        params = self.params
        if not kwargs and len(args) == len(params) and not any(a is _MISSING for a in args):
            return args
        if len(args) > len(params):
            raise LaunchError(f"{self.__name__} takes {len(params)} arguments "
                              f"({', '.join(p.name for p in params)}) but {len(args)} were given")
        values = list(args) + [_MISSING] * (len(params) - len(args))
        for name, value in kwargs.items():
            slot = next((i for i, p in enumerate(params) if p.name == name), None)
            if slot is None:
                raise LaunchError(f"{self.__name__} has no parameter {name!r}")
            if values[slot] is not _MISSING:
                raise LaunchError(f"{self.__name__} got two values for {name!r}")
            values[slot] = value
        for i, (p, v) in enumerate(zip(params, values)):
            if v is _MISSING:
                if p.default is not _EMPTY:
                    values[i] = p.default
                else:
                    kind = "constexpr " if p.constexpr else ""
                    raise LaunchError(f"{self.__name__} is missing its {kind}argument {p.name!r}",
                                      hint=f"pass {p.name}=..." if p.constexpr else "")
        return values

    def describe_args(self, values: list) -> list:
        """The `ArrayInfo` of each array argument (None for numbers and constexprs), each
        within the extents the proofs assume (`limits.check_extents`)."""
        try:
            infos = [None if p.constexpr else describe(v) for p, v in zip(self.params, values)]
        except LaunchError as err:
            bad = next(p.name for p, v in zip(self.params, values) if not p.constexpr
                       and _describe_fails(v))
            raise LaunchError(f"{self.__name__}: argument {bad!r}: {err.message}",
                              hint=err.hint) from None
        limits.check_extents(self.__name__, [p.name for p in self.params], infos)
        return infos

    def spec_key(self, values: list, infos: list, block: tuple | None,
                 grid: tuple | None = None) -> tuple:
        """What a compiled form depends on: the block shape, the grid axes with one block
        (the race proofs use both: one block storing a fixed tile, or a last reduction
        launched `[1, 256]`, is race-free), then one entry per argument: a tile
        kernel's integer scalar also says whether it is a multiple of `MULTIPLE` (masks
        against it then compare once per run of elements, `Param.multiple_of`), and its
        array whether it is `on_grid` (`ArrayType.on_grid`); an int64 or uint64 scalar on
        either track says whether it lies in int32's range (`Param.narrow`: the proofs
        know it, so `i * n + j` does not wrap; a larger value gets the other variant)."""
        key = [block, self.unit_grid_axes(grid)]
        for p, v, info in zip(self.params, values, infos):
            if p.constexpr:
                key.append(constexpr_entry(_hashable(v, p.name, self.__name__)))
            elif info is not None:
                key.append(("a", info.dtype.name, info.ndim,
                            info.ndim > 0 and info.strides[-1] == 1, info.ptr % 16 == 0)
                           + ((on_grid(info.shape, info.strides),) if self.track == "tile" else ()))
            elif type(v) is float:  # weak (`ir.nodes.Expr.weak`), and the range it needs
                key.append(("s", "float64", None, "weak", T.float_range_bits(v)))
            else:
                dtype = scalar_dtype(v, p.name, self.__name__)
                number = int(v) if dtype.is_int else None  # a Python bool in the key, not NumPy's
                key.append(scalar_entry(dtype, self.track == "tile",
                                        dtype.is_int and number % MULTIPLE == 0,
                                        dtype.name in N.NARROW_DTYPES and is_narrow(number)))
        return tuple(key)

    def unit_grid_axes(self, grid: tuple | None) -> tuple | None:
        """The grid axes launched with one block, as specialization keys hold them."""
        return None if grid is None else (
            (0,) * (grid[0] <= 1) + (1,) * (grid[1] <= 1) + (2,) * (grid[2] <= 1))

    def check_constants(self) -> None:
        """Where a module-level constant the kernel reads (`runtime.constants`) has changed
        since its specializations were built, drop them (and their records and launchers)."""
        if self._constants is None:
            self._constants = constants.snapshot(self.fn)
            return
        if constants.identical(self._constants):
            return
        from . import fastpath

        for head in self._launches.values():  # they test the objects by identity
            fastpath.retire(head)
        self._launches.clear()
        if constants.changed(self._constants):
            self._specializations.clear()
            self._recorded.clear()
            self.__dict__.pop("_vg_dependencies", None)  # `records.dependencies` reads again
        self._constants = constants.snapshot(self.fn)

    def compile_aot(self, signatures, *, block=None, grid=None, targets=("sm_90",)):
        """A `runtime.bundle.Bundle` of this kernel compiled for `signatures` (one or a list,
        as `verdigris compile --sig` writes them, or dicts of parameter -> type) and
        `targets`; `vg.load_bundle` launches it later without the compiler."""
        from .bundle import compile_aot

        return compile_aot(self, signatures, block=block, grid=grid, targets=targets)

    def build(self, key: tuple) -> N.Kernel:
        """The typed IR for a specialization key, straight from the frontend (no checks)."""
        specs, multiples, weak, narrow = {}, {}, {}, set()
        for p, k in zip(self.params, key[2:]):
            if k[0] == "c":
                specs[p.name] = Static(k[1])
            elif k[0] == "a":
                specs[p.name] = N.ArrayType(T.from_name(k[1]), k[2], "global", k[3], k[4],
                                            on_grid=divisibility(k) is True)
            else:
                specs[p.name] = T.from_name(k[1])
                if divisibility(k):
                    multiples[p.name] = MULTIPLE
                if narrowness(k):
                    narrow.add(p.name)
                if k[3:4] == ("weak",):
                    weak[p.name] = k[4]
        kernel = build_kernel(self.fn, self.track, specs, key[0], key[1], self.options["fma"],
                              multiples, self.options["min_blocks_per_sm"], frozenset(weak),
                              frozenset(narrow))
        refuse_narrowed_floats(kernel, weak, self.__name__)
        return kernel

    def recorded(self, key: tuple) -> Specialization | None:
        """The specialization for `key` from its launch record (`records`: compiled by an
        earlier process, launched without the frontend), unless this process built it."""
        spec = self._recorded.get(key)
        if spec is None and key not in self._specializations and self.fn is not None:
            from . import records

            spec = records.load(self, key)
            if spec is not None:
                self._recorded[key] = spec
        return spec

    def specialization(self, key: tuple, beside_compile: bool = False) -> Specialization:
        """The specialization for `key`, built and checked once. With `beside_compile` (the
        cuda launch path, which settles it before anything runs) its safety verdict may
        still be pending (`proofs.start`); every other caller gets it settled."""
        spec = self._specializations.get(key)
        if spec is None:
            if self._constants is None:  # the values this build reads
                self._constants = constants.snapshot(self.fn)
            start = time.perf_counter()
            kernel = self.build(key)
            built = time.perf_counter()
            from . import proofs

            names = [p.name for p in self.params]
            # once per specialization (the disk cache keeps the verdict), never per launch
            verdict = proofs.start(kernel, key, names, beside_compile)
            from .assumptions import of_kernel

            arrays = tuple(i for i, k in enumerate(key[2:]) if k[0] == "a")
            spec = Specialization(
                kernel, arrays, tuple(i for i in arrays if names[i] in kernel.writes),
                tuple((names.index(a.param), a.role, a.axis) for a in abi_params(kernel)),
                key=key, dynamic_shared=_dynamic_itemsize(kernel), verdict=verdict,
                bounds_guard=verdict.guard, timings={"frontend": built - start},
                assumptions=of_kernel(kernel, names))
            self._specializations[key] = spec
        if not (beside_compile and spec.verdict is not None and spec.verdict.threaded):
            spec.settle()
        return spec

    def specialize(self, *args, block: tuple | None = None, **kwargs) -> N.Kernel:
        """The typed IR this kernel gets for these arguments (nothing runs); with `block`,
        as launched with that block shape."""
        self.check_constants()
        values = self.bind(args, kwargs)
        infos = self.describe_args(values)
        block = None if block is None else _dims(block, "block", self.__name__)
        return self.specialization(self.spec_key(values, infos, block)).kernel

    def specialize_types(self, specs: dict, block: tuple | None = None,
                         grid: tuple | None = None) -> N.Kernel:
        """The typed IR for explicit parameter specs (ArrayType, DType, `Multiple`,
        `Narrow`, `Weak` or constexpr value); with `grid`, as launched with it (which axes
        have one block). A plain int64 or uint64 DType is the wide variant (any value). A
        constexpr left out takes its default, as at a launch."""
        specs = {p.name: p.default for p in self.params
                 if p.constexpr and p.default is not _EMPTY} | specs
        missing = [p.name for p in self.params if p.name not in specs]
        if missing:
            raise CompileError(f"{self.__name__}: no type given for {', '.join(missing)}")
        block = None if block is None else _dims(block, "block", self.__name__)
        grid = None if grid is None else _dims(grid, "grid", self.__name__)
        multiples = {name: s.of for name, s in specs.items()
                     if isinstance(s, (Multiple, Narrow)) and s.of > 1}
        narrow = frozenset(name for name, s in specs.items() if isinstance(s, Narrow))
        for name in narrow:
            if specs[name].dtype.name not in N.NARROW_DTYPES:
                raise CompileError(f"{self.__name__}: {name!r}: narrow is for int64 and uint64 "
                                   f"scalars, not {specs[name].dtype.name}")
        weak = frozenset(name for name, s in specs.items() if isinstance(s, Weak))
        return build_kernel(self.fn, self.track, {
            p.name: Static(specs[p.name]) if p.constexpr else
            specs[p.name].dtype if isinstance(specs[p.name], (Multiple, Narrow)) else
            T.float64 if p.name in weak else specs[p.name]
            for p in self.params}, block, self.unit_grid_axes(grid), fma=self.options["fma"],
            multiples=multiples,
            min_blocks_per_sm=self.options["min_blocks_per_sm"], weak=weak, narrow=narrow)

    # ---------------------------------------------------------------- launching

    def launch(self, grid: tuple, block: tuple, args: tuple, kwargs: dict, stream=None,
               shared_bytes: int = 0, on: str | None = None):
        """The general launch path, on backend `on` (default: the current one); on the cuda
        backend it returns the `launch_cuda.Plan` it followed (what a generated launcher
        repeats); on the cpu backend, or for a grid with no blocks, None. `vg.Array`'s own
        operations (`hostops`) launch `on="cuda"`: their arrays are device memory whichever
        backend kernels run on."""
        self.check_constants()
        values = self.bind(args, kwargs)  # a tuple or list, in parameter order
        infos = self.describe_args(values)
        key = self.spec_key(values, infos, block, grid)
        cuda = (on or backend.current()) == "cuda"
        spec = (cuda and self.recorded(key)) or self.specialization(key, beside_compile=cuda)
        check_aliasing(self, spec, infos)
        if spec.assumptions is not None:  # before anything runs, on every backend
            spec.assumptions.check(self.__name__, values, infos, grid, block)
        if shared_bytes or spec.dynamic_shared:
            self.check_shared_bytes(spec, shared_bytes)
        if not cuda:
            if 0 not in grid:
                self.launch_cpu(spec, grid, block, values, infos, shared_bytes)
        else:
            from . import launch_cuda

            if block is None:  # a tile kernel: the block its lowering chose
                block = spec.launch_block or launch_cuda.tile_block(spec)
            return launch_cuda.launch(self, spec, grid, block, values, infos, stream, shared_bytes)

    def check_shared_bytes(self, spec: Specialization, shared_bytes) -> None:
        """`shared_bytes=`: an int >= 0, for SIMT kernels; at least one element for a kernel
        that declares `simt.shared.dynamic`."""
        if self.track != "simt":
            raise LaunchError(f"{self.__name__}: shared_bytes= sizes simt.shared.dynamic in "
                              "SIMT kernels; a tile kernel's shared memory is the compiler's")
        if not isinstance(shared_bytes, (int, np.integer)) or isinstance(shared_bytes, bool) \
                or shared_bytes < 0:
            raise LaunchError(f"{self.__name__}: shared_bytes must be an int >= 0, not "
                              f"{shared_bytes!r}")
        if shared_bytes < spec.dynamic_shared:
            raise LaunchError(f"{self.__name__} uses simt.shared.dynamic, but the launch gives "
                              f"{shared_bytes} bytes of dynamic shared memory",
                              hint=f"{self.__name__}[grid, block](..., shared_bytes=n): n bytes, "
                                   f"n // {spec.dynamic_shared} elements")

    def launch_cpu(self, spec: Specialization, grid, block, values, infos,
                   shared_bytes: int = 0) -> None:
        from .. import cpu

        args = {}
        for p, v, info in zip(self.params, values, infos):
            if p.constexpr:
                continue
            if info is None:
                args[p.name] = np.dtype(spec.kernel.param(p.name).dtype.np).type(v)
            elif info.device != -1 or not isinstance(v, np.ndarray):
                args[p.name] = _host_view(info, p.name, self.__name__)
            else:
                args[p.name] = v
        if self.track == "tile":
            cpu.run_tile(spec.kernel, grid, args)
        else:
            cpu.run_simt(spec.kernel, grid, block, args, shared_bytes=int(shared_bytes))


def _forget_launchers() -> None:
    """After a backend switch: configurations start again from their `Launch`."""
    from . import fastpath

    for kernel in list(_KERNELS):
        for head in kernel._launches.values():
            fastpath.retire(head)
        kernel._launches.clear()


_KERNELS = weakref.WeakSet()  # every KernelFunction, for _forget_launchers
backend.on_switch(_forget_launchers)


def _dynamic_itemsize(kernel: N.Kernel) -> int:
    from ..frontend import walk

    return next((n.array.dtype.itemsize for n in walk(kernel.body) if isinstance(n, N.LocalAlloc)
                 and n.array.type.space == "shared" and n.array.type.shape is None), 0)


_MISSING = object()
from inspect import Parameter as _Parameter  # noqa: E402

_EMPTY = _Parameter.empty


def _describe_fails(value) -> bool:
    try:
        describe(value)
    except LaunchError:
        return True
    return False


def _hashable(value, name: str, kernel: str):
    try:
        hash(value)
    except TypeError:
        raise LaunchError(f"{kernel}: constexpr {name!r} must be hashable (a number, bool, "
                          f"string or tuple), not {type(value).__name__}") from None
    return value


def _host_view(info, name: str, kernel: str) -> np.ndarray:
    """A NumPy view of a non-NumPy host array for the cpu backend, made from `info`, the
    description the alias check inspected (no copy, no second export)."""
    if info.device != -1:
        raise LaunchError(f"{kernel}: argument {name!r} lives on GPU {info.device}, but the "
                          "current backend is cpu", hint="copy it to the host, or use the "
                          "cuda backend: vg.set_backend('cuda')")
    return host_view(info)
