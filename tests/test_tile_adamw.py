"""Fused AdamW over packed tensors (src/verdigris/examples/tile_adamw.py) on the cpu backend:
against a float64 reference over several steps; bit for bit against torch's single-tensor
AdamW step written out in NumPy float32 (its operations in its order); against
torch.optim.AdamW itself where torch is installed; bfloat16 parameters and gradients;
the packing; PTX assembled by ptxas. `tests/gpu/test_train_kernels_gpu.py` runs it on the
GPU beside torch's fused AdamW."""
import numpy as np
import pytest

from verdigris import codegen
from verdigris import types as T
from verdigris.examples import tile_adamw as adamw
from verdigris.ir import ArrayType

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPES = ((64, 48), (48,), (3000,), (7, 5, 3))
DECAYS = (True, False, True, False)
HYPER = dict(lr=2e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


class Packed:
    """Packed master weights, moments and parameters, and a fresh gradient per step."""

    def __init__(self, rng, grad_dtype=np.float32, param_dtype=np.float32, block=512):
        self.rng, self.grad_dtype = rng, grad_dtype
        self.layout = adamw.pack_layout(SHAPES, DECAYS, block)
        self.master = np.zeros(self.layout.size, np.float32)
        for view in self.layout.views(self.master):
            view[...] = self.rng.standard_normal(view.shape)
        self.exp_avg, self.exp_avg_sq = np.zeros_like(self.master), np.zeros_like(self.master)
        self.params = np.full(self.layout.size, np.nan, param_dtype)

    def gradient(self):
        grad = np.zeros(self.layout.size, self.grad_dtype)
        for view in self.layout.views(grad):
            view[...] = self.rng.standard_normal(view.shape)
        return grad

    def step(self, grad, step, **hyper):
        adamw.adamw_step(self.layout, self.master, grad, self.exp_avg, self.exp_avg_sq, self.params,
                         self.layout.block_decays, step=step, **hyper)

    def element_decays(self):
        return np.repeat(self.layout.block_decays.astype(bool), self.layout.block)


def torch_single_tensor_step(p, g, m, v, decays, *, step, lr, betas, eps, weight_decay):
    """torch.optim.AdamW's single-tensor step (torch/optim/adam.py with decoupled weight
    decay), each torch operation as one NumPy float32 operation, Python's scalars in float64
    rounded to float32 where they meet a float32 tensor."""
    f32 = np.float32
    beta1, beta2 = betas
    g = g.astype(np.float32)
    p = np.where(decays, p * f32(1 - lr * weight_decay), p)  # param.mul_(1 - lr * wd)
    weight = f32(1 - beta1)  # exp_avg.lerp_(grad, 1 - beta1)
    m = m + weight * (g - m) if weight < 0.5 else g - (g - m) * (f32(1) - weight)
    v = v * f32(beta2) + f32(1 - beta2) * g * g  # exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2)
    denom = np.sqrt(v) / f32((1 - beta2 ** step) ** 0.5) + f32(eps)
    p = p + f32(-(lr / (1 - beta1 ** step))) * m / denom  # param.addcdiv_(m, denom, -step_size)
    return p, m, v


def test_adamw_matches_float64_over_steps(rng):
    packed = Packed(rng)
    want = tuple(a.astype(np.float64) for a in (packed.master, packed.exp_avg, packed.exp_avg_sq))
    for step in range(1, 6):
        grad = packed.gradient()
        packed.step(grad, step, **HYPER)
        want = adamw.reference_step(want[0], grad, want[1], want[2], packed.element_decays(), step=step, **HYPER)
    for got, ref in zip((packed.master, packed.exp_avg, packed.exp_avg_sq), want):
        assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
    np.testing.assert_array_equal(packed.params, packed.master)


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.3, 0.95)], ids=["beta1_0.9", "beta1_0.3"])
def test_adamw_is_torchs_float32_step_bit_for_bit(betas, rng):
    packed = Packed(rng)
    hyper = dict(HYPER, betas=betas)
    want = (packed.master.copy(), packed.exp_avg.copy(), packed.exp_avg_sq.copy())
    for step in range(1, 5):
        grad = packed.gradient()
        packed.step(grad, step, **hyper)
        want = torch_single_tensor_step(want[0], grad, want[1], want[2], packed.element_decays(), step=step,
                                        **hyper)
        for got, ref in zip((packed.master, packed.exp_avg, packed.exp_avg_sq), want):
            np.testing.assert_array_equal(got, ref)


def test_adamw_writes_bfloat16_params_from_float32_master_weights_and_bfloat16_grads(rng):
    packed = Packed(rng, grad_dtype=BF16, param_dtype=BF16)
    want = (packed.master.copy(), packed.exp_avg.copy(), packed.exp_avg_sq.copy())
    for step in (1, 2):
        grad = packed.gradient()
        packed.step(grad, step, **HYPER)
        want = torch_single_tensor_step(want[0], grad, want[1], want[2], packed.element_decays(), step=step,
                                        **HYPER)
    np.testing.assert_array_equal(packed.master, want[0])
    np.testing.assert_array_equal(packed.params, packed.master.astype(BF16))


