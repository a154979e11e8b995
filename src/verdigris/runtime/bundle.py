"""Ahead-of-time bundles: a kernel's compiled specializations in one file, launched later
without the compiler.

Takes: a kernel, argument types (signatures as `verdigris compile --sig` writes them, e.g.
"f32, f32[::1], f32[::1], f32[::1]", or dicts of parameter -> `ArrayType`, `DType` or
constexpr value), the block (SIMT kernels), a representative grid (which axes have one
block: the race proofs use it; default, many blocks along x only) and targets (`sm_80`,
`sm_89`, `sm_90`, `sm_90a`, and "ptx": PTX for sm_80 that the driver compiles at load, for
GPUs newer than every cubin). Gives: `compile_aot(kernel, signatures, block=, grid=,
targets=) -> Bundle` (also `KernelFunction.compile_aot`), `Bundle.save(path)`,
`Bundle.merge(other)`, and `load_bundle(path) -> BundleKernel`, launched as
`k[grid, block](...)` like the kernel it came from (also `vg.load_bundle`).

A bundle file is b"VGBUNDLE1\\n", the manifest's length (8 bytes, little-endian), the
manifest (JSON), then the images; the manifest gives each image's offset and size. Per
specialization it holds the key (as `repr`), the ABI, which arguments are arrays and which
are written, the bounds proofs' launch condition, the entry symbol, the fault table (each
access's file, line, column, function and array), the line that writes each array, a tile
kernel's launch block, and per target the image of the proven variant and, when the proofs
have launch conditions, of the fully checked one.

Guarantees:
- Loading and launching import neither llvmlite nor the code generator nor the checker; a
  launch does what a compiled kernel's does (argument checks, alias check, bounds guard and
  checked variant, bounds faults reported with their line, generated launchers).
- Arguments that match no specialization of the bundle raise LaunchError naming what the
  launch asked for and what the bundle holds (an entry compiled for fewer values, such as
  `i64:narrow` for a launch beyond int32's range, is no match; one compiled for more is); a GPU with no usable image (a cubin runs on
  its own architecture and later minor versions of it, an `a` target on its own only, PTX
  on any later one) raises LaunchError naming the GPU's architecture and the targets.
- A tile kernel with matrix products holds, per image, its launch plan (shared memory,
  tensor maps, producer warps, persistent grid: `tensormap.MatmulLaunch`) and, where it
  streams through the copy engine, the variant without it, which launches with arrays the
  engine cannot describe.
"""
from __future__ import annotations

import ast
import json
import struct

from .. import types as T
from ..errors import CompileError, LaunchError, Loc
from ..ir.abi import AbiParam
from ..ir.nodes import NARROW_DTYPES
from .dispatch import _KERNELS, KernelFunction, _dims
from .specialization import Specialization
from .speckeys import FACT_AT, MULTIPLE, constexpr_entry, divisibility
from .scalars import NARROW_AT, narrowness, scalar_entry

MAGIC = b"VGBUNDLE1\n"
PTX_FOR_ANY = "sm_80"  # what the "ptx" target is compiled for


class Bundle:
    """A manifest and its images, as `compile_aot` makes them and `save` writes them."""

    def __init__(self, manifest: dict, images: list):
        self.manifest, self.images = manifest, images

    def save(self, path) -> None:
        header, blobs, offset = json.loads(json.dumps(self.manifest)), [], 0
        for entry in header["specializations"]:
            for variants in entry["images"].values():
                for variant, index in variants.items():
                    data = self.images[index]
                    variants[variant] = [offset, len(data)]
                    blobs.append(data)
                    offset += len(data)
        text = json.dumps(header, indent=1).encode()
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(text)) + text)
            for blob in blobs:
                f.write(blob)

    def merge(self, other: "Bundle") -> "Bundle":
        """One bundle with the specializations of both (of the same kernel)."""
        if other.manifest["name"] != self.manifest["name"]:
            raise CompileError(f"cannot merge bundles of {self.manifest['name']!r} and "
                               f"{other.manifest['name']!r}")
        shift = len(self.images)
        entries = json.loads(json.dumps(other.manifest["specializations"]))
        for entry in entries:
            for variants in entry["images"].values():
                for variant in variants:
                    variants[variant] += shift
        manifest = dict(self.manifest, specializations=self.manifest["specializations"] + entries)
        return Bundle(manifest, self.images + other.images)


