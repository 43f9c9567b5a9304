"""Every zoo mixer: step-by-step recurrence (one token at a time, state carried) equals the
parallel/chunked forward; eig_range bounds the materialised transition spectrum."""

import pytest
import torch

from statetrack.layers import GLA, IDS4, S4D, DeltaNet, DeltaProduct, GatedDeltaNet, Mamba, Mamba2, mLSTM
from statetrack.models import zoo
from statetrack.ops import delta_product
from statetrack.ops.delta_rule import delta_rule_reference

D = 8
SWITCHED = {  # layers with the eigenvalue-range switch
    "mamba": lambda r: Mamba(D, d_state=4, eig_range=r),
    "mamba2": lambda r: Mamba2(D, d_state=4, head_dim=4, eig_range=r),
    "deltanet": lambda r: DeltaNet(D, 2, eig_range=r),
    "gated_deltanet": lambda r: GatedDeltaNet(D, 2, eig_range=r),
    "deltaproduct": lambda r: DeltaProduct(D, 2, n_h=2, eig_range=r),
}


def layer_for(name: str) -> torch.nn.Module:
    spec = zoo.resolve({"name": name, "d_model": D})
    kwargs = {k: v for k, v in spec.items() if k != "name" and k not in zoo.MODEL_DEFAULTS}
    # fixed-point layers: iterate to rounding, so chunks and the whole sequence find the same fixed point
    for key, small in (("d_state", 4), ("head_dim", 4 if name == "mamba2" else None), ("n_h", 3), ("tol", 1e-13), ("max_iter", 200)):
        if key in kwargs:
            kwargs[key] = small
    return zoo.get_entry(name).mixer(D, **kwargs)


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_one_token_at_a_time_equals_whole_sequence(name):
    torch.manual_seed(0)
    layer = layer_for(name).double()
    x = torch.randn(2, 7, D, dtype=torch.float64)
    y, _ = layer(x)
    state, steps = None, []
    for t in range(x.shape[1]):
        y_t, state = layer(x[:, t : t + 1], state)
        steps.append(y_t)
    torch.testing.assert_close(torch.cat(steps, 1), y, rtol=1e-9, atol=1e-9)
    # and in two uneven chunks
    y1, state = layer(x[:, :3])
    y2, _ = layer(x[:, 3:], state)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-9, atol=1e-9)


def test_deltaproduct_is_deltanet_on_interleaved_micro_steps():
    """Independent oracle: the reference delta-rule loop over the T * n_h micro-steps."""
    torch.manual_seed(1)
    layer = DeltaProduct(D, 2, n_h=3, eig_range="[-1,1]").double()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    g = layer.gates(x)
    k, v, beta = g["k"].view(2, 5, 3, 2, -1), g["v"].view(2, 5, 3, 2, -1), g["beta"].view(2, 5, 3, 2)  # token t, micro-step j
    S = None
    outs = []
    for t in range(x.shape[1]):
        for j in range(3):
            o, S = delta_rule_reference(g["q"][:, t : t + 1], k[:, t : t + 1, j], v[:, t : t + 1, j], beta[:, t : t + 1, j], initial_state=S)
        outs.append(o)
    o = torch.cat(outs, 1)
    expected = layer.o_proj(layer.o_norm(o).reshape(2, 5, -1))
    torch.testing.assert_close(layer(x)[0], expected, rtol=1e-10, atol=1e-10)


