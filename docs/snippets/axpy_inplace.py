import numpy as np
import verdigris as vg
from verdigris import simt


@simt.kernel
def axpy_inplace(alpha, x, y):
    i = simt.global_id(0)
    if i < y.shape[0]:
        y[i] = alpha * x[i] + y[i]  # each thread reads and writes only its own element


n = 10_000
x = vg.asarray(np.random.rand(n).astype(np.float32))
y0 = np.random.rand(n).astype(np.float32)
y = vg.asarray(y0.copy())
axpy_inplace[vg.cdiv(n, 256), 256](2.0, x, y)
assert np.allclose(np.asarray(y), 2.0 * np.asarray(x) + y0)
