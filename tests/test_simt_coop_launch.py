"""`shared_bytes=` on the cuda launch path, without a GPU: the fake driver (tests/fakecuda)
records what cuLaunchKernel got. The dynamic shared memory reaches the launch, a request
over 48 KB opts the function in first (cuFuncSetAttribute), and such launches keep taking
the general path (generated launchers pass ABI values only)."""
import json
import textwrap

import pytest

from tests import fakecuda

pytest.importorskip("cuda.bindings.driver")
pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")


def test_shared_bytes_reach_the_launch():
    done = fakecuda.run(textwrap.dedent("""
        import json, sys
        sys.path.insert(0, "tests")  # test_simt_coop imports its siblings by name
        import verdigris as vg
        from tests.fakecuda import count_general_calls, last_launch
        from tests.test_simt_coop import dynamic_extent, reverse_blocks

        calls = count_general_calls()

        out = vg.empty(4, vg.int64)
        seen = []
        for nbytes in (8 * 100, 100 * 1024, 8 * 100):
            dynamic_extent[4, 64](out, shared_bytes=nbytes)
            seen.append(last_launch().shared)
        x, y = vg.empty(256, vg.float32), vg.empty(256, vg.float32)
        reverse_blocks[2, 128](x, y)
        reverse_blocks[2, 128](x, y)
        static = last_launch().shared
        print(json.dumps(dict(seen=seen, static=static, calls=calls[0])))
        """))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["seen"] == [800, 100 * 1024, 800]
    assert got["static"] == 0  # static shared memory is the kernel's own
    assert got["calls"] == 4  # three with shared_bytes, one before reverse_blocks' launcher
