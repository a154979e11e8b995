"""Names are values and plain helpers on the GPU: kernels with rebound names (new dtypes and
shapes, joins at merges, arrays selected under `if`) and plain helper functions give the
cpu backend's results, bit for bit, on fresh random inputs."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris.runtime import backend
from test_names_are_values import (arrays_meet, astype_rebinding, dead_after_merge,
                                   loop_local_rebinding, parameter_joined, reshapes,
                                   scalar_widens, selected_write_fixed, while_carried,
                                   widened_offsets)
from test_plain_helpers import simt_plain, tile_plain

pytestmark = pytest.mark.gpu


def run_both(kernel, launch, args: dict, outputs: tuple, **options):
    """Outputs (poisoned first) of one launch on the GPU and one on the cpu backend."""
    results = []
    for where in ("cuda", "cpu"):
        backend.set_backend(where)
        values = {}
        for name, v in args.items():
            if isinstance(v, np.ndarray):
                v = np.full_like(v, -7) if name in outputs else v
                values[name] = vg.asarray(v) if where == "cuda" else v.copy()
            else:
                values[name] = v
        kernel[launch](**values, **options)
        results.append({n: values[n].numpy() if where == "cuda" else values[n] for n in outputs})
    return results


def cases(rng):
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    f64 = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    return [
        (scalar_widens, (2, 32), dict(x=f64(50), out=f64(50)), ("out",), {}),
        (parameter_joined, (1, 1), dict(out=f64(1), n=np.int32(5)), ("out",), {}),
        (while_carried, (1, 1), dict(out=f64(1), n=np.int32(10)), ("out",), {}),
        (arrays_meet, (2, 32), dict(a=f64(40), b=f64(40), out=f64(40), flag=1), ("out",), {}),
        (selected_write_fixed, (1, 64), dict(a=f32(64), b=f32(64), flag=0), ("a", "b"), {}),
        (astype_rebinding, 1, dict(x=f32(64), out=f32(64)), ("out",), dict(B=64)),
        (reshapes, 1, dict(x=f32(16), out=f32(1)), ("out",), dict(B=16)),
        (widened_offsets, 1, dict(out=np.zeros(8, np.int64), n=np.int64(2 ** 40)), ("out",),
         dict(B=8)),
        (dead_after_merge, 1, dict(x=f32(8), out=f32(8, 1), flag=1), ("out",), dict(B=8)),
        (loop_local_rebinding, 1, dict(x=f32(32), out=f32(32, 1)), ("out",), dict(B=8)),
        (simt_plain, (2, 32), dict(x=f64(50), y=f64(50), out=f64(50)), ("out",), {}),
        (tile_plain, 4, dict(x=f32(64), out=f32(64)), ("out",), dict(B=16)),
    ]


def test_rebound_names_and_plain_helpers_match_the_cpu_backend(rng):
    previous = backend.current()
    try:
        for kernel, launch, args, outputs, options in cases(rng):
            gpu, cpu = run_both(kernel, launch, args, outputs, **options)
            for name in outputs:  # sums may add in another order: a few ulps apart
                rtol = 0 if gpu[name].dtype.kind != "f" else 8 * np.finfo(gpu[name].dtype).eps
                np.testing.assert_allclose(gpu[name], cpu[name], rtol=rtol, err_msg=kernel.__name__)
    finally:
        backend.set_backend(previous)
