"""Attention forward variants on the GPU (issue #29 part 1) against torch's
scaled_dot_product_attention: grouped-query attention (`verdigris.ops.attention`, forward
and backward, against SDPA with enable_gqa=True), head dims 64, 128 and 256 at the
forward's launches (`tile_attention.FORWARD_LAUNCH`), variable-length batches
(`ops.attention.attention_varlen` against SDPA one sequence at a time), and fp8 e4m3
(`attention_fp8`, V as stored and transposed, against SDPA of the dequantized inputs),
causal and not, at sequences the tiles divide and ones they do not; outputs are NaN before
the kernels run. Relative Frobenius errors against float32 references. The cpu twin, with
float64 references: tests/test_attention_variants.py."""
import math

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

F = torch.nn.functional
TOLERANCE = 1.6e-2  # bfloat16: P rounded before P @ V, o rounded once
FP8_TOLERANCE = 5e-2  # inputs and P rounded to e4m3


def rel_err(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all()
    return float((got - want).norm() / want.norm())


def randn(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g)


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1024, 999])
def test_grouped_query_attention_forward_and_backward(group, causal, seq):
    from verdigris.ops.attention import attention

    q = randn(2, 8, seq, 128, seed=1).to(torch.bfloat16).requires_grad_()
    k, v = (randn(2, 8 // group, seq, 128, seed=s).to(torch.bfloat16).requires_grad_() for s in (2, 3))
    do = randn(2, 8, seq, 128, seed=4).to(torch.bfloat16)
    out = attention(q, k, v, causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), do)
    params = [t.detach().float().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*params, is_causal=causal, enable_gqa=True)
    assert rel_err(out, want) < TOLERANCE
    for name, got, expected in zip("qkv", grads, torch.autograd.grad(want, params, do.float())):
        assert got.shape == expected.shape and rel_err(got, expected) < TOLERANCE, f"d{name}"


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [2048, 1500])
def test_head_dims_at_the_forward_launch(d, causal, seq):
    import verdigris as vg
    from verdigris.examples.tile_attention import FORWARD_LAUNCH, attention

    q, k, v = (randn(2, 4, seq, d, seed=s).to(torch.bfloat16) for s in range(3))
    o = torch.full_like(q, math.nan)
    lse = torch.full((2, 4, seq), math.nan, device="cuda")
    launch = FORWARD_LAUNCH[d]
    attention[vg.cdiv(seq, launch["BM"]), 4, 2](q, k, v, o, lse, 1 / math.sqrt(d), CAUSAL=causal, D=d,
                                                **launch)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    assert rel_err(o, want) < TOLERANCE


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)], ids=["mha", "gqa4"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_variable_length_batches(causal, heads, d):
    from verdigris.ops.attention import attention_varlen

    lengths = [1000, 1, 0, 2048, 77, 3000, 128, 513]
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    cu = torch.tensor(offsets, device="cuda", dtype=torch.int32)
    total = offsets[-1]
    q = randn(total, heads[0], d, seed=1).to(torch.bfloat16)
    k, v = (randn(total, heads[1], d, seed=s).to(torch.bfloat16) for s in (2, 3))
    o = attention_varlen(q, k, v, cu, causal=causal)
    for start, end in zip(offsets[:-1], offsets[1:]):
        if start < end:
            one = [t[start:end].transpose(0, 1).float() for t in (q, k, v)]
            want = F.scaled_dot_product_attention(*one, is_causal=causal, enable_gqa=True)
            assert rel_err(o[start:end], want.transpose(0, 1)) < TOLERANCE, (start, end)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("transposed", [False, True], ids=["v", "vt"])
@pytest.mark.parametrize("d, seq", [(128, 2048), (128, 1000), (64, 1024), (256, 1024)])
def test_fp8_against_sdpa_of_the_dequantized_inputs(causal, transposed, d, seq):
    import verdigris as vg
    from verdigris.examples.tile_attention_variants import FP8_LAUNCH, attention_fp8

    real = [randn(8, seq, d, seed=s) for s in range(3)]
    descales = [float(t.abs().max()) / 448 for t in real]
    q, k, v = (t.div(s).to(torch.float8_e4m3fn) for t, s in zip(real, descales))
    stored = v.transpose(1, 2).contiguous() if transposed else v
    o = torch.full((8, seq, d), math.nan, device="cuda", dtype=torch.bfloat16)
    lse = torch.full((8, seq), math.nan, device="cuda")  # the fp8 kernel's rows: (batch * heads, seq)
    launch = FP8_LAUNCH[d]
    attention_fp8[vg.cdiv(seq, launch["BM"]), 8](
        q, k, stored, o, lse, descales[0] * descales[1] / math.sqrt(d), descales[2],
        CAUSAL=causal, D=d, V_TRANSPOSED=transposed, **launch)
    want = F.scaled_dot_product_attention(*(t.float() * s for t, s in zip((q, k, v), descales)),
                                          is_causal=causal)
    assert rel_err(o, want) < FP8_TOLERANCE