# ----------------------------------------------------------------------------- compiling


def compile_aot(kernel: KernelFunction, signatures, *, block=None, grid=None,
                targets=("sm_90",)) -> Bundle:
    from ..codegen import TARGETS

    for target in targets:
        if target not in TARGETS and target != "ptx":
            raise CompileError(f"unknown target {target!r}; the targets are "
                               f"{', '.join([*TARGETS, 'ptx'])}")
    if kernel.track == "simt" and block is None:
        raise CompileError(f"{kernel.__name__}: a SIMT kernel is compiled for its block: "
                           "pass block=, as in k[grid, block]")
    block = None if block is None else _dims(block, "block", kernel.__name__)
    grid = _dims(grid if grid is not None else 2, "grid", kernel.__name__)
    if isinstance(signatures, (str, dict)):
        signatures = [signatures]
    bundle = Bundle({"format": 1, "name": kernel.__name__, "track": kernel.track,
                     "params": [_param_entry(p) for p in kernel.params],
                     "specializations": []}, [])
    for signature in signatures:
        key = (block, kernel.unit_grid_axes(grid), *_key_entries(kernel, signature))
        bundle.manifest["specializations"].append(
            _entry(kernel, kernel.specialization(key), targets, bundle.images))
    return bundle


def _key_entries(kernel: KernelFunction, signature) -> list:
    from ..frontend.typing import Multiple, Narrow
    from ..ir.nodes import ArrayType

    if isinstance(signature, str):
        from .signatures import SignatureError, parse_signature

        try:
            signature = parse_signature(kernel, signature)
        except SignatureError as err:
            raise CompileError(f"{kernel.__name__}: {err}") from None
    out = []
    for p in kernel.params:
        if p.name not in signature:
            raise CompileError(f"{kernel.__name__}: the signature gives no type for {p.name!r}")
        spec = signature[p.name]
        if p.constexpr:
            out.append(constexpr_entry(spec))
        elif isinstance(spec, ArrayType):
            out.append(("a", spec.dtype.name, spec.ndim, bool(spec.unit_inner_stride),
                        bool(spec.aligned16)) + ((spec.on_grid,) if kernel.track == "tile" else ()))
        elif isinstance(spec, (Multiple, Narrow)):  # `i64:16`, `i64:narrow`: for those only
            if isinstance(spec, Narrow) and spec.dtype.name not in NARROW_DTYPES:
                raise CompileError(f"{kernel.__name__}: {p.name!r}: narrow is for int64 and "
                                   f"uint64 scalars, not {spec.dtype.name}")
            out.append(scalar_entry(spec.dtype, kernel.track == "tile", spec.of % MULTIPLE == 0,
                                    isinstance(spec, Narrow)))
        else:
            dtype = T.from_any(spec)
            # compiled for any value, unless the signature said `:16` or `:narrow`
            out.append(scalar_entry(dtype, kernel.track == "tile", False, False))
    return out


def _relaxed(key: tuple, divisible: bool, narrow: bool) -> tuple:
    """`key` with each integer scalar's "multiple of MULTIPLE" and each array's "on the
    grid" fact (`divisibility`) set to False where `divisible`, and each 64-bit integer
    scalar's "in int32's range" fact (`narrowness`) where `narrow`: the entries a bundle
    compiled for more values holds (their proofs hold for these values too)."""
    def relaxed(entry):
        entry = list(entry)
        if divisible and divisibility(tuple(entry)) is not None:
            entry[FACT_AT[entry[0]]] = False
        if narrow and narrowness(tuple(entry)) is not None:
            entry[NARROW_AT] = False
        return tuple(entry)
    return key[:2] + tuple(map(relaxed, key[2:]))


def _any_value(key: tuple) -> tuple:
    """`key` compiled for any values (`_relaxed`, every fact False)."""
    return _relaxed(key, True, True)


def _as_typed_floats(key: tuple, dtype: str) -> tuple:
    """`key` with each Python float argument's entry (weak, `dispatch.spec_key`) that of a
    `dtype` scalar: a signature's `f32` or `f64`, whose slot the float is passed in."""
    return key[:2] + tuple(("s", dtype) if e[3:4] == ("weak",) else e for e in key[2:])


