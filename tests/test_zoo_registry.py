"""The model registry: every model builds, trains a step and has the papers' display name."""

import pytest
import torch

from statetrack import StatetrackError, zoo


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_every_model_builds_and_backpropagates(name):
    torch.manual_seed(0)
    model = zoo.build_model({"name": name, "d_model": 16, "num_layers": 2}, vocab_size=7, num_classes=4)
    logits, _ = model(torch.randint(0, 7, (2, 9)))
    assert logits.shape == (2, 9, 4)
    logits.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(
    "spec, name",
    [
        ({"name": "transformer"}, "Transformer"),
        ({"name": "transformer", "positional": "rope"}, "Transformer (RoPE)"),
        ({"name": "mlstm"}, "mLSTM"),
        ({"name": "slstm"}, "sLSTM"),
        ({"name": "mamba", "eig_range": "[-1,1]"}, "Mamba [-1,1]"),
        ({"name": "mamba"}, "Mamba [0,1]"),
        ({"name": "mamba2", "eig_range": "[-1,1]"}, "Mamba-2 [-1,1]"),
        ({"name": "deltanet", "eig_range": "[0,1]"}, "DeltaNet [0,1]"),
        ({"name": "gated_deltanet"}, "Gated DeltaNet [-1,1]"),
        ({"name": "deltaproduct", "n_h": 3}, "DeltaProduct_3 [-1,1]"),
        ("deltaproduct-2", "DeltaProduct_2 [-1,1]"),
        ({"name": "s4d"}, "S4D"),
        ({"name": "ids4"}, "IDS4"),
        ({"name": "gla"}, "GLA"),
    ],
)
def test_display_names(spec, name):
    assert zoo.display_name(spec) == name


@pytest.mark.parametrize("spec, match", [
    ({"name": "mamba", "eig_range": "[0,2]"}, r"unknown eig_range '\[0,2\]'"),
    ({"name": "deltaproduct", "n_h": 0}, "n_h .* must be an integer >= 1"),
    ({"name": "mamba", "heads": 2}, "model 'mamba' has no parameter 'heads'"),
])
def test_bad_switches_are_named(spec, match):
    with pytest.raises(StatetrackError, match=match):
        zoo.build_model(spec, 4, 2)


def test_transformer_is_not_chunk_evaluated_but_recurrent_models_are():
    assert not zoo.get_entry("transformer").recurrent
    assert all(zoo.get_entry(n).recurrent for n in zoo.MODELS if n != "transformer")
