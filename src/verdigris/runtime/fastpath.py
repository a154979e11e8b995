"""Generated launchers: the cuda backend's launch hot path.

Takes: a launch that has just gone through the general path (`launches.Launch.general`,
then `launch_cuda.launch`), described by its `launch_cuda.Plan` (specialization, device,
compiled variant, block, what the bounds guard said, the argument values and their
`ArrayInfo`s). Gives: `install(launch, plan, num_warps)`, which puts a generated launcher
at the head of the configuration's chain (`kernel._launches[config]`, what
`k[grid, block]` returns), and `retire(launcher)`.

A launcher is Python source written for one (specialization, argument kinds, device) and
compiled once: a function with the kernel's own parameters (user defaults kept) plus
`stream=` (and `num_warps=` for tile kernels), so Python binds the arguments in C. Per
launch it checks, argument by argument, everything the general path decided from: the
exact type; for arrays dtype, rank, unit inner stride and 16-byte alignment (the
specialization key) and the device (a `vg.Array`'s `kind` holds all of these: one identity
test; `launcher_arrays`); for scalars the type (and for an int64 or uint64 whether it lies
in int32's range, `scalars.narrowness`: a larger value never reuses the narrow variant),
for constexprs the value. A failed check returns the call down the chain (no exception).
Then the bounds proofs' preconditions (`spec.bounds_guard`) and the alias check (byte range
of each written array against every other array, and where two overlap whether the views
share an element; a written view against itself; a `vg.Array` carries its byte range), and
that no extent passes `ir.limits.MAX_EXTENT` (one bitwise or of them all). Then it packs
the ABI values with one `struct.pack_into` into this thread's preallocated slots and calls
`cuLaunchKernel` once, with the address of a prebuilt `void*` array.

A launcher whose arrays are all `vg.Array`s has two sets of slots per thread and remembers
what each holds (the memo: each array's `serial`, every other argument itself). A launch
on the default stream with the same arrays and the very same other objects as one of the
two passed the same checks then (an Array never changes; an object is itself): it tests
those identities, the fault flag, and launches those slots as they are. So do the
launches of a loop that alternates between two sets of arrays (a stencil's ping-pong).
Any other launch checks and packs as above, into the set used longest ago, and replaces
its memo.

For a launch on torch tensors, `clauncher` may put a compiled launcher in front of the
generated one (same checks from the same plan, in C; a miss hands the call to it).

Guarantees:
- A launcher launches what the general path would for the same call, or hands the call
  unchanged to the launcher installed before it, and at the end of the chain to the general
  path (which raises the error, or installs another launcher). One licence: an array whose
  strides differ from C order only on axes of extent 1 (no index moves along them) may use
  a C-contiguous array's launcher.
- A launch allocates nothing but what the array libraries hand back (torch's shape tuple),
  the empty dict of extra keywords Python makes for the call, the driver call's result
  tuple and, when it packs, the memo's tuple.
- Generated names (the launcher's globals and locals) all start with "_": a kernel with a
  parameter named so keeps the general path.
- At most MAX_CHAIN launchers per configuration; installing one more starts a new chain.
- A launcher's source is compiled once per machine (`cache.code`; compiling it takes
  ~0.4 ms, a fifth of a disk-cache hit's first launch).
- Kernels whose `CudaKernel` subclass launches differently (`runtime.tensormap`: tensor
  maps, a persistent grid) get the same checks, then hand the ABI values to that class's
  own `launch`, which allocates its parameter array.
"""
from __future__ import annotations

import re
import threading
from inspect import Parameter
from types import FunctionType

from .. import types as T
from ..ir.limits import MAX_ELEMENTS, MAX_EXTENT
from . import cache, clauncher, faults, interop, streams
from .speckeys import MULTIPLE, OFF_GRID, divisibility, type_tag
from .scalars import NARROW_END, NARROW_LOW, narrowness
from .interop import span
from .launcher_arrays import alias_check, array_facts, items
from .module import PACK_ERRORS, CudaKernel

MAX_CHAIN = 8
_EMPTY = Parameter.empty


# A failed check returns the call down the chain; these are what an argument of an
# unexpected make can raise on the way (a shape of another rank: ValueError; comparing
# values of other types: TypeError), which go down the chain too.
_MISSES = (ValueError, TypeError, AttributeError, IndexError)
_RESERVED = {"stream", "num_warps"}