def test_deltanet_is_deltaproduct_with_one_householder():
    """Same init for the same seed, same outputs; and the `delta_rule` path DeltaNet takes equals the
    `delta_product` op with one micro-step per token."""
    x = torch.randn(2, 9, D, dtype=torch.float64)
    for eig_range in ("[0,1]", "[-1,1]"):
        torch.manual_seed(7)
        deltanet = DeltaNet(D, 2, eig_range=eig_range).double()
        torch.manual_seed(7)
        product = DeltaProduct(D, 2, n_h=1, eig_range=eig_range).double()
        for (name, a), (name_b, b) in zip(deltanet.state_dict().items(), product.state_dict().items()):
            assert name == name_b and torch.equal(a, b)
        torch.testing.assert_close(deltanet(x)[0], product(x)[0], rtol=0, atol=0)
        o, _ = delta_product(**deltanet.gates(x), num_householder=1)
        expected = deltanet.o_proj(deltanet.o_norm(o).reshape(2, 9, -1))
        torch.testing.assert_close(deltanet(x)[0], expected, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(deltanet.transition_matrices(x), product.transition_matrices(x), rtol=0, atol=0)


def test_deltaproduct_transition_is_the_product_of_householders_applied_to_the_state():
    torch.manual_seed(2)
    layer = DeltaProduct(D, 1, n_h=2, eig_range="[-1,1]").double()
    x = torch.randn(1, 1, D, dtype=torch.float64)
    S0 = torch.randn(1, 1, D, D, dtype=torch.float64)
    g = layer.gates(x)  # k, v [1, 2 micro-steps, 1, D]
    q = torch.zeros_like(g["q"])
    _, S1 = delta_rule_reference(q.expand(1, 2, 1, D), g["k"], g["v"], g["beta"], initial_state=S0)
    _, S_zero_v = delta_rule_reference(q.expand(1, 2, 1, D), g["k"], torch.zeros_like(g["v"]), g["beta"], initial_state=S0)
    A = layer.transition_matrices(x)[0, 0, 0]
    torch.testing.assert_close(S_zero_v[0, 0], A @ S0[0, 0])  # the state part of the update is A S
    assert not torch.allclose(S1, S_zero_v)


def _eigs(layer, x):
    with torch.no_grad():
        if type(layer) is DeltaProduct:  # each Householder factor is the materialised symmetric transition
            return torch.linalg.eigvalsh(layer.householder_factors(x))
        return layer.transition_eigenvalues(x)


@pytest.mark.parametrize("name", sorted(SWITCHED))
def test_eig_range_bounds_the_transition_spectrum(name):
    torch.manual_seed(3)
    x = torch.randn(4, 12, D, dtype=torch.float64) * 3
    positive, negative = SWITCHED[name]("[0,1]").double(), SWITCHED[name]("[-1,1]").double()
    negative.load_state_dict(positive.state_dict())
    with torch.no_grad():  # drive the transitions towards their extreme (beta -> top, dt -> large)
        for layer in (positive, negative):
            for attr in ("b_proj", "dt_proj"):
                if hasattr(layer, attr):
                    getattr(layer, attr).bias.fill_(3.0)
            if hasattr(layer, "dt_bias"):
                layer.dt_bias.fill_(3.0)
            if hasattr(layer, "a_proj"):  # Gated DeltaNet: decay close to 1
                layer.a_proj.bias.fill_(-8.0)
    ev_pos, ev_neg = _eigs(positive, x), _eigs(negative, x)
    assert not ev_pos.is_complex() and not ev_neg.is_complex()
    eps = 1e-9
    assert ev_pos.min() >= -eps and ev_pos.max() <= 1 + eps
    assert ev_neg.min() >= -1 - eps and ev_neg.max() <= 1 + eps
    assert ev_neg.min() < -0.5, f"{name} [-1,1] never reaches a negative eigenvalue (min {ev_neg.min():.3f})"


def test_deltaproduct_two_factors_in_zero_one_keep_real_nonnegative_product_spectrum():
    """A product of two PSD contractions has real eigenvalues in [0, 1]; with [-1,1] the product
    of two reflections is a rotation (complex eigenvalues on the unit circle)."""
    torch.manual_seed(4)
    x = torch.randn(3, 10, D, dtype=torch.float64) * 3
    pos, neg = DeltaProduct(D, 1, n_h=2, eig_range="[0,1]").double(), DeltaProduct(D, 1, n_h=2, eig_range="[-1,1]").double()
    neg.load_state_dict(pos.state_dict())
    with torch.no_grad():
        for layer in (pos, neg):
            layer.b_proj.bias.fill_(4.0)
        ev_pos, ev_neg = pos.transition_eigenvalues(x), neg.transition_eigenvalues(x)
    assert ev_pos.imag.abs().max() < 1e-6 and ev_pos.real.min() > -1e-9 and ev_pos.real.max() < 1 + 1e-9
    assert ev_neg.imag.abs().max() > 0.1 and ev_neg.abs().max() < 1 + 1e-9


@pytest.mark.parametrize("make", [lambda: S4D(D, 4), lambda: IDS4(D, 4), lambda: GLA(D, 2), lambda: mLSTM(D, 2)])
def test_decaying_layers_stay_inside_the_unit_disk(make):
    torch.manual_seed(5)
    ev = _eigs(make().double(), torch.randn(2, 6, D, dtype=torch.float64) * 3)
    assert ev.abs().max() < 1 and (ev.is_complex() or ev.min() > 0)


def test_ids4_transition_depends_on_the_input_and_s4d_does_not():
    torch.manual_seed(6)
    x = torch.randn(1, 5, D)
    s4d, ids4 = S4D(D, 4), IDS4(D, 4)
    a = s4d.transition_eigenvalues(x)
    assert a.is_complex() and torch.allclose(a[0, 0], a[0, 3])
    b = ids4.transition_eigenvalues(x)
    assert b.is_complex() and not torch.allclose(b[0, 0], b[0, 3])
