"""The array arguments of a generated launcher (`fastpath`): the source that checks them.

Takes: the launcher being written (`fastpath._Writer`: its globals `env`, its `checks` and
`check(failed)`, a test whose truth sends the call down the chain, and `divisible`), one
array argument (its position, parameter name, value, `ArrayInfo` and specialization key
entry) and, for the alias check, the specialization and every array's facts. Gives
`array_facts(w, i, name, value, info, entry)`, which writes the argument's checks and
returns its `ArrayFacts` (the source expressions of its pointer, shape, strides and, for a
`vg.Array`, its byte range), `alias_check(w, spec, facts)`, and `items(names)`.

Guarantees: a launcher passes an array only where the general path would have decided the
same: the exact type and dtype (torch and CuPy: the libraries' own dtype objects; a torch
tensor without its negative bit, which the general path refuses), the device, the rank, C order or not, unit inner stride and 16-byte alignment as in the key
(a `vg.Array`: one identity test of its `kind`, which holds them all), and the tile
track's divisibility facts. An array type of another library is described by its
`interop` extractor, then checked like a `vg.Array`. The alias check compares the byte
range of each written array against every other array's (an empty range overlaps
nothing), asks of two that overlap whether the views share an element (the general path's
question, `interop.views_share`: the q, k and v parts of one packed gradient do not), and
tests a written strided view against itself; a hit goes down the chain, to the general
path, which refuses the launch.
"""
from __future__ import annotations

from . import interop
from .speckeys import divisibility


# Per array kind, the expressions of its facts; `{a}` is the argument, `{i}` its index.
_KINDS = {
    interop._torch: dict(
        check="type({a}) is not _ty{i} or {a}.dtype is not _dt{i} or {a}.get_device() != _DEV or {a}.is_neg()",
        ptr="{a}.data_ptr()", shape="{a}.shape", strides="{a}.stride()",
        contiguous="not {a}.is_contiguous()", library_dtype=True),
    interop._cupy: dict(
        check="type({a}) is not _ty{i} or {a}.dtype is not _dt{i} or {a}.data.device_id != _DEV",
        ptr="{a}.data.ptr", shape="{a}.shape",
        strides="_element_strides({a}.strides, {size})",
        contiguous="{a}.strides != ({c_bytes})", library_dtype=True),
    interop._vg_array: dict(
        check="type({a}) is not _ty{i} or {a}.dtype is not _dt{i} or {a}.device != _DEV",
        ptr="{a}.ptr", shape="{a}.shape", strides="{a}.strides",
        contiguous="{a}.strides != ({c_elements})", library_dtype=False),
}
# A vg.Array knows its launch kind (dtype, device, rank, C order, unit inner stride,
# alignment: `arrays.Array.kind`), one object per kind: one identity test checks them all,
# and its type too (only Arrays hold those objects; anything without `.kind` raises
# AttributeError, which goes down the chain).
_ARRAY = dict(_KINDS[interop._vg_array], check="{a}.kind is not _k{i}")
# Any other array type: its `interop` extractor makes an ArrayInfo, checked like a vg.Array.
_GENERIC = dict(_KINDS[interop._vg_array],
                check="{a} is None or {a}.dtype is not _dt{i} or {a}.device != _DEV")


class ArrayFacts:
    """Source expressions of one array argument's pointer, shape and strides, and of its
    byte range when the array holds it (a vg.Array: `extent`, else None); its dtype."""

    def __init__(self, subject, ptr, shapes, strides, dtype, contiguous, extent=None):
        self.subject, self.ptr, self.shapes, self.strides = subject, ptr, shapes, strides
        self.dtype, self.itemsize, self.contiguous, self.extent = dtype, dtype.itemsize, contiguous, extent


def items(names) -> str:
    """Source of a tuple's items: `a, b, ` (each followed by a comma)."""
    return "".join(n + ", " for n in names)


