"""GEMM backward and linear (+ GELU) layers on the GPU (issue #28): the GEMM with either
operand read transposed (dA = dC @ B.T, dB = A.T @ dC: wgmma from transposed shared-memory
operands on sm_90a) against float32 torch, and `verdigris.ops.linear` with bf16 CUDA tensors
against torch autograd in float32 (values and every gradient), at GPT-2's MLP shape and at
shapes no tile divides; gradcheck in float64 (small); bias gradients the same bit for bit
from run to run; torch.compile(fullgraph=True) forward and backward. Split-K (the weight
gradient's few output tiles, issue #29): in every operand order, with empty parts (more
parts than K tiles), the same bit for bit from run to run, and taken by the op where
`k_parts` chooses it (dw at GPT-2's MLP shape)."""
import pytest

torch = pytest.importorskip("torch")

from tests.gpu.test_norm_backward_gpu import BF16_TOL, rel_err  # noqa: E402 (bf16: one rounding)

pytestmark = pytest.mark.gpu

F = torch.nn.functional


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed + sum(shape))
    return torch.randn(*shape, device="cuda", generator=g).to(dtype)


@pytest.mark.parametrize("m, k, n", [(8192, 768, 3072), (1000, 200, 776)])
def test_gemm_backward_against_float32_torch(m, k, n):
    from verdigris.examples.tile_linear import launch_gemm

    a, b, dc = randn(m, k, seed=1), randn(k, n, seed=2), randn(m, n, seed=3)
    da, db = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16), \
        torch.full((k, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch_gemm(dc, b, da, B_ORDER="F")
    launch_gemm(a, dc, db, A_ORDER="F")
    assert rel_err(da, dc.float() @ b.float().T) < BF16_TOL
    assert rel_err(db, a.float().T @ dc.float()) < BF16_TOL


@pytest.mark.parametrize("m, k, n, parts", [(8192, 768, 3072, 2), (8192, 768, 3072, 3), (1000, 200, 776, 20)])
def test_split_k_against_float32_torch_bit_for_bit(m, k, n, parts):
    """dB = A.T @ dC (the weight gradient: K = m) and dA = dC @ B.T split in `parts`, the
    workspace poisoned (NaN) each run: 20 parts of 16 K tiles leave 4 empty, whose slices
    must be zeros; two runs give the same bits."""
    from verdigris.examples.tile_gemm import workspace_shape
    from verdigris.examples.tile_linear import GEMM_TILES, launch_gemm

    a, b, dc = randn(m, k, seed=15), randn(k, n, seed=16), randn(m, n, seed=17)
    want_db, want_da = a.float().T @ dc.float(), dc.float() @ b.float().T
    runs = []
    for _ in range(2):
        db, da = (torch.full(s, float("nan"), device="cuda", dtype=torch.bfloat16) for s in ((k, n), (m, k)))
        launch_gemm(a, dc, db, A_ORDER="F", workspace=torch.full(
            workspace_shape(k, n, parts, GEMM_TILES), float("nan"), device="cuda"))
        launch_gemm(dc, b, da, B_ORDER="F", workspace=torch.full(
            workspace_shape(m, k, parts, GEMM_TILES), float("nan"), device="cuda"))
        assert rel_err(db, want_db) < BF16_TOL and rel_err(da, want_da) < BF16_TOL
        runs.append((db, da))
    assert all(torch.equal(x, y) for x, y in zip(*runs))


def test_the_op_splits_the_weight_gradient_bit_for_bit():
    """At GPT-2's MLP shape k_parts splits dw (768 x 3072 over 8192 rows: 144 tiles) on an
    H100 or H200; the gradient is the same bits twice."""
    from verdigris.examples.tile_linear import GEMM_TILES, k_parts
    from verdigris.ops.linear import linear_gelu

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert k_parts(3072, 768, 8192, GEMM_TILES, sms) > 1
    x, w, b = randn(8192, 768, seed=18), randn(3072, 768, seed=19) * 0.05, randn(3072, seed=20)
    w.requires_grad_()
    dy = randn(8192, 3072, seed=21)
    first, second = (torch.autograd.grad(linear_gelu(x, w, b), (w,), dy)[0] for _ in range(2))
    assert torch.equal(first, second)


@pytest.mark.parametrize("gelu", [False, True])
@pytest.mark.parametrize("m, k, n", [(8192, 768, 3072), (8192, 3072, 768), (333, 200, 136)])
def test_linear_against_torch_autograd(m, k, n, gelu):
    from verdigris.ops.linear import linear, linear_gelu

    x, w, b, dy = randn(m, k, seed=4), randn(n, k, seed=5) * 0.05, randn(n, seed=6), randn(m, n, seed=7)
    params = [t.clone().requires_grad_() for t in (x, w, b)]
    y = (linear_gelu if gelu else linear)(*params)
    grads = torch.autograd.grad(y, params, dy)
    reference = [t.float().requires_grad_() for t in (x, w, b)]
    want_y = F.linear(*reference)
    want_y = F.gelu(want_y) if gelu else want_y
    want = torch.autograd.grad(want_y, reference, dy.float())
    assert y.dtype == torch.bfloat16 and rel_err(y, want_y) < BF16_TOL
    for got, expected in zip(grads, want):
        assert got.dtype == torch.bfloat16 and rel_err(got, expected) < BF16_TOL


def test_gradcheck_in_float64():
    from verdigris.ops.linear import linear, linear_gelu

    x, w, b = (randn(*s, dtype=torch.float64, seed=8).requires_grad_() for s in ((6, 10), (7, 10), (7,)))
    assert torch.autograd.gradcheck(lambda x, w, b: linear_gelu(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: linear(x, w), (x, w))


def test_bias_gradients_are_the_same_bit_for_bit():
    from verdigris.ops.linear import linear_gelu

    x, w, b = randn(4096, 768, seed=9), randn(3072, 768, seed=10) * 0.05, randn(3072, seed=11)
    b.requires_grad_()
    dy = randn(4096, 3072, seed=12)
    first, second = (torch.autograd.grad(linear_gelu(x, w, b), (b,), dy)[0] for _ in range(2))
    assert torch.equal(first, second)


def test_torch_compile_fullgraph_forward_and_backward():
    from verdigris.ops.linear import linear, linear_gelu

    def mlp(x, w1, b1, w2, b2):
        return linear(linear_gelu(x, w1, b1), w2, b2)

    params = [randn(*s, seed=13).requires_grad_() for s in ((512, 256), (1024, 256), (1024,), (256, 1024), (256,))]
    dy = randn(512, 256, seed=14)
    eager = torch.autograd.grad(mlp(*params), params, dy)
    got = torch.autograd.grad(torch.compile(mlp, fullgraph=True)(*params), params, dy)
    for a, c in zip(eager, got):
        assert rel_err(c, a) < 1e-3  # the same kernels; inductor may move the glue around
