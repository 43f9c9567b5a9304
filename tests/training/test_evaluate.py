"""Evaluation: the score, chunked evaluation equal to whole-sequence evaluation, long inputs."""

import pytest
import torch

from statetrack.models import zoo
from statetrack.tasks import make_task
from statetrack.training.evaluate import PREDICTED_CLASSES, Sampling, evaluate_lengths, predict, scaled_accuracy


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


def test_a_whole_input_pass_lets_go_of_each_layers_state():
    """Evaluation feeds a Transformer the whole input: each layer's key-value cache ([B, H, T, D] twice)
    is freed once the next layer runs, so the pass holds one layer's cache, not every layer's (at
    repl-traces' paper scale, 18 layers of them on 32 traces of 5,621 tokens, 12 GiB); its
    predictions are those of the pass that keeps every state."""
    import weakref

    torch.manual_seed(0)
    task = make_task("parity")
    model = zoo.build_model({"name": "transformer", "d_model": 16, "num_layers": 4}, task.vocab_size, task.num_classes)
    caches, alive = [], []
    for block in model.blocks:
        block.register_forward_pre_hook(lambda module, args: alive.append(sum(c() is not None for c in caches)))
        block.register_forward_hook(lambda module, args, out: caches.extend(weakref.ref(t) for t in out[1]))
    inputs = task.sample(2, 30, torch.Generator().manual_seed(0)).inputs
    with torch.no_grad():
        kept = model.eval()(inputs)[0].argmax(-1)
    assert alive == [0, 2, 4, 6]  # the pass that keeps every state holds each layer's keys and values
    alive.clear()
    assert torch.equal(predict(model, inputs), kept)
    assert alive == [0, 0, 0, 0]


def test_evaluation_is_chunk_size_invariant_and_reaches_length_10000():
    torch.manual_seed(0)
    task = make_task("parity")
    model = zoo.build_model({"name": "deltanet", "eig_range": "[-1,1]", "d_model": 8, "num_heads": 1}, task.vocab_size, task.num_classes)
    a = evaluate_lengths(model, task, [30], Sampling(samples=8, batch_size=8, chunk_size=None))
    b = evaluate_lengths(model, task, [30], Sampling(samples=8, batch_size=8, chunk_size=7))
    assert a == b
    long = evaluate_lengths(model, task, [10_000], Sampling(samples=2, batch_size=2, chunk_size=2048))
    assert long[0]["length"] == 10_000 and 0 <= long[0]["accuracy"] <= 1


class _Oracle(torch.nn.Module):
    """Predicts the copy task's targets, except the first `wrong` supervised positions of every
    other example (hand-made predictions with known per-character and string accuracy)."""

    def __init__(self, task, wrong: int):
        super().__init__()
        self.task, self.wrong = task, wrong

    def forward(self, tokens, state=None):
        n = (tokens.shape[1] - 3) // 2
        targets = torch.zeros_like(tokens)
        targets[:, n + 1 : 2 * n + 1] = tokens[:, 1 : n + 1] - 4  # the copied letters, as class ids
        targets[:, 2 * n + 1] = self.task.symbols  # the end mark
        targets[::2, n + 1 : n + 1 + self.wrong] = (targets[::2, n + 1 : n + 1 + self.wrong] + 1) % self.task.symbols
        return torch.nn.functional.one_hot(targets, self.task.num_classes).float(), state


@pytest.mark.parametrize("wrong", [0, 1, 3])
def test_sequence_accuracy_counts_whole_strings(wrong):
    """Copying strings of n = 10: half the strings carry `wrong` errors, so string accuracy is 1/2
    (1 with no error) while per-character accuracy is 1 - wrong / 2 / 11."""
    task = make_task("copy")
    rows = evaluate_lengths(_Oracle(task, wrong), task, [10], Sampling(samples=64, batch_size=16))
    assert rows[0]["accuracy"] == pytest.approx(1 - wrong / 2 / 11)
    assert rows[0]["sequence_accuracy"] == (1.0 if wrong == 0 else 0.5)
    assert rows[0]["metrics"] == {PREDICTED_CLASSES: task.symbols + 1}  # every letter and the end mark


class _Constant(torch.nn.Module):
    """Predicts class `answer` at every position: a collapsed model."""

    def __init__(self, num_classes: int, answer: int = 0):
        super().__init__()
        self.num_classes, self.answer = num_classes, answer

    def forward(self, tokens, state=None):
        return torch.nn.functional.one_hot(torch.full_like(tokens, self.answer), self.num_classes).float(), state


def test_every_row_counts_the_classes_predicted_so_a_collapsed_model_shows():
    task = make_task("modadd", m=5)
    (row,) = evaluate_lengths(_Constant(task.num_classes, 2), task, [10], Sampling(samples=64, batch_size=16))
    assert row["metrics"][PREDICTED_CLASSES] == 1 and row["accuracy"] < 0.5


def test_scores_print_as_a_table_and_per_position_figures_come_on_request():
    task = make_task("copy")
    rows = evaluate_lengths(_Oracle(task, 1), task, [4, 10], Sampling(samples=64, batch_size=16))
    assert str(rows) == repr(rows) == "\n".join([
        "length  accuracy  scaled accuracy  sequence accuracy",
        f"     4  {1 - 1 / 2 / 5:8.3f}  {rows[0]['scaled_accuracy']:15.3f}              0.500",
        f"    10  {1 - 1 / 2 / 11:8.3f}  {rows[1]['scaled_accuracy']:15.3f}              0.500"])
    assert all("position_accuracy" not in row for row in rows)
    (row,) = evaluate_lengths(_Oracle(task, 1), task, [4], Sampling(samples=64, batch_size=16), positions=True)
    assert row["position_accuracy"][5:10] == [0.5] + [1.0] * 4 and row["accuracy"] == rows[0]["accuracy"]


@pytest.mark.parametrize("kwargs, message", [
    ({"samples": 0}, "samples must be an integer >= 1, got 0"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    ({"chunk_size": -1}, "chunk_size (or None: the whole input at once) must be an integer >= 1, got -1"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"seed": 2**64}, "seed must be an integer from 0 to 9,223,372,036,854,775,807"),
    ({"lengths": []}, "lengths must be a non-empty list of integers, got []"),
    ({"lengths": [0]}, "length must be an integer >= 1, got 0"),
])
def test_evaluate_lengths_refuses_bad_arguments(kwargs, message):
    from statetrack.errors import StatetrackError
    from statetrack.models import zoo
    from statetrack.tasks import make_task
    from statetrack.training.evaluate import Sampling, evaluate_lengths

    task = make_task("parity")
    model = zoo.build_model({"name": "lstm", "d_model": 8}, task.vocab_size, task.num_classes)
    sampling = {k: v for k, v in kwargs.items() if k != "lengths"}
    with pytest.raises(StatetrackError) as error:
        evaluate_lengths(model, task, kwargs.get("lengths", [5]), Sampling(**sampling))
    assert message in str(error.value)
    with pytest.raises(StatetrackError, match=r"sampling must be a Sampling\(samples=..., batch_size=..., seed=..., chunk_size=...\), got 256"):
        evaluate_lengths(model, task, [5], 256)


def test_eig_range_given_as_a_list_is_a_one_line_error():
    from statetrack.errors import StatetrackError
    from statetrack.models import zoo

    with pytest.raises(StatetrackError, match=r"unknown eig_range \[-1, 1\]; expected one of"):
        zoo.build_model({"name": "deltanet", "eig_range": [-1, 1]}, 4, 2)