def _serving(key: tuple) -> list:
    """The keys of the entries that may serve a launch with `key`, the closest first: `key`,
    then with fewer facts (`_relaxed`; a launch never gains one: a large value never gets a
    narrow entry), then both for any number of blocks along grid axis 0
    (a bundle compiled for the default grid, launched with one block: its proofs hold for
    any grid, so for this one too); each also with Python floats as float64, then float32
    scalars (the signatures a bundle is compiled for name no weak float)."""
    def relaxations(k):  # the narrow fact kept longest: the variant proven for fewer values
        return list(dict.fromkeys([k, _relaxed(k, True, False), _relaxed(k, False, True),
                                   _any_value(k)]))
    keys = relaxations(key)
    if key[1] is not None and 0 in key[1]:
        keys += relaxations((key[0], tuple(a for a in key[1] if a != 0), *key[2:]))
    if any(e[3:4] == ("weak",) for e in key[2:]):
        keys += [_as_typed_floats(k, dtype) for dtype in ("float64", "float32") for k in keys]
    return keys


WITHOUT_TMA = " without tma"  # an image variant's suffix (`_entry`)


def _entry(kernel: KernelFunction, spec, targets, images: list) -> dict:
    """The specialization's launch entry with its images per target and variant (the
    fully checked one too when the proofs have launch conditions) and, for a kernel with
    matrix products, each image's `tensormap.MatmulLaunch` and, where it streams through
    the copy engine, the variant without it (for arrays the engine cannot describe)."""
    from ..ir.tiles import has_dots
    from .launch_cuda import build_image
    from .tensormap import MatmulLaunch

    products = kernel.track == "tile" and has_dots(spec.kernel)
    variants = [False] + ([True] if spec.bounds_guard is not None else [])
    entry_images, entry_matmul = {}, {}

    def add(arch: str, variant: str, ptx_target: str, checked: bool, tma: bool = True):
        ir, image = build_image(spec, ptx_target, arch, checked, tma=tma)[:2]
        entry_images[arch][variant] = len(images)
        images.append(image)
        if products:
            launch = MatmulLaunch.of(ir, ptx_target)
            entry_matmul[arch][variant] = launch.to_json()
            return launch

    for target in targets:
        ptx_target, arch = (PTX_FOR_ANY, "ptx") if target == "ptx" else (target, target)
        entry_images[arch], entry_matmul[arch] = {}, {}
        for checked in variants:
            variant = "checked" if checked else "proven"
            launch = add(arch, variant, ptx_target, checked)
            if launch is not None and launch.maps:  # it streams through the copy engine
                add(arch, variant + WITHOUT_TMA, ptx_target, checked, tma=False)
    return dict(launch_entry(kernel, spec), images=entry_images,
                **({"matmul": entry_matmul} if products else {}))


def launch_entry(kernel: KernelFunction, spec) -> dict:
    """What a launch of `spec` needs besides its images, as JSON (a bundle's entry without
    its "images"; `runtime.records` keeps the same)."""
    from ..codegen import checks
    from ..ir import abi_params
    from .launch_cuda import FAULT_PARAM, _entry_symbol

    ir = spec.kernel
    launch_block = spec.launch_block
    if kernel.track == "tile" and launch_block is None:
        from ..tile.warps import launch_block as tile_block

        launch_block = tile_block(ir)
    names = [p.name for p in kernel.params]
    return {
        "key": repr(spec.key),
        "abi": [[a.param, a.role, a.axis, a.dtype.name] for a in abi_params(ir) + [FAULT_PARAM]],
        "array_slots": list(spec.array_slots), "written_slots": list(spec.written_slots),
        "abi_slots": [list(s) for s in spec.abi_slots],
        "guard": None if spec.bounds_guard is None else spec.bounds_guard.condition,
        "entry": _entry_symbol(ir.name), "kernel_id": checks.kernel_id(ir),
        "sites": [[*_loc(n.loc), n.array.name] for n in checks.sites(ir)],
        "writes": {names[i]: _loc(spec.write_loc(names[i])) for i in spec.written_slots},
        "launch_block": None if launch_block is None else list(launch_block),
        "dynamic_shared": spec.dynamic_shared,
        "assumptions": None if spec.assumptions is None else spec.assumptions.to_json(),
    }