def _retired(*args, **kwargs):
    # Runs as a retired launcher's code, with that launcher's globals: its `_vg_next`.
    return globals()["_vg_next"](*args, **kwargs)


def retire(launcher) -> None:
    """Make `launcher` and the launchers below it hand every call down the chain from now
    on (a backend switch: someone may still hold one). Their code is swapped for a stub, so
    launchers test nothing for it."""
    while getattr(launcher, "kinds", None) is not None:
        if type(launcher) is FunctionType:
            launcher.__defaults__ = launcher.__kwdefaults__ = None
            launcher.__code__ = _retired.__code__
        else:  # a compiled launcher (`clauncher`)
            launcher.retire()
        launcher = launcher.fallback


def install(launch, plan, num_warps) -> None:
    """Put a launcher for this call's argument kinds at the head of `launch`'s
    configuration (unless the chain already has one for them)."""
    kernel = launch.kernel
    names = [p.name for p in kernel.params]
    if any(n in _RESERVED or n.startswith("_") for n in names):
        return  # the launcher's own names (globals and locals) all start with "_"
    values, infos = plan.values, plan.infos
    kinds = (plan.compiled, num_warps, plan.checked, plan.torch_args,
             tuple((type(v), getattr(v, "dtype", None)) for v in values))
    head = kernel._launches.get(launch.config)
    link = head
    while getattr(link, "kinds", None) is not None:
        if link.kinds == kinds:
            return
        link = link.fallback
    depth = getattr(head, "depth", 0)
    fallback = head if 0 < depth < MAX_CHAIN else launch.general
    writer = _Writer(names, num_warps, kernel.track == "tile")
    _body(writer, kernel, plan, values, infos)
    launcher = writer.build(kernel, fallback)
    launcher.kernel, launcher.grid, launcher.block = kernel, launch.grid, launch.block
    launcher.config, launcher.general, launcher.fallback = launch.config, launch.general, fallback
    launcher.kinds = kinds
    launcher.depth = depth + 1 if fallback is head else 1
    # torch tensors: the compiled launcher in front of it, where there is one
    front = clauncher.wrap(launcher, plan, num_warps) if plan.torch_args else None
    if kernel._launches.get(launch.config) is head:
        kernel._launches[launch.config] = front or launcher