def test_adamw_matches_torch_optim_adamw(rng):
    torch = pytest.importorskip("torch")
    packed = Packed(rng)
    tensors = [torch.tensor(v.copy(), requires_grad=True) for v in packed.layout.views(packed.master)]
    groups = [{"params": [t for t, d in zip(tensors, DECAYS) if d], "weight_decay": HYPER["weight_decay"]},
              {"params": [t for t, d in zip(tensors, DECAYS) if not d], "weight_decay": 0.0}]
    hyper = {k: v for k, v in HYPER.items() if k != "weight_decay"}
    optimizer = torch.optim.AdamW(groups, foreach=False, **hyper)
    for step in range(1, 6):
        grad = packed.gradient()
        for t, g in zip(tensors, packed.layout.views(grad)):
            t.grad = torch.from_numpy(g.copy())
        optimizer.step()
        packed.step(grad, step, **HYPER)
    for t, got in zip(tensors, packed.layout.views(packed.master)):
        want = t.detach().numpy()
        # the same operations; torch's vectorized CPU kernels may fuse a multiply-add (a
        # rounding less) in a step, so a few units in the last place over five steps
        assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))


def test_pack_layout_puts_each_tensor_at_a_multiple_of_the_block():
    layout = adamw.pack_layout(SHAPES, DECAYS, block=512)
    assert layout.offsets == (0, 3072, 3584, 6656) and layout.size == 7168
    assert layout.block_decays.tolist() == [1] * 6 + [0] + [1] * 6 + [0]
    views = layout.views(np.arange(layout.size))
    assert [v.shape for v in views] == list(SHAPES) and views[2][0] == 3584
    with pytest.raises(ValueError, match="2 decay flags"):
        adamw.pack_layout(SHAPES, (True, False))
    packed = Packed(np.random.default_rng(0))
    with pytest.raises(ValueError, match="step counts from 1"):
        packed.step(packed.gradient(), 0, **HYPER)


def test_adamw_padding_between_tensors_stays_zero(rng):
    packed = Packed(rng)
    for step in (1, 2):
        packed.step(packed.gradient(), step, **HYPER)
    padding = np.ones(packed.layout.size, bool)
    for view in packed.layout.views(padding):
        view[...] = False
    assert padding.any() and (packed.master[padding] == 0).all() and (packed.params[padding] == 0).all()


def arr(dtype):
    return ArrayType(dtype, 1, "global", True, True)


@pytest.mark.skipif(not codegen.ptxas_available(), reason="ptxas not found")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_adamw_ptx_assembles(target):
    f32 = T.float32
    spec = dict(master=arr(f32), grad=arr(T.bfloat16), exp_avg=arr(f32), exp_avg_sq=arr(f32),
                params=arr(T.bfloat16), block_decays=arr(T.uint8), BLOCK=adamw.BLOCK,
                **{name: f32 for name in adamw.step_scalars(1, **HYPER)})
    compiled = codegen.compile_to_ptx(adamw.adamw.specialize_types(spec), target)
    assert codegen.assemble(compiled.ptx, target, optimize=False)[:4] == b"\x7fELF"
    assert "fma" not in compiled.ptx  # each operation rounds on its own, as torch's do


@pytest.mark.parametrize("param_dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
def test_adamw_gpu_code_on_the_host_is_the_cpu_backend_bit_for_bit(param_dtype, rng):
    """The lowering's code (host_jit: the GPU's LLVM IR run on this CPU) against the cpu
    backend: the same operations, each rounded once, give the same bits."""
    import host_jit

    packed = Packed(rng, grad_dtype=BF16, param_dtype=param_dtype, block=256)
    grad = packed.gradient()
    arguments = dict(master=packed.master, grad=grad.view(np.uint16), exp_avg=packed.exp_avg,
                     exp_avg_sq=packed.exp_avg_sq, params=packed.params, block_decays=packed.layout.block_decays,
                     BLOCK=256, **adamw.step_scalars(3, **HYPER))
    if param_dtype == BF16:
        arguments["params"] = packed.params.view(np.uint16)
    want = Packed(np.random.default_rng(0), grad_dtype=BF16, param_dtype=param_dtype, block=256)
    for name in ("master", "exp_avg", "exp_avg_sq"):
        getattr(want, name)[...] = getattr(packed, name)
    want.step(grad, 3, **HYPER)
    dtypes = {"grad": T.bfloat16, **({"params": T.bfloat16} if param_dtype == BF16 else {})}
    assert host_jit.run(adamw.adamw, packed.layout.size // 256, num_warps=1, dtypes=dtypes, **arguments) is None
    for name in ("master", "exp_avg", "exp_avg_sq"):
        np.testing.assert_array_equal(getattr(packed, name), getattr(want, name))
    np.testing.assert_array_equal(packed.params, want.params)
