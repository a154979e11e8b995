"""examples/train_gpt.py on the cpu backend: the tiny config trains a few steps with the
verdigris ops and with torch eager, from the same weights on the same batches; the loss
falls in both and the verdigris run tracks eager's (bfloat16 everywhere against float32
parameters under autocast). torch.compile's run is `slow` (its CPU compile takes tens of
seconds). The ops under it have their own tests (test_torch_losses.py,
test_torch_optim.py, ...); the GPU twin, the gpt2 config, is
tests/gpu/test_train_gpt_gpu.py."""
import pytest

torch = pytest.importorskip("torch")

from verdigris.examples import train_gpt  # noqa: E402

TINY = train_gpt.CONFIGS["tiny"]
STEPS, BATCH = 6, 2


def assert_falls_and_tracks(impl, seed, tolerance):
    """`impl` and eager from the same weights on the same batches: both losses fall by half
    a nat or more, and `impl`'s stays within `tolerance` (relative) of eager's at every step."""
    run, eager = (train_gpt.train(i, TINY, STEPS, BATCH, "cpu", seed) for i in (impl, "eager"))
    for losses in (run.losses, eager.losses):
        assert losses[-1] < losses[0] - 0.5, losses
    for got, want in zip(run.losses, eager.losses):
        assert abs(got - want) <= tolerance * want, (run.losses, eager.losses)


def test_verdigris_training_falls_and_tracks_eager(rng):
    assert_falls_and_tracks("verdigris", int(rng.integers(2**31)), 0.01)


@pytest.mark.slow
def test_compiled_training_falls_and_tracks_eager(rng):
    assert_falls_and_tracks("compile", int(rng.integers(2**31)), 0.002)


def test_the_same_batches_for_every_run_windows_of_the_text():
    draw = train_gpt.batches(TINY, 3, seed=5)
    (tokens, targets), (again, _) = draw(2), train_gpt.batches(TINY, 3, seed=5)(2)
    assert torch.equal(tokens, again) and not torch.equal(tokens, draw(3)[0])
    assert tokens.shape == targets.shape == (3, TINY.context)
    assert torch.equal(tokens[:, 1:], targets[:, :-1])
    ids = train_gpt.np.random.default_rng(5).choice(TINY.vocab, 256, replace=False)
    byte_of = {int(token): byte for byte, token in enumerate(ids)}
    text = train_gpt.corpus().tobytes()
    for row in tokens.tolist():  # each row is a window of the corpus, its bytes as token ids
        assert bytes(byte_of[t] for t in row) in text


def test_the_command_line_prints_the_table_and_refuses_an_unknown_impl(capsys):
    assert train_gpt.main(["--config", "tiny", "--steps", "2", "--batch", "1", "--impl", "eager",
                           "--device", "cpu", "--png", ""]) == 0
    out = capsys.readouterr().out
    assert "eager" in out and "tokens/s" in out and "last 10" in out
    with pytest.raises(SystemExit):
        train_gpt.main(["--impl", "eager,jax"])


def test_cuda_graphs_need_cuda(capsys):
    with pytest.raises(SystemExit):
        train_gpt.main(["--config", "tiny", "--steps", "2", "--device", "cpu", "--graph"])
    assert "--graph: CUDA graphs need --device cuda" in capsys.readouterr().err