class _Writer:
    """The launcher's source: checks (a miss goes down the chain), then the launch."""

    def __init__(self, names: list, num_warps, tile: bool):
        self.names = names
        # Tile launches take num_warps=; a SIMT launch given one misses (in **_vg_named).
        self.options = ", num_warps=None" if tile else ""
        self.passed_options = ", num_warps=num_warps" if tile else ""
        self.checks: list[str] = []
        self.launch: list[str] = []
        # per parameter, what the memo of a launch keeps of it (`_memo_keys`), or None
        self.memo: list[str] | None = None
        # the values a divisibility fact holds for, tested together (`divisible_check`)
        self.grid_extents: list[str] = []
        self.grid_multiples: list[str] = []
        self.env: dict = dict(__name__=__name__, _MISSES=_MISSES, _span=span,
                              _overlaps=interop.overlaps_itself, _views_share=interop.views_share,
                              _element_strides=interop._element_strides,
                              _handle=streams.handle, _pack_errors=PACK_ERRORS)
        # tested before a memo's launch too: extra arguments, the module's constants
        self.first = ["_vg_more or _vg_named" + (
            "" if not tile else " or num_warps is not None" if num_warps is None
            else f" or num_warps != {num_warps!r}")]

    def check(self, failed: str) -> None:
        self.checks.append(f"if {failed}: {{down}}")

    def divisible(self, fact: bool | None, extents=(), multiples=()) -> None:
        """A tile specialization's divisibility fact about some values (`speckeys.divisibility`:
        `speckeys.on_grid`, `speckeys.MULTIPLE`): `extents` must be multiples of MULTIPLE
        below 2**30 and `multiples` multiples of MULTIPLE. Where the fact holds, the values
        join one test made after the argument checks (`divisible_check`); where it does not,
        they are tested here, to be off the grid; None (no such fact) tests nothing."""
        if fact is None:
            return
        if fact:
            self.grid_extents += extents
            self.grid_multiples += multiples
        else:
            self.check("not (" + _off_grid(extents, multiples) + ")")

    def divisible_check(self) -> None:
        if self.grid_extents or self.grid_multiples:
            self.check(_off_grid(self.grid_extents, self.grid_multiples))

    def build(self, kernel, fallback):
        from .dispatch import _MISSING

        defaults = []
        for i, p in enumerate(kernel.params):
            if p.default is not _EMPTY:
                self.env[f"_d{i}"] = p.default
                defaults.append(f"{p.name}=_d{i}")
            else:
                defaults.append(f"{p.name}=_vg_M")
        self.env.update(_vg_M=_MISSING, _vg_next=fallback)
        passed = "".join(n + ", " for n in self.names)
        down = (f"return _vg_next({passed}*_vg_more, stream=stream{self.passed_options}, "
                "**_vg_named)")
        lines = [f"def launch({', '.join(defaults)}, *_vg_more, stream=None{self.options}, "
                 "**_vg_named):", "    try:", f"        if {' or '.join(self.first)}: {down}"]
        checks, indent = self.checks, "        "
        if self.memo is not None:  # the arguments of one of this thread's last two launches
            # (checked then): its slots are launched as they are
            unpack = f"_address, {items(f'_m{i}' for i in range(len(self.memo)))}= _memos"
            same = "if " + " and ".join(["stream is None"] + [
                f"{key} is _m{i}" for i, key in enumerate(self.memo)]) + ":"
            lines += ["        _t = _local", "        _memos = _t.memos",
                      f"        {unpack}[0]", f"        {same}", "            _h, _hit = None, True",
                      "        else:", f"            {unpack}[1]", f"            {same}",
                      "                _memos.reverse()  # the last used first",
                      "                _h, _hit = None, True", "            else:",
                      "                _hit = False"]
            indent = "                "
        lines += [indent + c.replace("{down}", down) for c in checks]
        lines += ["    except _MISSES:", "        " + down]
        lines += ["    " + line.replace("{down}", down) for line in self.launch]
        self.source = "\n".join(lines) + "\n"
        namespace: dict = {}
        exec(cache.code(self.source, f"<verdigris launcher: {kernel.__name__}>"), self.env,
             namespace)
        launcher = namespace["launch"]
        launcher.source = self.source
        return launcher


def _body(w: _Writer, kernel, plan, values, infos) -> None:
    spec = plan.spec
    w.env["_DEV"] = plan.device
    for j, (holder, name, value) in enumerate(kernel._constants or ()):  # `runtime.constants`
        w.env[f"_km{j}"], w.env[f"_kv{j}"] = holder, value  # changed: the general path rebuilds
        w.first.append(f"_km{j}.get({name!r}, _vg_M) is not _kv{j}" if isinstance(holder, dict)
                       else f"_km{j}.cell_contents is not _kv{j}")
    facts: dict = {}  # array argument index -> ArrayFacts
    for i, (name, value, info, entry) in enumerate(zip(w.names, values, infos, plan.key[2:])):
        if entry[0] == "c":  # the same value, of the same type (100.0 is not 100's code)
            w.env[f"_c{i}"] = entry[1]
            if isinstance(entry[1], tuple):  # element by element
                w.env[f"_ct{i}"], w.env["_type_tag"] = entry[2], type_tag
                w.check(f"{name} is not _c{i} and (_type_tag({name}) != _ct{i} or {name} != _c{i})")
            else:  # one identity test, as for a scalar's type
                w.env[f"_ct{i}"] = type(entry[1])
                w.check(f"{name} is not _c{i} and (type({name}) is not _ct{i} or {name} != _c{i})")
        elif entry[0] == "s":
            w.env[f"_ty{i}"] = type(value)
            w.check(f"type({name}) is not _ty{i}")
            if entry[3:4] == ("weak",):  # a Python float: the range it was specialized for
                w.check(_outside_float_range(w, i, name, entry[4]))
            w.divisible(divisibility(entry), multiples=[name])
            narrow = narrowness(entry)
            if narrow is not None:  # int32's range, or not: one comparison
                inside = (f"{name} < {NARROW_END}" if entry[1].startswith("u")
                          else f"{NARROW_LOW} <= {name} < {NARROW_END}")
                w.check(f"not ({inside})" if narrow else inside)
        else:
            facts[i] = array_facts(w, i, name, value, info, entry)
    w.divisible_check()
    extents = [n for f in facts.values() for n in f.shapes]
    if extents:  # one past MAX_EXTENT (a long broadcast view): the general path refuses it
        w.check(f"({' | '.join(extents)}) > {MAX_EXTENT}")
    for f in facts.values():  # extents that multiply past MAX_ELEMENTS, or an empty array
        if len(f.shapes) > 1:  # (which may claim any others): the general path decides
            w.check(f"not 0 < {' * '.join(f.shapes)} <= {MAX_ELEMENTS}")
    if spec.bounds_guard is not None:
        condition = _inline_guard(spec.bounds_guard.condition, w.names, facts, plan)
        w.check(f"({condition})" if plan.checked else f"not ({condition})")
    if spec.assumptions is not None:  # broken: down the chain to the general path, which refuses
        w.env["_vg_assumed"] = spec.assumptions.holds
        atoms = _inline_guard(", ".join(spec.assumptions.atoms), w.names, facts, plan)
        w.check(f"not _vg_assumed({atoms})")
    alias_check(w, spec, facts)
    _stream(w, plan)
    own = type(plan.compiled).launch is not CudaKernel.launch
    if not own and not plan.torch_args and all(f.extent is not None for f in facts.values()):
        w.memo = _memo_keys(w.names, facts)
    _launch(w, plan, _abi_values(w, plan, facts, convert=not own), own)


