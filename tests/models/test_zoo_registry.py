"""The model registry: every model builds (also on the meta device), trains a step, rejects a badly
shaped input and has the papers' display name; `@register_model` adds a model without touching the zoo."""

import re

import pytest
import torch
from torch import nn

from statetrack import StatetrackError
from statetrack.layers import MODELS
from statetrack.layers.common import DEFAULT_EIG_RANGE, head_split
from statetrack.models import zoo


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_every_model_builds_and_backpropagates(name):
    torch.manual_seed(0)
    model = zoo.build_model({"name": name, "d_model": 16, "num_layers": 2}, vocab_size=7, num_classes=4)
    logits, _ = model(torch.randint(0, 7, (2, 9)))
    assert logits.shape == (2, 9, 4)
    logits.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_every_model_builds_on_the_meta_device(name):
    with torch.device("meta"):
        model = zoo.build_model(name, 7, 4)
    params = list(model.parameters())
    assert params and all(p.is_meta for p in params)


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_every_mixer_rejects_a_badly_shaped_input(name):
    d = 16
    mixer = _mixer(name, d)
    for bad in (torch.randn(2, 5, d + 1), torch.randn(5, d)):
        expected = f"{type(mixer).__name__} expects x of shape [B, T, d_model] = [B, T, {d}], got {tuple(bad.shape)}"
        with pytest.raises(StatetrackError, match=re.escape(expected)):
            mixer(bad)


def _mixer(name: str, d_model: int) -> nn.Module:
    spec = zoo.resolve({"name": name, "d_model": d_model})
    return zoo.get_entry(name).mixer(d_model, **{k: v for k, v in spec.items() if k != "name" and k not in zoo.MODEL_DEFAULTS})


# the models whose published form has negative eigenvalues (or reflections) by default: fla's Gated
# DeltaProduct layer (allow_neg_eigval=True) and PaTH attention (Yang et al. 2025b: beta in (0, 2))
PUBLISHED_NEGATIVE = {"gated_deltaproduct", "path_attention"}


@pytest.mark.parametrize("name", sorted(n for n in zoo.MODELS if "eig_range" in zoo.mixer_parameters(n)))
def test_the_default_eig_range_is_the_published_models(name):
    published = "[-1,1]" if name in PUBLISHED_NEGATIVE else DEFAULT_EIG_RANGE
    assert DEFAULT_EIG_RANGE == "[0,1]"
    assert zoo.mixer_parameters(name)["eig_range"] == published
    assert zoo.display_name(name).endswith(f" {published}")


def test_the_switched_families():
    switched = {n for n in zoo.MODELS if "eig_range" in zoo.mixer_parameters(n)}
    assert switched == {"deltanet", "gated_deltanet", "deltaproduct", "mamba", "mamba2", "gated_deltaproduct", "kda",
                        "rwkv7", "path_attention", "deltaformer", "mamba3"}


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
        ({"name": "deltanet", "eig_range": "[-1,1]"}, "DeltaNet [-1,1]"),
        ({"name": "gated_deltanet"}, "Gated DeltaNet [0,1]"),
        ({"name": "gated_deltanet", "eig_range": "[-1,1]"}, "Gated DeltaNet [-1,1]"),
        ({"name": "deltaproduct", "n_h": 3, "eig_range": "[-1,1]"}, "DeltaProduct_3 [-1,1]"),
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
    ({"name": "deltanet", "eig_range": "[-1,0]"}, r"unknown eig_range '\[-1,0\]'; expected one of: \[0,1\], \[-1,1\]"),
    ({"name": "deltaproduct", "n_h": 0}, "n_h .* must be an integer >= 1"),
    ({"name": "mamba", "heads": 2}, "model 'mamba' has no parameter 'heads'"),
    ({"name": "mamba2", "d_model": 16, "head_dim": 12}, r"expand \* d_model = 32 is not divisible by head_dim 12"),
    ({"name": "s4d", "d_state": 3}, "d_state must be an even number"),
])
def test_bad_switches_are_named(spec, match):
    with pytest.raises(StatetrackError, match=match):
        zoo.build_model(spec, 4, 2)


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "deltaproduct", "gla", "mlstm", "slstm", "transformer"])
def test_every_head_split_is_one_statetrack_error(name):
    with pytest.raises(StatetrackError, match="d_model 30 is not divisible by num_heads 4; choose num_heads dividing d_model"):
        zoo.build_model({"name": name, "d_model": 30, "num_heads": 4}, 4, 2)


