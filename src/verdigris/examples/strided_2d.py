"""2-D elementwise on strided views: a transposed input and every other row of an output,
read and written in place without copies."""
import numpy as np

import verdigris as vg
from verdigris import simt


@simt.kernel
def scale_add_2d(a, b, out, beta):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a[r, c] * beta + b[r, c]


def check(rng, rows=300, cols=129):
    from verdigris.examples import Result

    a_t = rng.standard_normal((cols, rows)).astype(np.float32)  # passed transposed
    b = rng.standard_normal((rows, cols)).astype(np.float32)
    big = np.full((2 * rows, cols), np.nan, np.float32)  # we write rows 0, 2, 4, ...
    dev_a_t, dev_b, dev_big = vg.asarray(a_t), vg.asarray(b), vg.asarray(big)
    out_view = dev_big[::2]
    grid = (vg.cdiv(cols, 32), vg.cdiv(rows, 8))
    scale_add_2d[grid, (32, 8)](dev_a_t.T, dev_b, out_view, -0.5)
    got = np.asarray(dev_big)
    want = big.astype(np.float64)
    want[::2] = a_t.T.astype(np.float64) * -0.5 + b
    return [Result(f"{rows}x{cols} strided views (transposed input, every other output row)",
                   np.nan_to_num(got, nan=7.0), np.nan_to_num(want, nan=7.0), 1e-6)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
