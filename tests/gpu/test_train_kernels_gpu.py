"""The fused cross-entropy and the packed AdamW on the GPU, on torch tensors: the
cross-entropy's loss and gradient (bfloat16 logits, 50,257 and 128,256 columns, ignored
rows, in place and not) against torch's float32 cross-entropy and its autograd gradient;
AdamW bit for bit against torch's float32 step written out in NumPy (the GPU divides and
takes square roots with IEEE rounding and fuses no multiply-add), and close to
torch.optim.AdamW(fused=True) on the GPU."""
import numpy as np
import pytest

import verdigris as vg
from verdigris.examples import tile_adamw as adamw
from verdigris.examples import tile_cross_entropy as ce
from tests.test_tile_adamw import torch_single_tensor_step

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def torch_reference(logits, labels, dloss):
    x = logits.float().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(x, labels, reduction="none", ignore_index=ce.IGNORE_INDEX)
    (loss * dloss).sum().backward()
    return loss.detach(), torch.logsumexp(x.detach(), 1), x.grad


def rel_err(got, want):
    got, want = got.double(), want.double()
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("vocab", [50257, 128256])
@pytest.mark.parametrize("mode", ["separate", "one_launch", "one_launch_in_place", "backward_in_place",
                                  "in_place_at_pitch_16"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cross_entropy_matches_torch(vocab, mode, dtype, rng):
    rows = 96
    logits = torch.from_numpy(3 * rng.standard_normal((rows, vocab)).astype(np.float32)).cuda()
    logits = logits.to(getattr(torch, dtype))
    labels = torch.from_numpy(rng.integers(0, vocab, rows)).cuda()
    labels[::7] = ce.IGNORE_INDEX
    labels[1] = vocab - 1
    dloss = torch.from_numpy(rng.random(rows).astype(np.float32) + 0.5).cuda()
    want_loss, want_lse, want_grad = torch_reference(logits, labels, dloss)
    loss, lse = (torch.full((rows,), float("nan"), device="cuda") for _ in range(2))
    grad = torch.full_like(logits, float("nan"))
    if mode == "separate":
        ce.forward(logits, labels, loss, lse)
        ce.backward(logits, labels, lse, dloss, grad)
    elif mode == "one_launch":
        ce.forward_backward(logits, labels, loss, lse, dloss, grad)
    elif mode == "one_launch_in_place":
        grad = logits.clone()
        ce.forward_backward(grad, labels, loss, lse, dloss, in_place=True)
    elif mode == "backward_in_place":
        ce.forward(logits, labels, loss, lse)
        grad = logits.clone()
        ce.backward(grad, labels, lse, dloss, in_place=True)
    else:  # rows at a pitch of a multiple of 16 elements: 16-byte vectors throughout
        buffer = torch.full((rows, -(-vocab // 16) * 16), 7, dtype=logits.dtype, device="cuda")
        grad = buffer[:, :vocab]
        grad.copy_(logits)
        ce.forward_backward(grad, labels, loss, lse, dloss, in_place=True)
        assert (buffer[:, vocab:] == 7).all()
    torch.cuda.synchronize()
    assert rel_err(loss, want_loss) < 1e-5
    assert rel_err(lse, want_lse) < 1e-6
    assert rel_err(grad, want_grad) < (2 ** -8 if dtype == "bfloat16" else 1e-5)
    ignored = labels == ce.IGNORE_INDEX
    assert (loss[ignored] == 0).all() and (grad[ignored] == 0).all()


def test_cross_entropy_gradient_aliasing_the_logits_is_refused(rng):
    logits = torch.from_numpy(rng.standard_normal((8, 1000)).astype(np.float32)).cuda()
    labels = torch.from_numpy(rng.integers(0, 1000, 8)).cuda()
    loss, lse = torch.empty(8, device="cuda"), torch.empty(8, device="cuda")
    with pytest.raises(vg.AliasError):
        ce.forward_backward(logits, labels, loss, lse, torch.ones(8, device="cuda"), logits)


HYPER = dict(lr=2e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
SHAPES = ((768, 2304), (2304,), (50257, 64), (768,), (3, 5))
DECAYS = (True, False, True, False, True)


def test_adamw_on_gpu_is_torchs_float32_step_bit_for_bit(rng):
    layout = adamw.pack_layout(SHAPES, DECAYS)
    decays = np.repeat(layout.block_decays.astype(bool), layout.block)
    master = np.zeros(layout.size, np.float32)
    for view in layout.views(master):
        view[...] = rng.standard_normal(view.shape)
    want = (master.copy(), np.zeros_like(master), np.zeros_like(master))
    on_gpu = [torch.from_numpy(a.copy()).cuda() for a in want]
    params = torch.full((layout.size,), float("nan"), dtype=torch.bfloat16, device="cuda")
    block_decays = torch.from_numpy(layout.block_decays).cuda()
    for step in range(1, 4):
        grad = np.zeros(layout.size, np.float32)
        for view in layout.views(grad):
            view[...] = rng.standard_normal(view.shape)
        adamw.adamw_step(layout, *on_gpu[:1], torch.from_numpy(grad).cuda(), *on_gpu[1:], params, block_decays,
                         step=step, **HYPER)
        want = torch_single_tensor_step(want[0], grad, want[1], want[2], decays, step=step, **HYPER)
    for got, ref in zip(on_gpu, want):
        np.testing.assert_array_equal(got.cpu().numpy(), ref)
    assert torch.equal(params, on_gpu[0].to(torch.bfloat16))


def test_adamw_on_gpu_is_close_to_torch_fused_adamw(rng):
    layout = adamw.pack_layout(SHAPES, DECAYS)
    master = torch.zeros(layout.size, device="cuda")
    for view in layout.views(master):
        view.copy_(torch.from_numpy(rng.standard_normal(view.shape).astype(np.float32)))
    tensors = [v.clone().requires_grad_(True) for v in layout.views(master)]
    groups = [{"params": [t for t, d in zip(tensors, DECAYS) if d], "weight_decay": HYPER["weight_decay"]},
              {"params": [t for t, d in zip(tensors, DECAYS) if not d], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, fused=True, **{k: v for k, v in HYPER.items() if k != "weight_decay"})
    exp_avg, exp_avg_sq = torch.zeros_like(master), torch.zeros_like(master)
    params = torch.empty(layout.size, dtype=torch.bfloat16, device="cuda")
    block_decays = torch.from_numpy(layout.block_decays).cuda()
    for step in range(1, 6):
        grad = torch.zeros_like(master)
        for t, view in zip(tensors, layout.views(grad)):
            view.copy_(torch.from_numpy(rng.standard_normal(view.shape).astype(np.float32)))
            t.grad = view.clone()
        optimizer.step()
        adamw.adamw_step(layout, master, grad, exp_avg, exp_avg_sq, params, block_decays, step=step, **HYPER)
    for t, got in zip(tensors, layout.views(master)):
        assert float((got - t.detach()).abs().max()) <= 1e-6 * float(t.detach().abs().max())