def _outside_float_range(w: _Writer, i: int, name: str, range_bits: int) -> str:
    """The test that Python float `name` needs another range than `range_bits`
    (`types.float_range_bits`): for float16's range, the common one, inline (one chained
    comparison for a value inside it, a third of a call's time); else the call."""
    if range_bits == 16:  # outside ±65504, and finite (NaN and infinities are in range 16)
        w.env["_F16_MAX"] = T.FLOAT_MAX[16]
        return f"not (-_F16_MAX <= {name} <= _F16_MAX) and {name} - {name} == 0.0"
    w.env[f"_range{i}"], w.env["_float_range_bits"] = range_bits, T.float_range_bits
    return f"_float_range_bits({name}) != _range{i}"


def _memo_keys(names: list, facts: dict) -> list:
    """What a launch whose arrays are all `vg.Array`s remembers of each argument: an
    array's serial (an Array never changes, so its serial stands for every fact the checks
    read of it), any other argument itself (compared by identity: the same object passes
    the same checks)."""
    return [f"{name}.serial" if i in facts else name for i, name in enumerate(names)]


_GUARD_ATOMS = re.compile(r"infos\[(\d+)\]\.shape\[(\d+)\]|values\[(\d+)\]|(grid|block)\[(\d)\]")


def _inline_guard(condition: str, names: list, facts: dict, plan) -> str:
    """The bounds guard's condition (`safety.bounds.launch_guard`), or the launch values a
    `vg.assume` test reads (`assumptions.LaunchFacts.atoms`), over the launcher's own
    variables: shapes it has read, parameters, and the constant grid and block."""
    def atom(m):
        if m.group(1) is not None:
            return facts[int(m.group(1))].shapes[int(m.group(2))]
        if m.group(3) is not None:
            return names[int(m.group(3))]
        return str((plan.grid if m.group(4) == "grid" else plan.block)[int(m.group(5))])

    def difference(m):  # a - b <= 0, written either way round
        return f"{m[1]} <= {m[2]}" if m[1] is not None else f"{m[4]} <= {m[3]}"

    return _DIFFERENCE.sub(difference, _GUARD_ATOMS.sub(atom, condition))


# `(1 * a + -1 * b) <= 0` and `(-1 * b + 1 * a) <= 0`, the commonest condition: `a <= b`
_DIFFERENCE = re.compile(r"\(1 \* (\w+) \+ -1 \* (\w+)\) <= 0|\(-1 \* (\w+) \+ 1 \* (\w+)\) <= 0")


def _off_grid(extents, multiples) -> str:
    """Source of a test that is true when some extent is not a multiple of MULTIPLE below
    2**30 or some multiple is not a multiple of MULTIPLE (one bitwise test for all)."""
    tests = ([f"({' | '.join(extents)}) & {OFF_GRID}"] if extents else []) \
        + ([f"({' | '.join(multiples)}) & {MULTIPLE - 1}"] if multiples else [])
    return " or ".join(tests) or "False"


