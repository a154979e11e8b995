"""Mandelbrot set: loops with `break`, an early `return`, and a @vg.func helper."""
import numpy as np

import verdigris as vg
from verdigris import simt


@vg.func
def escape_time(cx, cy, max_iter):
    x = 0.0
    y = 0.0
    for n in range(max_iter):
        if x * x + y * y > 4.0:
            return n
        x, y = x * x - y * y + cx, 2.0 * x * y + cy
    return max_iter


@simt.kernel
def mandelbrot(out, x0, y0, step, MAX_ITER: vg.constexpr):
    row = simt.global_id(1)
    col = simt.global_id(0)
    if row >= out.shape[0] or col >= out.shape[1]:
        return
    out[row, col] = escape_time(x0 + col * step, y0 + row * step, MAX_ITER)


def reference(height, width, x0, y0, step, max_iter):
    f32 = np.float32
    cy, cx = np.mgrid[0:height, 0:width].astype(f32)
    cx, cy = f32(x0) + cx * f32(step), f32(y0) + cy * f32(step)
    x, y = np.zeros_like(cx), np.zeros_like(cy)
    counts = np.full(cx.shape, max_iter, np.int32)
    alive = np.ones(cx.shape, bool)
    for n in range(max_iter):
        escaped = alive & (x * x + y * y > 4)
        counts[escaped] = n
        alive &= ~escaped
        x, y = np.where(alive, x * x - y * y + cx, x), np.where(alive, f32(2) * x * y + cy, y)
    return counts


def check(rng, height=96, width=160):
    from verdigris.examples import Result

    x0, y0 = -2.2 + rng.uniform(-0.05, 0.05), -1.2 + rng.uniform(-0.05, 0.05)
    step = 2.4 / height
    out = vg.asarray(np.full((height, width), -1, np.int32))
    mandelbrot[(vg.cdiv(width, 16), vg.cdiv(height, 16)), (16, 16)](out, x0, y0, step, MAX_ITER=200)
    got = np.asarray(out)
    want = reference(height, width, x0, y0, step, 200)
    # Points on the set's boundary can escape one iteration apart under different fma
    # contraction; count how many pixels differ at all.
    mismatch = np.count_nonzero(got != want) / got.size
    return [Result(f"{height}x{width} Mandelbrot (fraction of pixels that differ)",
                   np.array([mismatch]), np.array([0.0]), 0.01, absolute=True)]


if __name__ == "__main__":
    from verdigris.examples import report

    raise SystemExit(0 if report(check(np.random.default_rng())) else 1)
