"""Fused cross-entropy (src/verdigris/examples/tile_cross_entropy.py) on the cpu backend
against NumPy float64: GPT-2's and Llama 3's vocabularies (neither a multiple of the
chunk), float32 and bfloat16 logits, ignored rows, the gradient out of place and in place;
an accidental alias of the gradient and the logits refused at the launch; a racy in-place
kernel refused beside the accepted one; PTX for every kernel assembled by ptxas.
`tests/gpu/test_train_kernels_gpu.py` runs them on the GPU against torch."""
import numpy as np
import pytest

import verdigris as vg
from verdigris import codegen, tile
from verdigris import types as T
from verdigris.examples import tile_cross_entropy as ce
from verdigris.ir import ArrayType

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BF16}
# error of the gradient relative to its largest element: float32 math, then one rounding
# to the gradient's dtype (bfloat16 keeps 8 bits)
GRAD_RTOL = {"float32": 1e-5, "bfloat16": 2 ** -8}


def inputs(rng, rows, vocab, dtype):
    logits = (3 * rng.standard_normal((rows, vocab))).astype(dtype)
    labels = rng.integers(0, vocab, rows)
    labels[1] = ce.IGNORE_INDEX
    labels[2] = vocab - 1  # the last column: in the ragged last chunk
    dloss = rng.random(rows).astype(np.float32) + 0.5
    return logits, labels, dloss


def poisoned(rows):
    return np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)


def assert_close(got, want, rtol):
    got = np.asarray(got).astype(np.float64)
    assert np.isfinite(got).all()
    error = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert error <= rtol, f"error {error:.3e} over {rtol:.0e}"


def assert_matches(logits, labels, dloss, loss, lse, grad, dtype_name):
    want_loss, want_lse, want_grad = ce.reference(logits, labels, dloss)
    assert_close(loss, want_loss, 1e-5)
    assert_close(lse, want_lse, 1e-6)
    assert_close(grad, want_grad, GRAD_RTOL[dtype_name])
    ignored = labels == ce.IGNORE_INDEX
    assert (np.asarray(loss)[ignored] == 0).all()
    assert (np.asarray(grad, np.float32)[ignored] == 0).all()


@pytest.mark.parametrize("vocab", [50257, 128256])
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_forward_then_backward_match_float64(vocab, dtype_name, rng):
    logits, labels, dloss = inputs(rng, 4, vocab, DTYPES[dtype_name])
    loss, lse = poisoned(4)
    grad = np.full_like(logits, np.nan)
    ce.forward(logits, labels, loss, lse)
    ce.backward(logits, labels, lse, dloss, grad)
    assert_matches(logits, labels, dloss, loss, lse, grad, dtype_name)


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_backward_in_place_overwrites_the_logits_with_their_gradient(dtype_name, rng):
    logits, labels, dloss = inputs(rng, 4, 50257, DTYPES[dtype_name])
    loss, lse = poisoned(4)
    ce.forward(logits, labels, loss, lse)
    grad = logits.copy()
    ce.backward(grad, labels, lse, dloss, in_place=True)
    assert_matches(logits, labels, dloss, loss, lse, grad, dtype_name)


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_forward_backward_in_one_launch(dtype_name, in_place, rng):
    logits, labels, dloss = inputs(rng, 4, 128256, DTYPES[dtype_name])
    loss, lse = poisoned(4)
    if in_place:
        grad = logits.copy()
        ce.forward_backward(grad, labels, loss, lse, dloss, in_place=True)
    else:
        grad = np.full_like(logits, np.nan)
        ce.forward_backward(logits, labels, loss, lse, dloss, grad)
    assert_matches(logits, labels, dloss, loss, lse, grad, dtype_name)


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_in_place_on_rows_of_a_wider_buffer_leaves_the_rest_alone(dtype_name, rng):
    logits, labels, dloss = inputs(rng, 4, 1000, DTYPES[dtype_name])
    buffer = np.full((4, 1008), 7, DTYPES[dtype_name])  # rows at a pitch of a multiple of 16
    grad = buffer[:, :1000]
    grad[...] = logits
    loss, lse = poisoned(4)
    ce.forward_backward(grad, labels, loss, lse, dloss, in_place=True, block=256)
    assert_matches(logits, labels, dloss, loss, lse, grad, dtype_name)
    assert (buffer[:, 1000:] == 7).all()


