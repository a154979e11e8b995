"""The vector path's bounds tests in 32 bits (`tile.memory._Access.vector_inside`): taken
only where every spanned axis's extent and start are below 2**31 (`whole_vectors`), so an
array with 2**31 elements or more along an axis takes the rolled path and its edges stay
exact (host CPU, through `host_jit`: rows aliased by a stride of
0, so no memory of that size is allocated); and in the PTX, each predicated vector access
is guarded by 32-bit comparisons only."""
from __future__ import annotations

import re

import numpy as np
import pytest

import host_jit
import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples.tile_vector_add import add
from verdigris.ir import ArrayType
from test_tile_codegen import block_2d


@tile.kernel
def rows_from(x, out, i, R: vg.constexpr, C: vg.constexpr):
    """Rows i * R .. i * R + R - 1 of x (their part inside x; -1 past its end) into out."""
    tile.store(out, index=(0, 0), tile=tile.load(x, index=(i, 0), shape=(R, C), padding=-1) * 2 + 1)


@pytest.mark.parametrize("rows,i", [(2**31 + 4, 0), (2**31 + 4, 2**31 // 8), (2**31 - 4, 2**31 // 8 - 1),
                                    (2**32 + 3, 2**32 // 8)])
def test_extents_and_starts_past_two_to_the_31(rng, rows, i):
    """A row axis of 2**31 elements or more, or a tile starting near 2**31: truncated to 32
    bits, the extent 2**31 + 4 would be negative (every vector outside) and 2**32 + 3 would
    be 3 (rows 3.. outside); the rolled path keeps them exact."""
    row = rng.standard_normal(64).astype(np.float32)
    x = np.lib.stride_tricks.as_strided(row, shape=(rows, 64), strides=(0, 4), writeable=False)
    out = np.zeros((8, 64), np.float32)
    assert host_jit.run(rows_from, 1, x=x, out=out, i=i, R=8, C=64) is None
    inside = min(8, rows - 8 * i)
    want = np.full((8, 64), -1, np.float32)
    want[:inside] = row * 2 + 1
    np.testing.assert_array_equal(out, want)


def _guards(ptx: str) -> list:
    """The comparisons behind the predicate of each predicated 16-byte global access."""
    definitions = {p: line for line, p in re.findall(r"^\s*((?:setp|and|or|not)\.\S+\s+(%p\d+),.*;)", ptx, re.M)}
    guards = []

    def expand(p):
        line = definitions[p]
        if line.startswith("setp"):
            guards.append(line)
        for q in re.findall(r"%p\d+", line.split(",", 1)[1]):
            expand(q)
    for p in re.findall(r"@(%p\d+) (?:ld|st)\.global(?:\.nc)?\.v4", ptx):
        expand(p)
    return guards


needs_ptxas = pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")


@needs_ptxas
@pytest.mark.parametrize("kernel,specs", [
    (add, dict(a=T.float32, b=T.float32, out=T.float32, BLOCK=4096)),
    (block_2d, dict(x=T.float32, out=T.float32, R=8, C=64)),
])
def test_vector_accesses_are_guarded_by_32_bit_comparisons(kernel, specs):
    ndim = 1 if kernel is add else 2
    types = {k: ArrayType(v, ndim, "global", True, True) if isinstance(v, T.DType) else v for k, v in specs.items()}
    ptx = codegen.compile_to_ptx(kernel.specialize_types(types), "sm_90a").ptx
    guards = _guards(ptx)
    assert guards and all(re.match(r"setp\.\w+\.[sub]32\s", g) for g in guards), guards
    codegen.assemble(ptx, "sm_90a", optimize=False)
