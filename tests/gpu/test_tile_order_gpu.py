"""One block's statements in program order, on the GPU: each kernel of `tile_order_kernels`
(statements of one block meeting through two shapes, scalars beside tiles, gathers and
scatters, a broadcast layout, a loop's next iteration, an if's arms) leaves what program
order leaves, on many fresh inputs and over many blocks (the cpu version is
`tests/test_tile_order.py`). Without the barriers the lowering puts between them, the
threads of a block race and these results differ (issue #25)."""
import numpy as np
import pytest

import verdigris as vg
from tile_order_kernels import CASES

pytestmark = pytest.mark.gpu

REPEATS = 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_gives_program_order(name, rng):
    kernel, grid, make, want = CASES[name]
    for _ in range(REPEATS):
        arguments = make(rng)
        expected = want(**{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arguments.items()})
        device = {k: vg.asarray(v) if isinstance(v, np.ndarray) else v for k, v in arguments.items()}
        kernel[grid](**device)
        for array, value in expected.items():
            np.testing.assert_array_equal(np.asarray(device[array]), value, err_msg=f"{name}: {array}")


@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_gpu_overwrite_of_two_shapes_over_many_blocks(warps, rng):
    """The issue's kernel over 4096 blocks, at each warp count (its layouts change with it)."""
    from tile_order_kernels import ROWS, overwrite_half

    x = rng.standard_normal((4096 * ROWS, 64)).astype(np.float32)
    device = vg.asarray(x)
    overwrite_half[4096](device, num_warps=warps)
    got = np.asarray(device)
    assert (got[:, :32] == 1.0).all() and (got[:, 32:] == 2.0).all()