def test_mean_loss_gradient_through_a_broadcast_upstream_gradient(rng):
    logits, labels, _ = inputs(rng, 5, 1000, np.float32)
    dloss = np.broadcast_to(np.float32(1 / np.count_nonzero(labels != ce.IGNORE_INDEX)), 5)
    loss, lse = poisoned(5)
    grad = np.full_like(logits, np.nan)
    ce.forward_backward(logits, labels, loss, lse, dloss, grad, block=256)
    assert_matches(logits, labels, dloss, loss, lse, grad, "float32")


def test_masked_columns_at_minus_infinity_take_no_part(rng):
    # a first chunk of nothing but -inf (the running maximum starts there), masked columns
    # scattered over the rest, as a padded or constrained vocabulary has
    logits, labels, dloss = inputs(rng, 4, 1000, np.float32)
    logits[:, :256] = -np.inf
    logits[:, 600:700:3] = -np.inf
    labels[[0, 2, 3]] = [300, 999, 256]
    loss, lse = poisoned(4)
    grad = np.full_like(logits, np.nan)
    ce.forward_backward(logits, labels, loss, lse, dloss, grad, block=256)
    assert_matches(logits, labels, dloss, loss, lse, grad, "float32")
    assert (grad[:, :256] == 0).all()


def test_a_label_outside_the_vocabulary_gives_a_nan_loss(rng):
    logits, labels, dloss = inputs(rng, 4, 300, np.float32)
    labels[0], labels[3] = 300, -1
    loss, lse = poisoned(4)
    ce.forward(logits, labels, loss, lse, block=128)
    assert np.isnan(loss[[0, 3]]).all() and np.isfinite(loss[[1, 2]]).all()


@pytest.mark.parametrize("overlap", ["same_array", "shifted_view"])
@pytest.mark.parametrize("launcher", ["backward", "forward_backward"])
def test_gradient_overlapping_the_logits_is_refused_unless_asked_for_in_place(launcher, overlap, rng):
    logits, labels, dloss = inputs(rng, 4, 1000, np.float32)
    loss, lse = poisoned(4)
    ce.forward(logits, labels, loss, lse, block=256)
    before = logits.copy()
    x, grad = (logits, logits) if overlap == "same_array" else (logits[:, :-1], logits[:, 1:])
    with pytest.raises(vg.AliasError) as refused:
        if launcher == "backward":
            ce.backward(x, labels, lse, dloss, grad, block=256)
        else:
            ce.forward_backward(x, labels, loss, lse, dloss, grad, block=256)
    assert refused.value.code == "VG201" and "'grad'" in str(refused.value)
    np.testing.assert_array_equal(logits, before)  # refused before anything ran


@pytest.mark.parametrize("launcher", ["backward", "forward_backward"])
def test_in_place_is_said_explicitly(launcher, rng):
    logits, labels, dloss = inputs(rng, 4, 300, np.float32)
    loss, lse = poisoned(4)
    ce.forward(logits, labels, loss, lse, block=128)
    before = logits.copy()
    launch = getattr(ce, launcher)
    args = (logits, labels, lse, dloss) if launcher == "backward" else (logits, labels, loss, lse, dloss)
    with pytest.raises(vg.LaunchError, match="no array for the gradient") as neither:
        launch(*args, block=128)  # grad forgotten: the logits are not overwritten
    assert neither.value.loc.file == __file__ and "in_place=True" in neither.value.hint
    with pytest.raises(vg.LaunchError, match="a grad was passed too"):
        launch(*args, np.empty_like(logits), in_place=True, block=128)
    np.testing.assert_array_equal(logits, before)


@tile.kernel
def backward_in_place_into_the_next_row(logits, labels, lse, dloss, ignore_index, BLOCK: vg.constexpr):
    # racy twin of cross_entropy_backward_inplace: block r overwrites row r + 1, which
    # block r + 1 reads
    r = tile.bid(0)
    label = tile.load(labels, index=(r,), shape=())
    scale = tile.where(label == ignore_index, 0.0, tile.load(dloss, index=(r,), shape=()))
    row_lse = tile.load(lse, index=(r,), shape=())
    for c in range(tile.num_tiles(logits, 1, (1, BLOCK))):
        t = tile.load(logits, index=(r, c), shape=(1, BLOCK)).astype(vg.float32)
        onehot = tile.where(c * BLOCK + tile.arange(BLOCK, dtype=vg.int64) == label, 1.0, 0.0)
        tile.store(logits, index=(r + 1, c), tile=((tile.exp(t - row_lse) - onehot) * scale).astype(logits.dtype))