def _stream(w: _Writer, plan) -> None:
    # None: cuda-bindings' quickest spelling of the default stream (0 makes a CUstream, ~60 ns)
    default = "None"
    if plan.torch_args:
        w.env["_torch_stream"] = streams.torch_current_function()
        default = "(_torch_stream(_DEV) or None)"
    w.checks.append(f"_h = {default} if stream is None else stream if type(stream) is int "
                    "else _handle(stream)")


def _abi_values(w: _Writer, plan, facts: dict, convert: bool) -> list:
    """The ABI values in order, as source (with `convert`, scalars stored as raw bits are
    converted here; a kernel's own launch converts them itself)."""
    from .module import scalar_converter

    out = []
    for (index, role, axis), param in zip(plan.spec.abi_slots, plan.compiled.packer.abi):
        if role == "scalar":
            name = w.names[index]
            to_bits = scalar_converter(param.dtype) if convert else None
            if to_bits is not None:
                w.env[f"_cv{index}"] = to_bits
                name = f"_cv{index}({name})"
            out.append(name)
        else:
            f = facts[index]
            out.append(f.ptr if role == "ptr" else f.shapes[axis] if role == "shape"
                       else f.strides[axis])
    return out


def _launch(w: _Writer, plan, abi: list, own: bool) -> None:
    compiled = plan.compiled
    g, b = plan.grid, plan.block
    if own:  # its launches add more than ABI values (tensor maps, the persistent grid, shared
        # memory): the checks are the launcher's, the launch is the kernel's own
        w.env.update(_own_launch=compiled.launch, _record=faults.flag_view(plan.device),
                     _FLAG=faults.FLAG, _pending=faults.raise_pending,
                     _fault_block=faults.block_address(plan.device))
        w.launch += ["if _record[_FLAG]: _pending(_DEV)",
                     f"_own_launch({tuple(g)}, {tuple(b)}, ({items(abi)}_fault_block,), _h)"]
        return
    keys = len(w.memo) if w.memo is not None else None
    w.env.update(_local=_PerThread(compiled.packer.new_buffers, keys),
                 _pack_into=compiled.packer.pack_into, _cu_launch=compiled.raw_launch,
                 _F=compiled.function, _record=faults.flag_view(plan.device),
                 _FLAG=faults.FLAG, _pending=faults.raise_pending,
                 _failed=compiled.launch_failed, _fault_block=faults.block_address(plan.device))
    pack = f"_pack_into(_slots, 0, {items(abi)}_fault_block)"
    if w.memo is None:
        w.launch += ["if _record[_FLAG]: _pending(_DEV)", "_slots, _address = _local.entries[0]",
                     "try:", f"    {pack}", "except _pack_errors:", "    {down}"]
    else:  # a miss packs into the slots used longest ago, then remembers what they hold
        w.launch += ["if _record[_FLAG]: _pending(_DEV)",
                     "if not _hit:",
                     "    _address = _memos[1][0]",
                     "    _slots = _t.slots[_address]",
                     "    try:", f"        {pack}",
                     "    except _pack_errors:",
                     "        _memos[1] = _t.cleared[_address]  # some slots may have changed",
                     "        {down}",
                     "    _memos[1] = _memos[0]",
                     f"    _memos[0] = (_address, {items(w.memo)}) if stream is None "
                     "else _t.cleared[_address]"]
    w.launch += [
        f"_err, = _cu_launch(_F, {g[0]}, {g[1]}, {g[2]}, {b[0]}, {b[1]}, {b[2]}, "
        f"{compiled.shared}, _h, _address, 0)",
        f"if _err: _failed(_err, {tuple(g)}, {tuple(b)}, _address, _h, {compiled.shared})",
    ]


class _PerThread(threading.local):
    """One launcher's memory in one thread: `entries`, its packed-argument slots and their
    `void*` array's address (`ArgPacker.new_buffers`). With `keys` (a launcher with a memo)
    two entries, `slots` (address -> its slots) and `memos`, the last used first: per
    entry, the address, then per argument the argument itself or a `vg.Array`'s serial
    (`_memo_keys`); `cleared[address]` (the address, then keys that match nothing) for an
    entry whose slots hold nothing known."""

    def __init__(self, new_buffers, keys: int | None):
        self.entries = tuple(new_buffers() for _ in range(1 if keys is None else 2))
        if keys is not None:
            self.slots = {address: slots for slots, address in self.entries}
            self.cleared = {address: (address,) + (object(),) * keys for address in self.slots}
            self.memos = list(self.cleared.values())
