"""`verdigris.tile`: the tile track. You write what one block does to whole tiles.

    @tile.kernel
    def add(a, b, out, BLOCK: vg.constexpr):
        i = tile.bid(0)
        x = tile.load(a, index=(i,), shape=(BLOCK,))   # index counts tiles, not elements
        y = tile.load(b, index=(i,), shape=(BLOCK,))
        tile.store(out, index=(i,), tile=x + y)        # edge tiles are masked

    add[vg.cdiv(n, 1024)](a, b, out, BLOCK=1024)

Tiles combine with NumPy broadcasting (`+ - * / // % **`, comparisons, `&`, `|`, ...),
with scalars, and through math: the elementwise functions of `vg.math` are here too
(`tile.exp`, `tile.sqrt`, ..., `tile.maximum`/`tile.minimum` for the two-operand max/min;
`tile.max`/`tile.min` reduce). Bool tiles combine with `&`, `|`, `^` and `~` (and `not t`),
element by element; Python's `and`, `or` and chained comparisons (`0 < t < 1`) take one
truth value, so they refuse tiles, as in NumPy: write `(0 < t) & (t < 1)`.

Tile methods: `t.shape`, `t.dtype`, `t.ndim`, `t.T`, `t.astype(dtype)` (or `t.to(dtype)`),
`t.reshape(shape)`, `t.permute(axes)`, `t.transpose(axis0, axis1)`, `t.sum(axis)` and the
other reductions, `t.mean(axis)`, the scans `t.cumsum(axis, reverse=False)`, `t.cumprod`,
`t.cummax`, `t.cummin`, `t.flip(axis)` and `t.extract(index, shape)`. A subscript slices
with constant bounds and adds size-1 axes, as NumPy's: `t[2:6]`, `t[:, 0:8:2]`, `t[-4:]`;
`t[:, None]` is `t.reshape((n, 1))`, `t[None, :]` is `t.reshape((1, n))` (slices, `None`
and `...` index a tile). The functions below are the intrinsics kernels call; on the host
they raise.
"""
from __future__ import annotations

from .. import math as _math
from ..ir.nodes import MATH_FUNCS as _MATH_FUNCS
from ..lang import device_only


def kernel(fn=None, **options):
    """`@tile.kernel`: make `fn` a tile kernel, launched as `k[grid](*args)`.

    `@tile.kernel(fma=True)`: on the GPU, `x * y + z` may run as one fused multiply-add,
    rounded once (as CUDA C++ and Triton do by default): fewer instructions, and as accurate,
    but no longer bit for bit the cpu backend's result. By default every float multiply and
    add rounds on its own, as on the cpu backend."""
    from ..runtime.dispatch import KernelFunction

    if fn is None:
        return lambda f: KernelFunction(f, "tile", **options)
    return KernelFunction(fn, "tile", **options)


