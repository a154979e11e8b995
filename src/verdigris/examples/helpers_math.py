"""@vg.func helpers and math functions: GELU (tanh and erf forms) and a stable sigmoid."""
import math

import numpy as np

import verdigris as vg
from verdigris import simt


@vg.func
def gelu_tanh(x):
    return 0.5 * x * (1.0 + vg.math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@vg.func
def gelu_erf(x):
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


@vg.func
def sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + vg.math.exp(-x))
    z = vg.math.exp(x)
    return z / (1.0 + z)


@simt.kernel
def activations(x, out_tanh, out_erf, out_sigmoid, out_misc):
    i = simt.global_id(0)
    if i >= x.shape[0]:
        return
    v = x[i]
    out_tanh[i] = gelu_tanh(v)
    out_erf[i] = gelu_erf(v)
    out_sigmoid[i] = sigmoid(v)
    a = abs(v) + 0.5
    out_misc[i] = vg.math.fma(vg.math.sqrt(a), vg.math.rsqrt(a), vg.math.log2(a)) \
        + vg.math.sin(v) * vg.math.cos(v) + vg.math.exp2(-a) + vg.math.pow(a, 0.3) \
        + vg.math.floor(v) - vg.math.ceil(v) + min(v, 0.25) + max(v, -0.25)


def reference(x):
    x = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    a = np.abs(x) + 0.5
    misc = (np.sqrt(a) * (1 / np.sqrt(a)) + np.log2(a) + np.sin(x) * np.cos(x) + np.exp2(-a)
            + a ** 0.3 + np.floor(x) - np.ceil(x) + np.minimum(x, 0.25) + np.maximum(x, -0.25))
    return {
        "GELU (tanh form)": 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))),
        "GELU (erf form)": 0.5 * x * (1 + erf(x / math.sqrt(2))),
        "sigmoid": 1 / (1 + np.exp(-x)),
        "fma/sqrt/rsqrt/log2/sin/cos/exp2/pow/floor/ceil/min/max": misc,
    }


def check(rng, n=50_000):
    from verdigris.examples import Result

    x = (rng.standard_normal(n) * 4).astype(np.float32)
    outs = [vg.asarray(np.full(n, np.nan, np.float32)) for _ in range(4)]
    activations[vg.cdiv(n, 128), 128](vg.asarray(x), *outs)
    return [Result(f"{name} on {n:,} float32", np.asarray(out), want, 2e-6)
            for (name, want), out in zip(reference(x).items(), outs)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
