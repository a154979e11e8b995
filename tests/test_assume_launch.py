"""`vg.assume` on the cuda launch path, through the fake driver (tests/fakecuda): the
generated launcher tests the facts too, and a launch that breaks one goes down to the
general path, which refuses it before anything is enqueued."""
import pytest

from tests import fakecuda
from tests.test_runtime_launch import run

pytestmark = pytest.mark.skipif(fakecuda.library_dir() is None, reason="needs a C compiler")


def test_a_generated_launcher_refuses_what_the_general_path_refuses():
    got = run("""
    from tests.fakecuda.kernels import assumed_rows
    x, o = f32(100), f32(800)
    assumed_rows[1, 128](x, o, 8, 5)
    assumed_rows[1, 128](x, o, 8, 5)
    launched = last_launch().count
    for m in (5, 9, 5, 9):
        before = general_calls[0]
        try:
            assumed_rows[1, 128](x, o, 8, m)
            result = "ran"
        except vg.AssumptionError as err:
            result = err.code + (" m = 9, n = 8" if "m = 9, n = 8" in str(err) else "")
        out.setdefault("results", []).append([result, general_calls[0] - before])
    out["launched"] = last_launch().count - launched
    """)
    assert got["results"] == [["ran", 0], ["VG304 m = 9, n = 8", 1], ["ran", 0],
                              ["VG304 m = 9, n = 8", 1]]
    assert got["launched"] == 2  # only the launches that keep the fact