_DOCS = {
    "bid": "bid(axis): this block's index in the tile grid along `axis` (int32).",
    "num_blocks": "num_blocks(axis): the number of blocks along `axis` (int32).",
    "num_tiles": "num_tiles(array, axis, shape): how many tiles of `shape` cover `array` along "
                 "`axis`, a partial edge tile included: vg.cdiv(array.shape[axis], shape[axis]) "
                 "(int64), as cuTile's num_tiles.",
    "load": "load(array, index, shape, padding=0, latency=None, order='C', allow_tma=None): "
            "the tile of "
            "`shape` at tile index `index` (element index[k] * shape[k] + j along axis k); "
            "elements outside take `padding`. shape=() loads the one element at `index` as a "
            "scalar (cuTile's 0-d load; `padding` outside). `order` (cuTile's): tile axis k "
            "runs along array axis order[k] ('F': reversed), `index` and `shape` along the "
            "tile's axes. `latency` (1 to 10) and `allow_tma` (None, True or False) are hints "
            "not used yet.",
    "store": "store(array, index, tile, latency=None, order='C', allow_tma=None): write "
             "`tile` at tile index "
             "`index`; elements outside the array are not written. `order` as for load. "
             "`latency` and `allow_tma` are hints not used yet, as for load.",
    "atomic_add": "atomic_add(array, index, tile): add `tile` at tile index `index`, atomically.",
    "atomic_max": "atomic_max(array, index, tile): array = maximum(array, tile) at tile index "
                  "`index`, atomically per element (np.maximum.at; a float NaN loses to a number). "
                  "Integers of 32 and 64 bits, float32, float64.",
    "atomic_min": "atomic_min(array, index, tile): array = minimum(array, tile) at tile index "
                  "`index`, atomically per element (np.minimum.at; a float NaN loses to a number). "
                  "Integers of 32 and 64 bits, float32, float64.",
    "atomic_cas": "atomic_cas(array, index, compare, value): where the element at `index` (one "
                  "scalar per axis, counting elements) equals `compare` (bit patterns), store "
                  "`value`; once for the block, which gets the old value. Acquire and release "
                  "ordering at GPU scope (Triton's sem='acq_rel'). int32, int64, uint32, "
                  "uint64, float32, float64.",
    "atomic_xchg": "atomic_xchg(array, index, value): store `value` at the element `index`; once "
                   "for the block, which gets the old value. Ordering and dtypes as atomic_cas.",
    "lock": "lock(locks, index): `with tile.lock(locks, index):` runs its body while the block "
            "holds lock element `index` of the int32 array `locks` (0: free, before and after "
            "the launch); blocks holding one element run their bodies one at a time, and the "
            "race checker orders their accesses. No nesting, no return/break/continue out of "
            "the body; nothing else may access `locks`.",
    "gather": "gather(array, indices, padding=0, skip_out_of_bounds=True): array[indices[0], "
              "indices[1], ...] per element (one int tile per axis, broadcast together); where "
              "an index lies outside the array (a negative one too), `padding`, nothing read. "
              "skip_out_of_bounds=True (the scatters' option) says so and changes nothing; "
              "False is refused.",
    "scatter": "scatter(array, indices, tile, mask=None, skip_out_of_bounds=False): "
               "array[indices...] = tile, per element (only where the bool tile `mask` holds, "
               "when given). An element whose index lies outside the array is a bounds fault "
               "(VG302); with skip_out_of_bounds=True it writes nothing, as a masked-off one.",
    "scatter_add": "scatter_add(array, indices, tile, mask=None, skip_out_of_bounds=False): "
                   "array[indices...] += tile, atomically (only where `mask` holds, when "
                   "given; outside the array as scatter).",
    "scatter_max": "scatter_max(array, indices, tile, mask=None, skip_out_of_bounds=False): "
                   "np.maximum.at(array, indices, tile), atomically (only where `mask` holds, "
                   "when given; outside the array as scatter).",
    "scatter_min": "scatter_min(array, indices, tile, mask=None, skip_out_of_bounds=False): "
                   "np.minimum.at(array, indices, tile), atomically (only where `mask` holds, "
                   "when given; outside the array as scatter).",
    "arange": "arange(n, dtype=int32): the tile 0, 1, ..., n-1, of `dtype` (an integer dtype "
              "must hold n - 1; a float dtype rounds as np.arange does).",
    "zeros": "zeros(shape, dtype=float32): a tile of zeros.",
    "full": "full(shape, value, dtype=None): a tile of `value` (a constant or a scalar).",
    "where": "where(cond, x, y): x where cond holds, else y, element by element.",
    "sigmoid": "sigmoid(x): 1 / (1 + exp(-x)), element by element.",
    "clamp": "clamp(x, lo, hi): minimum(maximum(x, lo), hi), element by element (lo > hi "
             "gives hi, as np.clip). As tile.maximum/tile.minimum take the number over a NaN, a "
             "NaN x gives lo (np.clip gives NaN) and a NaN bound bounds nothing.",
    "sum": "sum(t, axis=None, keepdims=False): the sum over `axis` (None: all, a scalar).",
    "max": "max(t, axis=None, keepdims=False): the largest element over `axis`.",
    "min": "min(t, axis=None, keepdims=False): the smallest element over `axis`.",
    "prod": "prod(t, axis=None, keepdims=False): the product over `axis`.",
    "argmax": "argmax(t, axis=None, keepdims=False): the first position of the largest (int32).",
    "argmin": "argmin(t, axis=None, keepdims=False): the first position of the smallest (int32).",
    "mean": "mean(t, axis=None, keepdims=False): the sum over `axis` divided by its length, in "
            "t's float dtype (float32 for integers and bools, as their `/` gives); float16, "
            "bfloat16 and float8 are summed in float32.",
    "cumsum": "cumsum(t, axis=0, reverse=False): the inclusive running sum along `axis` "
              "(np.cumsum); with reverse=True from the last element back (as Triton's "
              "tl.cumsum(x, axis, reverse=True)). Bools and narrow integers sum in int32.",
    "cumprod": "cumprod(t, axis=0, reverse=False): the inclusive running product along `axis` "
               "(np.cumprod), from the last element back with reverse=True. Bools and narrow "
               "integers multiply in int32.",
    "cummax": "cummax(t, axis=0, reverse=False): the running maximum along `axis` "
              "(np.fmax.accumulate: a NaN loses to a number), from the end with reverse=True.",
    "cummin": "cummin(t, axis=0, reverse=False): the running minimum along `axis` "
              "(np.fmin.accumulate: a NaN loses to a number), from the end with reverse=True.",
    "flip": "flip(t, axis=None): `t` reversed along `axis` (an int or a tuple of ints), as "
            "np.flip; None reverses every axis (Triton's tl.flip reverses the last one: write "
            "tile.flip(t, -1) for that).",
    "sort": "sort(t, axis=-1, descending=False): `t` with each line along `axis` sorted "
            "(each row of a 2-d tile, by default), as np.sort: NaN last (as a NaN: its bits are "
            "not kept), and -0.0 before +0.0; descending: the reverse, NaN first. "
            "Tiles of up to 16,384 elements (sizes padded to powers of two).",
    "argsort": "argsort(t, axis=-1, descending=False): the int32 positions along `axis` that "
               "sort `t`, as np.argsort(t, axis, kind='stable'): equal elements (-0.0 and "
               "+0.0, any two NaNs) keep their order; descending: largest first, NaN first, "
               "equal elements still in their order.",
    "astype": "astype(t, dtype): `t` converted to `dtype` (also the methods t.astype(dtype) "
              "and, Triton's name, t.to(dtype)).",
    "reshape": "reshape(t, shape): the same elements, row-major, in another shape.",
    "broadcast_to": "broadcast_to(t, shape): `t` stretched to `shape` by NumPy's rules "
                    "(leading axes added, size-1 axes repeated).",
    "permute": "permute(t, axes): axes reordered; result axis k is t's axis axes[k].",
    "transpose": "transpose(t, axis0=None, axis1=None): axes `axis0` and `axis1` swapped "
                 "(cuTile's transpose, also the method t.transpose(axis0, axis1)); a 2-d tile "
                 "without axes: t.T.",
    "extract": "extract(t, index, shape): the sub-tile of `shape` at `index` (constants, one "
               "per axis, counting sub-tiles: elements index[k] * shape[k] + j), which must lie "
               "inside `t` (cuTile's extract; the slice t[a:a + s] along each axis).",
    "cat": "cat(tiles, axis): the tiles one after another along `axis` (np.concatenate); "
           "they have one dtype and agree in every other extent.",
    "rand": "rand(seed, offsets): uniform float32 in [0, 1) per element of the int tile "
            "`offsets` (Philox-4x32-10 keyed by `seed`, identical on every backend).",
    "mma": "mma(a, b, acc, input_precision=None, allow_tf32=None): acc + a @ b on tensor "
           "cores; a (M, K), b (K, N) of float16, bfloat16, fp8 or tfloat32 (float32 acc), float32 "
           "(exact; tf32 with allow_tf32=True or input_precision='tf32', as tfloat32 operands "
           "are) or float64. 3-d tiles are "
           "batches (NumPy's matmul: a 2-d operand, or a batch of one, is shared).",
    "dot": "dot(a, b, input_precision=None, allow_tf32=None): a @ b (mma with a zero acc).",
    "truediv": "truediv(x, y, rounding_mode=None, flush_to_zero=False): x / y, float32 division "
               "rounded as 'rn' (None, IEEE), 'full' or 'approx' (PTX's div.full / div.approx, "
               "within a few ulps on the GPU) says; flush_to_zero=True flushes subnormal "
               "operands and results to zero. sqrt takes the same keywords ('rn' or 'approx'), "
               "exp2 flush_to_zero= (ex2.approx.ftz).",
}
for _name, _doc in _DOCS.items():
    globals()[_name] = device_only(f"tile.{_name}", _doc)

# Elementwise math: vg.math's functions themselves (max/min here are reductions).
for _name in _MATH_FUNCS:
    if _name not in ("max", "min"):
        globals()[_name] = getattr(_math, _name)
maximum, minimum = _math.max, _math.min

__all__ = ["kernel", "maximum", "minimum", *_DOCS,
           *(n for n in _MATH_FUNCS if n not in ("max", "min"))]
