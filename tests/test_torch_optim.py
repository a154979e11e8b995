"""`verdigris.ops.optim.AdamW` with CPU torch tensors on the cpu backend: steps against
torch.optim.AdamW (float32 parameters, param groups with and without weight decay, a
learning rate changed between steps), bfloat16 parameters over float32 master weights,
the parameters and gradients packed (views of one buffer each), and param groups it
cannot pack refused. The kernel's own tests are test_tile_adamw.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.ops.optim import AdamW  # noqa: E402

SHAPES = ((30, 7), (7,), (5000,))
HYPER = dict(betas=(0.9, 0.95), eps=1e-8)


def parameters(rng):
    return [torch.from_numpy(rng.standard_normal(s)).float().requires_grad_() for s in SHAPES]


def groups(params):
    return [{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:], "weight_decay": 0.0}]


def loss_of(params, x):
    return (params[0] @ x).sin().sum() + params[1].sum() ** 2 + (params[2] ** 3).mean()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_steps_match_torch_adamw(rng, set_to_none):
    """Gradients set to None (autograd's own tensors, gathered by the step) or zeroed in
    place (autograd adds into the packed views)."""
    ours, theirs = parameters(rng), None
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    optimizers = AdamW(groups(ours), lr=1e-2, **HYPER), torch.optim.AdamW(groups(theirs), lr=1e-2, **HYPER)
    for step in range(4):
        x = torch.from_numpy(rng.standard_normal(7)).float()
        for params, optimizer in zip((ours, theirs), optimizers):
            for group in optimizer.param_groups:
                group["lr"] = 1e-2 / (step + 1)
            optimizer.zero_grad(set_to_none=set_to_none)
            loss_of(params, x).backward()
            optimizer.step()
    for got, want in zip(ours, theirs):
        assert got.dtype == torch.float32
        assert float((got - want).detach().abs().max()) < 1e-6


def test_bfloat16_parameters_over_float32_master_weights(rng):
    params = parameters(rng)
    start = [p.detach().clone() for p in params]
    optimizer = AdamW(groups(params), lr=1e-3, param_dtype=torch.bfloat16, **HYPER)
    assert all(p.dtype == p.grad.dtype == torch.bfloat16 for p in params)
    for view, p in zip(optimizer.layout.views(optimizer.master), start):
        assert torch.equal(view, p)  # the master weights are the values before rounding
    loss_of(params, torch.ones(7, dtype=torch.bfloat16)).backward()
    optimizer.step()
    for view, p in zip(optimizer.layout.views(optimizer.master), params):
        assert torch.equal(view.to(torch.bfloat16), p)
    assert any(not torch.equal(p.float(), s) for p, s in zip(params, start))


def test_parameters_and_gradients_are_views_of_packed_buffers(rng):
    params = parameters(rng)
    optimizer = AdamW(params, lr=1e-3)

    def packed(t, buffer):
        return t.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()

    assert all(packed(p, optimizer.params) and packed(p.grad, optimizer.grads) for p in params)
    loss_of(params, torch.ones(7)).backward()  # accumulated into the views
    assert optimizer.grads.abs().sum() > 0
    optimizer.zero_grad(set_to_none=False)
    assert not optimizer.grads.any() and all(packed(p.grad, optimizer.grads) for p in params)
    optimizer.zero_grad()
    assert all(p.grad is None for p in params)
    loss_of(params, torch.ones(7)).backward()  # autograd's own tensors, no add
    assert not optimizer.grads.any() and not any(packed(p.grad, optimizer.grads) for p in params)
    optimizer.step()  # gathers them
    for p, view in zip(params, optimizer.layout.views(optimizer.grads)):
        assert torch.equal(view, p.grad)


def test_a_parameter_without_a_gradient_steps_with_zeros(rng):
    """Its packed gradient is zeroed, whatever an earlier step left there (torch's AdamW
    would skip it; here its moments decay, as the docstring says)."""
    params = parameters(rng)
    optimizer = AdamW(params, lr=1e-3)
    loss_of(params, torch.ones(7)).backward()
    optimizer.step()
    optimizer.zero_grad()
    (params[0].sum() * 2).backward()  # only the first gets a gradient
    optimizer.step()
    views = optimizer.layout.views(optimizer.grads)
    assert torch.equal(views[0], torch.full_like(views[0], 2.0))
    assert not views[1].any() and not views[2].any()


def test_groups_it_cannot_pack_are_refused(rng):
    a, b, c = parameters(rng)
    with pytest.raises(ValueError, match="weight_decay"):
        AdamW([{"params": [a], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.2}])
    with pytest.raises(ValueError, match="betas"):
        AdamW([{"params": [a], "betas": (0.9, 0.99)}, {"params": [b]}])
    with pytest.raises(ValueError, match="more than one"):
        AdamW([{"params": [a, c]}, {"params": [c]}])


def test_state_dict_round_trip(rng):
    params = parameters(rng)
    optimizer = AdamW(groups(params), lr=1e-3, **HYPER)
    loss_of(params, torch.ones(7)).backward()
    optimizer.step()
    saved = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in optimizer.state_dict().items()}
    fresh = parameters(rng)
    restored = AdamW(groups(fresh), lr=1e-3, **HYPER)
    restored.load_state_dict(saved)
    assert restored.steps == 1 and torch.equal(restored.exp_avg_sq, optimizer.exp_avg_sq)
    assert all(torch.equal(a, b) for a, b in zip(fresh, params))