def test_head_split():
    assert head_split(32, 4) == (4, 8)
    assert head_split(32, 5, head_dim=8) == (5, 8)  # an explicit head_dim needs no divisibility
    with pytest.raises(StatetrackError, match="d_model 32 is not divisible by num_heads 5; choose num_heads dividing d_model$"):
        head_split(32, 5)
    with pytest.raises(StatetrackError, match="choose num_heads dividing d_model or set head_dim$"):
        head_split(32, 5, takes_head_dim=True)
    with pytest.raises(StatetrackError, match="num_heads must be an integer >= 1, got 0"):
        head_split(32, 0)


ATTENTION = {"transformer", "path_attention", "deltaformer"}  # a cache that grows with the input, no fixed state


def test_attention_models_are_not_chunk_evaluated_but_recurrent_models_are():
    assert not any(zoo.get_entry(n).recurrent for n in ATTENTION)
    assert all(zoo.get_entry(n).recurrent for n in zoo.MODELS if n not in ATTENTION)


def test_zoo_exposes_the_registry_itself():
    assert zoo.MODELS is MODELS
    assert all(entry.name == name for name, entry in zoo.MODELS.items())
    assert zoo.get_entry("deltanet").summary.startswith("The delta rule")  # the docstring's first line


# --- @register_model ---------------------------------------------------------------------------


class Doubler(nn.Module):
    """Doubles its input: a stateless test mixer.

    More docstring that is not the summary.
    """

    def __init__(self, d_model: int, factor: int = 2):
        super().__init__()
        self.d_model, self.factor = d_model, factor
        self.scale = nn.Parameter(torch.ones(d_model))

    def forward(self, x, state=None):
        return self.factor * self.scale * x, state


def test_a_registered_mixer_builds_through_the_zoo(registry):
    zoo.register_model("test_doubler", display="Doubler x{factor}")(Doubler)
    spec = zoo.resolve({"name": "test_doubler", "factor": 3, "d_model": 8})
    assert spec == {"name": "test_doubler", "d_model": 8, "num_layers": 1, "mlp": True, "factor": 3}
    assert zoo.display_name(spec) == "Doubler x3"
    entry = zoo.get_entry("test_doubler")
    assert entry.summary == "Doubles its input: a stateless test mixer" and entry.recurrent and entry.mixer is Doubler
    model = zoo.build_model(spec, vocab_size=5, num_classes=3)
    logits, _ = model(torch.randint(0, 5, (2, 4)))
    assert logits.shape == (2, 4, 3)
    mixers = [m for m in model.modules() if isinstance(m, Doubler)]
    assert len(mixers) == 1 and mixers[0].factor == 3


def test_display_callable_summary_and_recurrent_flag(registry):
    zoo.register_model("test_doubler", display=lambda s: f"D{s['factor'] * 10}", summary="mine", recurrent=False)(Doubler)
    entry = zoo.get_entry("test_doubler")
    assert (entry.summary, entry.recurrent, zoo.display_name("test_doubler")) == ("mine", False, "D20")


def test_the_same_class_registered_again_replaces_its_entry(registry):
    zoo.register_model("test_doubler", display="A")(Doubler)
    zoo.register_model("test_doubler", display="B")(Doubler)  # e.g. a user module imported twice
    assert zoo.display_name("test_doubler") == "B"


def test_a_taken_name_is_an_error_naming_both_classes(registry):
    class Other(Doubler):
        pass

    with pytest.raises(StatetrackError, match=r"model name 'deltanet' is taken by statetrack\.layers\.deltanet\.DeltaNet; "
                                              r"cannot register .*Other under it"):
        zoo.register_model("deltanet", display="X")(Other)
    assert zoo.get_entry("deltanet").mixer.__name__ == "DeltaNet"


class NoDModel(nn.Module):
    def __init__(self, width: int):
        super().__init__()


@pytest.mark.parametrize("name, target, display, match", [
    ("", Doubler, "X", "the name must be a non-empty string, got ''"),
    (3, Doubler, "X", "the name must be a non-empty string, got 3"),
    ("test_bad", object, "X", "expects an nn.Module subclass whose __init__ takes d_model as its first parameter, got <class 'object'>"),
    ("test_bad", len, "X", "expects an nn.Module subclass"),
    ("test_bad", NoDModel, "X", "NoDModel.__init__ takes width first"),
    ("test_bad", Doubler, "X {heads}", "display 'X {heads}' names 'heads', which is not a parameter; its parameters: .*factor"),
    ("test_bad", Doubler, 5, "display must be a template string or a callable"),
])
def test_bad_registrations_are_one_line_errors(registry, name, target, display, match):
    with pytest.raises(StatetrackError, match=match) as error:
        zoo.register_model(name, display=display)(target)
    assert "\n" not in str(error.value)
    assert "test_bad" not in MODELS