def specialization_of(entry: dict, key: tuple, load) -> Specialization:
    """The specialization a launch entry describes (no IR: its images come from `load`,
    `(spec, device, checked=) -> CudaKernel`)."""
    from . import proofs
    from .assumptions import LaunchFacts

    return Specialization(
        None, tuple(entry["array_slots"]), tuple(entry["written_slots"]),
        tuple(tuple(s) for s in entry["abi_slots"]),
        bounds_guard=proofs.guard(entry["guard"]), key=key, load=load,
        launch_block=None if entry["launch_block"] is None else tuple(entry["launch_block"]),
        write_locs={name: _unloc(loc) for name, loc in entry["writes"].items()},
        dynamic_shared=entry.get("dynamic_shared", 0),
        # a bundle made before vg.assume existed has none
        assumptions=LaunchFacts.from_json(entry.get("assumptions")))


def cuda_kernel_of(entry: dict, image: bytes, device: int, name: str, matmul=None):
    """The loaded kernel of a launch entry's image on `device`, its fault table registered;
    `matmul`: (`tensormap.MatmulLaunch`, its `without_tma`) for a kernel with matrix
    products."""
    from . import faults
    from .module import CudaKernel, CudaModule

    faults.register(entry["kernel_id"], name, [(_unloc(site[:4]), site[4]) for site in entry["sites"]])
    abi = [AbiParam(param, role, axis, T.from_name(dtype)) for param, role, axis, dtype in entry["abi"]]
    module = CudaModule(bytes(image), device)
    if matmul is None:
        return CudaKernel(module, entry["entry"], abi)
    from .tensormap import MatmulKernel

    return MatmulKernel(module, entry["entry"], abi, *matmul)


def _loc(loc: Loc | None) -> list | None:
    return None if loc is None else [loc.file, loc.line, loc.col, loc.function]


# ----------------------------------------------------------------------------- loading


