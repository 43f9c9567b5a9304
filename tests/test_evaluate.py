"""Evaluation: the score, chunked evaluation equal to whole-sequence evaluation, long inputs."""

import pytest
import torch

from statetrack import zoo
from statetrack.evaluate import evaluate_lengths, predict
from statetrack.scoring import scaled_accuracy
from statetrack.tasks import make_task


def test_scaled_accuracy():
    assert scaled_accuracy(0.5, 0.5) == 0
    assert scaled_accuracy(1.0, 0.05) == 1
    assert scaled_accuracy(0.525, 0.05) == pytest.approx(0.5)


@pytest.mark.parametrize("spec", [{"name": "deltanet", "eig_range": "[-1,1]", "num_layers": 2}, {"name": "lstm", "num_layers": 2}])
def test_chunked_predictions_equal_whole_sequence(spec):
    torch.manual_seed(0)
    task = make_task("modadd", m=5)
    model = zoo.build_model({**spec, "d_model": 16}, task.vocab_size, task.num_classes).double().eval()
    inputs = task.sample(4, 50, torch.Generator().manual_seed(0)).inputs
    with torch.no_grad():
        whole, _ = model(inputs)
        state, parts = None, []
        for start in range(0, inputs.shape[1], 13):
            logits, state = model(inputs[:, start : start + 13], state)
            parts.append(logits)
    torch.testing.assert_close(torch.cat(parts, 1), whole, rtol=1e-9, atol=1e-9)
    assert torch.equal(predict(model, inputs, chunk_size=13), whole.argmax(-1))


def test_evaluation_is_chunk_size_invariant_and_reaches_length_10000():
    torch.manual_seed(0)
    task = make_task("parity")
    model = zoo.build_model({"name": "deltanet", "eig_range": "[-1,1]", "d_model": 8, "num_heads": 1}, task.vocab_size, task.num_classes)
    a = evaluate_lengths(model, task, [30], samples=8, batch_size=8, chunk_size=None)
    b = evaluate_lengths(model, task, [30], samples=8, batch_size=8, chunk_size=7)
    assert a == b
    long = evaluate_lengths(model, task, [10_000], samples=2, batch_size=2, chunk_size=2048)
    assert long[0]["length"] == 10_000 and 0 <= long[0]["accuracy"] <= 1
