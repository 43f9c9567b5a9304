"""Gradient accumulation (`train.accumulate`): a step taken in micro-batches is the whole batch's step,
and no forward pass holds more than one micro-batch."""

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.models import zoo
from statetrack.tasks import Batch, make_task
from statetrack.training.train import TrainConfig, Trainer

WordProblem = type(make_task("word_problem"))


class SparselySupervised(WordProblem):
    """Word problems with about half the positions supervised, a different number in each example: the
    micro-batches' shares of the supervised positions differ."""

    def sample(self, batch_size, length, generator):
        batch = super().sample(batch_size, length, generator)
        keep = torch.rand(batch.mask.shape, generator=generator) < 0.5
        keep[:, -1] = True
        return Batch(batch.inputs, batch.targets, batch.mask & keep)


def _train(accumulate: int, seen: list[int] | None = None) -> tuple[dict, list[dict]]:
    task = SparselySupervised(group="Z5")
    torch.manual_seed(0)
    model = zoo.build_model({"name": "lstm", "d_model": 16}, task.vocab_size, task.num_classes).double()
    if seen is not None:
        model.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[0]))
    config = TrainConfig(
        steps=4,
        batch_size=10,
        accumulate=accumulate,
        lr=3e-2,
        min_length=4,
        max_length=8,
        log_every=1,
        early_stop_loss=None,
        device="cpu",
    )
    trainer = Trainer(model, task, config, progress=False).fit()
    return {k: v.clone() for k, v in model.state_dict().items()}, trainer.curve


def test_micro_batches_take_the_whole_batchs_step():
    """Three micro-batches (4, 3 and 3 examples), each weighted by its share of the supervised
    positions: the same parameters and logged loss and accuracy as one pass over the 10 examples."""
    whole, whole_curve = _train(1)
    split, split_curve = _train(3)
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], rtol=1e-9, atol=1e-12, msg=name)
    for a, b in zip(whole_curve, split_curve):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-9)
        assert b["accuracy"] == pytest.approx(a["accuracy"], rel=1e-6)  # a float32 mean


def test_a_forward_pass_holds_one_micro_batch():
    seen: list[int] = []
    _train(3, seen)
    assert seen and max(seen) == 4, seen  # ceil(10 / 3): never the batch of 10


def test_more_micro_batches_than_examples_is_refused():
    with pytest.raises(StatetrackError, match=r"accumulate \(12 micro-batches\) must be at most batch_size \(8\)"):
        TrainConfig(batch_size=8, accumulate=12)
