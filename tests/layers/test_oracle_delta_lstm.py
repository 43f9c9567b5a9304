"""DeltaNet, Gated DeltaNet, DeltaProduct and the LSTM against independent definitions.

Each layer's weights are randomised, read out, and fed to an implementation that shares no code
with the layer: a per-step loop written here from the published equations (float64, relative
error <= 1e-10 on outputs and final state), and, for the delta rule family, fla-core's naive
recurrences too (written by others; they compute in float32, so their tolerance is float32's).
The state is carried in: the layer runs on two halves, the oracle on the whole sequence.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import load_fla_naive, randomised, rel_error, rms_norm
from statetrack import StatetrackError
from statetrack.layers import LSTM, DeltaNet, DeltaProduct, GatedDeltaNet

EXACT = 1e-10
B, T, D = 2, 11, 16


def halves(layer, x):
    """The layer on x[:, :T//2] then on the rest with the returned state: (y, final state)."""
    y1, state = layer(x[:, : T // 2])
    y2, state = layer(x[:, T // 2 :], state)
    return torch.cat([y1, y2], dim=1), state


# ---- the delta rule family: Schlag et al. 2021; Yang et al. 2024b; Yang et al. 2025a; Siems et al. 2025
def short_conv_per_step(u, weight):
    """A depthwise causal convolution from a zero past, token by token: out_t[c] = sum_{i=0}^{w-1}
    weight[c, w - 1 - i] u_{t-i}[c] (torch's Conv1d layout: the last tap meets the current token)."""
    w = weight.shape[-1]
    return torch.stack(
        [sum(weight[:, 0, w - 1 - i] * u[:, t - i] for i in range(min(w, t + 1))) for t in range(u.shape[1])], dim=1
    )


def delta_inputs(layer, x):
    """q, k, v, beta, log-decay g per token and micro-step, from the read-out weights:
    q, k = L2-normalised SiLU projections, v linear, beta = s sigmoid(w_b x + b) with s = 1 for
    [0,1] and 2 for [-1,1] (Grazzi et al. 2025), g = -exp(A_log) softplus(w_a x + b_a) (Yang et
    al. 2025); with a short convolution (Yang et al. 2024b), each projection convolved over the last
    w tokens and then SiLU'd, v too. Shapes: q [B, T, H, Dk]; k, v [B, T, n_h, H, D]; beta [B, T,
    n_h, H]; g [B, T, H]."""
    H, Dh, n = layer.num_heads, layer.head_dim, layer.n_h
    q, k, v = (x @ proj.weight.T for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    if layer.short_conv:
        weight = layer.conv.conv.weight  # [q | k | v channels, 1, w]
        q, k, v = (
            F.silu(short_conv_per_step(u, w))
            for u, w in zip((q, k, v), weight.split([q.shape[-1], k.shape[-1], v.shape[-1]]))
        )
    else:
        q, k = F.silu(q), F.silu(k)
    q = F.normalize(q.view(B, T, H, Dh), dim=-1)
    k = F.normalize(k.view(B, T, n, H, Dh), dim=-1)
    v = v.view(B, T, n, H, Dh)
    s = {"[0,1]": 1.0, "[-1,1]": 2.0}[layer.eig_range]
    beta = s * torch.sigmoid(x @ layer.b_proj.weight.T + layer.b_proj.bias).view(B, T, n, H)
    g = None
    if hasattr(layer, "a_proj"):
        g = -layer.A_log.exp() * F.softplus(x @ layer.a_proj.weight.T + layer.a_proj.bias)
    return q, k, v, beta, g


def delta_per_step(q, k, v, beta, g, S0):
    """Per token t: S <- alpha_t S, then for j = 1..n_h: S <- (I - beta k k^T) S + beta k v^T;
    o_t = S^T q_t (per head). Returns o [B, T, H, Dv] and S [B, H, Dk, Dv]."""
    S, outputs = S0.clone(), []
    for t in range(T):
        if g is not None:
            S = g[:, t].exp()[..., None, None] * S
        for j in range(k.shape[2]):
            kj, vj, bj = k[:, t, j], v[:, t, j], beta[:, t, j]  # [B, H, D], [B, H, D], [B, H]
            eye = torch.eye(kj.shape[-1], dtype=S.dtype)
            transition = eye - bj[..., None, None] * kj[..., :, None] * kj[..., None, :]
            S = transition @ S + bj[..., None, None] * kj[..., :, None] * vj[..., None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S


def delta_readout(layer, o):
    """Per-head RMS normalisation, then the output projection."""
    return rms_norm(o, layer.o_norm.weight).reshape(B, T, -1) @ layer.o_proj.weight.T


DELTA_LAYERS = {
    "deltanet": lambda r, w=0: DeltaNet(D, num_heads=2, eig_range=r, short_conv=w),
    "gated_deltanet": lambda r, w=0: GatedDeltaNet(D, num_heads=2, eig_range=r, short_conv=w),
    "deltaproduct": lambda r, w=0: DeltaProduct(D, num_heads=2, n_h=3, eig_range=r, short_conv=w),
}


def _delta_case(name, eig_range, seed=0, short_conv=0):
    """The layer on two halves, the state (S, and the convolution's past with a short convolution)
    carried from the first to the second: (layer, x, S0, y, final S)."""
    layer = randomised(DELTA_LAYERS[name](eig_range, short_conv), seed)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=gen)
    S0 = torch.randn(B, layer.num_heads, layer.head_dim, layer.head_dim, dtype=torch.float64, generator=gen)
    with torch.no_grad():
        y1, state = layer(x[:, : T // 2], (None, S0) if short_conv else S0)
        y2, state = layer(x[:, T // 2 :], state)
    return layer, x, S0, torch.cat([y1, y2], dim=1), state[1] if short_conv else state


def check_per_step(name, eig_range, short_conv=0):
    layer, x, S0, y, state = _delta_case(name, eig_range, short_conv=short_conv)
    with torch.no_grad():
        q, k, v, beta, g = delta_inputs(layer, x)
        o, S = delta_per_step(q, k, v, beta, g, S0)
        expected = delta_readout(layer, o)
    assert rel_error(y, expected) <= EXACT
    assert rel_error(state, S) <= EXACT
    # the departure Grazzi et al. 2025 introduce, checked: [-1,1] doubles beta, so the transition's
    # eigenvalue along k, 1 - beta, reaches below 0 (and it never does in [0,1])
    assert (beta.min() < 1) and ((beta.max() > 1) == (eig_range == "[-1,1]"))


def check_fla(name, eig_range):
    """fla-core's naive gated delta product (num_householder = n_h; g = None without decay), with
    scale 1: our q is L2-normalised and used as it is. fla computes in float32."""
    fla = load_fla_naive("gated_delta_product/naive.py")
    layer, x, S0, y, state = _delta_case(name, eig_range, seed=3)
    with torch.no_grad():
        q, k, v, beta, g = delta_inputs(layer, x)
        n, H, Dh = layer.n_h, layer.num_heads, layer.head_dim
        o, S = fla.naive_recurrent_gated_delta_product(
            q.float(),
            k.reshape(B, T * n, H, Dh).float(),
            v.reshape(B, T * n, H, Dh).float(),
            None if g is None else g.float(),
            beta.reshape(B, T * n, H).float(),
            scale=1.0,
            initial_state=S0.float(),
            output_final_state=True,
            num_householder=n,
        )
        expected = delta_readout(layer, o.double())
    assert rel_error(y, expected) <= 1e-5
    assert rel_error(state, S.double()) <= 1e-5


RANGES = pytest.mark.parametrize("eig_range", ["[0,1]", "[-1,1]"])


@RANGES
def test_deltanet_matches_per_step_delta_rule(eig_range):
    check_per_step("deltanet", eig_range)


@RANGES
def test_gated_deltanet_matches_per_step_gated_delta_rule(eig_range):
    check_per_step("gated_deltanet", eig_range)


@RANGES
def test_deltaproduct_matches_per_step_householder_products(eig_range):
    check_per_step("deltaproduct", eig_range)


@RANGES
@pytest.mark.parametrize("name", sorted(DELTA_LAYERS))
def test_delta_family_with_short_convolution_matches_per_step(name, eig_range):
    """short_conv = 4 (Yang et al. 2024b): the convolution's past is carried from one half to the
    next (T // 2 = 5 tokens, more than its 3 past ones), against the convolution summed token by token."""
    check_per_step(name, eig_range, short_conv=4)


def test_short_convolution_width_is_checked():
    with pytest.raises(StatetrackError, match=r"short_conv .* must be an integer >= 0, got -1"):
        DeltaNet(D, short_conv=-1)


@RANGES
@pytest.mark.parametrize("name", sorted(DELTA_LAYERS))
def test_delta_family_matches_fla_naive_gated_delta_product(name, eig_range):
    check_fla(name, eig_range)


def test_deltanet_departures_are_explicit():
    """Departures from DeltaNet as Yang et al. 2024b train it, each checked: no short convolution
    before q, k, v; q is used without a 1/sqrt(d) scale (it is L2-normalised; the oracle above has
    none); a per-head RMSNorm before the output projection is applied (without it the oracle
    would not match), which makes the output invariant to the state's scale."""
    layer, x, S0, y, _ = _delta_case("deltanet", "[-1,1]")
    assert not any(isinstance(m, torch.nn.Conv1d) for m in layer.modules())
    with torch.no_grad():
        q, k, v, beta, g = delta_inputs(layer, x)
        o, _ = delta_per_step(q, k, v, beta, g, S0)
        unnormalised = o.reshape(B, T, -1) @ layer.o_proj.weight.T
        assert rel_error(y, unnormalised) > 1e-2
        assert rel_error(delta_readout(layer, 7.0 * o), delta_readout(layer, o)) <= EXACT


# ---- LSTM: Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000 -------------
def lstm_per_step(layer, x, h0, c0):
    """i, f, g, o = sigma(W_i x + b_i + U_i h), sigma(..f), tanh(..g), sigma(..o) (PyTorch's row
    order of the stacked weights); c = f c + i g; h = o tanh(c); projected back to d_model."""
    rnn = layer.rnn
    W, U, b = rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0 + rnn.bias_hh_l0
    h, c, outputs = h0, c0, []
    for t in range(x.shape[1]):
        i, f, g, o = (x[:, t] @ W.T + h @ U.T + b).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    y = torch.stack(outputs, dim=1)
    if isinstance(layer.proj, torch.nn.Linear):
        y = y @ layer.proj.weight.T + layer.proj.bias
    return y, h, c


@pytest.mark.parametrize("hidden", [None, 24])
def test_lstm_matches_per_step_lstm_equations(hidden):
    layer = randomised(LSTM(D, hidden=hidden))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=gen)
    size = hidden or D
    h0, c0 = (torch.randn(1, B, size, dtype=torch.float64, generator=gen) for _ in range(2))
    with torch.no_grad():
        y1, state = layer(x[:, : T // 2], (h0, c0))
        y2, (h, c) = layer(x[:, T // 2 :], state)
        expected, h_ref, c_ref = lstm_per_step(layer, x, h0[0], c0[0])
    assert rel_error(torch.cat([y1, y2], dim=1), expected) <= EXACT
    assert rel_error(h[0], h_ref) <= EXACT and rel_error(c[0], c_ref) <= EXACT
    assert math.isfinite(float(expected.abs().max()))
