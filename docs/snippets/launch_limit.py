import numpy as np
import verdigris as vg
from verdigris import simt


@simt.kernel
def copy_rows(x, out):
    r = simt.global_id(1)
    c = simt.global_id(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c]


rows = 70_000
x = np.ones((rows, 8), np.float32)
copy_rows[(1, rows), (8, 1)](x, np.empty_like(x))  # one block per row: 70,000 > 65535
