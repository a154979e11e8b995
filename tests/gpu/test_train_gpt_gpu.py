"""examples/train_gpt.py's gpt2 config (GPT-2 small: 12 layers, d_model 768, context 1024,
vocabulary 50,257) on the GPU for a few steps: the verdigris run and torch eager's start
from the same weights on the same batches, their losses start at log(vocabulary) and stay
within 1% of each other, and the verdigris run's peak memory is no more than eager's. The
300-step targets (loss, tokens/s, memory against eager and torch.compile) are the script's
own run: `python examples/train_gpt.py --config gpt2 --steps 300 --batch 8 --png gpt.png`."""
import math

import pytest

torch = pytest.importorskip("torch")

from verdigris.examples import train_gpt  # noqa: E402

pytestmark = pytest.mark.gpu

GPT2 = train_gpt.CONFIGS["gpt2"]


def test_gpt2_trains_on_verdigris_kernels_beside_eager():
    runs = {impl: train_gpt.train(impl, GPT2, 6, 2, "cuda", seed=3, untimed_steps=2)
            for impl in ("verdigris", "eager")}
    ours, eager = runs["verdigris"], runs["eager"]
    assert abs(ours.losses[0] - math.log(GPT2.vocab)) < 0.5, ours.losses
    assert all(math.isfinite(v) for v in ours.losses), ours.losses
    for got, want in zip(ours.losses, eager.losses):
        assert abs(got - want) <= 0.01 * want, (ours.losses, eager.losses)
    assert ours.losses[-1] < ours.losses[0], ours.losses
    assert ours.peak_memory <= eager.peak_memory, (ours.peak_memory, eager.peak_memory)


def test_a_step_replayed_from_a_cuda_graph_trains_as_the_step_launched_op_by_op():
    """`train(graph=True)`: forward and backward captured once (`graphed_step`), the
    optimizer outside; the same batches give the same losses as launch by launch, up to
    bfloat16's rounding (the kernels and their order are the same)."""
    plain = train_gpt.train("verdigris", GPT2, 6, 2, "cuda", seed=4, untimed_steps=2)
    graphed = train_gpt.train("verdigris", GPT2, 6, 2, "cuda", seed=4, untimed_steps=2, graph=True)
    for got, want in zip(graphed.losses, plain.losses):
        assert abs(got - want) <= 2e-3 * want, (graphed.losses, plain.losses)
