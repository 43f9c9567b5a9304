"""Every registered model, one property: a sequence's outputs do not depend on its batch-mates nor on
the chunks evaluation feeds it in. For each model (its defaults, the presets, a few settings with
their own state mechanics, and a model registered by the test as a user would), in float64: each
sequence of a batch alone, the batch whole, and the batch fed through evaluation's chunking
(`statetrack.training.evaluate.chunked_logits`) in chunks of several sizes give the same logits. A new model
is checked by being registered.

A model whose output is an iterate stopped at a tolerance (a `tol` parameter: the fixed-point RNNs)
is batch-independent at its own tolerance, and chunk-independent once the iterate is the fixed point
(tol 1e-13): a chunk's iterate stopped early is not the whole sequence's stopped early."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from statetrack.layers.bilinear import STRUCTURES
from statetrack.models import zoo
from statetrack.training.evaluate import chunked_logits

VOCAB, CLASSES, BATCH, LENGTH = 5, 3, 5, 11
CHUNKS = (1, 3, 4, 7)
RTOL, ATOL = 1e-9, 1e-11
TINY = {"d_model": 8, "num_layers": 2}
VARIANTS = [  # settings whose state carries more than the recurrence
    *({"name": "bilinear", "structure": s, "additive": "both", "normalize_training": True, "normalize_every": 3} for s in STRUCTURES),
    {"name": "bilinear", "structure": "block", "block_size": 4, "normalize_every": 3},
    {"name": "fixedpoint", "reflections": 2},
    {"name": "bedouin", "reflections": 2},
]


class UserLeakyMean(nn.Module):
    """A user's mixer: a leaky running mean h_t = a h_{t-1} + (1 - a) W x_t, carried across chunks."""

    def __init__(self, d_model: int, decay: float = 0.8):
        super().__init__()
        self.decay, self.proj = decay, nn.Linear(d_model, d_model)

    def forward(self, x, state=None):
        h = x.new_zeros(x.shape[0], x.shape[2]) if state is None else state
        outputs = []
        for x_t in self.proj(x).unbind(1):
            h = self.decay * h + (1 - self.decay) * x_t
            outputs.append(h)
        return torch.stack(outputs, 1) if outputs else x, h


class BatchCentred(nn.Module):
    """Wrong on purpose: subtracts the batch mean, so a sequence depends on its batch-mates."""

    def __init__(self, d_model: int):
        super().__init__()

    def forward(self, x, state=None):
        return x - x.mean(0, keepdim=True), None


class RestartingSum(nn.Module):
    """Wrong on purpose: a running sum that starts again at every call, so chunks change it."""

    def __init__(self, d_model: int):
        super().__init__()

    def forward(self, x, state=None):
        return x.cumsum(1) / x.shape[1], None


def _register_user_models(registry):
    zoo.register_model("user_leaky_mean", display="User leaky mean")(UserLeakyMean)
    zoo.register_model("batch_centred", display="Batch centred")(BatchCentred)
    zoo.register_model("restarting_sum", display="Restarting sum")(RestartingSum)
    assert {"user_leaky_mean", "batch_centred", "restarting_sum"} <= set(registry)


def _model(spec: dict) -> nn.Module:
    torch.manual_seed(0)
    return zoo.build_model({**TINY, **spec}, VOCAB, CLASSES).double().eval()


def _tight(spec: dict) -> dict:
    """The spec with an iterate's stopping tolerance (if the model has one) at rounding."""
    return {**spec, "tol": 1e-13} if "tol" in zoo.mixer_parameters(zoo.resolve(spec)["name"]) else spec


def assert_invariant(spec: dict) -> None:
    """Alone, in a batch and in chunks: the same logits (float64, at RTOL/ATOL), else AssertionError
    naming the case."""
    name = zoo.resolve(spec)["name"]
    tokens = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model = _model(spec)
        whole = model(tokens)[0]
        for i in range(BATCH):
            torch.testing.assert_close(model(tokens[i : i + 1])[0], whole[i : i + 1], rtol=RTOL, atol=ATOL,
                                       msg=lambda m: f"{spec}: sequence {i} alone differs from it in a batch: {m}")
        model = _model(_tight(spec))
        whole = model(tokens)[0]
        recurrent = zoo.get_entry(name).recurrent  # evaluation chunks recurrent models only
        for size in CHUNKS:
            chunks = list(chunked_logits(model, tokens, size if recurrent else None))
            if recurrent:
                assert len(chunks) == -(-LENGTH // size)
            chunked = torch.cat([logits for _, logits in chunks], 1)
            torch.testing.assert_close(chunked, whole, rtol=RTOL, atol=ATOL,
                                       msg=lambda m: f"{spec}: fed in chunks of {size}, the logits differ: {m}")


CASES = [{"name": name} for name in zoo.MODELS] + [{"name": name} for name in zoo.PRESETS] + VARIANTS + [{"name": "user_leaky_mean"}]


@pytest.mark.parametrize("spec", CASES, ids=lambda spec: "-".join(str(v) for v in spec.values()))
def test_a_sequence_gives_the_same_outputs_alone_in_a_batch_and_in_chunks(spec, registry):
    _register_user_models(registry)
    assert_invariant(spec)


@pytest.mark.parametrize("spec, what", [({"name": "batch_centred"}, "in a batch"), ({"name": "restarting_sum"}, "in chunks")])
def test_the_check_catches_a_model_that_depends_on_its_batch_or_its_chunks(spec, what, registry):
    _register_user_models(registry)
    with pytest.raises(AssertionError, match=what):
        assert_invariant(spec)
