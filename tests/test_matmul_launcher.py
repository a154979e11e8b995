"""Repeated launches of a tile matrix product take a generated launcher (`runtime.fastpath`)
and the kernel's prepared parameters (`runtime.tensormap`), on the fake CUDA driver
(launches recorded, not run): the same grid, block, shared memory and parameters as the
first launch, which took the general path; other arrays get their own tensor maps, and
an argument of another kind goes back down the chain."""
import json

import pytest

from tests import fakecuda

pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")

REPEATED = """
import json
import numpy as np
import verdigris as vg
from tests.fakecuda import last_launch
from verdigris.examples.tile_gemm import gemm

def shot(a, b, c):
    gemm[8, 4](a, b, c, BM=128, BN=256, BK=64)
    launch = last_launch(19)  # 13 values (ABI, fault block), 3 grid int32s, A's, B's, C's maps
    return dict(grid=list(launch.grid), block=list(launch.block), shared=launch.shared,
                virtual=[v & 0xFFFFFFFF for v in launch.slots[13:16]],
                maps=launch.slots[16:19], ptrs=[launch.slots[0], launch.slots[3]])

a, b = (vg.asarray(np.zeros((1024, 512), np.float16)), vg.asarray(np.zeros((512, 1024), np.float16)))
c = vg.asarray(np.zeros((1024, 1024), np.float32))
first = shot(a, b, c)
generated = getattr(gemm._launches[next(iter(gemm._launches))], "kinds", None) is not None
second = shot(a, b, c)
other = vg.asarray(np.zeros((1024, 512), np.float16))
third = shot(other, b, c)
print(json.dumps(dict(first=first, second=second, third=third, generated=generated,
                      a=a.ptr, other=other.ptr)))
"""


def test_repeated_gemm_launches_take_a_generated_launcher_with_the_same_parameters():
    done = fakecuda.run(REPEATED)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    first, second, third = got["first"], got["second"], got["third"]
    assert got["generated"]
    assert first == second
    assert first["grid"] == [32, 1, 1] and first["block"] == [384, 1, 1]
    assert first["virtual"] == [8, 4, 1] and first["shared"] > 48 * 1024
    # The fake driver's tensor map starts with the address it describes.
    assert first["maps"][0] == first["ptrs"][0] == got["a"]
    assert third["maps"][0] == third["ptrs"][0] == got["other"]
    assert third["maps"][1:] == first["maps"][1:]
