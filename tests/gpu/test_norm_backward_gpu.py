"""LayerNorm and RMSNorm backward on the GPU (issue #28): `verdigris.ops.norms` with bf16
CUDA tensors against float32 torch references (values and every gradient, stated
tolerances), at the benchmark's width (one 8192-wide tile) and at widths the tile overhangs;
gradcheck in float64; weight gradients the same bit for bit from run to run; and
torch.compile(fullgraph=True) forward and backward. The kernels on their own, float32 against
float64, run at larger sizes in test_tile_examples.py."""
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

F = torch.nn.functional
# bf16 outputs: one rounding (2^-8 relative) over float32 arithmetic, in norm relative terms
BF16_TOL = 1e-2


def rel_err(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm())


def bf16_case(rows, cols, norm, weight_dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(rows * 131 + cols)
    x = torch.randn(rows, cols, device="cuda", generator=g).to(torch.bfloat16) * 2 + 0.25
    dy = torch.randn(rows, cols, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(cols, device="cuda", generator=g).to(weight_dtype)
    b = torch.randn(cols, device="cuda", generator=g).to(weight_dtype)
    return x, dy, w, b


def float32_reference(norm, x, dy, w, b):
    params = [t.float().requires_grad_() for t in ((x, w, b) if norm == "layer" else (x, w))]
    y = (F.layer_norm(params[0], (x.shape[-1],), params[1], params[2], 1e-5) if norm == "layer"
         else F.rms_norm(params[0], (x.shape[-1],), params[1], 1e-6))
    return y, torch.autograd.grad(y, params, dy.float())


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("rows, cols, weight_dtype", [(4096, 8192, torch.bfloat16), (1000, 3000, torch.bfloat16),
                                                      (333, 768, torch.float32)])
def test_bf16_against_float32_torch(norm, rows, cols, weight_dtype):
    from verdigris.ops.norms import layer_norm, rms_norm

    x, dy, w, b = bf16_case(rows, cols, norm, weight_dtype)
    params = [t.clone().requires_grad_() for t in ((x, w, b) if norm == "layer" else (x, w))]
    y = layer_norm(*params) if norm == "layer" else rms_norm(*params)
    grads = torch.autograd.grad(y, params, dy)
    want_y, want = float32_reference(norm, x, dy, w, b)
    assert y.dtype == torch.bfloat16 and rel_err(y, want_y) < BF16_TOL
    for got, expected, p in zip(grads, want, params):
        assert got.dtype == p.dtype and rel_err(got, expected) < BF16_TOL


def test_gradcheck_in_float64():
    from verdigris.ops.norms import layer_norm, rms_norm

    x, w, b = (torch.randn(*s, device="cuda", dtype=torch.float64, requires_grad=True)
               for s in ((3, 37), (37,), (37,)))
    assert torch.autograd.gradcheck(lambda x, w, b: layer_norm(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w), (x, w))


def test_weight_gradients_are_the_same_bit_for_bit():
    from verdigris.ops.norms import layer_norm

    x, dy, w, b = bf16_case(8192, 4096, "layer", torch.float32)
    w, b = w.requires_grad_(), b.requires_grad_()
    first, second = (torch.autograd.grad(layer_norm(x, w, b), (w, b), dy) for _ in range(2))
    assert all(torch.equal(a, c) for a, c in zip(first, second))


def test_torch_compile_fullgraph_forward_and_backward():
    from verdigris.ops.norms import layer_norm, rms_norm

    def f(x, w, b, w2):
        return rms_norm(torch.relu(layer_norm(x, w, b) * 2 + 1), w2)

    x, dy, w, b = bf16_case(512, 1024, "layer", torch.float32)
    params = [x.clone().requires_grad_(), w.requires_grad_(), b.requires_grad_(),
              torch.randn_like(w).requires_grad_()]
    eager = torch.autograd.grad(f(*params), params, dy)
    compiled = torch.compile(f, fullgraph=True)
    got = torch.autograd.grad(compiled(*params), params, dy)
    for a, c in zip(eager, got):
        assert rel_err(c, a) < 1e-2