def array_facts(w, i: int, name: str, value, info, entry) -> ArrayFacts:
    ndim, unit, aligned = entry[2:5]
    from .arrays import Array

    extractor = interop.extractor(type(value))
    kind, subject = _ARRAY if type(value) is Array else _KINDS.get(extractor), name
    if kind is None:  # any other array type: extract an ArrayInfo, then check that
        kind, subject = _GENERIC, f"_x{i}"
        w.env[f"_ex{i}"] = extractor
        w.check(f"type({name}) is not _ty{i}")
        w.checks.append(f"{subject} = _ex{i}({name})")
    if kind is not _ARRAY:  # (a vg.Array's kind stands for its type and dtype)
        w.env[f"_ty{i}"] = type(value)
        # torch and CuPy dtypes are the libraries' own objects; the others, verdigris DTypes
        w.env[f"_dt{i}"] = value.dtype if kind["library_dtype"] else info.dtype
    size = info.dtype.itemsize
    shapes = [f"_n{i}_{k}" for k in range(ndim)]
    fmt = dict(a=subject, i=i, size=size, c_bytes=items(_c_strides(shapes, size)),
               c_elements=items(_c_strides(shapes, 1)))
    w.check(kind["check"].format(**fmt))
    ptr = f"_p{i}"
    w.checks.append(f"{ptr} = {kind['ptr'].format(**fmt)}")
    if ndim:
        w.checks.append(f"{items(shapes)}= {kind['shape'].format(**fmt)}")
    else:
        w.check(f"len({kind['shape'].format(**fmt)})")
    contiguous = tuple(info.strides) == interop._c_strides(tuple(info.shape))
    in_kind = kind is _ARRAY  # its kind holds contiguity, unit stride and alignment
    if in_kind:
        w.env[f"_k{i}"] = value.kind
    if contiguous:
        if not in_kind:
            w.check(kind["contiguous"].format(**fmt))
        strides = _c_strides(shapes, 1)
    else:
        strides = [f"_t{i}_{k}" for k in range(ndim)]
        w.checks.append(f"{items(strides)}= {kind['strides'].format(**fmt)}")
        if not in_kind:
            w.check(f"({strides[-1]} == 1) is not {bool(unit)}")
    if not in_kind:
        w.check(f"{'' if aligned else 'not '}{ptr} & 15")
    # (a C-order array's strides are products of its extents: on the grid with them)
    w.divisible(divisibility(entry), extents=shapes, multiples=[] if contiguous else strides[:-1])
    return ArrayFacts(subject, ptr, shapes, strides, info.dtype, contiguous,
                  (f"{subject}.lo", f"{subject}.hi") if in_kind else None)


def _sharing(written: ArrayFacts, other: ArrayFacts) -> str:
    """Source of the test, after their byte ranges overlap, that two views share an element
    (views of different dtypes: taken to, as `interop.shares_elements` does)."""
    if written.dtype != other.dtype:
        return ""
    return (f" and _views_share({written.ptr}, ({items(written.shapes)}), ({items(written.strides)}), "
            f"{other.ptr}, ({items(other.shapes)}), ({items(other.strides)}), {written.itemsize})")


def _c_strides(shapes: list, size: int) -> list:
    """Source of the C-order strides of these shape names, times `size`."""
    out = []
    for k in range(len(shapes)):
        factors = shapes[k + 1:] + ([str(size)] if size != 1 else [])
        out.append(" * ".join(factors) or "1")
    return out


def alias_check(w, spec, facts: dict) -> None:
    """The byte range of each written array against every other array's (an empty range
    overlaps nothing), and where two overlap, whether the views share an element
    (`interop.views_share`, as the general path asks: the interleaved parts of a packed
    array do not, and launch here); and a written strided view against itself."""
    if not spec.written_slots:
        return
    for i, f in facts.items():
        if f.extent is not None:  # computed when the array was made
            w.checks.append(f"_hi{i} = {f.extent[1]}" if f.contiguous
                            else f"_lo{i}, _hi{i} = {f.extent[0]}, {f.extent[1]}")
        elif f.contiguous:  # its range starts at its pointer
            count = " * ".join(f.shapes + [str(f.itemsize)])
            w.checks.append(f"_hi{i} = {f.ptr} + {count}")
        else:
            w.checks.append(f"_lo{i}, _hi{i} = _span({f.ptr}, ({items(f.shapes)}), "
                            f"({items(f.strides)}), {f.itemsize})")
    lo = {i: f.ptr if f.contiguous else f"_lo{i}" for i, f in facts.items()}
    for wi in spec.written_slots:
        f = facts[wi]
        if not f.contiguous:
            w.check(f"_overlaps(({items(f.shapes)}), ({items(f.strides)}))")
        others = " or ".join(f"({lo[o]} < _hi{wi} and {lo[wi]} < _hi{o} and {lo[o]} < _hi{o}"
                             + _sharing(f, facts[o]) + ")" for o in facts if o != wi)
        if others:
            w.check(f"{lo[wi]} < _hi{wi} and ({others})")