def test_in_place_gradient_into_another_blocks_row_is_refused(rng):
    logits, labels, dloss = inputs(rng, 4, 1000, np.float32)
    loss, lse = poisoned(4)
    ce.forward(logits, labels, loss, lse, block=256)
    with pytest.raises(vg.SafetyError) as refused:
        backward_in_place_into_the_next_row[4](logits, labels, lse, dloss, ce.IGNORE_INDEX, BLOCK=256)
    assert refused.value.code == "VG203" and "block" in str(refused.value)
    grad = logits.copy()
    ce.backward(grad, labels, lse, dloss, in_place=True, block=256)  # its fixed twin: accepted
    assert_matches(logits, labels, dloss, loss, lse, grad, "float32")


def arr(dtype, ndim=1):
    return ArrayType(dtype, ndim, "global", True, True)


f32, bf16, i64 = T.float32, T.bfloat16, T.int64
LOGITS = dict(logits=arr(bf16, 2), labels=arr(i64), ignore_index=i64, BLOCK=ce.BLOCK)
SPECS = {
    ce.cross_entropy_forward: dict(LOGITS, loss=arr(f32), lse=arr(f32)),
    ce.cross_entropy_backward: dict(LOGITS, lse=arr(f32), dloss=arr(f32), grad=arr(bf16, 2)),
    ce.cross_entropy_backward_inplace: dict(LOGITS, lse=arr(f32), dloss=arr(f32)),
    ce.cross_entropy_forward_backward: dict(LOGITS, loss=arr(f32), lse=arr(f32), dloss=arr(f32),
                                            grad=arr(bf16, 2)),
    ce.cross_entropy_forward_backward_inplace: dict(LOGITS, loss=arr(f32), lse=arr(f32), dloss=arr(f32)),
}


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel", list(SPECS), ids=lambda k: k.__name__)
def test_cross_entropy_ptx_assembles(kernel, target):
    compiled = codegen.compile_to_ptx(kernel.specialize_types(SPECS[kernel]), target)
    assert codegen.assemble(compiled.ptx, target, optimize=False)[:4] == b"\x7fELF"


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("kernel", list(SPECS), ids=lambda k: k.__name__)
def test_cross_entropy_gpu_code_on_the_host_matches_the_cpu_backend(kernel, dtype_name, rng):
    """The lowering's code (host_jit: the GPU's LLVM IR run on this CPU, a warp's threads
    taking turns) against the cpu backend, on the same inputs (bfloat16 as raw bits)."""
    import host_jit
    from verdigris.runtime import backend

    logits, labels, dloss = inputs(rng, 3, 3000, DTYPES[dtype_name])
    names = {p.name for p in kernel.params}
    every = dict(logits=logits, labels=labels, loss=poisoned(3)[0], lse=poisoned(3)[1], dloss=dloss,
                 grad=np.full_like(logits, np.nan), ignore_index=ce.IGNORE_INDEX, BLOCK=1024)
    if "loss" not in names:  # a backward: the forward's log-sum-exp
        every["lse"] = ce.reference(logits, labels, dloss)[1].astype(np.float32)
    arguments = {k: v for k, v in every.items() if k in names}
    want = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arguments.items()}
    backend.set_backend("cpu")
    kernel[3](**want)
    narrow = {k for k in ("logits", "grad") if k in names and dtype_name == "bfloat16"}
    raw = {k: v.view(np.uint16) if k in narrow else v for k, v in arguments.items()}
    assert host_jit.run(kernel, 3, num_warps=1, dtypes={k: T.bfloat16 for k in narrow}, **raw) is None
    for name in ("loss", "lse", "grad", "logits"):
        if name in arguments:  # the C library's exp2f and log against NumPy's
            np.testing.assert_allclose(arguments[name].astype(np.float32), want[name].astype(np.float32),
                                       rtol=1e-6, atol=1e-7 if dtype_name == "float32" else 2 ** -9)
