"""Repeated launches of a tile matrix product take a generated launcher (`runtime.fastpath`)
and the kernel's prepared parameters (`runtime.tensormap`), on the fake CUDA driver
(launches recorded, not run): the same grid, block, shared memory and parameters as the
first launch, which took the general path; other arrays get their own tensor maps, and
an argument of another kind goes back down the chain. Attention's dK/dV kernel on 4-d
views of packed arrays: tensor maps of the views' strides, and the interleaved gradient
views relaunched from the generated launcher."""
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


PACKED = """
import json
import numpy as np
import verdigris as vg
from tests import fakecuda
from verdigris.examples import tile_attention as ta
from verdigris.runtime import tensormap

encoded = []
encode = tensormap.encode
def recording(spec, pointer, shape, strides):
    encoded.append(dict(param=spec.param, box=list(spec.box), pointer=pointer, shape=list(shape),
                        strides=list(strides)))
    return encode(spec, pointer, shape, strides)
tensormap.encode = recording
general = fakecuda.count_general_calls()

batch, heads, seq, d = 2, 12, 256, 64
qkv = vg.asarray(np.zeros((batch, seq, 3 * heads * d), np.float16))
do = vg.asarray(np.zeros((batch, seq, heads * d), np.float16))
dqkv = vg.asarray(np.zeros(qkv.shape, np.float16))
lse = vg.asarray(np.zeros((batch, heads, seq), np.float32))
q, k, v = ta.head_views(qkv, heads, 3)
(do_heads,) = ta.head_views(do, heads, 1)
dq, dk, dv = ta.head_views(dqkv, heads, 3)
counts = []
for _ in range(2):
    ta.attention_backward_dkdv[seq // 128, heads, batch](q, k, v, do_heads, lse, lse, dk, dv, 0.125, D=d,
                                                          **ta.backward_launches(d)[0])
    counts.append(dict(general=general[0], encoded=len(encoded)))
print(json.dumps(dict(encoded=encoded, counts=counts, q=q.ptr, do=do_heads.ptr)))
"""


def test_attention_streams_4d_views_of_packed_arrays_and_relaunches_from_the_launcher():
    """The dK/dV kernel on GPT-2's packed layout: its streamed Q and dO tiles get 4-d tensor
    maps of the views' own strides (the seq stride 3 * heads * d, the heads' d), and the
    interleaved dK and dV views of one gradient pass the alias check; the second launch
    takes the generated launcher and the tensor maps already encoded."""
    done = fakecuda.run(PACKED, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    batch, heads, seq, d = 2, 12, 256, 64
    maps = {m["param"]: m for m in got["encoded"]}
    # Q and dO feed two products each: one map serves both (the same array and box)
    assert sorted(m["param"] for m in got["encoded"]) == ["do", "q"]
    assert maps["q"]["pointer"] == got["q"] and maps["do"]["pointer"] == got["do"]
    assert maps["q"]["shape"] == [batch, heads, seq, d] and maps["q"]["box"][:2] == [1, 1]
    assert maps["q"]["strides"] == [seq * 3 * heads * d, d, 3 * heads * d]
    assert maps["do"]["strides"] == [seq * heads * d, d, heads * d]
    assert got["counts"] == [dict(general=1, encoded=2), dict(general=1, encoded=2)]