def test_a_family_declares_its_own_stack_defaults_and_a_spec_still_wins(registry):
    bilinear = zoo.build_model({"name": "bilinear", "d_model": 8}, vocab_size=4, num_classes=2)
    assert zoo.resolve("bilinear")["mlp"] is False and all(block.mlp is None for block in bilinear.blocks)  # as published
    with_mlp = zoo.build_model({"name": "bilinear", "d_model": 8, "mlp": True}, vocab_size=4, num_classes=2)
    assert all(block.mlp is not None for block in with_mlp.blocks) and zoo.resolve("deltanet")["mlp"] is True
    zoo.register_model("test_doubler", display="D", stack_defaults={"num_layers": 2, "mlp": False})(Doubler)
    assert zoo.resolve("test_doubler") == {"name": "test_doubler", "d_model": 64, "num_layers": 2, "mlp": False, "factor": 2}
    assert zoo.resolve({"name": "test_doubler", "num_layers": 3})["num_layers"] == 3
    for bad, match in (({"heads": 2}, "stack_defaults has 'heads', which is no stack setting; expected some of: d_model, num_layers, mlp, stack"),
                       (["mlp"], "stack_defaults must be a mapping")):
        with pytest.raises(StatetrackError, match=match):
            zoo.register_model("test_bad", display="X", stack_defaults=bad)(Doubler)
    assert "test_bad" not in MODELS


def test_the_plain_stack_is_embedding_cell_readout_and_the_common_stack_stays_unnamed():
    """`stack: plain` builds embedding -> mixer -> readout with no norm and no residual ("a single
    recurrent cell followed by a linear classification head"): its logits are exactly the cell's
    output read out. The common residual stack is left out of the resolved spec, so the run ids of
    models that do not name a stack stay as they were; a bad value is a one-line error."""
    import torch

    assert "stack" not in zoo.resolve({"name": "lstm", "stack": "residual"}) and "stack" not in zoo.resolve("lstm")
    assert zoo.resolve({"name": "lstm", "stack": "plain"})["stack"] == "plain"
    torch.manual_seed(0)
    plain = zoo.build_model({"name": "lstm", "d_model": 8, "stack": "plain", "mlp": False}, vocab_size=3, num_classes=2)
    tokens = torch.randint(0, 3, (4, 7))
    cell_output, _ = plain.blocks[0].mixer.rnn(plain.embedding(tokens))
    assert torch.allclose(plain(tokens)[0], plain.readout(cell_output), atol=1e-6)
    assert not any("norm" in name for name, _ in plain.named_parameters())
    residual = zoo.build_model({"name": "lstm", "d_model": 8, "mlp": False}, vocab_size=3, num_classes=2)
    assert any("norm" in name for name, _ in residual.named_parameters())
    with pytest.raises(StatetrackError, match="stack must be one of residual, plain, got 'flat'"):
        zoo.resolve({"name": "lstm", "stack": "flat"})


def test_the_lstm_forget_bias_sets_the_forget_gate_and_nothing_else():
    """`forget_bias: b` starts the LSTM's forget gate at sigma(b) (b_if = b, b_hf = 0, torch's gate order
    i, f, g, o), leaves the other gates' biases as torch draws them, and is left out of a spec that does
    not give it (so every run id without it stays the same); a non-number is a one-line error."""
    import torch

    assert "forget_bias" not in zoo.resolve("lstm")
    torch.manual_seed(0)
    plain = zoo.build_model({"name": "lstm", "d_model": 8}, vocab_size=3, num_classes=2)
    torch.manual_seed(0)
    biased = zoo.build_model({"name": "lstm", "d_model": 8, "forget_bias": 1.0}, vocab_size=3, num_classes=2)
    before, after = plain.blocks[0].mixer.rnn, biased.blocks[0].mixer.rnn
    assert torch.equal(after.bias_ih_l0[8:16], torch.ones(8)) and torch.equal(after.bias_hh_l0[8:16], torch.zeros(8))
    for name in ("bias_ih_l0", "bias_hh_l0"):
        for gate in (slice(0, 8), slice(16, 32)):
            assert torch.equal(getattr(before, name)[gate], getattr(after, name)[gate])
    assert not torch.equal(before.bias_ih_l0[8:16], after.bias_ih_l0[8:16])
    with pytest.raises(StatetrackError, match="forget_bias must be a number"):
        zoo.build_model({"name": "lstm", "d_model": 8, "forget_bias": "one"}, vocab_size=3, num_classes=2)
