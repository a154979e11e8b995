import numpy as np
import verdigris as vg
from verdigris import simt


@simt.kernel
def axpy(alpha, x, y, out):
    i = simt.global_id(0)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


n = 10_000
x = vg.asarray(np.random.rand(n).astype(np.float32))
y = vg.asarray(np.random.rand(n).astype(np.float32))
axpy[vg.cdiv(n, 256), 256](2.0, x, y, y)  # "y = 2x + y, in place"