def load_bundle(path) -> "BundleKernel":
    """The kernel in a bundle file, ready to launch on the cuda backend."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise LaunchError(f"cannot read the bundle {path}: {err.strerror}") from None
    if not data.startswith(MAGIC):
        raise LaunchError(f"{path} is not a verdigris bundle")
    try:
        (length,) = struct.unpack_from("<Q", data, len(MAGIC))
        start = len(MAGIC) + 8
        manifest = json.loads(data[start:start + length])
        return BundleKernel(manifest, memoryview(data)[start + length:])
    except (struct.error, ValueError, KeyError, TypeError):  # cut short, or written by hand
        raise LaunchError(f"{path} is a damaged verdigris bundle",
                          hint="write it again with verdigris compile --emit bundle") from None


def _param_entry(p) -> list:
    """[name, constexpr], and a constexpr's default where it has a literal one: launches of
    the bundled kernel may leave it out, as launches of the kernel may."""
    literal = p.constexpr and type(p.default) in (bool, int, float, str, type(None))
    return [p.name, p.constexpr, p.default] if literal else [p.name, p.constexpr]


class BundleKernel(KernelFunction):
    """A bundle's kernel: `k[grid, block](*args)` as for the kernel it was compiled from."""

    def __init__(self, manifest: dict, blob):
        from ..frontend import ParamInfo

        self.__name__ = self.__qualname__ = manifest["name"]
        self.__doc__ = f"The bundled kernel {manifest['name']}."
        self.fn = None
        self.track = manifest["track"]
        self.options = {}
        self._params = tuple(ParamInfo(*entry) for entry in manifest["params"])
        self._specializations: dict = {}
        self._recorded: dict = {}
        self._launches: dict = {}
        self._entries = {ast.literal_eval(e["key"]): e for e in manifest["specializations"]}
        self._blob = blob
        _KERNELS.add(self)

    def __repr__(self) -> str:
        return f"<verdigris bundled {self.track} kernel {self.__name__}>"

    def specialization(self, key: tuple, beside_compile: bool = False) -> Specialization:
        """The bundle's specialization for `key`; its verdict came with the bundle (nothing
        compiles beside it, whatever `beside_compile` says)."""
        spec = self._specializations.get(key)
        if spec is None:
            from .backend import current

            if current() == "cpu":
                self.launch_cpu(None, None, None, None, None)
            entry = next((self._entries[k] for k in _serving(key) if k in self._entries), None)
            if entry is None:
                raise LaunchError(
                    f"{self.__name__}: the bundle has no specialization for this launch "
                    f"({_describe_key(self, key)}); it has: "
                    + "; ".join(_describe_key(self, k) for k in self._entries),
                    hint="compile the bundle for these argument types too")
            spec = self._specializations[key] = specialization_of(entry, key, self._loader(entry))
        return spec

    def build(self, key: tuple):
        raise CompileError(f"{self.__name__} comes from a bundle: it holds compiled code only")

    def launch_cpu(self, spec, grid, block, values, infos) -> None:
        raise LaunchError(f"{self.__name__} comes from a bundle, which runs on the cuda "
                          "backend only", hint="vg.set_backend('cuda')")

    def _loader(self, entry: dict):
        def load(spec, device: int, checked: bool = False):
            from . import driver

            arch = self._arch(entry, driver.properties(device).cc)
            return self._kernel(entry, arch, "checked" if checked else "proven", device)

        return load

    def _kernel(self, entry: dict, arch: str, variant: str, device: int):
        """The loaded kernel of one image; a kernel with matrix products gets its launch
        plan and, for arrays the copy engine cannot describe, the variant without it."""
        launch = entry.get("matmul", {}).get(arch, {}).get(variant)
        matmul = None
        if launch is not None:
            from .tensormap import MatmulLaunch

            def without_tma():
                if variant + WITHOUT_TMA not in entry["images"][arch]:
                    raise LaunchError(f"{self.__name__}: the bundle has no variant without the "
                                      "copy engine for these arrays")
                return self._kernel(entry, arch, variant + WITHOUT_TMA, device)

            matmul = (MatmulLaunch.from_json(launch), without_tma)
        image = self._slice(entry["images"][arch][variant])
        return cuda_kernel_of(entry, image, device, self.__name__, matmul)

    def _arch(self, entry: dict, cc: tuple) -> str:
        """The image architecture to load on compute capability `cc`."""
        images = entry["images"]
        own = f"sm_{cc[0]}{cc[1]}"
        usable = [arch for arch in images if arch != "ptx" and _runs_on(arch, cc)]
        if usable:  # the closest cubin (its own architecture, else the newest older minor)
            return min(usable, key=lambda a: (a != f"{own}a", a != own, -int(a[3:].rstrip("af"))))
        if "ptx" in images:
            return "ptx"
        raise LaunchError(f"{self.__name__}: the bundle has no image for this GPU ({own}); it "
                          f"was compiled for {', '.join(images)}",
                          hint="compile it for this architecture too, or with target 'ptx'")

    def _slice(self, where: list):
        offset, size = where
        return self._blob[offset:offset + size]


def _runs_on(arch: str, cc: tuple) -> bool:
    """Whether a cubin for `arch` (sm_XY or sm_XYa) runs on compute capability `cc`."""
    digits = arch[3:].rstrip("af")
    major, minor = int(digits[:-1]), int(digits[-1])
    if arch.endswith(("a", "f")):
        return (major, minor) == tuple(cc)
    return major == cc[0] and minor <= cc[1]


def _unloc(fields) -> Loc | None:
    return None if fields is None else Loc(*fields)


def _describe_key(kernel: KernelFunction, key: tuple) -> str:
    parts = []
    for p, entry in zip(kernel.params, key[2:]):
        if entry[0] == "c":
            parts.append(f"{p.name}={entry[1]!r}")
        elif entry[0] == "s":
            parts.append(f"{p.name}: {entry[1]}" + (":16" if divisibility(entry) else "")
                         + (":narrow" if narrowness(entry) else ""))
        else:
            dtype, ndim, unit, aligned = entry[1:5]
            axes = ", ".join([":"] * (ndim - 1) + (["::1"] if unit else [":"])) if ndim else ""
            parts.append(f"{p.name}: {dtype}[{axes}]" + (":16" if divisibility(entry) else "")
                         + ("" if aligned else " unaligned"))
    block = "" if key[0] is None else f" block {key[0]}"
    return ", ".join(parts) + block
