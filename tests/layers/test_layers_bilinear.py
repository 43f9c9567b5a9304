"""The bilinear RNN family (Ebrahimi & Memisevic 2025): fast path against the per-step definition,
scale-invariant evaluation, init, frozen recurrence, names and bad settings."""

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.layers.bilinear import ADDITIVE, STRUCTURES, Bilinear
from statetrack.models import zoo

SMALL = {"hidden": 8, "rank": 4, "block_size": 4}


def layer(structure, additive="none", d=16, **kw):
    return Bilinear(d, structure=structure, additive=additive, **{**SMALL, **kw}).double()


@pytest.mark.parametrize("additive", ADDITIVE)
@pytest.mark.parametrize("structure", STRUCTURES)
def test_fast_path_equals_the_per_step_definition(structure, additive):
    """Forward, final state and gradients (input and every parameter) in float64; the transitions
    have negative and (for rotation) complex eigenvalues."""
    torch.manual_seed(0)
    m = layer(structure, additive)
    x = torch.randn(3, 9, 16, dtype=torch.float64, requires_grad=True)
    y, h = m(x)
    y_ref, h_ref = m.forward_reference(x)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(y)
    params = [p for p in m.parameters() if p.requires_grad]
    fast = torch.autograd.grad((y * g).sum(), [x, *params])
    ref = torch.autograd.grad((y_ref * g).sum(), [x, *params])
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("every", [1, 4])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_renormalised_training_equals_the_per_step_definition(structure, every):
    """normalize_training: h_{t-1} / ||h_{t-1}|| every k steps, with additive terms, in both forms."""
    torch.manual_seed(6)
    m = layer(structure, "both", normalize_training=True, normalize_every=every)
    x = torch.randn(2, 9, 16, dtype=torch.float64, requires_grad=True)
    (y, h), (y_ref, h_ref) = m(x), m.forward_reference(x)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-10, atol=1e-10)
    params = [p for p in m.parameters() if p.requires_grad]
    fast = torch.autograd.grad(y.square().sum(), [x, *params])
    ref = torch.autograd.grad(y_ref.square().sum(), [x, *params])
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("renormalised", [False, True])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_carried_state_continues_the_sequence(structure, renormalised):
    """Chunks of 4, 1 and 5 steps give the whole sequence's outputs; with additive terms renormalised
    every 3 steps (training and evaluation), the renormalisations fall on the same steps as in the
    whole sequence, and the per-step definition fed the same chunks agrees."""
    torch.manual_seed(1)
    m = layer(structure, **({"additive": "both", "normalize_training": True, "normalize_every": 3} if renormalised else {}))
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    for mode in (True, False):
        m.train(mode)
        for forward in (m.forward, m.forward_reference):
            y, _ = forward(x)
            parts, state = [], None
            for lo, hi in ((0, 4), (4, 5), (5, 10)):
                part, state = forward(x[:, lo:hi], state)
                parts.append(part)
            torch.testing.assert_close(torch.cat(parts, 1), y)


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_evaluation_renormalisation_changes_no_prediction(structure, every):
    """Scale invariance: where the unnormalised state neither overflows nor underflows, renormalising
    it every k steps leaves every output unchanged; the carried state has unit norm."""
    torch.manual_seed(2)
    m = layer(structure, normalize_every=every).eval()
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    y_norm, h = m(x)
    m.normalize_every = 0
    y_plain, _ = m(x)
    torch.testing.assert_close(y_norm, y_plain, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(h.norm(dim=-1), torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize("structure", STRUCTURES)
def test_long_input_stays_finite_with_renormalisation(structure):
    """5000 steps of a random pure model stay finite when renormalised, and the first 300 match the
    float64 direction. (Further on, a coordinate 1e-38 below the largest is lost in float32 and kept
    in float64; with random inputs it can come back to matter, so the two may part.)"""
    torch.manual_seed(3)
    m = Bilinear(16, structure=structure, **SMALL).eval()
    x = torch.nn.functional.layer_norm(torch.randn(1, 5000, 16), (16,)) * 1.5
    y, h = m(x)
    assert torch.isfinite(y).all() and torch.isfinite(h).all()
    y64, _ = m.double()(x.double())
    torch.testing.assert_close(y[:, :300].double(), y64[:, :300], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("structure", ["full", "cp", "block"])
def test_initial_spectral_radius_is_about_one(structure):
    torch.manual_seed(4)
    m = Bilinear(64, structure=structure)
    x = torch.nn.functional.layer_norm(torch.randn(1, 64, 64), (64,))
    radius = m.transition_eigenvalues(x).abs().amax(-1).median().item()
    assert 0.7 < radius < 1.4


@pytest.mark.parametrize("structure", ["rotation", "diagonal"])
def test_diagonal_transitions_have_unit_scale_at_init(structure):
    torch.manual_seed(4)
    m = Bilinear(64, structure=structure)
    x = torch.nn.functional.layer_norm(torch.randn(1, 64, 64), (64,))
    a = m.transition_eigenvalues(x)
    rms = a.abs().pow(2).mean().sqrt().item()
    assert 0.8 < rms < 1.25
    if structure == "diagonal":
        assert (a < 0).float().mean() > 0.3  # negative eigenvalues from the start: parity is reachable


def test_frozen_recurrence_trains_only_the_readout_and_h0():
    torch.manual_seed(5)
    model = zoo.build_model({"name": "bilinear", "structure": "diagonal", "frozen_recurrence": True,
                             "additive": "both", "d_model": 16, "mlp": False}, vocab_size=5, num_classes=2)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"blocks.0.mixer.h0", "blocks.0.mixer.out_proj.weight", "norm.weight", "norm.bias",
                         "readout.weight", "readout.bias"}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    tokens = torch.randint(0, 5, (4, 6))
    model(tokens)[0].sum().backward()
    opt.step()
    for n, p in model.named_parameters():
        assert torch.equal(before[n], p.detach()) == (n not in trainable), n


def test_unfrozen_model_trains_its_embedding():
    model = zoo.build_model({"name": "bilinear", "d_model": 8}, vocab_size=5, num_classes=2)
    assert all(p.requires_grad for p in model.parameters())


def test_fixed_h0_is_not_a_parameter():
    m = Bilinear(8, learn_h0=False)
    assert "h0" not in dict(m.named_parameters()) and "h0" in dict(m.named_buffers())
    torch.testing.assert_close(m.h0.norm(), torch.tensor(1.0))


@pytest.mark.parametrize("spec, name", [
    ({}, "Bilinear full"),
    ({"structure": "cp", "rank": 16}, "Bilinear CP R=16"),
    ({"structure": "block", "block_size": 8}, "Bilinear block b=8"),
    ({"structure": "rotation", "additive": "input"}, "Bilinear rotation +input"),
    ({"structure": "full", "additive": "constant"}, "Bilinear full +const"),
    ({"structure": "diagonal", "additive": "both", "frozen_recurrence": True}, "Bilinear diagonal +both frozen"),
    ({"additive": "input", "normalize_training": True}, "Bilinear full +input norm"),
])
def test_display_names_say_the_structure(spec, name):
    assert zoo.display_name({"name": "bilinear", **spec}) == name


@pytest.mark.parametrize("kwargs, message", [
    ({"structure": "dense"}, "expected one of: full, cp, block, rotation, diagonal"),
    ({"additive": "bias"}, "expected one of: none, input, constant, both"),
    ({"structure": "block", "block_size": 5}, "not divisible by block_size 5"),
    ({"structure": "rotation", "hidden": 7}, "even hidden size"),
    ({"rank": 0}, "rank must be an integer >= 1"),
    ({"normalize_every": -1}, "normalize_every must be an integer >= 0"),
])
def test_bad_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(StatetrackError, match=message):
        Bilinear(8, **kwargs)
