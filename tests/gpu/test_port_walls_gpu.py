"""Issue #26 item 8 on the GPU: string constexprs, constants derived from constexprs, integer
true division (float64), numba's forall and `x.load4` give the cpu backend's results, bit
for bit, on fresh random inputs (the aligned load4 as one vector load)."""
from __future__ import annotations

import numpy as np
import pytest

import verdigris as vg
from verdigris.runtime import backend
from test_compile_time_values import activation, simt_halves, tile_activation, tile_halves
from test_forall import threads_seen
from test_true_division import simt_divide, tile_divide
from test_vector_loads import proven_group_sums, row_groups

pytestmark = pytest.mark.gpu


def run_both(launch, args: dict, outputs: tuple, **options):
    """Outputs (poisoned first) of `launch(values)` on the GPU and on the cpu backend."""
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
        launch(values, options)
        results.append({n: values[n].numpy() if where == "cuda" else values[n] for n in outputs})
    return results


def grid(kernel, config):
    return lambda values, options: kernel[config](**values, **options)


def cases(rng):
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    i32 = lambda n: rng.integers(-2**31, 2**31, n, dtype=np.int32)  # noqa: E731
    nonzero = i32(256)
    nonzero[nonzero == 0] = 1
    n = int(rng.integers(1, 5000))
    return [
        ("activation", grid(activation, (4, 32)), dict(x=f32(100), out=f32(100)), ("out",),
         dict(ACTIVATION="leaky_relu")),
        ("activation-none", grid(activation, (4, 32)), dict(x=f32(100), out=f32(100)), ("out",),
         dict(ACTIVATION="none")),
        ("tile_activation", grid(tile_activation, 4), dict(x=f32(128), out=f32(128)), ("out",),
         dict(B=32, ACTIVATION="relu")),
        ("tile_halves", grid(tile_halves, 1), dict(x=f32(32), out=f32(16),
                                                   idx=np.zeros(16, np.int32)), ("out", "idx"),
         dict(B=32)),
        ("simt_halves", grid(simt_halves, (1, 32)), dict(x=f32(32), out=f32(16)), ("out",),
         dict(B=32)),
        ("simt_divide", grid(simt_divide, (8, 32)),
         dict(a=i32(256), b=nonzero, n=int(rng.integers(1, 1000)), by_array=np.zeros(256),
              by_literal=np.zeros(256), by_argument=np.zeros(256)),
         ("by_array", "by_literal", "by_argument"), {}),
        ("tile_divide", grid(tile_divide, 8),
         dict(a=i32(256), b=nonzero, n=int(rng.integers(1, 1000)), by_tile=np.zeros(256),
              by_literal=np.zeros(256), by_argument=np.zeros(256)),
         ("by_tile", "by_literal", "by_argument"), dict(B=32)),
        ("forall", lambda values, options: threads_seen.forall(n, block=128)(**values),
         dict(out=np.zeros(n + 7, np.int64), n=n), ("out",), {}),
        ("load4", grid(proven_group_sums, (4, 32)), dict(x=f32(4 * 100), out=f32(100)),
         ("out",), {}),
        ("load4-2d", grid(row_groups, ((1, 5), (8, 1))),
         dict(x=rng.integers(0, 10, (5, 24)).astype(np.int64), out=np.zeros((5, 6), np.int64)),
         ("out",), {}),
    ]


def test_port_walls_match_the_cpu_backend(rng):
    previous = backend.current()
    try:
        for name, launch, args, outputs, options in cases(rng):
            gpu, cpu = run_both(launch, args, outputs, **options)
            for out in outputs:
                np.testing.assert_array_equal(gpu[out], cpu[out], err_msg=f"{name}: {out}")
    finally:
        backend.set_backend(previous)
